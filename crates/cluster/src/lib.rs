//! The one launcher of local clusters: real member processes (kv-server,
//! or a real etcd binary, which takes the same flags) on 127.0.0.1, each
//! with its data directory and log under one directory. The integration
//! tests (`kv-server/tests/common`), the robustness suite and, through
//! the `local-cluster` binary, every script start their clusters here, so
//! a member's flags and ports are written once.
//!
//! # Module map
//! - [`layout`]: which ports each member listens on and advertises.
//! - [`spec`]: what a cluster is made of: binary, directory, layout,
//!   token, flags, environment, TLS, CPUs.
//! - [`launch`]: the running cluster: start, kill, signal, restart, wait
//!   for health, stop.
//! - [`probe`]: the health and liveness probes over HTTP.
//!
//! Every wait is bounded ([`launch::HEALTHY_WITHIN`],
//! [`launch::GONE_WITHIN`]), and members only ever listen on loopback.

pub mod launch;
pub mod layout;
pub mod probe;
pub mod spec;

pub use launch::{Cluster, Member};
pub use layout::Layout;
pub use probe::Probe;
pub use spec::{Spec, Tls};
