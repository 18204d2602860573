//! Clients waiting for their proposals to apply.
//!
//! A proposal carries this member's id and a sequence number; when its
//! entry applies, the apply stage answers the waiter registered under that
//! number with the store's result. Entries proposed by other members, or
//! before a restart, find no waiter here. Answers go out through the
//! member's [`Courier`], a batch at a time.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use tokio::sync::oneshot;

pub use crate::member::courier::ProposalResult;
use crate::member::courier::{Courier, Delivery};

pub struct Waiters {
    waiting: Mutex<HashMap<u64, oneshot::Sender<ProposalResult>>>,
    next_sequence: AtomicU64,
    courier: Courier,
}

impl Waiters {
    /// Waiters whose sequences start from the wall-clock time `now`
    /// (since the Unix epoch), so that an entry proposed before a restart
    /// never finds a waiter registered after it. Answers go through
    /// `courier`.
    pub fn new(now: std::time::Duration, courier: Courier) -> Waiters {
        let start = (now.as_nanos() as u64).max(1);
        Waiters {
            waiting: Mutex::new(HashMap::new()),
            next_sequence: AtomicU64::new(start),
            courier,
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
        self.answer_all([(sequence, result)]);
    }

    /// Answers the waiters of a batch, in its order, those that still
    /// wait: one lock, and one hand-off to the courier.
    pub fn answer_all(&self, answers: impl IntoIterator<Item = (u64, ProposalResult)>) {
        let deliveries: Vec<Delivery> = {
            let mut waiting = self.waiting.lock();
            answers
                .into_iter()
                .filter_map(|(sequence, result)| {
                    waiting
                        .remove(&sequence)
                        .map(|waiter| Delivery::Proposal(waiter, result))
                })
                .collect()
        };
        self.courier.send(deliveries);
    }

    /// The courier the member's answers go through.
    pub fn courier(&self) -> &Courier {
        &self.courier
    }

    /// Drops a waiter that gave up.
    /// Proposals waiting for their answer: etcd's pending proposals.
    pub fn len(&self) -> usize {
        self.waiting.lock().len()
    }

    pub fn forget(&self, sequence: u64) {
        self.waiting.lock().remove(&sequence);
    }

    /// Drops every waiter, and the answers not yet carried: each hears
    /// the member stopped.
    pub fn abandon(&self) {
        self.waiting.lock().clear();
        self.courier.close();
    }
}
