//! Value files: the stored blocks' bytes, kept outside sled, which holds
//! a pointer to each.
//!
//! # Why
//! sled keeps what it reads in its page cache, and its LRU applies the
//! accesses it queues per shard late, so a walk over a cold store (the
//! first big LIST, a RangeStream, a HashKV) left most of the store's
//! values resident, and RSS grew by hundreds of MB (`docs/measurements.md`).
//! Its log also keeps old versions of a
//! leaf until a fixed-threshold cleaner relocates them, so a
//! defragmentation's fresh copy was about 1.6 times its bytes in use.
//! With the blocks in files of their own, a read costs one `pread` into
//! a buffer of its answer's size: the kernel's page cache, which the
//! kernel gives back under pressure, holds the store, not the member's
//! heap. sled holds small pointers, its cache a few MB of them.
//!
//! # Layout
//! The files live in `<store>.values/`, beside every generation of the
//! sled database (defrag.rs), so a pointer means the same in each and a
//! defragmentation's copy of sled copies pointers only. File `n` is
//! `<n, 20 digits>.values`: blocks (block.rs) one after another, with no
//! framing; a pointer names the file, the offset, the length and the
//! block's CRC-32C:
//!
//! ```text
//! 0 u32 (a block's count is never 0, so a pointer is never a block)
//! file u64 BE, offset u64 BE, length u32 BE, crc32c u32 BE
//! ```
//!
//! A sled value under a block key is either such a pointer or, in a store
//! written before value files (format 2) or upgraded from format 1, the
//! block itself; both are read.
//!
//! # Durability
//! A commit appends its blocks to the newest file in one write, syncs
//! it (`fdatasync`), and only then hands sled the batch holding their
//! pointers, so no pointer sled may persist names bytes that are not on
//! disk. A file is created and its directory synced before anything
//! points into it. Each open starts a new file, so a tail torn by a crash
//! is never appended to: pointers name only synced bytes, and bytes no
//! pointer names are garbage. A read checks the CRC, so a flipped bit is
//! reported as corruption, not served.
//!
//! # Reclaiming space
//! Each file's live bytes (those some pointer in sled names) are counted
//! when the store opens and kept by every commit. A compaction that
//! rewrites blocks leaves their old bytes dead. Once a file other than
//! the newest holds less than [`RECLAIM_LIVE_PERCENT`] live bytes, its
//! live blocks are rewritten into the newest file (store/compact.rs, a step at a
//! time after the compaction), and once sled holds none of its pointers,
//! durably, it is deleted. Files a compaction's removals leave wholly
//! dead go while it still runs, once there are [`DEAD_FILES_RECLAIM_MIN`],
//! so that a long compaction gives space back as it goes. A defragmentation reclaims every file below
//! [`DEFRAG_RECLAIM_LIVE_PERCENT`] live, so the store shrinks to about its
//! bytes in use.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::{Error, Result};

/// Bytes a file grows to before the next commit starts a new one. Large
/// enough that a store of a few GB is a few dozen files, kept open; small
/// enough that reclaiming one rewrites at most this much, a step at a
/// time.
pub const VALUE_FILE_BYTES_MAX: u64 = 64 << 20;

/// A file whose live bytes fall below this share of its length is
/// reclaimed. At half, the files never hold more than about twice their
/// live bytes, and a reclaimed byte costs at most one rewritten byte; a
/// defragmentation reclaims more ([`DEFRAG_RECLAIM_LIVE_PERCENT`]).
pub const RECLAIM_LIVE_PERCENT: u64 = 50;

/// A defragmentation reclaims every file whose live bytes are below this
/// share of its length, the newest included, so the files hold at most
/// about a ninth more than their live bytes afterwards, as a blocking
/// defragmentation's copy would (bbolt's file keeps its pages' slack
/// too). Reclaiming a file with a few dead blocks rewrites all of it:
/// files nearly all live were most of the bytes a defragmentation under
/// load moved (`docs/measurements.md`).
pub const DEFRAG_RECLAIM_LIVE_PERCENT: u64 = 90;

/// Wholly dead files (no live byte: nothing to move) a compaction still
/// running waits for before it deletes them. Deleting needs sled made
/// durable first (`sled::Db::flush`, under the store's state lock, as
/// applies wait), so the flush is paid once per this many files or more
/// (the removals are checked after each step, so usually this many: up
/// to 256 MiB given back at a time). A compaction of ten million
/// revisions under steady writes ran for many minutes before its end
/// gave anything back; the writes meanwhile filled an 8 GiB quota
/// (`docs/benchmarks.md`).
pub const DEAD_FILES_RECLAIM_MIN: usize = 4;

/// Bytes of a pointer as sled stores it.
pub const POINTER_BYTES: usize = 4 + 8 + 8 + 4 + 4;

/// Where a block's bytes are: see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pointer {
    pub file: u64,
    pub offset: u64,
    pub length: u32,
    pub crc: u32,
}

impl Pointer {
    pub fn encode(&self) -> [u8; POINTER_BYTES] {
        let mut out = [0u8; POINTER_BYTES];
        out[4..12].copy_from_slice(&self.file.to_be_bytes());
        out[12..20].copy_from_slice(&self.offset.to_be_bytes());
        out[20..24].copy_from_slice(&self.length.to_be_bytes());
        out[24..28].copy_from_slice(&self.crc.to_be_bytes());
        out
    }

    /// The pointer `stored` is, or `None` when it is a block itself.
    pub fn decode(stored: &[u8]) -> Option<Pointer> {
        if stored.len() != POINTER_BYTES || stored[..4] != [0; 4] {
            return None;
        }
        Some(Pointer {
            file: u64::from_be_bytes(stored[4..12].try_into().ok()?),
            offset: u64::from_be_bytes(stored[12..20].try_into().ok()?),
            length: u32::from_be_bytes(stored[20..24].try_into().ok()?),
            crc: u32::from_be_bytes(stored[24..28].try_into().ok()?),
        })
    }
}

/// One value file: its handle, its length, and how many of its bytes
/// some pointer names.
struct Usage {
    file: Arc<File>,
    length: u64,
    live: u64,
}

/// The store's value files. Reads take `&self`; appends, syncs and
/// removals `&mut self`, which the store's state lock gives only to
/// commits and their like.
pub struct ValueFiles {
    dir: PathBuf,
    files: BTreeMap<u64, Usage>,
    /// The file appends go to; `None` until the first append after open
    /// or after [`ValueFiles::seal`].
    newest: Option<u64>,
    /// Bytes appended and not yet written.
    pending: Vec<u8>,
    /// The number the next file takes: above every file this handle has
    /// seen, so that a file still being unlinked is never reused.
    next_number: u64,
    /// The threads that removed or remove retired files, one at a time
    /// ([`ValueFiles::retire`]), for [`ValueFiles::settle`].
    unlinking: Vec<std::thread::JoinHandle<()>>,
    /// Files retired and not yet removed, for the one thread that removes
    /// them ([`ValueFiles::retire`]).
    retired: Arc<Mutex<Retired>>,
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |error| Error::Storage(format!("{what} {}: {error}", path.display()))
}

fn corrupt(what: String) -> Error {
    Error::Storage(format!("corrupt store: {what}"))
}

/// The value directory of the store at `base`.
pub fn dir_of(base: &Path) -> PathBuf {
    let mut name = base.file_name().unwrap_or_default().to_os_string();
    name.push(".values");
    base.with_file_name(name)
}

fn file_name(file: u64) -> String {
    format!("{file:020}.values")
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io("syncing", dir))
}

impl ValueFiles {
    /// Opens the value files in `dir` (creating it), each with no live
    /// bytes until [`ValueFiles::count_live`] counts them.
    pub fn open(dir: &Path) -> Result<ValueFiles> {
        fs::create_dir_all(dir).map_err(io("creating", dir))?;
        let mut files = BTreeMap::new();
        for entry in fs::read_dir(dir).map_err(io("listing", dir))? {
            let entry = entry.map_err(io("listing", dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(number) = name.strip_suffix(".values").and_then(|n| n.parse::<u64>().ok()) else {
                continue;
            };
            let path = entry.path();
            let file = File::open(&path).map_err(io("opening", &path))?;
            let length = file.metadata().map_err(io("reading", &path))?.len();
            files.insert(
                number,
                Usage {
                    file: Arc::new(file),
                    length,
                    live: 0,
                },
            );
        }
        Ok(ValueFiles {
            dir: dir.to_path_buf(),
            next_number: files.keys().next_back().map_or(1, |last| last + 1),
            files,
            newest: None,
            pending: Vec::new(),
            unlinking: Vec::new(),
            retired: Arc::default(),
        })
    }

    /// No files: what a store's state holds while it is being replaced
    /// (a restore), never read.
    pub fn closed() -> ValueFiles {
        ValueFiles {
            dir: PathBuf::new(),
            files: BTreeMap::new(),
            newest: None,
            pending: Vec::new(),
            next_number: 1,
            unlinking: Vec::new(),
            retired: Arc::default(),
        }
    }

    /// The bytes of the block `stored` (a sled value under a block key):
    /// read from its file when it is a pointer, else `stored` itself.
    pub fn resolve<'a>(&self, stored: &'a [u8]) -> Result<Cow<'a, [u8]>> {
        match Pointer::decode(stored) {
            Some(pointer) => self.read(&pointer).map(Cow::Owned),
            None => Ok(Cow::Borrowed(stored)),
        }
    }

    /// As [`ValueFiles::resolve`], reading a pointer's bytes into
    /// `buffer`, which a pass over many blocks reuses: one allocation
    /// for the pass instead of a zeroed one per block.
    pub fn resolve_into<'a>(&self, stored: &'a [u8], buffer: &'a mut Vec<u8>) -> Result<&'a [u8]> {
        match Pointer::decode(stored) {
            Some(pointer) => {
                self.read_into(&pointer, buffer)?;
                Ok(buffer.as_slice())
            }
            None => Ok(stored),
        }
    }

    /// The bytes `pointer` names, checked against its CRC.
    pub fn read(&self, pointer: &Pointer) -> Result<Vec<u8>> {
        let mut bytes = Vec::new();
        self.read_into(pointer, &mut bytes)?;
        Ok(bytes)
    }

    /// Reads the bytes `pointer` names into `bytes` (replacing what it
    /// held), checked against its CRC.
    pub fn read_into(&self, pointer: &Pointer, bytes: &mut Vec<u8>) -> Result<()> {
        let usage = self
            .files
            .get(&pointer.file)
            .ok_or_else(|| corrupt(format!("value file {} is missing", pointer.file)))?;
        bytes.clear();
        bytes.resize(pointer.length as usize, 0);
        usage.file.read_exact_at(bytes, pointer.offset).map_err(|error| {
            corrupt(format!(
                "reading {} bytes at {} of value file {}: {error}",
                pointer.length, pointer.offset, pointer.file
            ))
        })?;
        if crc32c::crc32c(bytes) != pointer.crc {
            return Err(corrupt(format!(
                "a block at {} of value file {} fails its checksum",
                pointer.offset, pointer.file
            )));
        }
        Ok(())
    }

    /// Appends `block` to the newest file (starting one when there is
    /// none or it is full) and returns its pointer. Nothing is written
    /// until [`ValueFiles::sync`].
    pub fn append(&mut self, block: &[u8]) -> Result<Pointer> {
        let file = match self.newest {
            Some(file) if self.pending.is_empty() && self.files[&file].length >= VALUE_FILE_BYTES_MAX => {
                self.start_file()?
            }
            Some(file) => file,
            None => self.start_file()?,
        };
        let offset = self.files[&file].length + self.pending.len() as u64;
        self.pending.extend_from_slice(block);
        Ok(Pointer {
            file,
            offset,
            length: u32::try_from(block.len()).expect("blocks are far below 4 GiB"),
            crc: crc32c::crc32c(block),
        })
    }

    /// Creates the next file, syncing the directory so that it is there
    /// after a crash before anything points into it.
    fn start_file(&mut self) -> Result<u64> {
        let number = self.next_number;
        let path = self.dir.join(file_name(number));
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create_new(true)
            .open(&path)
            .map_err(io("creating", &path))?;
        sync_dir(&self.dir)?;
        self.files.insert(
            number,
            Usage {
                file: Arc::new(file),
                length: 0,
                live: 0,
            },
        );
        self.newest = Some(number);
        self.next_number = number + 1;
        Ok(number)
    }

    /// Writes what was appended and syncs it. A failure is the store's:
    /// nothing that was appended may be pointed to.
    pub fn sync(&mut self) -> Result<()> {
        let Some(number) = self.newest.filter(|_| !self.pending.is_empty()) else {
            return Ok(());
        };
        let path = self.dir.join(file_name(number));
        let usage = self.files.get_mut(&number).expect("the newest file is open");
        let mut file: &File = &usage.file;
        file.write_all(&self.pending).map_err(io("writing", &path))?;
        fail::fail_point!("mvcc::value_sync", |_| Err(Error::Storage(format!(
            "syncing {}: injected failure",
            path.display()
        ))));
        file.sync_data().map_err(io("syncing", &path))?;
        usage.length += self.pending.len() as u64;
        self.pending.clear();
        Ok(())
    }

    /// Ends the newest file: the next append starts another, so that the
    /// ended one can be reclaimed.
    pub fn seal(&mut self) {
        if self.pending.is_empty() {
            self.newest = None;
        }
    }

    /// Forgets every count of live bytes, before counting them anew.
    pub fn reset_live(&mut self) {
        for usage in self.files.values_mut() {
            usage.live = 0;
        }
    }

    /// Counts `change` bytes more (or fewer) as live in the file
    /// `pointer` names.
    pub fn count_live(&mut self, pointer: &Pointer, change: i64) {
        if let Some(usage) = self.files.get_mut(&pointer.file) {
            usage.live = (usage.live as i64 + change).max(0) as u64;
        }
    }

    /// The files, other than the newest, holding less than `percent` of
    /// their length in live bytes (100: any dead byte), oldest first.
    pub fn reclaimable(&self, percent: u64) -> Vec<u64> {
        self.files
            .iter()
            .filter(|(number, usage)| Some(**number) != self.newest && usage.live * 100 < usage.length * percent)
            .map(|(number, _)| *number)
            .collect()
    }

    /// The files, other than the newest, in which no pointer sled holds
    /// names a byte, oldest first: reclaiming them moves nothing.
    pub fn dead(&self) -> Vec<u64> {
        self.files
            .iter()
            .filter(|(number, usage)| Some(**number) != self.newest && usage.live == 0)
            .map(|(number, _)| *number)
            .collect()
    }

    /// Live bytes of every file.
    pub fn live_total(&self) -> u64 {
        self.files.values().map(|usage| usage.live).sum()
    }

    /// Live bytes of file `number`.
    pub fn live(&self, number: u64) -> u64 {
        self.files.get(&number).map_or(0, |usage| usage.live)
    }

    /// Forgets file `number`, which no pointer sled may recover names, and
    /// removes it on a thread of its own, in paced steps (wal's
    /// `removal.rs`): unlinking a file of [`VALUE_FILE_BYTES_MAX`] took tens
    /// of milliseconds here, which the applies waited for when a reclaim's step
    /// did it, and freeing it whole stalled the syncs of every appending
    /// file on the disk. A failed removal leaves a file no pointer names,
    /// which the next open deletes; it is logged, not fatal.
    /// [`ValueFiles::settle`] waits for the removals.
    pub fn retire(&mut self, number: u64) {
        let Some((path, usage)) = self.forget(number) else {
            return;
        };
        // Reads go through the files kept, so none reads this one now.
        drop(usage);
        let mut queue = self.retired.lock();
        queue.paths.push_back(path);
        if queue.removing {
            return;
        }
        let shared = Arc::clone(&self.retired);
        match std::thread::Builder::new()
            .name("value-unlink".into())
            .spawn(move || remove_retired(&shared))
        {
            Ok(thread) => {
                queue.removing = true;
                self.unlinking.retain(|thread| !thread.is_finished());
                self.unlinking.push(thread);
            }
            Err(error) => {
                tracing::warn!(%error, "no thread to remove a value file; the next retire or open removes it")
            }
        }
    }

    /// The unlinks [`ValueFiles::retire`] started, to wait for outside
    /// any lock.
    pub fn settle(&mut self) -> Vec<std::thread::JoinHandle<()>> {
        std::mem::take(&mut self.unlinking)
    }

    /// Deletes file `number`, which no pointer sled may recover names.
    pub fn remove(&mut self, number: u64) -> Result<()> {
        let Some((path, _)) = self.forget(number) else {
            return Ok(());
        };
        // No sync of the directory: an unlink a crash loses leaves a file
        // no pointer names, which the next open deletes
        // (`remove_unreferenced`), and the sync cost as much as the unlink.
        // A file already gone is what was asked for.
        match fs::remove_file(&path) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(io("removing", &path)(error)),
            _ => Ok(()),
        }
    }

    /// Drops file `number` from those kept, with its path and its handle,
    /// for [`ValueFiles::remove`] or [`ValueFiles::retire`] to delete.
    fn forget(&mut self, number: u64) -> Option<(PathBuf, Usage)> {
        let usage = self.files.remove(&number)?;
        if self.newest == Some(number) {
            self.newest = None;
        }
        Some((self.dir.join(file_name(number)), usage))
    }

    /// Deletes every file no pointer names, but the newest: what a crash
    /// or a restore left behind. Only when what sled holds is durable.
    pub fn remove_unreferenced(&mut self) -> Result<()> {
        let dead: Vec<u64> = self
            .files
            .iter()
            .filter(|(number, usage)| usage.live == 0 && Some(**number) != self.newest)
            .map(|(number, _)| *number)
            .collect();
        for number in dead {
            self.remove(number)?;
        }
        Ok(())
    }

    /// Bytes of every file, with what is appended and not yet written.
    pub fn size_on_disk(&self) -> u64 {
        self.files.values().map(|usage| usage.length).sum::<u64>() + self.pending.len() as u64
    }
}

/// Value files retired and waiting for removal, oldest first, and
/// whether a thread is removing them.
#[derive(Default)]
struct Retired {
    paths: std::collections::VecDeque<PathBuf>,
    removing: bool,
}

/// The removal thread's body: removes retired files one after another
/// until none is left, then says it stopped, under the same lock a retire
/// takes, so a file retired meanwhile either is seen here or starts a
/// thread of its own. One such thread per store: the files go one at a
/// time whatever a compaction retires at once.
fn remove_retired(retired: &Mutex<Retired>) {
    loop {
        let Some(path) = ({
            let mut queue = retired.lock();
            let next = queue.paths.pop_front();
            queue.removing = next.is_some();
            next
        }) else {
            return;
        };
        wal::removal::remove_all(&[path], "a reclaimed value file");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: a pointer round-trips, and no block (whose count is never 0)
    // reads as one.
    #[test]
    fn pointers_round_trip_and_blocks_are_not_pointers() {
        let pointer = Pointer {
            file: 7,
            offset: 1 << 40,
            length: 4096,
            crc: 0xdead_beef,
        };
        assert_eq!(Pointer::decode(&pointer.encode()), Some(pointer));
        let mut block = pointer.encode().to_vec();
        block[3] = 1;
        assert_eq!(Pointer::decode(&block), None);
        assert_eq!(Pointer::decode(&pointer.encode()[..27]), None);
    }

    // Goal: appended blocks read back after the sync and after a reopen;
    // each open starts a new file; a flipped bit is reported; files no
    // pointer names are deleted.
    #[test]
    fn blocks_read_back_and_a_flipped_bit_is_caught() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kv.values");
        let mut files = ValueFiles::open(&path).unwrap();
        let first = files.append(b"first block").unwrap();
        let second = files.append(&[9u8; 5000]).unwrap();
        files.sync().unwrap();
        assert_eq!(files.read(&first).unwrap(), b"first block");
        assert_eq!(files.resolve(&second.encode()).unwrap().as_ref(), &[9u8; 5000][..]);
        assert_eq!(files.resolve(b"inline").unwrap().as_ref(), b"inline");
        drop(files);

        let mut files = ValueFiles::open(&path).unwrap();
        assert_eq!(files.read(&second).unwrap(), vec![9u8; 5000]);
        let third = files.append(b"third").unwrap();
        files.sync().unwrap();
        assert_ne!(third.file, first.file, "an open starts a new file");

        let on_disk = path.join(file_name(first.file));
        let mut bytes = fs::read(&on_disk).unwrap();
        bytes[3] ^= 0x10;
        fs::write(&on_disk, bytes).unwrap();
        let files = ValueFiles::open(&path).unwrap();
        let error = files.read(&first).unwrap_err().to_string();
        assert!(error.contains("checksum"), "{error}");

        let mut files = files;
        files.count_live(&third, third.length as i64);
        files.remove_unreferenced().unwrap();
        assert!(!on_disk.exists());
        assert_eq!(files.read(&third).unwrap(), b"third");
        assert_eq!(files.size_on_disk(), 5);
    }

    // Goal: a retired file is unlinked off the caller's thread, and its
    // number is never taken again by this handle, even when it was the
    // highest.
    #[test]
    fn a_retired_file_is_unlinked_and_its_number_not_reused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kv.values");
        let mut files = ValueFiles::open(&path).unwrap();
        let first = files.append(b"first").unwrap();
        files.sync().unwrap();
        let on_disk = path.join(file_name(first.file));
        assert!(on_disk.exists());
        files.retire(first.file);
        for thread in files.settle() {
            thread.join().unwrap();
        }
        assert!(!on_disk.exists());
        let second = files.append(b"second").unwrap();
        files.sync().unwrap();
        assert!(second.file > first.file, "file {} after {}", second.file, first.file);
        assert_eq!(files.read(&second).unwrap(), b"second");
    }

    // Goal: a file is reclaimable once its live share falls below the
    // bound, never while it is the newest.
    #[test]
    fn reclaimable_files_are_the_sealed_mostly_dead_ones() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = ValueFiles::open(&dir.path().join("kv.values")).unwrap();
        let a = files.append(&[1u8; 100]).unwrap();
        let b = files.append(&[2u8; 100]).unwrap();
        files.sync().unwrap();
        files.count_live(&a, 100);
        files.count_live(&b, 100);
        assert!(files.reclaimable(RECLAIM_LIVE_PERCENT).is_empty());
        files.seal();
        assert!(files.reclaimable(RECLAIM_LIVE_PERCENT).is_empty());
        assert_eq!(files.reclaimable(100), Vec::<u64>::new());
        files.count_live(&a, -100);
        assert_eq!(files.reclaimable(100), vec![a.file]);
        assert!(files.reclaimable(RECLAIM_LIVE_PERCENT).is_empty(), "half is live");
        files.count_live(&b, -1);
        assert_eq!(files.reclaimable(RECLAIM_LIVE_PERCENT), vec![a.file]);
        let c = files.append(b"next").unwrap();
        assert_ne!(c.file, a.file, "a sealed file is not appended to");
    }
}
