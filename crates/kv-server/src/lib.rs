//! etcd's v3 API served on a raft-rs cluster.
//!
//! # Module map
//! - [`proto`]: the code generated from `proto/` (etcd's wire API).
//!
//! The server itself is the subject of the kv-server issue; today this
//! crate compiles the protocol so every later piece builds on it.

pub mod proto;
