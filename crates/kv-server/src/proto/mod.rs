//! The protocol: the generated code (the `etcd-proto` crate), under the
//! name the server's modules use, and its conversions to the store's
//! types ([`convert`]), and watch responses built from pieces encoded
//! once ([`watch_wire`]).

pub use etcd_proto::*;

pub mod convert;
pub mod watch_wire;

/// The prefix of each gRPC message in a call's body: a compressed flag,
/// then the message's length, 4 bytes big-endian.
pub const GRPC_MESSAGE_PREFIX_BYTES: usize = 5;
