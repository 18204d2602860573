//! Running a member.
//!
//! - [`start`]: opens what is on disk, wires the member and starts the
//!   apply stage and the raft loop.
//! - [`wiring`]: the one way a member's core, raft loop and apply stage
//!   are built (the server and the in-process tests use it).
//! - [`join`]: a new member learning a running cluster's membership.
//! - [`serve`]: the peer and client listeners, until a stop signal.
//! - [`tasks`]: the background tasks.
//! - [`listener`]: the client port's listener, bounded in connections.
//! - [`client_port`]: what a client connection serves: gRPC, or plain
//!   HTTP and the gateway, split by each request's kind.
//! - [`restore`]: `kv-server snapshot restore`, a new member's data
//!   directory from a saved snapshot.

pub mod client_port;
pub mod join;
pub mod listener;
pub mod restore;
pub mod serve;
pub mod start;
pub mod tasks;
pub(crate) mod wiring;

pub use start::run;
