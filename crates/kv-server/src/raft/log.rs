//! What raft reads its log and snapshots from: raft-rs's in-memory log for
//! entries, and the MVCC store for snapshots.
//!
//! A snapshot is the whole store at the raft index it has applied. Raft
//! asks for one when a follower needs entries that were compacted away;
//! what it gets here is only the metadata, and the store's contents follow
//! apart (`peer::snapshot_send`), so the raft thread never copies the
//! store.
//!
//! Compaction keeps the term of the entry just before the new first index,
//! which raft needs for log matching but `MemStorage::compact` drops.

use std::sync::Arc;

use parking_lot::Mutex;
use raft::prelude::{ConfState, Entry, Snapshot};
use raft::storage::{MemStorage, Storage};
use raft::{GetEntriesContext, RaftState, StorageError};

use crate::membership::Membership;

#[derive(Clone)]
pub struct RaftLog {
    pub memory: MemStorage,
    pub store: Arc<mvcc::Store>,
    /// (index, term) of the last entry compacted away, once any was.
    compacted: Arc<Mutex<Option<(u64, u64)>>>,
}

impl RaftLog {
    pub fn new(memory: MemStorage, store: Arc<mvcc::Store>) -> RaftLog {
        RaftLog {
            memory,
            store,
            compacted: Arc::new(Mutex::new(None)),
        }
    }

    /// Drops in-memory entries before `first_kept`, remembering the term of
    /// the one just before it.
    pub fn compact(&self, first_kept: u64) -> raft::Result<()> {
        if first_kept <= self.memory.first_index()? {
            return Ok(());
        }
        let term = self.memory.term(first_kept - 1)?;
        self.memory.wl().compact(first_kept)?;
        *self.compacted.lock() = Some((first_kept - 1, term));
        Ok(())
    }

    pub fn conf_state(&self) -> ConfState {
        self.memory
            .initial_state()
            .map(|state| state.conf_state)
            .unwrap_or_default()
    }
}

impl Storage for RaftLog {
    fn initial_state(&self) -> raft::Result<RaftState> {
        self.memory.initial_state()
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        self.memory.entries(low, high, max_size, context)
    }

    fn term(&self, index: u64) -> raft::Result<u64> {
        match self.memory.term(index) {
            Err(raft::Error::Store(StorageError::Compacted)) => match *self.compacted.lock() {
                Some((compacted, term)) if compacted == index => Ok(term),
                _ => Err(raft::Error::Store(StorageError::Compacted)),
            },
            other => other,
        }
    }

    fn first_index(&self) -> raft::Result<u64> {
        self.memory.first_index()
    }

    fn last_index(&self) -> raft::Result<u64> {
        self.memory.last_index()
    }

    /// A snapshot of the store as it is now, metadata only: its index is
    /// whatever the apply stage has reached, which is at least
    /// `request_index` once the member has applied that far; until then
    /// raft is told to ask again.
    fn snapshot(&self, request_index: u64, to: u64) -> raft::Result<Snapshot> {
        // The configuration is the store's at its index, which the raft
        // loop's may have passed.
        let (index, record) = self.store.membership();
        if index < request_index {
            return Err(raft::Error::Store(StorageError::SnapshotTemporarilyUnavailable));
        }
        let mut snapshot = Snapshot::default();
        let metadata = snapshot.mut_metadata();
        metadata.index = index;
        metadata.term = self.term(index)?;
        let conf_state = match record.map(|bytes| Membership::decode(&bytes, 0)) {
            Some(Ok(membership)) => membership.conf_state(),
            Some(Err(error)) => return Err(raft::Error::Store(StorageError::Other(Box::new(error)))),
            None => self.conf_state(),
        };
        // A member just added, which the store's membership does not hold
        // yet, would refuse the snapshot: wait until the store has it.
        if !conf_state.voters.contains(&to) && !conf_state.learners.contains(&to) {
            return Err(raft::Error::Store(StorageError::SnapshotTemporarilyUnavailable));
        }
        metadata.set_conf_state(conf_state);
        Ok(snapshot)
    }
}
