//! What the raft loop hands the apply stage, in order.

use raft::prelude::Entry;

use crate::error::RequestError;
use crate::raft::input::ReadWaiter;

/// Capacity of the queue from the raft loop, in inputs. An input is at
/// most one Ready's committed entries; 64 of them let raft run ahead of
/// the store by a burst. Past it the raft loop keeps what does not fit
/// in its own backlog rather than wait (see [`APPLY_BACKLOG_MAX`]).
pub const APPLY_QUEUE_CAPACITY: usize = 64;

/// Inputs the raft loop keeps for the apply stage while its queue is
/// full, so that a stalled store (a defragmentation, a slow disk) does
/// not stop the loop's heartbeats and cost an election. The entries they
/// hold are in raft's in-memory log too, until applied. On a leader the
/// backlog stays far below this bound, since writes are refused once the
/// store is 5000 entries behind commit (etcd's "too many requests"); a
/// follower whose store stalls while the leader writes fills it at one
/// input per Ready. Past it the loop waits for the stage, as the last
/// resort that bounds memory: 65,536 Readies are minutes of writes.
pub const APPLY_BACKLOG_MAX: usize = 65_536;

pub enum ApplyInput {
    /// Committed entries, contiguous, in index order.
    Entries(Vec<Entry>),
    /// A snapshot from the leader: the store takes the contents of the
    /// pending snapshot file for `index` and `term` (`storage::pending`).
    Restore { index: u64, term: u64 },
    /// Linearizable reads, released once the store has applied `index`.
    Read { index: u64, waiters: Vec<ReadWaiter> },
    /// Flush the store (everything applied so far, at least `index`) and
    /// tell the raft loop (`NodeInput::Flushed`): the raft loop never
    /// waits for the store itself.
    Flush { index: u64, term: u64 },
    /// Raft refused a proposal: its waiter gets `error`. Going through
    /// the apply stage keeps it the only one that answers writers.
    Dropped { sequence: u64, error: RequestError },
}

impl ApplyInput {
    /// What the input asks of the stage, for its slow-work line.
    pub fn kind(&self) -> &'static str {
        match self {
            ApplyInput::Entries(_) => "entries",
            ApplyInput::Restore { .. } => "restore",
            ApplyInput::Read { .. } => "read",
            ApplyInput::Flush { .. } => "flush",
            ApplyInput::Dropped { .. } => "dropped",
        }
    }
}
