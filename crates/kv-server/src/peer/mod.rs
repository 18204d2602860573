//! This member's side of talking to peers.
//!
//! - [`transport`]: the raft loop's outbox and the peer set: one raft
//!   stream per peer, written by the raft loop itself, bounded, lossy
//!   under overload as raft allows.
//! - [`link`]: a peer's link thread (dial, flush, heartbeat, timeouts)
//!   and its `poll`.
//! - [`connection`]: one raft stream's connection: dialling, TLS, and
//!   the bytes waiting for the socket.
//! - [`frames`]: the raft stream's wire format.
//! - [`receive`]: peers' raft streams: a plain one handed to the raft
//!   loop, which reads it itself (`raft::inbox`); a TLS one read by a
//!   runtime task into the loop's queue.
//! - [`snapshot_send`]: the store streamed to a peer as a file.
//! - [`snapshot_receive`]: a snapshot from the leader, kept as a pending
//!   file before raft hears of it.
//! - [`timeouts`]: etcd's `--raft-read-timeout` and
//!   `--raft-write-timeout`.
//! - [`channels`]: how a peer is dialled, and channels for calls
//!   forwarded to the leader.
//!
//! The peer gRPC service (`api::peer`) receives snapshots and forwarded
//! calls, and the raft stream of a member of the previous release.

pub mod channels;
pub mod connection;
pub mod frames;
pub mod link;
pub mod receive;
pub mod snapshot_receive;
pub mod snapshot_send;
pub mod timeouts;
pub mod transport;

pub use frames::PEER_MESSAGE_BYTES_MAX;

pub use timeouts::{PeerTimeouts, PEER_TIMEOUT_MIN};
