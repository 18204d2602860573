//! Removing a large file without stalling the disk's other writers.
//!
//! Both stores drop whole files as they go: the log its released
//! segments (`Wal::release_to`), the MVCC store its dead value files. On
//! ext4 mounted with `discard`, as cloud disks often are, unlinking one of
//! 64 MiB takes tens of milliseconds in the `unlink` call itself, and
//! while the file system frees (and trims) its extents, another file's
//! `fdatasync` that needs a journal commit (an append, as the value files
//! and sled's log make) waits about as long (`docs/measurements.md`). The
//! raft loop that released segments waited the unlink itself, on every
//! other snapshot at ten million keys.
//!
//! So a file goes in steps: it is truncated by [`REMOVAL_CHUNK_BYTES`] at
//! a time, each step synced, so that each journal commit frees a few
//! extents, and only the empty file is unlinked. The steps run on the
//! caller's thread (each store calls this from a thread of its own), and
//! one removal at a time runs in the process, as they share the disk.
//!
//! The file must be one nobody reads any more, and whose loss in part is
//! harmless after a crash: a truncated file stays behind under its name
//! until the next open removes it (the log hides a released segment
//! under a `.tmp` name first; a value file no pointer names is removed
//! at open).

use std::fs::{self, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::thread::JoinHandle;

/// Bytes a removal frees per step: a 64 MiB file goes in 8 synced steps,
/// and an appending writer's `fdatasync` beside them waited a fifth of
/// what it waited beside one unlink of the whole file
/// (`docs/measurements.md`); each step is one more sync of the removing
/// thread, so much smaller steps only add syncs.
pub const REMOVAL_CHUNK_BYTES: u64 = 8 << 20;

/// One removal at a time in the process: two would free extents into the
/// same journal commits, which is what the steps avoid.
static REMOVING: Mutex<()> = Mutex::new(());

/// Removes the file at `path` in synced steps of [`REMOVAL_CHUNK_BYTES`],
/// then unlinks it. A file already gone is what was asked for.
pub fn remove_paced(path: &Path) -> io::Result<()> {
    let _one = REMOVING.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let file = match OpenOptions::new().write(true).open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(error),
    };
    let mut length = file.metadata()?.len();
    while length > 0 {
        length = length.saturating_sub(REMOVAL_CHUNK_BYTES);
        file.set_len(length)?;
        file.sync_data()?;
    }
    drop(file);
    match fs::remove_file(path) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => Err(error),
        _ => Ok(()),
    }
}

/// Removes `paths`, in order, on a thread of its own, and returns the
/// thread for the caller to wait for before it reuses the directory.
/// Without a thread to be had, removes them here. A failed removal is
/// logged as `what` could not be removed, never fatal: the files are no
/// longer part of their store.
pub fn remove_on_thread(paths: Vec<PathBuf>, what: &'static str) -> Option<JoinHandle<()>> {
    let mine = paths.clone();
    match std::thread::Builder::new()
        .name("file-removal".into())
        .spawn(move || remove_all(&mine, what))
    {
        Ok(thread) => Some(thread),
        Err(error) => {
            tracing::warn!(%error, "no thread to remove files; removing them in line");
            remove_all(&paths, what);
            None
        }
    }
}

/// [`remove_paced`] for each of `paths`, logging a failure.
pub fn remove_all(paths: &[PathBuf], what: &'static str) {
    for path in paths {
        if let Err(error) = remove_paced(path) {
            tracing::warn!(path = %path.display(), %error, "{what} could not be removed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: a file of several steps, one of a partial step and an empty
    // one are all removed; a missing one is not an error.
    #[test]
    fn removes_files_of_any_length() {
        let dir = tempfile::tempdir().unwrap();
        for (name, length) in [
            ("steps", 3 * REMOVAL_CHUNK_BYTES),
            ("partial", REMOVAL_CHUNK_BYTES + 5),
            ("empty", 0),
        ] {
            let path = dir.path().join(name);
            fs::write(&path, vec![7u8; length as usize]).unwrap();
            remove_paced(&path).unwrap();
            assert!(!path.exists(), "{name} is still there");
        }
        remove_paced(&dir.path().join("never")).unwrap();
    }

    // Goal: a path that cannot be opened for writing (a directory) is an
    // error the caller sees, not a silent success.
    #[test]
    fn reports_what_it_cannot_remove() {
        let dir = tempfile::tempdir().unwrap();
        assert!(remove_paced(dir.path()).is_err());
    }
}
