//! This member's side of talking to peers.
//!
//! - [`transport`]: the raft loop's outbox: one raft stream per peer,
//!   written by the raft loop itself, bounded, lossy under overload as
//!   raft allows.
//! - [`frames`]: the raft stream's wire format.
//! - [`receive`]: peers' raft streams read, a runtime task each, into
//!   the raft loop.
//! - [`snapshot_send`]: the store streamed to a peer as a file.
//! - [`snapshot_receive`]: a snapshot from the leader, kept as a pending
//!   file before raft hears of it.
//! - [`channels`]: how a peer is dialled, and channels for calls
//!   forwarded to the leader.
//!
//! The peer gRPC service (`api::peer`) receives snapshots and forwarded
//! calls, and the raft stream of a member of the previous release.

pub mod channels;
pub mod frames;
pub mod receive;
pub mod snapshot_receive;
pub mod snapshot_send;
pub mod transport;

pub use transport::PEER_MESSAGE_BYTES_MAX;
