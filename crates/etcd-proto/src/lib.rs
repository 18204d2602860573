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

/// This project's own member-to-member messages (`proto/kvserverpb`).
pub mod kvserverpb {
    tonic::include_proto!("kvserverpb");
}
