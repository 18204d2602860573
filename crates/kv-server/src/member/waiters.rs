//! Clients waiting for their proposals to apply.
//!
//! A proposal carries this member's id and a sequence number; when its
//! entry applies, the apply stage answers the waiter registered under that
//! number with the store's result. Entries proposed by other members, or
//! before a restart, find no waiter here.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::error::RequestError;

/// How a proposal ends: applied (with the store's answer), or failed.
pub type ProposalResult = Result<mvcc::Applied, RequestError>;

pub struct Waiters {
    waiting: Mutex<HashMap<u64, oneshot::Sender<ProposalResult>>>,
    next_sequence: AtomicU64,
}

impl Waiters {
    /// Waiters whose sequences start from the wall-clock time `now`
    /// (since the Unix epoch), so that an entry proposed before a restart
    /// never finds a waiter registered after it.
    pub fn new(now: std::time::Duration) -> Waiters {
        let start = (now.as_nanos() as u64).max(1);
        Waiters {
            waiting: Mutex::new(HashMap::new()),
            next_sequence: AtomicU64::new(start),
        }
    }

    /// Registers a waiter and returns its sequence number.
    pub fn register(&self) -> (u64, oneshot::Receiver<ProposalResult>) {
        let sequence = self.next_sequence.fetch_add(1, Ordering::Relaxed);
        let (sender, receiver) = oneshot::channel();
        self.waiting.lock().insert(sequence, sender);
        (sequence, receiver)
    }

    /// Answers the waiter for `sequence`, if it still waits.
    pub fn answer(&self, sequence: u64, result: ProposalResult) {
        if let Some(waiter) = self.waiting.lock().remove(&sequence) {
            let _ = waiter.send(result);
        }
    }

    /// Drops a waiter that gave up.
    /// Proposals waiting for their answer: etcd's pending proposals.
    pub fn len(&self) -> usize {
        self.waiting.lock().len()
    }

    pub fn forget(&self, sequence: u64) {
        self.waiting.lock().remove(&sequence);
    }

    /// Drops every waiter: each hears the member stopped.
    pub fn abandon(&self) {
        self.waiting.lock().clear();
    }
}
