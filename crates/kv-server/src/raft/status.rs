//! What the raft loop and the apply stage tell the rest of the member:
//! the term, the leader, and how far the log is committed and applied.
//! Plain atomics, written by one thread each and read by anyone.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Notify;

#[derive(Default)]
pub struct RaftStatus {
    term: AtomicU64,
    /// 0 while no leader is known.
    leader: AtomicU64,
    committed: AtomicU64,
    applied: AtomicU64,
    /// Woken each time `applied` moves.
    applied_changed: Notify,
}

impl RaftStatus {
    pub fn term(&self) -> u64 {
        self.term.load(Ordering::Acquire)
    }

    /// The leader's member id, 0 while none is known.
    pub fn leader(&self) -> u64 {
        self.leader.load(Ordering::Acquire)
    }

    pub fn committed(&self) -> u64 {
        self.committed.load(Ordering::Acquire)
    }

    pub fn applied(&self) -> u64 {
        self.applied.load(Ordering::Acquire)
    }

    /// The raft loop's view after a Ready.
    pub fn set_raft(&self, term: u64, leader: u64, committed: u64) {
        self.term.store(term, Ordering::Release);
        let before = self.leader.swap(leader, Ordering::AcqRel);
        if leader != before && leader != 0 {
            crate::metrics::metrics().server.leader_changes.inc();
        }
        self.committed.store(committed, Ordering::Release);
    }

    /// The apply stage reached `index`.
    pub fn set_applied(&self, index: u64) {
        self.applied.store(index, Ordering::Release);
        self.applied_changed.notify_waiters();
    }

    /// Waits until the applied index changes; register before checking
    /// it (see `Notified::enable`), so a change in between still wakes.
    pub fn applied_changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.applied_changed.notified()
    }
}
