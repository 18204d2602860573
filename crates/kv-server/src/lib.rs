//! etcd's v3 API served on a raft-rs cluster.
//!
//! # Module map
//! Dependencies point down this list, never up: `server` wires everything;
//! `api` serves etcd's services over the member core; the core talks to
//! the raft loop only through its input queue; the loop persists through
//! `storage` and hands committed entries to `apply`, which writes the
//! store and answers the core's waiters.
//!
//! - [`server`]: start-up, listeners, background tasks, shutdown.
//! - [`api`]: etcd's gRPC services, `/health` and `/version`, the peer
//!   service; each a thin layer over the member core.
//! - [`member`]: the member core (`Member`): propose, linearize, quota,
//!   headers; and what it shares with the apply stage (waiters).
//! - [`lease`]: leases: the member's operations, the leader's deadlines
//!   and checkpoints, lease ids.
//! - [`watch`]: the watch engine: the hub the apply stage publishes to,
//!   each stream's task, matching, catch-up, outbox and pacing.
//! - [`raft`]: the raft loop (`node`), its inputs, ReadIndex rounds, and
//!   raft-rs's view of the log.
//! - [`apply`]: the apply stage: committed entries into the store.
//! - [`peer`]: this member's side of talking to peers: the raft stream,
//!   snapshots sent and received, forwarded calls.
//! - [`storage`]: the data directory's layout, the WAL-backed log, the
//!   snapshot marker, pending snapshots, published client URLs.
//! - [`proto`]: the generated code and its conversions to store types.
//! - [`flags`]: etcd's flags, variables and config file, read as etcd
//!   reads them, into [`config`]'s typed settings; [`membership`]: the
//!   member and cluster ids derived from them.
//! - [`auth`]: users, roles, permissions and tokens (etcd's auth).
//! - [`tls`]: TLS on the client and peer URLs, and who a client
//!   certificate names.
//! - [`metrics`]: etcd's Prometheus metrics; [`logging`]: etcd's log
//!   lines (zap's JSON).
//! - [`connection_info`]: what each request carries of its client
//!   connection (identity, address, gateway stream bound), one shared
//!   value per connection.
//! - [`clock`]: the time, and [`entropy`]: randomness, each behind a seam
//!   a simulator can fill; [`driver`]: the seams the `simulator` crate
//!   runs whole members through;
//! - [`error`]: errors as types; [`halt`]: a fault that stops the member,
//!   carried up to `main` (nothing below `main` exits the process);
//!   [`allocator`]: mimalloc's settings; [`broken`]: the builds broken on
//!   purpose (failpoints), which the checks must catch.
//!
//! # A write, end to end
//! `api::kv` checks the request and calls `Member::propose`, which
//! registers a waiter and queues a proposal for the raft loop. The loop
//! proposes every queued input, then handles one Ready: messages out (a
//! leader sends appends before its own fsync), committed entries to the
//! apply stage, new entries and hard state to the WAL with one fdatasync,
//! then the messages that must follow the fsync. The apply stage applies
//! the committed batch to the store's open batch and answers the
//! waiter with the store's response, through the courier that carries a
//! batch's answers to the clients' runtime at once.

pub mod allocator;
pub(crate) mod api;
pub(crate) mod apply;
pub(crate) mod auth;
pub(crate) mod broken;
pub(crate) mod clock;
pub mod config;
pub(crate) mod connection_info;
pub mod driver;
pub(crate) mod entropy;
pub(crate) mod error;
pub mod flags;
pub(crate) mod halt;
pub(crate) mod lease;
pub mod logging;
pub(crate) mod member;
pub(crate) mod membership;
pub mod metrics;
pub(crate) mod peer;
pub mod proto;
pub(crate) mod raft;
pub mod server;
pub(crate) mod storage;
pub mod tls;
pub(crate) mod watch;

pub use api::maintenance::ETCD_API_VERSION;
pub use error::Error;
pub use peer::PEER_MESSAGE_BYTES_MAX;
pub use storage::backup;
pub use watch::outbox::WATCH_STREAM_STALLED_BYTES_MAX;
