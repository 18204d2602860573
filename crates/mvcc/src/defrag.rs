//! Defragmenting: the store rewritten into a fresh sled database, which
//! holds only what is live, then moved into the store's place. sled never
//! gives back the space of what was deleted or compacted away; this is how
//! it is won back, as etcd's Defragment rewrites its bbolt file.
//!
//! The rewrite goes to `<store>.defrag`. Once it is complete, flushed and
//! its directories synced, the old directory moves to `<store>.old`, the new one into place, the
//! parent directory is synced, and the old one is removed. A crash at any
//! point leaves one of these, which [`recover`] (run on every open)
//! finishes or discards:
//!
//! - the store and a `.defrag`: the rewrite was cut short; it goes;
//! - no store, and a `.defrag`: the rewrite was complete (the old one moves
//!   aside only after it is); it moves into place;
//! - an `.old`: the move was complete; it goes.

use std::fs;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Bytes of items copied per sled batch while rewriting: large enough
/// that batches cost little each, small enough to bound the memory one
/// batch holds.
pub const DEFRAG_BATCH_BYTES: usize = 16 << 20;

/// Where the rewrite of the store at `path` is made.
pub fn rewrite_path(path: &Path) -> PathBuf {
    sibling(path, "defrag")
}

/// Where the old store waits to be removed.
pub fn old_path(path: &Path) -> PathBuf {
    sibling(path, "old")
}

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".");
    name.push(suffix);
    path.with_file_name(name)
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |error| Error::Storage(format!("{what} {}: {error}", path.display()))
}

/// Finishes or discards what a defragmentation cut short by a crash left
/// beside the store at `path` (see the module docs).
pub fn recover(path: &Path) -> Result<()> {
    let rewrite = rewrite_path(path);
    if rewrite.exists() {
        if path.exists() {
            fs::remove_dir_all(&rewrite).map_err(io("removing", &rewrite))?;
        } else {
            fs::rename(&rewrite, path).map_err(io("moving into place", &rewrite))?;
            sync_parent(path)?;
        }
    }
    let old = old_path(path);
    if old.exists() {
        fs::remove_dir_all(&old).map_err(io("removing", &old))?;
    }
    Ok(())
}

/// Copies every item of `from` into `to`, in batches.
pub fn copy(from: &sled::Db, to: &sled::Db) -> Result<()> {
    let mut batch = sled::Batch::default();
    let mut bytes = 0;
    for item in from.iter() {
        let (key, value) = item?;
        bytes += key.len() + value.len();
        batch.insert(key, value);
        if bytes >= DEFRAG_BATCH_BYTES {
            to.apply_batch(std::mem::take(&mut batch))?;
            bytes = 0;
        }
    }
    to.apply_batch(batch)?;
    to.flush()?;
    Ok(())
}

/// Syncs the rewrite's directories (sled syncs its files' contents, not
/// their entries), so that once it moves into place every file is there
/// after a power loss too.
pub fn sync_rewrite(path: &Path) -> Result<()> {
    let rewrite = rewrite_path(path);
    let entries = fs::read_dir(&rewrite).map_err(io("listing", &rewrite))?;
    for entry in entries {
        let entry = entry.map_err(io("listing", &rewrite))?;
        if entry.file_type().map_err(io("listing", &rewrite))?.is_dir() {
            sync_dir(&entry.path())?;
        }
    }
    sync_dir(&rewrite)
}

fn sync_dir(dir: &Path) -> Result<()> {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("syncing", dir))
}

/// Moves the complete rewrite into the place of the store at `path`, both
/// closed, and removes the old one.
pub fn swap_in(path: &Path) -> Result<()> {
    let (rewrite, old) = (rewrite_path(path), old_path(path));
    fs::rename(path, &old).map_err(io("moving aside", path))?;
    // Crash tests stop the process here, with no store in place.
    fail::fail_point!("mvcc::defrag_moved_aside", |_| std::process::abort());
    fs::rename(&rewrite, path).map_err(io("moving into place", &rewrite))?;
    sync_parent(path)?;
    fs::remove_dir_all(&old).map_err(io("removing", &old))?;
    Ok(())
}

fn sync_parent(path: &Path) -> Result<()> {
    sync_dir(
        path.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new(".")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: each state a crash can leave is finished or discarded.
    #[test]
    fn recovery_finishes_or_discards() {
        let root = tempfile::tempdir().unwrap();
        let store = root.path().join("kv");
        let mark = |dir: &Path, content: &str| {
            fs::create_dir_all(dir).unwrap();
            fs::write(dir.join("mark"), content).unwrap();
        };
        let read = |dir: &Path| fs::read_to_string(dir.join("mark")).unwrap();

        // A rewrite cut short: the store stays, the rewrite goes.
        mark(&store, "store");
        mark(&rewrite_path(&store), "partial");
        recover(&store).unwrap();
        assert_eq!(read(&store), "store");
        assert!(!rewrite_path(&store).exists());

        // Moved aside, not yet into place: the rewrite moves in.
        fs::rename(&store, old_path(&store)).unwrap();
        mark(&rewrite_path(&store), "rewritten");
        recover(&store).unwrap();
        assert_eq!(read(&store), "rewritten");
        assert!(!old_path(&store).exists() && !rewrite_path(&store).exists());
    }
}
