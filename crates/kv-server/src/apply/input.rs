//! What the raft loop hands the apply stage, in order.

use raft::prelude::Entry;

use crate::error::RequestError;
use crate::raft::input::ReadWaiter;

/// Capacity of the queue from the raft loop, in inputs. An input is at
/// most one Ready's committed entries; 64 of them let raft run ahead of
/// the store by a burst, and then the raft loop waits.
pub const APPLY_QUEUE_CAPACITY: usize = 64;

pub enum ApplyInput {
    /// Committed entries, contiguous, in index order.
    Entries(Vec<Entry>),
    /// A snapshot from the leader: the store takes the contents of the
    /// pending snapshot file for `index` and `term` (`storage::pending`).
    Restore { index: u64, term: u64 },
    /// Linearizable reads, released once the store has applied `index`.
    Read { index: u64, waiters: Vec<ReadWaiter> },
    /// Raft refused a proposal: its waiter gets `error`. Going through
    /// the apply stage keeps it the only one that answers writers.
    Dropped { sequence: u64, error: RequestError },
}
