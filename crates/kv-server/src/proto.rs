//! The generated protocol code (the `etcd-proto` crate), under the name
//! the server's modules use.

pub use etcd_proto::*;
