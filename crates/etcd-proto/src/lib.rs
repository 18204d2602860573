//! Code generated from `proto/` at build time, shared by the server and
//! the load generator. Package paths mirror etcd's: `etcdserverpb`,
//! `mvccpb`, `authpb`, plus this project's `kvserverpb`.

#![allow(clippy::all, clippy::pedantic, missing_docs)]

pub mod codec;

pub mod mvccpb {
    tonic::include_proto!("mvccpb");
}

pub mod authpb {
    tonic::include_proto!("authpb");
}

pub mod etcdserverpb {
    tonic::include_proto!("etcdserverpb");
}

/// etcd's Lock service (`proto/v3lockpb`).
pub mod v3lockpb {
    tonic::include_proto!("v3lockpb");
}

/// etcd's Election service (`proto/v3electionpb`).
pub mod v3electionpb {
    tonic::include_proto!("v3electionpb");
}

/// The encoded descriptor set of every proto above: each message's
/// fields, names and JSON names, for the gateway's JSON mapping.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/descriptors.bin"));

/// etcd's gRPC-JSON gateway rules, as the protos' `google.api.http`
/// options declare them (read by `build.rs`).
pub mod gateway {
    /// One rule: a POST path and the gRPC method it calls.
    #[derive(Debug)]
    pub struct HttpRule {
        /// `/v3/kv/range`.
        pub path: &'static str,
        /// `/etcdserverpb.KV/Range`.
        pub grpc_path: &'static str,
        /// The request and response messages' full names.
        pub input: &'static str,
        pub output: &'static str,
        pub client_streaming: bool,
        pub server_streaming: bool,
    }

    /// Every rule of every service.
    pub const HTTP_RULES: &[HttpRule] = include!(concat!(env!("OUT_DIR"), "/gateway_rules.rs"));
}

/// This project's own member-to-member messages (`proto/kvserverpb`).
pub mod kvserverpb {
    tonic::include_proto!("kvserverpb");
}
