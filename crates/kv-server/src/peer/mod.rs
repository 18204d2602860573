//! This member's side of talking to peers.
//!
//! - [`transport`]: the raft loop's outbox: one batched gRPC stream per
//!   peer, bounded, lossy under overload as raft allows.
//! - [`snapshot_send`]: the store streamed to a peer as a file.
//! - [`snapshot_receive`]: a snapshot from the leader, kept as a pending
//!   file before raft hears of it.
//! - [`channels`]: how a peer is dialled, and channels for calls
//!   forwarded to the leader.
//!
//! The peer gRPC service that receives all this is `api::peer`.

pub mod channels;
pub mod snapshot_receive;
pub mod snapshot_send;
pub mod transport;

pub use transport::PEER_MESSAGE_BYTES_MAX;
