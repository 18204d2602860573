//! What the services and the server read of the member's state, each a
//! method of the core: its flags, the membership, raft's indexes, the
//! store's sizes and alarms, the auth state. The core's fields are its
//! own (`pub(super)`: the core's files alone reach them).

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::auth::state::AuthState;
use crate::config::Config;
use crate::member::core::Member;
use crate::membership::{Membership, SharedMembership};

impl Member {
    /// The member's flags.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The membership now.
    pub fn membership(&self) -> Arc<Membership> {
        self.membership.get()
    }

    /// The membership as the apply stage keeps it, for a part that reads
    /// it on every message (the peer listener).
    pub fn shared_membership(&self) -> Arc<SharedMembership> {
        self.membership.clone()
    }

    /// Whether this member is a learner.
    pub fn is_learner(&self) -> bool {
        self.membership.local_is_learner()
    }

    /// Raft's commit index here.
    pub fn committed_index(&self) -> u64 {
        self.status.committed()
    }

    /// The index this member has applied through.
    pub fn applied_index(&self) -> u64 {
        self.status.applied()
    }

    /// Raft's term here.
    pub fn term(&self) -> u64 {
        self.status.term()
    }

    /// Proposals waiting for their entries to apply here.
    pub fn pending_proposals(&self) -> usize {
        self.waiters.len()
    }

    /// The store's size on disk and the bytes it holds, as last sampled
    /// (`Member::sample_sizes`).
    pub fn sampled_sizes(&self) -> (u64, u64) {
        (
            self.disk_bytes.load(Ordering::Acquire),
            self.live_bytes.load(Ordering::Acquire),
        )
    }

    /// The store's size on disk now.
    pub fn size_on_disk(&self) -> mvcc::Result<u64> {
        self.store.size_on_disk()
    }

    /// Keys the store's index holds.
    pub fn indexed_keys(&self) -> usize {
        self.store.indexed_keys()
    }

    /// The alarms raised.
    pub fn alarms(&self) -> Vec<mvcc::Alarm> {
        self.store.alarms()
    }

    /// The leases the store holds, as (id, TTL).
    pub fn leases(&self) -> Vec<(i64, i64)> {
        self.store.leases()
    }

    /// Whether an alarm of `kind` is raised on any member.
    pub fn has_alarm(&self, kind: i32) -> bool {
        self.store.has_alarm(kind)
    }

    /// Writes the store to `path` as a snapshot file (`storage::backup`);
    /// blocking, for a blocking thread.
    pub fn write_backup(&self, path: &Path) -> Result<(u64, std::fs::File), crate::error::Error> {
        crate::storage::backup::write(&self.store, path)
    }

    /// Everything the store holds, as a raft snapshot carries it, and the
    /// raft index it reflects (what `peer::snapshot_send` dumps to a file).
    pub fn store_snapshot(&self) -> mvcc::Result<(u64, Vec<u8>)> {
        self.store.snapshot()
    }

    /// Flushes what the store applied to disk (on a graceful stop).
    pub fn flush_store(&self) -> mvcc::Result<()> {
        self.store.flush()
    }

    /// The auth state now.
    pub fn auth_state(&self) -> Arc<AuthState> {
        self.auth.state()
    }

    /// Whether auth is on.
    pub fn auth_enabled(&self) -> bool {
        self.auth.enabled()
    }

    /// Drops the expired simple tokens.
    pub fn sweep_tokens(&self) {
        self.auth.tokens.sweep();
    }

    /// A member torn down in a running process (the simulator's crash):
    /// every proposal still waiting hears that the member stopped, so the
    /// calls holding the member end. A real member's process ends instead.
    pub fn abandon_waiters(&self) {
        self.waiters.abandon();
    }

    /// Waits until this member has been removed from the cluster (the
    /// apply stage tells it): the server then stops.
    pub async fn removed(&self) {
        self.stop.notified().await;
    }
}
