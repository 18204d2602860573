//! The apply stage: committed entries into the store, on a thread of its
//! own apart from the raft loop.
//!
//! - [`input`]: what the raft loop hands it, in order.
//! - [`decode`]: an entry's request, in the store's types.
//! - [`stage`]: the loop: apply a batch, keep lease deadlines in step,
//!   tell watchers, answer writers; install snapshots; release reads.

pub mod decode;
pub mod input;
pub mod stage;
