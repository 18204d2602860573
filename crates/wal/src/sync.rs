//! The durability primitives: `fdatasync`, directory fsync, preallocation.
//!
//! Each carries a named failpoint (compiled in only with the `failpoints`
//! feature) so tests can make it fail as a broken disk would:
//! `wal::fdatasync`, `wal::write`, `wal::fsync_dir`. Three more crash the
//! process, for the robustness suite: `wal::torn_write` writes the first
//! half of a write and aborts (a torn tail, never synced nor
//! acknowledged); `wal::crash_before_fdatasync` and
//! `wal::crash_after_fdatasync` abort around the sync.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// The granularity at which the `wal::torn_write` failpoint tears a
/// write: a disk sector, as the medium's model assumes (see lib.rs).
#[cfg(feature = "failpoints")]
const TORN_SECTOR_BYTES: u64 = 512;

/// `fdatasync(2)`: the file's data and the metadata needed to read it back.
pub fn fdatasync(file: &File) -> io::Result<()> {
    fail::fail_point!("wal::fdatasync", |_| Err(io::Error::other("failpoint wal::fdatasync")));
    fail::fail_point!("wal::crash_before_fdatasync", |_| std::process::abort());
    file.sync_data()?;
    fail::fail_point!("wal::crash_after_fdatasync", |_| std::process::abort());
    Ok(())
}

/// Writes all of `bytes` at `offset` (positioned, so the file cursor is
/// never part of the state).
pub fn write_all_at(file: &File, bytes: &[u8], offset: u64) -> io::Result<()> {
    fail::fail_point!("wal::write", |_| Err(io::Error::other("failpoint wal::write")));
    fail::fail_point!("wal::torn_write", |_| {
        // Power lost halfway: the sectors before the middle of the write
        // reached the disk, the rest did not (the medium's model in lib.rs).
        let cut = (offset + bytes.len() as u64 / 2) / TORN_SECTOR_BYTES * TORN_SECTOR_BYTES;
        if cut > offset {
            let _ = file.write_all_at(&bytes[..(cut - offset) as usize], offset);
        }
        std::process::abort()
    });
    file.write_all_at(bytes, offset)
}

/// Makes the directory's entries (created, renamed, removed files) durable.
pub fn fsync_dir(dir: &Path) -> io::Result<()> {
    fail::fail_point!("wal::fsync_dir", |_| Err(io::Error::other("failpoint wal::fsync_dir")));
    File::open(dir)?.sync_all()
}

/// Allocates `bytes` of disk for the file so appends inside that range do
/// not allocate blocks. Falls back to extending the file sparsely on file
/// systems without `fallocate`.
pub fn preallocate(file: &File, bytes: u64) -> io::Result<()> {
    let length = libc::off_t::try_from(bytes).map_err(io::Error::other)?;
    // SAFETY: fallocate only reads its integer arguments; the descriptor is
    // owned by `file` and open for the duration of the call.
    let status = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, length) };
    if status == 0 {
        return Ok(());
    }
    let error = io::Error::last_os_error();
    match error.raw_os_error() {
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => {
            if file.metadata()?.len() < bytes {
                file.set_len(bytes)?;
            }
            Ok(())
        }
        _ => Err(error),
    }
}
