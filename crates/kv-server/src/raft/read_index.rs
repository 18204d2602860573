//! Linearizable reads waiting on ReadIndex rounds.
//!
//! Reads that arrive while a round is in flight wait and share the next
//! one, as in etcd: a busy member sends one heartbeat round per batch of
//! reads, not one per read. A round raft did not answer is asked again
//! after [`READ_INDEX_RETRY`] (raft drops a ReadIndex when there is no
//! leader, or when the leader has not yet committed an entry in its term),
//! and abandoned after [`READ_INDEX_EXPIRY`] with "request timed out".
//!
//! A round's context, as raft sees it, is this member's id and then the
//! round's number. The leader keeps pending ReadIndex requests by context
//! and silently drops one whose context is already pending, so contexts
//! must be unique across members, not only within one.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::error::RequestError;
use crate::raft::input::ReadWaiter;

/// A round with no answer this long is asked again.
pub const READ_INDEX_RETRY: Duration = Duration::from_millis(300);
/// A round is abandoned after this long; clients time out on their own.
pub const READ_INDEX_EXPIRY: Duration = Duration::from_secs(10);

struct Round {
    waiters: Vec<ReadWaiter>,
    issued: Instant,
    created: Instant,
}

pub struct ReadIndexQueue {
    member_id: u64,
    /// Reads waiting for the next round.
    waiting: Vec<ReadWaiter>,
    /// Rounds asked of raft and not yet answered, by number.
    in_flight: HashMap<u64, Round>,
    next_round: u64,
}

impl ReadIndexQueue {
    pub fn new(member_id: u64) -> ReadIndexQueue {
        ReadIndexQueue {
            member_id,
            waiting: Vec::new(),
            in_flight: HashMap::new(),
            next_round: 1,
        }
    }

    pub fn push(&mut self, reply: ReadWaiter) {
        self.waiting.push(reply);
    }

    /// The context of a new round for every waiting read, if there are
    /// reads waiting and no round in flight.
    pub fn start_round(&mut self, now: Instant) -> Option<Vec<u8>> {
        if self.waiting.is_empty() || !self.in_flight.is_empty() {
            return None;
        }
        let round = self.next_round;
        self.next_round += 1;
        let waiters = std::mem::take(&mut self.waiting);
        self.in_flight.insert(
            round,
            Round {
                waiters,
                issued: now,
                created: now,
            },
        );
        Some(self.context(round))
    }

    /// Abandons rounds past their expiry (their reads get "request timed
    /// out") and returns the contexts of rounds to ask again.
    pub fn retry(&mut self, now: Instant) -> Vec<Vec<u8>> {
        self.in_flight.retain(|_, round| {
            if now.duration_since(round.created) <= READ_INDEX_EXPIRY {
                return true;
            }
            for waiter in round.waiters.drain(..) {
                let _ = waiter.send(Err(RequestError::TimedOut));
            }
            false
        });
        let mut again = Vec::new();
        for (&number, round) in self.in_flight.iter_mut() {
            if now.duration_since(round.issued) > READ_INDEX_RETRY {
                round.issued = now;
                again.push(number);
            }
        }
        again.into_iter().map(|number| self.context(number)).collect()
    }

    /// The reads of the round `context` names, once raft answered it; none
    /// for a context this member did not send or already saw answered.
    pub fn answered(&mut self, context: &[u8]) -> Option<Vec<ReadWaiter>> {
        let number = context
            .strip_prefix(&self.member_id.to_be_bytes()[..])
            .and_then(|rest| rest.try_into().ok())
            .map(u64::from_be_bytes)?;
        self.in_flight.remove(&number).map(|round| round.waiters)
    }

    fn context(&self, round: u64) -> Vec<u8> {
        let mut bytes = self.member_id.to_be_bytes().to_vec();
        bytes.extend_from_slice(&round.to_be_bytes());
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::oneshot;

    fn read(queue: &mut ReadIndexQueue) -> oneshot::Receiver<Result<(), RequestError>> {
        let (reply, answer) = oneshot::channel();
        queue.push(reply);
        answer
    }

    // Goal: reads share one round at a time; a round is asked again after
    // the retry pause and times its reads out after the expiry; contexts
    // carry the member id, so another member's context is not taken.
    #[test]
    fn rounds_batch_retry_and_expire() {
        let start = Instant::now();
        let mut queue = ReadIndexQueue::new(7);
        assert_eq!(queue.start_round(start), None, "no reads, no round");
        let _first = read(&mut queue);
        let _second = read(&mut queue);
        let context = queue.start_round(start).expect("a round for the waiting reads");
        assert_eq!(&context[..8], &7u64.to_be_bytes());
        let mut third = read(&mut queue);
        assert_eq!(queue.start_round(start), None, "one round in flight at a time");

        assert!(queue.retry(start + READ_INDEX_RETRY / 2).is_empty());
        assert_eq!(queue.retry(start + READ_INDEX_RETRY * 2), vec![context.clone()]);

        let mut foreign = context.clone();
        foreign[..8].copy_from_slice(&8u64.to_be_bytes());
        assert!(queue.answered(&foreign).is_none(), "another member's round");
        assert_eq!(queue.answered(&context).map(|waiters| waiters.len()), Some(2));
        assert!(queue.answered(&context).is_none(), "answered once");

        let later = start + Duration::from_secs(1);
        queue.start_round(later).expect("the third read's round");
        assert!(queue
            .retry(later + READ_INDEX_EXPIRY + Duration::from_millis(1))
            .is_empty());
        assert!(matches!(third.try_recv(), Ok(Err(RequestError::TimedOut))));
    }
}
