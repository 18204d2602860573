//! The log's durability primitives behind a seam: positioned writes,
//! `fdatasync` and the directory's fsync, as the log calls them while it
//! runs (a save, a segment's creation, a release of old segments, and
//! the removal of released segments' files). The
//! real disk ([`RealDisk`]) is `sync.rs`, with its failpoints; a test or
//! a simulator gives its own [`Disk`] to fail, delay or watch them for one
//! log alone, where the failpoints act on the whole process.
//!
//! Opening a log (replay, and the repair of a torn tail) reads and writes
//! the real files directly: it runs before any write is acknowledged.

use std::fmt::Debug;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

use crate::removal;
use crate::sync;

/// Where the log's writes and syncs go.
pub trait Disk: Send + Sync + Debug {
    /// Writes all of `bytes` at `offset` of `file`.
    fn write_all_at(&self, file: &File, bytes: &[u8], offset: u64) -> io::Result<()>;
    /// Makes what was written to `file` durable.
    fn fdatasync(&self, file: &File) -> io::Result<()>;
    /// Makes `dir`'s entries (files created, renamed, removed) durable.
    fn fsync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Frees the files of released segments, already renamed out of the
    /// log and no longer read: the real disk removes them on a thread of
    /// its own in paced steps (removal.rs) and returns the thread, for
    /// the log to wait for when it closes. A simulator removes them at
    /// once, so that no thread's timing reaches its runs.
    fn release(&self, paths: Vec<PathBuf>) -> Option<JoinHandle<()>> {
        removal::remove_on_thread(paths, "a released segment")
    }
}

/// The real disk: `sync.rs`'s calls.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealDisk;

impl Disk for RealDisk {
    fn write_all_at(&self, file: &File, bytes: &[u8], offset: u64) -> io::Result<()> {
        sync::write_all_at(file, bytes, offset)
    }

    fn fdatasync(&self, file: &File) -> io::Result<()> {
        sync::fdatasync(file)
    }

    fn fsync_dir(&self, dir: &Path) -> io::Result<()> {
        sync::fsync_dir(dir)
    }
}
