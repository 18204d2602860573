//! Snapshots received from the leader and not yet installed.
//!
//! A received snapshot is synced to `snap-<index>-<term>.db` before raft
//! hears of it (`peer::snapshot_receive`); the raft loop records it in the
//! WAL and the apply stage restores the store from it, records the marker
//! and deletes the file. A pending file therefore outlives a crash
//! anywhere between its rename and the marker. On start
//! ([`super::durable_log::DurableLog::open`]) a pending snapshot newer
//! than the marker is installed if the WAL holds its record; if the WAL
//! does not, raft never took it, and the file is deleted.

use std::path::{Path, PathBuf};

use crate::error::Error;
use crate::storage::layout::DataDir;
use crate::storage::marker::SnapshotMarker;

/// A pending snapshot file.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PendingSnapshot {
    pub index: u64,
    pub term: u64,
    pub path: PathBuf,
}

/// Pending snapshot files in the data directory, in index order.
pub fn list(dir: &DataDir) -> Vec<PendingSnapshot> {
    let Ok(entries) = std::fs::read_dir(dir.member()) else {
        return Vec::new();
    };
    let mut found: Vec<PendingSnapshot> = entries
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let (index, term) = DataDir::parse_pending_snapshot(&name)?;
            Some(PendingSnapshot {
                index,
                term,
                path: entry.path(),
            })
        })
        .collect();
    found.sort();
    found
}

/// Deletes pending snapshot files at or below `index`.
pub fn remove_through(dir: &DataDir, index: u64) {
    for pending in list(dir) {
        if pending.index <= index {
            if let Err(error) = std::fs::remove_file(&pending.path) {
                tracing::warn!(%error, path = %pending.path.display(), "could not delete a used snapshot file");
            }
        }
    }
}

/// Restores `store` from a pending snapshot file at raft index `index`.
pub fn restore(store: &mvcc::Store, index: u64, path: &Path) -> Result<(), Error> {
    let file = std::fs::File::open(path).map_err(Error::io(path))?;
    store.restore_from(index, std::io::BufReader::new(file))?;
    Ok(())
}

/// Completes an install a crash cut short: restores the store from the
/// pending file unless it already holds the snapshot, then writes the
/// marker.
pub fn finish_install(dir: &DataDir, store: &mvcc::Store, pending: &PendingSnapshot) -> Result<(), Error> {
    if store.is_restoring()? || store.consistent_index() < pending.index {
        restore(store, pending.index, &pending.path)?;
    }
    SnapshotMarker::overwrite(&dir.snapshot_marker(), pending.index, pending.term)?;
    tracing::info!(
        index = pending.index,
        term = pending.term,
        "finished installing a received snapshot"
    );
    Ok(())
}
