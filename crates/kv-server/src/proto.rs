//! Code generated from `proto/` at build time. Package paths mirror etcd's:
//! `etcdserverpb`, `mvccpb`, `authpb`.

#![allow(clippy::all, clippy::pedantic, missing_docs)]

pub mod mvccpb {
    tonic::include_proto!("mvccpb");
}

pub mod authpb {
    tonic::include_proto!("authpb");
}

pub mod etcdserverpb {
    tonic::include_proto!("etcdserverpb");
}
