//! etcd's v3 API served on a raft-rs cluster.
//!
//! # Module map
//! - [`config`]: etcd's command-line flags.
//! - [`membership`]: the initial cluster, member and cluster ids.
//! - [`server`]: starts a member and wires the parts below together.
//! - [`node`]: the raft loop (one thread): proposals, ReadIndex batches,
//!   peer messages and ticks become Readies, persisted to the WAL.
//! - [`raft_storage`]: the WAL mirrored into raft's in-memory log, and
//!   the snapshot marker.
//! - [`log_store`]: what raft reads: that log, and the store as snapshots.
//! - [`apply`]: the apply stage (one thread): committed entries to the
//!   store in batches; answers waiting clients and released reads.
//! - [`transport`]: peer gRPC streams carrying raft messages as bytes;
//!   [`snapshot_transfer`]: snapshots streamed apart, as files.
//! - [`kv_service`], [`lease_service`], [`watch_service`],
//!   [`cluster_service`], [`maintenance_service`]: etcd's gRPC services;
//! - [`watch_hub`]: what the apply stage publishes to watch streams;
//! - [`lessor`]: the leader's lease deadlines; [`http`]: `/health` and `/version`;
//!   [`client_listener`]: the client port's bounded listener.
//! - [`allocator`]: mimalloc's settings;
//! - [`state`]: what the parts share; [`convert`]: wire types to store
//!   types; [`errors`]: etcd's server errors; [`slog_bridge`]: raft-rs
//!   logs into tracing; [`proto`]: generated code.
//!
//! # A write, end to end
//! A handler registers a waiter and queues a proposal for the raft loop.
//! The loop proposes every queued input, then handles one Ready: messages
//! out (a leader sends appends before its own fsync), committed entries to
//! the apply stage, new entries and hard state to the WAL with one
//! fdatasync, then the messages that must follow the fsync. The apply
//! stage applies the committed batch to the store in one sled batch and
//! answers the waiter with the store's response.

pub mod allocator;
pub mod apply;
pub mod client_listener;
pub mod cluster_service;
pub mod config;
pub mod convert;
pub mod errors;
pub mod http;
pub mod kv_service;
pub mod lease_service;
pub mod lessor;
pub mod log_store;
pub mod maintenance_service;
pub mod membership;
pub mod node;
pub mod proto;
pub mod raft_storage;
pub mod server;
pub mod slog_bridge;
pub mod snapshot_transfer;
pub mod state;
pub mod transport;
pub mod watch_hub;
pub mod watch_service;
