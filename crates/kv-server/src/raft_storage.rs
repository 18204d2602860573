//! Raft's durable log: the WAL on disk, mirrored into raft-rs's in-memory
//! `MemStorage`, which is what raft reads entries from.
//!
//! WAL entries carry the raft entry encoded by raft-rs; the WAL metadata
//! holds the cluster and member ids, checked on every start so a data
//! directory is never used by the wrong member.

use std::path::Path;

use protobuf::Message as _;
use raft::prelude::{ConfState, Entry, HardState};
use raft::storage::MemStorage;

/// Where the member's WAL lives inside its data directory (etcd's layout).
pub const WAL_DIR: &str = "member/wal";

pub struct RaftStorage {
    pub wal: wal::Wal,
    pub memory: MemStorage,
}

fn metadata(cluster_id: u64, member_id: u64) -> Vec<u8> {
    let mut bytes = cluster_id.to_be_bytes().to_vec();
    bytes.extend_from_slice(&member_id.to_be_bytes());
    bytes
}

impl RaftStorage {
    /// Creates a new log for a new member, or replays the existing one.
    /// Returns the storage and whether it was newly created.
    pub fn open(data_dir: &Path, cluster_id: u64, member_id: u64, voters: Vec<u64>) -> Result<RaftStorage, String> {
        let dir = data_dir.join(WAL_DIR);
        let expected = metadata(cluster_id, member_id);
        let memory = MemStorage::new_with_conf_state(ConfState::from((voters, vec![])));
        if !wal::Wal::exists(&dir) {
            let wal = wal::Wal::create(&dir, wal::Options::default(), &expected).map_err(|e| e.to_string())?;
            return Ok(RaftStorage { wal, memory });
        }
        let (wal, replay) = wal::Wal::open(&dir, wal::Options::default(), wal::SnapshotPosition::default())
            .map_err(|e| e.to_string())?;
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
        hard_state.commit = replay.hard_state.commit;
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
        Ok(RaftStorage { wal, memory })
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
