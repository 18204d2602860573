//! Running a member.
//!
//! - [`start`]: opens what is on disk, wires the member and starts the
//!   apply stage and the raft loop.
//! - [`wiring`]: the one way a member's core, raft loop and apply stage
//!   are built (the server and the in-process tests use it).
//! - [`join`]: a new member learning a running cluster's membership.
//! - [`force_new_cluster`]: `--force-new-cluster`, the recovery from a
//!   lost quorum.
//! - [`serve`]: the peer and client listeners, until a stop signal.
//! - [`tasks`]: the background tasks; [`compactor`]: auto-compaction.
//! - [`listener`]: the client and peer ports' listeners (TCP and Unix
//!   sockets), bounded in connections, with TLS.
//! - [`client_port`]: what a client connection serves: gRPC, or plain
//!   HTTP and the gateway, split by each request's kind; and the HTTP/2
//!   transport settings (keepalive, streams) its connections run with.
//! - [`ping_policy`]: `--grpc-keepalive-min-time`, clients' pings
//!   policed as etcd's gRPC server polices them.
//! - [`restore`]: `kv-server snapshot restore`, a new member's data
//!   directory from a saved snapshot.

pub mod client_port;
pub mod compactor;
pub mod force_new_cluster;
pub mod join;
pub mod listener;
pub mod ping_policy;
pub mod restore;
pub mod serve;
pub mod start;
pub mod tasks;
pub(crate) mod wiring;

pub use start::run;
