//! The snapshot marker: `member/snap` holds the index and term (16 bytes,
//! big-endian) of the newest snapshot whose state the store holds on disk.
//!
//! It is written only after the store was flushed at or past that index
//! and the WAL holds the snapshot record, so on restart the WAL replays
//! from it and the store already has everything before it. Without the
//! file, replay starts at 0.
//!
//! Two threads record snapshots: the raft loop (snapshots it takes) and
//! the apply stage (snapshots it installs). [`SnapshotMarker::record`]
//! serialises them and never moves the marker back.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;

use crate::error::Error;

pub struct SnapshotMarker {
    path: PathBuf,
    /// The index the file holds.
    recorded: Mutex<u64>,
}

impl SnapshotMarker {
    /// The marker at `path`, recorded at `index` (what `read` found).
    pub fn new(path: PathBuf, index: u64) -> SnapshotMarker {
        SnapshotMarker {
            path,
            recorded: Mutex::new(index),
        }
    }

    /// Reads the marker at `path`; (0, 0) when there is none.
    pub fn read(path: &Path) -> Result<(u64, u64), Error> {
        match std::fs::read(path) {
            Ok(bytes) if bytes.len() == 16 => Ok((
                u64::from_be_bytes(bytes[..8].try_into().expect("8 bytes")),
                u64::from_be_bytes(bytes[8..].try_into().expect("8 bytes")),
            )),
            Ok(_) => Err(Error::Corrupt {
                path: path.to_path_buf(),
                what: "not a snapshot marker".into(),
            }),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok((0, 0)),
            Err(error) => Err(Error::io(path)(error)),
        }
    }

    /// Records a snapshot, unless a newer one is recorded.
    pub fn record(&self, index: u64, term: u64) -> Result<(), Error> {
        let mut recorded = self.recorded.lock();
        if index <= *recorded {
            return Ok(());
        }
        write(&self.path, index, term).map_err(Error::io(&self.path))?;
        *recorded = index;
        Ok(())
    }

    /// Writes the marker whatever it held: for finishing an install at
    /// start, before the member runs.
    pub fn overwrite(path: &Path, index: u64, term: u64) -> Result<(), Error> {
        write(path, index, term).map_err(Error::io(path))
    }
}

/// Writes the marker durably: a temporary file, fsync, rename, fsync of
/// the directory.
fn write(path: &Path, index: u64, term: u64) -> std::io::Result<()> {
    let temporary = path.with_extension("tmp");
    let mut file = std::fs::File::create(&temporary)?;
    file.write_all(&index.to_be_bytes())?;
    file.write_all(&term.to_be_bytes())?;
    file.sync_all()?;
    std::fs::rename(&temporary, path)?;
    std::fs::File::open(path.parent().expect("the marker has a parent"))?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: a recorded snapshot reads back, an older one never replaces a
    // newer one, and bytes of the wrong size are refused.
    #[test]
    fn the_marker_only_moves_forward() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("snap");
        assert_eq!(SnapshotMarker::read(&path).unwrap(), (0, 0));
        let marker = SnapshotMarker::new(path.clone(), 0);
        marker.record(10, 2).unwrap();
        marker.record(7, 9).unwrap();
        assert_eq!(SnapshotMarker::read(&path).unwrap(), (10, 2));
        std::fs::write(&path, b"short").unwrap();
        assert!(SnapshotMarker::read(&path).is_err());
    }
}
