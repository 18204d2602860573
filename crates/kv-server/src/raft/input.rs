//! What the raft loop takes in, and how it sends to peers. The loop's
//! callers (the member core, the peer service, the transport) depend on
//! this module only, never on the loop itself.

use raft::prelude::{ConfChange, Message};
use tokio::sync::oneshot;

use crate::error::RequestError;

/// Capacity of the loop's input queue. 8192 covers a thousand clients with
/// several requests each in flight plus peer traffic; past it, clients get
/// etcd's "too many requests" and retry, instead of queueing without bound.
pub const NODE_INPUT_CAPACITY: usize = 8192;

/// A linearizable read waiting for the member to apply up to its index.
pub type ReadWaiter = oneshot::Sender<Result<(), RequestError>>;

/// Inputs the loop accepts. Senders never block: a full queue answers the
/// client "too many requests" instead.
pub enum NodeInput {
    /// A client write, already registered as a waiter under `sequence`.
    Propose { sequence: u64, data: Vec<u8> },
    /// A membership change (its context names the waiter, as a write's
    /// data does).
    ProposeConfChange { sequence: u64, change: ConfChange },
    /// The leader's view of how far each member's log matches its own,
    /// as (member id, matched index); empty on a follower.
    Progress { reply: oneshot::Sender<Vec<(u64, u64)>> },
    /// A linearizable read: answered once the member has applied up to a
    /// read index confirmed by the leader.
    ReadIndex { reply: ReadWaiter },
    /// A raft message from a peer.
    Message(Box<Message>),
    /// The raft messages of one batch a peer sent, in order: one input,
    /// one queue slot and one wake-up of the loop for the whole batch.
    Messages(Vec<Message>),
    /// The transport could not reach this peer.
    Unreachable(u64),
    /// How sending a snapshot to a peer ended.
    SnapshotStatus { to: u64, failed: bool },
    /// Hand leadership to this member (Maintenance.MoveLeader).
    TransferLeader(u64),
    /// Tick raft this many times at once: the election clock's advance
    /// at start (`member/tick_advance.rs`).
    AdvanceTicks(usize),
    /// The apply stage flushed the store through `index` (at `term`), as
    /// the loop asked with `ApplyInput::Flush`: the snapshot there can be
    /// recorded and the WAL released up to it.
    Flushed { index: u64, term: u64 },
    /// A graceful stop: end the loop after this turn's Ready, and say so.
    Stop(oneshot::Sender<()>),
}

/// Where the loop sends raft messages. Sending never blocks the loop: an
/// implementation queues, and drops (reporting the peer unreachable) what
/// does not fit, as a lossy network would. `peer::transport` is the real
/// one; the loop's tests use channels.
pub trait Outbox: Send {
    fn send(&mut self, messages: Vec<Message>);
}
