//! The server's own gRPC errors, with etcd's codes and exact messages
//! (clients map errors by message text). Store errors convert in
//! `convert::status`.

use tonic::Status;

pub fn no_leader() -> Status {
    Status::unavailable("etcdserver: no leader")
}

pub fn leader_changed() -> Status {
    Status::unavailable("etcdserver: leader changed")
}

pub fn timed_out() -> Status {
    Status::unavailable("etcdserver: request timed out")
}

pub fn too_many_requests() -> Status {
    Status::resource_exhausted("etcdserver: too many requests")
}

pub fn request_too_large() -> Status {
    Status::invalid_argument("etcdserver: request is too large")
}

pub fn stopped() -> Status {
    Status::unavailable("etcdserver: server stopped")
}

pub fn no_space() -> Status {
    Status::resource_exhausted("etcdserver: mvcc: database space exceeded")
}

pub fn not_leader() -> Status {
    Status::failed_precondition("etcdserver: not leader")
}

pub fn bad_leader_transferee() -> Status {
    Status::failed_precondition("etcdserver: bad leader transferee")
}

pub fn leader_transfer_timed_out() -> Status {
    Status::unavailable("etcdserver: request timed out, leader transfer took too long")
}
