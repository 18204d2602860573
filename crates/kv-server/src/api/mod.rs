//! etcd's gRPC services and the client port's plain HTTP, each a thin
//! layer over the member core (`member::core::Member`): check the
//! request as etcd does, call the core, shape the answer.
//!
//! - [`kv`], [`lease`], [`cluster`], [`maintenance`], [`watch`],
//!   [`auth`]: etcd's client services; [`range_stream`]: etcd 3.7's
//!   chunked range, part of `kv`.
//! - [`recipes`]: etcd's `Lock` and `Election` services, made of the
//!   calls above.
//! - [`gateway`]: etcd's gRPC-JSON gateway, every HTTP rule of the
//!   services above as JSON over HTTP.
//! - [`http`]: `/version` and `/metrics`; [`health`]: `/health`,
//!   `/livez` and `/readyz`; [`access`]: etcd's CORS and `Host` checks
//!   on the client port's HTTP.
//! - [`grpc`]: the services above as the client port serves them, each
//!   call dispatched by its path behind the learner gate, the call
//!   counters and the slow-call log.
//! - [`learner`]: what a learner refuses, as etcd's interceptors do;
//!   [`request_stats`]: etcd's "request stats" line for slow calls.
//! - [`peer`]: the service other members call (raft streams, snapshots,
//!   forwarded lease calls).
//! - [`errors`]: errors as gRPC statuses with etcd's codes.

pub mod access;
pub mod auth;
pub mod cluster;
pub mod errors;
pub mod gateway;
pub mod grpc;
pub mod health;
pub mod http;
pub mod kv;
pub mod learner;
pub mod lease;
pub mod maintenance;
pub mod peer;
pub mod range_stream;
pub mod recipes;
pub mod request_stats;
pub mod watch;
