//! The protocol: the generated code (the `etcd-proto` crate), under the
//! name the server's modules use, and its conversions to the store's
//! types ([`convert`]).

pub use etcd_proto::*;

pub mod convert;
