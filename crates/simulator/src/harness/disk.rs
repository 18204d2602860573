//! The simulated disk under a member's WAL (`wal::Disk`): the files are
//! real (on a temporary file system), but what is durable is decided
//! here. Every positioned write is recorded with the bytes it replaced
//! until the file's next `fdatasync`; a simulated crash then keeps a prefix
//! of those writes, tears the write at the cut on a sector boundary, and
//! reverts the rest, as a power loss may. `fdatasync` itself does no I/O:
//! durability is this bookkeeping, which is why a seed runs in
//! milliseconds. A sync takes simulated time (the member's thread would
//! block in it): until the member says it is over ([`SimDisk::settle`]),
//! the writes it covers are not durable, and a crash meanwhile treats them
//! as unsynced. It can also be made to fail (the member must stop), and
//! can flip one bit of synced data (the member must notice at its next
//! start).
//!
//! Files are known by the order of their first write, never by inode or
//! name, so that the choices a seed makes at a crash do not depend on the
//! file system's numbering.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use parking_lot::Mutex;

use super::rng::Rng;

/// The unit a disk writes whole or not at all (the WAL's medium model).
pub const SECTOR_BYTES: u64 = 512;

/// Synced writes remembered per file as candidates for a bit flip: the
/// most recent ones, enough to reach well into a short run's log.
const SYNCED_WRITES_KEPT: usize = 1024;

/// What a crash did to the writes that were not yet synced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CrashLoss {
    /// Writes not synced at the crash.
    pub unsynced: usize,
    /// Of those, writes whose sync was under way (the crash cut it short).
    pub cut_short: usize,
    /// Of those, writes reverted whole.
    pub lost: usize,
    /// Writes cut on a sector boundary (at most one).
    pub torn: usize,
}

#[derive(Debug, Clone)]
struct Write {
    offset: u64,
    /// What the write replaced (zeros past the file's old end).
    old: Vec<u8>,
    len: u64,
}

#[derive(Debug)]
struct FileState {
    /// The file, opened anew (without `O_DIRECT`) so that the simulator's
    /// own reads and writes need no alignment.
    handle: File,
    unsynced: Vec<Write>,
    /// (offset, length) of recent synced writes, oldest first.
    synced: Vec<(u64, u64)>,
}

#[derive(Debug, Default)]
struct State {
    /// Files by the order of their first write.
    files: BTreeMap<u64, FileState>,
    /// (device, inode) to a file's number, checked against the file's
    /// link count, since a removed segment's inode can be reused.
    numbers: HashMap<(u64, u64), u64>,
    next_number: u64,
    /// Writes made durable by syncs still under way, with their files:
    /// unsynced again if the member crashes before they end.
    in_flight: Vec<(u64, Write)>,
    /// Every fdatasync fails once set.
    failing: bool,
    /// While set (a crash under way) syncs make nothing durable.
    frozen: bool,
    syncs: u64,
    failed_syncs: u64,
}

/// One member's simulated disk.
#[derive(Debug, Default)]
pub struct SimDisk {
    state: Mutex<State>,
}

impl SimDisk {
    /// Makes every later fdatasync fail, as a disk that went bad.
    pub fn fail_syncs(&self) {
        self.state.lock().failing = true;
    }

    /// Makes fdatasync work again (a failing disk replaced before its
    /// member's next start).
    pub fn mend(&self) {
        self.state.lock().failing = false;
    }

    /// The syncs under way are over: what they covered is durable.
    pub fn settle(&self) {
        self.state.lock().in_flight.clear();
    }

    /// Syncs that succeeded so far.
    pub fn syncs(&self) -> u64 {
        self.state.lock().syncs
    }

    /// Syncs that failed so far.
    pub fn failed_syncs(&self) -> u64 {
        self.state.lock().failed_syncs
    }

    /// Starts a crash: from now until [`SimDisk::crash`], syncs make
    /// nothing durable (whatever the member does while it is torn down).
    pub fn freeze(&self) {
        self.state.lock().frozen = true;
    }

    /// Ends a crash: keeps a prefix of each file's unsynced writes, tears
    /// the write at the cut on a sector boundary and reverts the rest,
    /// choices drawn from `rng`. The disk then works again.
    pub fn crash(&self, rng: &mut Rng) -> io::Result<CrashLoss> {
        let mut state = self.state.lock();
        let mut loss = CrashLoss::default();
        // Syncs the crash cut short made nothing durable.
        for (number, write) in std::mem::take(&mut state.in_flight).into_iter().rev() {
            loss.cut_short += 1;
            if let Some(file) = state.files.get_mut(&number) {
                if file.synced.last() == Some(&(write.offset, write.len)) {
                    file.synced.pop();
                }
                file.unsynced.insert(0, write);
            }
        }
        for file in state.files.values_mut() {
            let writes = std::mem::take(&mut file.unsynced);
            loss.unsynced += writes.len();
            let kept = rng.below(writes.len() as u64 + 1) as usize;
            for (i, write) in writes.iter().enumerate().rev() {
                if i < kept {
                    break;
                }
                let sectors = write.len.div_ceil(SECTOR_BYTES);
                let whole = if i == kept && sectors > 1 {
                    rng.below(sectors)
                } else {
                    0
                };
                let from = (whole * SECTOR_BYTES) as usize;
                file.handle
                    .write_all_at(&write.old[from..], write.offset + from as u64)?;
                match whole {
                    0 => loss.lost += 1,
                    _ => loss.torn += 1,
                }
            }
        }
        state.frozen = false;
        state.failing = false;
        Ok(loss)
    }

    /// Flips one bit of a live file's synced data, before the start of
    /// its last synced write: the log writes its frames one after the
    /// other (a direct tail rewrites the block holding its end, from the
    /// block's start), so every byte there is the log's data, inside it,
    /// and never its torn end. Returns the file's number and the offset,
    /// or `None` if no file has such a byte.
    pub fn flip_bit(&self, rng: &mut Rng) -> io::Result<Option<(u64, u64)>> {
        let state = self.state.lock();
        let mut candidates = Vec::new();
        for (number, file) in &state.files {
            let start = file.synced.last().map_or(0, |(offset, _)| *offset);
            if start > 0 && file.handle.metadata()?.nlink() > 0 {
                candidates.push((*number, &file.handle, start));
            }
        }
        if candidates.is_empty() {
            return Ok(None);
        }
        let (number, handle, start) = candidates[rng.below(candidates.len() as u64) as usize];
        let at = rng.below(start);
        let file = handle;
        let mut byte = [0u8; 1];
        file.read_exact_at(&mut byte, at)?;
        byte[0] ^= 1 << rng.below(8);
        file.write_all_at(&byte, at)?;
        Ok(Some((number, at)))
    }

    /// The number of `file`, known or new.
    fn number(state: &mut State, file: &File) -> io::Result<u64> {
        let meta = file.metadata()?;
        let inode = (meta.dev(), meta.ino());
        if let Some(&number) = state.numbers.get(&inode) {
            if let Some(known) = state.files.get(&number) {
                if known.handle.metadata()?.nlink() > 0 {
                    return Ok(number);
                }
            }
        }
        let handle = OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/self/fd/{}", file.as_raw_fd()))?;
        let number = state.next_number;
        state.next_number += 1;
        state.numbers.insert(inode, number);
        state.files.insert(
            number,
            FileState {
                handle,
                unsynced: Vec::new(),
                synced: Vec::new(),
            },
        );
        Ok(number)
    }
}

impl wal::Disk for SimDisk {
    fn write_all_at(&self, file: &File, bytes: &[u8], offset: u64) -> io::Result<()> {
        let mut state = self.state.lock();
        let number = SimDisk::number(&mut state, file)?;
        let entry = state.files.get_mut(&number).expect("numbered just now");
        let mut old = vec![0u8; bytes.len()];
        let mut read = 0;
        while read < old.len() {
            match entry.handle.read_at(&mut old[read..], offset + read as u64)? {
                0 => break,
                n => read += n,
            }
        }
        // Past the file's old end it read as zeros (as a preallocated
        // segment does), which a revert writes back.
        old[read..].fill(0);
        entry.handle.write_all_at(bytes, offset)?;
        entry.unsynced.push(Write {
            offset,
            old,
            len: bytes.len() as u64,
        });
        Ok(())
    }

    fn fdatasync(&self, file: &File) -> io::Result<()> {
        let mut state = self.state.lock();
        if state.failing {
            state.failed_syncs += 1;
            return Err(io::Error::other("simulated fdatasync failure"));
        }
        state.syncs += 1;
        if state.frozen {
            return Ok(());
        }
        let number = SimDisk::number(&mut state, file)?;
        let entry = state.files.get_mut(&number).expect("numbered just now");
        let writes: Vec<Write> = entry.unsynced.drain(..).collect();
        for write in &writes {
            entry.synced.push((write.offset, write.len));
        }
        if entry.synced.len() > SYNCED_WRITES_KEPT {
            let excess = entry.synced.len() - SYNCED_WRITES_KEPT;
            entry.synced.drain(..excess);
        }
        state.in_flight.extend(writes.into_iter().map(|write| (number, write)));
        Ok(())
    }

    fn fsync_dir(&self, _dir: &Path) -> io::Result<()> {
        // Files created, renamed or removed are durable at once here: the
        // simulator loses data within files, not directory entries.
        Ok(())
    }

    fn release(&self, paths: Vec<std::path::PathBuf>) -> Option<std::thread::JoinHandle<()>> {
        // At once and on the member's thread: a removal thread's timing
        // would reach the seed's choices (a bit flip picks among the
        // files still linked).
        for path in paths {
            match std::fs::remove_file(&path) {
                Err(error) if error.kind() != io::ErrorKind::NotFound => {
                    panic!("the simulator could not remove {}: {error}", path.display())
                }
                _ => {}
            }
        }
        None
    }
}
