//! The next segment's file, written full of zeros before it is needed.
//!
//! Why zeros and not only `fallocate`: a preallocated but never written
//! extent is "unwritten" to ext4, so the first write into each block makes
//! the next `fdatasync` also write the extent tree, a second device write
//! per sync: small writes into an fallocated file took over one and a
//! half times as long as into one already written, and large ones ran at
//! about half the rate (`docs/measurements.md`). Raft's writes are mostly small,
//! so a sync that only flushes the disk's cache is worth a segment's worth
//! of zeros once per 64 MiB.
//!
//! The zeros go in with direct writes of [`ZERO_FILL_CHUNK_BYTES`] (no
//! copy through the page cache), then one `fdatasync`. The first segment
//! of a new log is filled in line; every later one on a background thread
//! started when the tail is half full ([`Spare::start`]), so a cut waits
//! only if the log outran the fill. The file is `spare.tmp`: a crash
//! leaves at most a `.tmp` file, which open removes (see segment.rs).
//!
//! The fill uses the file's own `write_all_at` and `sync_data`, not the
//! failpoint-wrapped ones in sync.rs: those model the log's writes, and a
//! crash failpoint firing on this thread would crash at a point no test
//! chose. A failed fill is still never ignored: the cut that needs the
//! spare fails and poisons the log.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::direct::{self, ALIGNMENT_BYTES};
use crate::error::{Error, Result};
use crate::sync;

/// The spare's file name in the log directory. The `.tmp` suffix makes
/// open remove a leftover one.
pub const SPARE_FILE: &str = "spare.tmp";

/// Size of each zero write: 1 MiB streams at the device's sequential rate
/// (measured above), and a cancelled fill stops within one such write,
/// about half a millisecond.
pub const ZERO_FILL_CHUNK_BYTES: usize = 1 << 20;

/// A file of the segment size, all zeros and synced, waiting at
/// `spare.tmp` to become the next segment.
#[derive(Debug)]
pub struct Prepared {
    pub file: File,
    pub path: PathBuf,
}

/// A spare being filled on a background thread.
#[derive(Debug)]
pub struct Spare {
    cancel: Arc<AtomicBool>,
    filling: Option<JoinHandle<Result<Prepared>>>,
}

impl Spare {
    /// Starts filling `spare.tmp` in `dir` with `size_bytes` of zeros.
    pub fn start(dir: &Path, size_bytes: u64) -> Spare {
        let cancel = Arc::new(AtomicBool::new(false));
        let dir = dir.to_path_buf();
        let flag = Arc::clone(&cancel);
        let filling = std::thread::Builder::new()
            .name("wal-spare".into())
            .spawn(move || prepare(&dir, size_bytes, &flag))
            .map_err(|error| {
                tracing::warn!(%error, "no thread for the spare segment; it will be filled at the cut");
            })
            .ok();
        Spare { cancel, filling }
    }

    /// Waits for the fill to end and returns the file. When no thread
    /// could be started, fills it now.
    pub fn take(mut self, dir: &Path, size_bytes: u64) -> Result<Prepared> {
        match self.filling.take() {
            Some(filling) => filling.join().expect("the spare's thread does not panic"),
            None => prepare(dir, size_bytes, &AtomicBool::new(false)),
        }
    }
}

impl Drop for Spare {
    /// A log closed before its cut stops the fill and waits for the thread,
    /// so no write of it can land in a file a later open of the same
    /// directory uses.
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
        if let Some(filling) = self.filling.take() {
            let _ = filling.join();
        }
    }
}

/// Creates `spare.tmp` in `dir` (replacing any left there), reserves
/// `size_bytes` and writes zeros over all of it, then syncs it. Stops with
/// an error when `cancel` is set.
pub fn prepare(dir: &Path, size_bytes: u64, cancel: &AtomicBool) -> Result<Prepared> {
    let path = dir.join(SPARE_FILE);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .map_err(|e| Error::io("create spare segment", &path, e))?;
    sync::preallocate(&file, size_bytes).map_err(|e| Error::io("preallocate", &path, e))?;
    zero_fill(&path, &file, size_bytes, cancel).map_err(|e| Error::io("zero-fill spare segment", &path, e))?;
    file.sync_data()
        .map_err(|e| Error::io("fdatasync spare segment", &path, e))?;
    Ok(Prepared { file, path })
}

/// Writes zeros over `0..size_bytes` of the file at `path`, directly where
/// the file system allows it, through `buffered` otherwise.
fn zero_fill(path: &Path, buffered: &File, size_bytes: u64, cancel: &AtomicBool) -> io::Result<()> {
    let direct = direct::open_direct(path)?;
    let mut backing = Vec::new();
    let zeros: &[u8] = direct::aligned_window(&mut backing, ZERO_FILL_CHUNK_BYTES);
    let file = direct.as_ref().unwrap_or(buffered);
    let mut offset = 0u64;
    while offset < size_bytes {
        if cancel.load(Ordering::Relaxed) {
            return Err(io::Error::other("spare fill cancelled: the log was closed"));
        }
        // The last write rounds up to the alignment; the file grows by at
        // most one block past the segment size, which appends ignore.
        let remaining = (size_bytes - offset).min(ZERO_FILL_CHUNK_BYTES as u64) as usize;
        let length = remaining.div_ceil(ALIGNMENT_BYTES) * ALIGNMENT_BYTES;
        file.write_all_at(&zeros[..length], offset)?;
        offset += length as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: a prepared spare is exactly the size asked (rounded up to the
    // alignment), all zeros, and a cancelled fill stops with an error.
    // Method: a temporary directory on this machine's disk; sizes on and
    // off the block and chunk boundaries.
    #[test]
    fn a_spare_is_all_zeros_and_a_cancel_stops_it() {
        let dir = tempfile::tempdir().unwrap();
        for size in [4096u64, 10_000, (ZERO_FILL_CHUNK_BYTES as u64) * 2 + 8] {
            let prepared = prepare(dir.path(), size, &AtomicBool::new(false)).unwrap();
            let length = prepared.file.metadata().unwrap().len();
            assert_eq!(length, size.div_ceil(ALIGNMENT_BYTES as u64) * ALIGNMENT_BYTES as u64);
            let mut read = vec![1u8; length as usize];
            prepared.file.read_exact_at(&mut read, 0).unwrap();
            assert!(read.iter().all(|&b| b == 0), "size {size}");
        }
        let cancelled = prepare(dir.path(), 1 << 24, &AtomicBool::new(true));
        assert!(cancelled.is_err());
        let spare = Spare::start(dir.path(), 1 << 20);
        let prepared = spare.take(dir.path(), 1 << 20).unwrap();
        assert_eq!(prepared.path, dir.path().join(SPARE_FILE));
    }
}
