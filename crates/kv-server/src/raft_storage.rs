//! Raft's durable log: the WAL on disk, mirrored into raft-rs's in-memory
//! `MemStorage`, which is what raft reads entries from.
//!
//! WAL entries carry the raft entry encoded by raft-rs; the WAL metadata
//! holds the cluster and member ids, checked on every start so a data
//! directory is never used by the wrong member.
//!
//! # Snapshot marker
//! `member/snap` holds the index and term (16 bytes, big-endian) of the
//! newest snapshot whose state the store holds on disk. It is written only
//! after the store was flushed at or past that index and the WAL holds the
//! snapshot record, so on restart the WAL replays from it and the store
//! already has everything before it. Without the file, replay starts at 0.
//!
//! A pending snapshot file from the leader, newer than the marker, takes
//! its place when the WAL holds its record (see `snapshot_transfer.rs`).

use std::path::Path;

use protobuf::Message as _;
use raft::prelude::{ConfState, Entry, HardState};
use raft::storage::{MemStorage, Storage};

use crate::snapshot_transfer;

/// Where the member's WAL lives inside its data directory (etcd's layout).
pub const WAL_DIR: &str = "member/wal";
/// The snapshot marker inside the data directory.
pub const SNAPSHOT_MARKER: &str = "member/snap";

/// Reads the snapshot marker; (0, 0) when there is none.
pub fn read_marker(data_dir: &Path) -> Result<(u64, u64), String> {
    let path = data_dir.join(SNAPSHOT_MARKER);
    match std::fs::read(&path) {
        Ok(bytes) if bytes.len() == 16 => Ok((
            u64::from_be_bytes(bytes[..8].try_into().expect("8 bytes")),
            u64::from_be_bytes(bytes[8..].try_into().expect("8 bytes")),
        )),
        Ok(_) => Err(format!("{}: not a snapshot marker", path.display())),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok((0, 0)),
        Err(error) => Err(format!("{}: {error}", path.display())),
    }
}

/// Writes the snapshot marker durably: a temporary file, fsync, rename,
/// fsync of the directory.
pub fn write_marker(data_dir: &Path, index: u64, term: u64) -> std::io::Result<()> {
    use std::io::Write;
    let path = data_dir.join(SNAPSHOT_MARKER);
    let temporary = path.with_extension("tmp");
    let mut file = std::fs::File::create(&temporary)?;
    file.write_all(&index.to_be_bytes())?;
    file.write_all(&term.to_be_bytes())?;
    file.sync_all()?;
    std::fs::rename(&temporary, &path)?;
    std::fs::File::open(path.parent().expect("marker has a parent"))?.sync_all()
}

/// Completes an install a crash cut short: restores the store from the
/// pending file unless it already holds the snapshot, then writes the
/// marker.
fn finish_install(data_dir: &Path, store: &mvcc::Store, index: u64, term: u64, path: &Path) -> Result<(), String> {
    if store.is_restoring().map_err(|e| e.to_string())? || store.consistent_index() < index {
        let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        store
            .restore_from(index, std::io::BufReader::new(file))
            .map_err(|e| e.to_string())?;
    }
    write_marker(data_dir, index, term).map_err(|e| e.to_string())?;
    tracing::info!(index, term, "finished installing a received snapshot");
    Ok(())
}

pub struct RaftStorage {
    pub wal: wal::Wal,
    pub memory: MemStorage,
    /// Index of the snapshot the marker recorded at start (0 for none).
    pub snapshot_index: u64,
}

fn metadata(cluster_id: u64, member_id: u64) -> Vec<u8> {
    let mut bytes = cluster_id.to_be_bytes().to_vec();
    bytes.extend_from_slice(&member_id.to_be_bytes());
    bytes
}

impl RaftStorage {
    /// Creates a new log for a new member, or replays the existing one,
    /// first finishing the install of a snapshot a crash interrupted.
    pub fn open(
        data_dir: &Path,
        cluster_id: u64,
        member_id: u64,
        voters: Vec<u64>,
        store: &mvcc::Store,
    ) -> Result<RaftStorage, String> {
        let dir = data_dir.join(WAL_DIR);
        let expected = metadata(cluster_id, member_id);
        let memory = MemStorage::new_with_conf_state(ConfState::from((voters, vec![])));
        if !wal::Wal::exists(&dir) {
            let wal = wal::Wal::create(&dir, wal::Options::default(), &expected).map_err(|e| e.to_string())?;
            return Ok(RaftStorage {
                wal,
                memory,
                snapshot_index: 0,
            });
        }
        let (mut index, mut term) = read_marker(data_dir)?;
        let mut opened = None;
        let newest = snapshot_transfer::pending(data_dir).pop();
        if let Some((pending, pending_term, path)) = newest.filter(|(at, _, _)| *at > index) {
            let position = wal::SnapshotPosition {
                index: pending,
                term: pending_term,
            };
            match wal::Wal::open(&dir, wal::Options::default(), position) {
                Ok(found) => {
                    finish_install(data_dir, store, pending, pending_term, &path)?;
                    (index, term) = (pending, pending_term);
                    opened = Some(found);
                }
                Err(wal::Error::SnapshotNotFound { .. }) => {
                    tracing::info!(index = pending, "dropping a received snapshot raft never took");
                }
                Err(error) => return Err(error.to_string()),
            }
        }
        snapshot_transfer::remove_pending_through(data_dir, u64::MAX);
        if store.is_restoring().map_err(|e| e.to_string())? {
            return Err(format!(
                "{}: the store holds part of a snapshot whose file is gone; remove the data directory and \
                 let the member catch up from the others",
                data_dir.display()
            ));
        }
        let (wal, replay) = match opened {
            Some(found) => found,
            None => wal::Wal::open(&dir, wal::Options::default(), wal::SnapshotPosition { index, term })
                .map_err(|e| e.to_string())?,
        };
        if index > 0 {
            let mut snapshot = raft::prelude::Snapshot::default();
            snapshot.mut_metadata().index = index;
            snapshot.mut_metadata().term = term;
            let conf_state = memory.initial_state().map_err(|e| e.to_string())?.conf_state;
            snapshot.mut_metadata().set_conf_state(conf_state);
            memory.wl().apply_snapshot(snapshot).map_err(|e| e.to_string())?;
        }
        if replay.metadata != expected {
            return Err(format!(
                "{} belongs to another member or cluster (its ids differ from this member's)",
                dir.display()
            ));
        }
        if let Some(report) = &replay.repaired {
            tracing::warn!(segment = %report.segment.display(), offset = report.offset, "WAL tail was torn and truncated");
        }
        let entries = replay
            .entries
            .iter()
            .map(|e| Entry::parse_from_bytes(&e.data).map_err(|error| format!("WAL entry {}: {error}", e.index)))
            .collect::<Result<Vec<_>, _>>()?;
        let mut hard_state = HardState::default();
        hard_state.term = replay.hard_state.term;
        hard_state.vote = replay.hard_state.vote;
        // A snapshot holds only committed entries, so its index is
        // committed even when the WAL's last hard state says less: a save
        // that only moves the commit index is not synced (the WAL's
        // MustSync rule), so a crash after installing a snapshot can lose
        // it, and raft refuses a commit index below its snapshot.
        hard_state.commit = replay.hard_state.commit.max(index);
        {
            let mut core = memory.wl();
            core.append(&entries).map_err(|e| e.to_string())?;
            core.set_hardstate(hard_state);
        }
        tracing::info!(
            entries = entries.len(),
            commit = replay.hard_state.commit,
            "replayed the WAL"
        );
        Ok(RaftStorage {
            wal,
            memory,
            snapshot_index: index,
        })
    }

    /// Makes `entries` and `hard_state` durable with one WAL write and one
    /// fdatasync, then hands them to raft's memory. A WAL failure is fatal
    /// to the member: the caller stops the process.
    pub fn persist(&mut self, entries: &[Entry], hard_state: Option<&HardState>) -> Result<(), wal::Error> {
        if entries.is_empty() && hard_state.is_none() {
            return Ok(());
        }
        let wal_entries: Vec<wal::Entry> = entries
            .iter()
            .map(|e| wal::Entry {
                index: e.index,
                term: e.term,
                data: e.write_to_bytes().expect("raft entries encode"),
            })
            .collect();
        let wal_hard_state = hard_state.map(|hs| wal::HardState {
            term: hs.term,
            vote: hs.vote,
            commit: hs.commit,
        });
        self.wal.save(&wal_entries, wal_hard_state.as_ref())?;
        let mut core = self.memory.wl();
        if !entries.is_empty() {
            core.append(entries).expect("entries follow the log");
        }
        if let Some(hs) = hard_state {
            core.set_hardstate(hs.clone());
        }
        Ok(())
    }
}
