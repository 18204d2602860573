//! The protocol: the generated code (the `etcd-proto` crate), under the
//! name the server's modules use, and its conversions to the store's
//! types ([`convert`]), and watch responses built from pieces encoded
//! once ([`watch_wire`]).

pub use etcd_proto::*;

pub mod convert;
pub mod watch_wire;
