//! Raft's durable log: the WAL on disk, mirrored into raft-rs's in-memory
//! `MemStorage`, which is what raft reads entries from.
//!
//! WAL entries carry the raft entry encoded by raft-rs; the WAL metadata
//! holds the cluster and member ids, checked on every start so a data
//! directory is never used by the wrong member. On start the log replays
//! from the snapshot the marker records (`marker.rs`), after finishing the
//! install of a received snapshot a crash cut short (`pending.rs`).

use protobuf::Message as _;
use raft::prelude::{ConfState, Entry, HardState};
use raft::storage::{MemStorage, Storage};

use crate::error::Error;
use crate::storage::layout::DataDir;
use crate::storage::marker::SnapshotMarker;
use crate::storage::pending;

/// A WAL sync slower than this is logged ("slow fdatasync"), as etcd
/// logs one (its `warnSyncDuration`, not configurable).
pub const SLOW_FDATASYNC: std::time::Duration = std::time::Duration::from_secs(1);

/// Whose log this is: checked against the WAL's metadata on every start.
#[derive(Debug, Clone, Copy)]
pub struct LogOwner {
    pub cluster_id: u64,
    pub member_id: u64,
}

impl LogOwner {
    fn metadata(self) -> Vec<u8> {
        let mut bytes = self.cluster_id.to_be_bytes().to_vec();
        bytes.extend_from_slice(&self.member_id.to_be_bytes());
        bytes
    }

    fn from_metadata(bytes: &[u8]) -> Option<LogOwner> {
        let bytes: &[u8; 16] = bytes.try_into().ok()?;
        let (cluster, member) = bytes.split_at(8);
        Some(LogOwner {
            cluster_id: u64::from_be_bytes(cluster.try_into().ok()?),
            member_id: u64::from_be_bytes(member.try_into().ok()?),
        })
    }
}

/// Where a new member's log starts.
pub enum LogStart {
    /// A member of a new cluster (or one restored from a backup): its log
    /// starts after a snapshot at this index and term, whose store holds
    /// the membership. A member joining later then always takes a
    /// snapshot first, never the log from index 1, which would miss what
    /// the store held before it.
    After {
        index: u64,
        term: u64,
        conf_state: ConfState,
    },
    /// A member joining a running cluster: an empty log, filled by the
    /// leader's snapshot.
    Empty,
}

pub struct DurableLog {
    wal: wal::Wal,
    /// What raft reads: the log's entries and hard state, in memory.
    pub memory: MemStorage,
    /// Index of the snapshot replay started from (0 for none).
    pub snapshot_index: u64,
}

impl DurableLog {
    /// Whether the data directory holds a log: a member that has started.
    pub fn exists(dir: &DataDir) -> bool {
        wal::Wal::exists(&dir.wal())
    }

    /// Writes a new member's log in `wal.tmp` and moves it into place
    /// whole, so a crash leaves either no log (and the member starts anew)
    /// or a complete one. For [`LogStart::After`], the caller has already
    /// recorded the snapshot in the store and the marker.
    pub fn create(dir: &DataDir, owner: LogOwner, start: LogStart, options: &wal::Options) -> Result<(), Error> {
        let new = dir.new_wal();
        if new.exists() {
            std::fs::remove_dir_all(&new).map_err(Error::io(&new))?;
        }
        let mut wal = wal::Wal::create(&new, options.clone(), &owner.metadata())?;
        if let LogStart::After {
            index,
            term,
            conf_state,
        } = start
        {
            wal.save_snapshot(&snapshot_record(index, term, &conf_state))?;
            let hard_state = wal::HardState {
                term,
                vote: 0,
                commit: index,
            };
            wal.save(&[], Some(&hard_state))?;
        }
        drop(wal);
        std::fs::rename(&new, dir.wal()).map_err(Error::io(dir.wal()))?;
        wal::sync::fsync_dir(&dir.wal_parent()).map_err(Error::io(dir.wal_parent()))?;
        Ok(())
    }

    /// Replays the member's log, first finishing the install of a snapshot
    /// a crash interrupted. Raft's configuration is `conf_state` of the
    /// store as it then stands (the store is the applied state; raft
    /// re-applies the configuration changes committed after it). The log
    /// is opened with `options` (the defaults, over the real disk, for a
    /// running member). Returns the log and whose it is.
    pub fn open(
        dir: &DataDir,
        store: &mvcc::Store,
        options: wal::Options,
        conf_state: impl FnOnce(&mvcc::Store) -> Result<ConfState, Error>,
    ) -> Result<(DurableLog, LogOwner), Error> {
        let (opened, (index, term)) = open_wal(dir, store, &options)?;
        let (wal, replay) = opened;
        let owner =
            LogOwner::from_metadata(&replay.metadata).ok_or_else(|| Error::ForeignDataDir { dir: dir.wal() })?;
        let memory = MemStorage::new_with_conf_state(conf_state(store)?);
        if index > 0 {
            restore_snapshot_point(&memory, index, term)?;
        }
        if let Some(report) = &replay.repaired {
            tracing::warn!(segment = %report.segment.display(), offset = report.offset, "WAL tail was torn and truncated");
        }
        load_replay(&memory, &replay, index)?;
        let log = DurableLog {
            wal,
            memory,
            snapshot_index: index,
        };
        Ok((log, owner))
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
        if let Some((bytes, took)) = self.wal.take_last_sync() {
            let metrics = crate::metrics::metrics();
            metrics.disk.wal_fsync.observe(took.as_secs_f64());
            metrics.disk.wal_write_bytes.add(bytes as i64);
            if took > SLOW_FDATASYNC {
                tracing::warn!(
                    took = %crate::logging::go_duration(took),
                    "expected-duration" = %crate::logging::go_duration(SLOW_FDATASYNC),
                    "slow fdatasync"
                );
            }
        }
        let mut core = self.memory.wl();
        if !entries.is_empty() {
            core.append(entries).expect("entries follow the log");
        }
        if let Some(hs) = hard_state {
            core.set_hardstate(hs.clone());
        }
        Ok(())
    }

    /// Records a snapshot at `index` in the WAL, durably.
    pub fn save_snapshot(&mut self, index: u64, term: u64, conf_state: &ConfState) -> Result<(), wal::Error> {
        self.wal.save_snapshot(&snapshot_record(index, term, conf_state))
    }

    /// Removes the WAL segments that replay from a snapshot at `index` no
    /// longer reads; returns how many.
    pub fn release_to(&mut self, index: u64) -> Result<usize, wal::Error> {
        self.wal.release_to(index)
    }
}

type Opened = (wal::Wal, wal::Replay);

/// Opens the WAL at the snapshot to replay from: a pending snapshot newer
/// than the marker if the WAL holds its record (installing it first),
/// otherwise the marker's. Returns the WAL and the snapshot's (index, term).
fn open_wal(dir: &DataDir, store: &mvcc::Store, options: &wal::Options) -> Result<(Opened, (u64, u64)), Error> {
    let (index, term) = SnapshotMarker::read(&dir.snapshot_marker())?;
    let newest = pending::list(dir).pop().filter(|pending| pending.index > index);
    let mut opened = None;
    if let Some(pending) = newest {
        let position = wal::SnapshotPosition {
            index: pending.index,
            term: pending.term,
        };
        match wal::Wal::open(&dir.wal(), options.clone(), position) {
            Ok(found) => {
                pending::finish_install(dir, store, &pending)?;
                opened = Some((found, (pending.index, pending.term)));
            }
            Err(wal::Error::SnapshotNotFound { .. }) => {
                tracing::info!(index = pending.index, "dropping a received snapshot raft never took");
            }
            Err(error) => return Err(error.into()),
        }
    }
    pending::remove_through(dir, u64::MAX);
    if store.is_restoring()? {
        return Err(Error::PartialRestore {
            dir: dir.root().to_path_buf(),
        });
    }
    match opened {
        Some(found) => Ok(found),
        None => {
            let position = wal::SnapshotPosition { index, term };
            Ok((wal::Wal::open(&dir.wal(), options.clone(), position)?, (index, term)))
        }
    }
}

/// Tells raft's memory the log starts after the snapshot at `index`.
fn restore_snapshot_point(memory: &MemStorage, index: u64, term: u64) -> Result<(), Error> {
    let mut snapshot = raft::prelude::Snapshot::default();
    snapshot.mut_metadata().index = index;
    snapshot.mut_metadata().term = term;
    let conf_state = memory.initial_state()?.conf_state;
    snapshot.mut_metadata().set_conf_state(conf_state);
    memory.wl().apply_snapshot(snapshot)?;
    Ok(())
}

/// Loads the replayed entries and hard state into raft's memory.
fn load_replay(memory: &MemStorage, replay: &wal::Replay, snapshot_index: u64) -> Result<(), Error> {
    let entries = replay
        .entries
        .iter()
        .map(|e| {
            Entry::parse_from_bytes(&e.data).map_err(|error| Error::BadWalEntry {
                index: e.index,
                reason: error.to_string(),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut hard_state = HardState::default();
    hard_state.term = replay.hard_state.term;
    hard_state.vote = replay.hard_state.vote;
    // A snapshot holds only committed entries, so its index is committed
    // even when the WAL's last hard state says less: a save that only
    // moves the commit index is not synced (the WAL's MustSync rule), so a
    // crash after installing a snapshot can lose it, and raft refuses a
    // commit index below its snapshot.
    hard_state.commit = replay.hard_state.commit.max(snapshot_index);
    {
        let mut core = memory.wl();
        core.append(&entries)?;
        core.set_hardstate(hard_state);
    }
    tracing::info!(
        entries = entries.len(),
        commit = replay.hard_state.commit,
        "replayed the WAL"
    );
    Ok(())
}

/// The WAL's record of a raft snapshot at `index`.
fn snapshot_record(index: u64, term: u64, conf_state: &ConfState) -> wal::SnapshotMeta {
    wal::SnapshotMeta {
        index,
        term,
        conf_state: wal::ConfState {
            voters: conf_state.voters.clone(),
            learners: conf_state.learners.clone(),
            ..wal::ConfState::default()
        },
    }
}
