//! Consensus: the raft loop and what it reads and writes.
//!
//! - [`input`]: what the loop takes in (`NodeInput`) and the `Outbox` it
//!   sends peer messages through; the rest of the member depends on this,
//!   never on the loop.
//! - [`inbox`]: how the loop waits: its queue's senders ring a doorbell,
//!   and it reads the peers' raft streams itself.
//! - [`status`]: term, leader, commit and applied indexes, for anyone.
//! - [`node`]: the loop itself, one thread: inputs become Readies, each
//!   persisted with one fdatasync, committed entries go to the apply stage.
//! - [`read_index`]: linearizable reads batched into ReadIndex rounds.
//! - [`log`]: raft-rs's `Storage`: the in-memory log, and snapshots as
//!   metadata over the store.
//! - [`logger`]: raft-rs's slog records into tracing; [`events`]: late
//!   heartbeats and leader changes, in etcd's log lines.

pub mod events;
pub mod inbox;
pub mod input;
pub mod log;
pub mod logger;
pub mod node;
pub mod read_index;
pub mod status;

#[cfg(test)]
mod tests;
