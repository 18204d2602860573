//! Every path inside a member's data directory, in one place. Nothing else
//! in the crate spells a file name.
//!
//! ```text
//! <data-dir>/member/
//!     wal/                      the WAL's segments (etcd's layout)
//!     wal.tmp/                  a new member's first WAL, being written
//!     kv/                       the MVCC store (sled)
//!     snap                      the snapshot marker (marker.rs)
//!     snap-<index>-<term>.db    a snapshot received from the leader, pending
//!     snap-in-<index>.tmp       a snapshot being received
//!     snap-out-<peer>.tmp       a snapshot being sent to a peer
//!     backup-<n>.tmp            a snapshot being written for a client
//!     backup-import.tmp         an etcd snapshot, converted, being restored
//!     restore.unfinished        `snapshot restore` has not finished here
//! ```
//!
//! With `--wal-dir` the WAL's segments live in that directory instead of
//! `member/wal` (and a new member's first WAL is written beside it, as
//! `<wal-dir>.tmp`); everything else stays in the data directory, as
//! etcd keeps it.
//!
//! Indexes, terms and peer ids in names are lowercase hex, the first two
//! zero-padded to 16 digits so names sort by index.

use std::path::{Path, PathBuf};

use crate::error::Error;

/// A member's data directory.
#[derive(Debug, Clone)]
pub struct DataDir {
    root: PathBuf,
    /// `--wal-dir`, when given.
    wal_dir: Option<PathBuf>,
}

impl DataDir {
    pub fn new(root: PathBuf) -> DataDir {
        DataDir { root, wal_dir: None }
    }

    /// A data directory whose WAL is in `wal_dir` (`--wal-dir`), if given.
    pub fn with_wal_dir(root: PathBuf, wal_dir: Option<PathBuf>) -> DataDir {
        DataDir { root, wal_dir }
    }

    /// Whether the WAL is in a directory of its own (`--wal-dir`).
    pub fn dedicated_wal(&self) -> Option<&Path> {
        self.wal_dir.as_deref()
    }

    /// The WAL's place in the data directory, where it is without
    /// `--wal-dir`.
    pub fn default_wal(&self) -> PathBuf {
        self.member().join("wal")
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Creates the `member` directory, and the WAL directory's parent,
    /// if they are missing.
    pub fn create(&self) -> Result<(), Error> {
        let member = self.member();
        std::fs::create_dir_all(&member).map_err(Error::io(member))?;
        let parent = self.wal_parent();
        std::fs::create_dir_all(&parent).map_err(Error::io(parent))
    }

    /// The directory holding everything else.
    pub fn member(&self) -> PathBuf {
        self.root.join("member")
    }

    pub fn wal(&self) -> PathBuf {
        self.wal_dir.clone().unwrap_or_else(|| self.default_wal())
    }

    /// Where a new member's WAL is written before it moves to `wal`.
    pub fn new_wal(&self) -> PathBuf {
        let mut name = self.wal().into_os_string();
        name.push(".tmp");
        PathBuf::from(name)
    }

    /// The directory holding the WAL directory, synced when it moves in.
    pub fn wal_parent(&self) -> PathBuf {
        self.wal().parent().map_or_else(|| self.member(), Path::to_path_buf)
    }

    pub fn store(&self) -> PathBuf {
        self.member().join("kv")
    }

    pub fn snapshot_marker(&self) -> PathBuf {
        self.member().join("snap")
    }

    /// The pending snapshot file for raft index `index` at `term`.
    pub fn pending_snapshot(&self, index: u64, term: u64) -> PathBuf {
        self.member().join(format!("snap-{index:016x}-{term:016x}.db"))
    }

    /// A snapshot for `index` while it is being received.
    pub fn incoming_snapshot(&self, index: u64) -> PathBuf {
        self.member().join(format!("snap-in-{index:016x}.tmp"))
    }

    /// The store's dump while it is being sent to `peer`.
    pub fn outgoing_snapshot(&self, peer: u64) -> PathBuf {
        self.member().join(format!("snap-out-{peer:x}.tmp"))
    }

    /// A snapshot file being written for a client (`storage::backup`).
    pub fn backup(&self, n: u64) -> PathBuf {
        self.member().join(format!("backup-{n}.tmp"))
    }

    /// Present while `kv-server snapshot restore` builds this directory:
    /// made first, removed last, so a restore stopped part way is never
    /// started as a member.
    pub fn unfinished_restore(&self) -> PathBuf {
        self.member().join("restore.unfinished")
    }

    /// The store's dump converted from a snapshot of etcd's, while
    /// `kv-server snapshot restore` builds the store from it.
    pub fn imported_dump(&self) -> PathBuf {
        self.member().join("backup-import.tmp")
    }

    /// Removes the dumps a member killed while sending a snapshot, to a
    /// peer or a client, left behind: each is a full copy of the store,
    /// and a new start never reads one (snapshots being received are kept:
    /// their receiver decides). Returns how many it removed.
    pub fn remove_leftover_dumps(&self) -> Result<usize, Error> {
        let member = self.member();
        let entries = std::fs::read_dir(&member).map_err(Error::io(&member))?;
        let mut removed = 0;
        for entry in entries {
            let path = entry.map_err(Error::io(&member))?.path();
            let name = path.file_name().and_then(|name| name.to_str()).unwrap_or_default();
            let dump = name.ends_with(".tmp") && (name.starts_with("snap-out-") || name.starts_with("backup-"));
            if dump {
                std::fs::remove_file(&path).map_err(Error::io(&path))?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// The (index, term) of a pending snapshot file's name, if it is one.
    pub fn parse_pending_snapshot(name: &str) -> Option<(u64, u64)> {
        let rest = name.strip_prefix("snap-")?.strip_suffix(".db")?;
        let (index, term) = rest.split_once('-')?;
        Some((
            u64::from_str_radix(index, 16).ok()?,
            u64::from_str_radix(term, 16).ok()?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: a start removes the dumps of snapshots being sent, to peers or
    // clients, and nothing else of the data directory.
    #[test]
    fn leftover_dumps_are_removed_and_nothing_else() {
        let root = tempfile::tempdir().unwrap();
        let dir = DataDir::new(root.path().to_path_buf());
        dir.create().unwrap();
        let dumps = [dir.outgoing_snapshot(0xab), dir.backup(3)];
        let kept = [
            dir.incoming_snapshot(9),
            dir.pending_snapshot(9, 2),
            dir.snapshot_marker(),
        ];
        for path in dumps.iter().chain(&kept) {
            std::fs::write(path, b"x").unwrap();
        }
        assert_eq!(dir.remove_leftover_dumps().unwrap(), 2);
        assert!(dumps.iter().all(|path| !path.exists()));
        assert!(kept.iter().all(|path| path.exists()));
    }

    // Goal: a pending snapshot's name gives back its index and term, and
    // the other snapshot files do not parse as pending ones.
    #[test]
    fn pending_snapshot_names_round_trip() {
        let dir = DataDir::new(PathBuf::from("/d"));
        let path = dir.pending_snapshot(0x2a, 7);
        let name = path.file_name().unwrap().to_str().unwrap();
        assert_eq!(DataDir::parse_pending_snapshot(name), Some((0x2a, 7)));
        for other in [
            dir.incoming_snapshot(0x2a),
            dir.outgoing_snapshot(5),
            dir.snapshot_marker(),
        ] {
            let name = other.file_name().unwrap().to_str().unwrap();
            assert_eq!(DataDir::parse_pending_snapshot(name), None, "{name}");
        }
    }
}
