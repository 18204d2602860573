//! etcd's rule for a learner: until promoted it serves only Status,
//! Snapshot and serializable Range; every other etcd RPC is answered
//! "etcdserver: rpc not supported for learner" (Unavailable), as etcd's
//! gRPC interceptors answer. The method's path decides here; the KV
//! service tells serializable ranges apart.

use crate::error::RequestError;
use crate::member::core::Member;

/// The etcd methods a learner serves.
const LEARNER_METHODS: [&str; 3] = [
    "/etcdserverpb.Maintenance/Status",
    "/etcdserverpb.Maintenance/Snapshot",
    "/etcdserverpb.KV/Range",
];

/// The status that refuses the call to `path` if this member may not
/// serve it (`api::grpc` asks before the call reaches its service):
/// everything passes while it votes.
pub fn refusal(member: &Member, path: &str) -> Option<tonic::Status> {
    let etcd_service = ["/etcdserverpb.", "/v3lockpb.", "/v3electionpb."]
        .iter()
        .any(|service| path.starts_with(service));
    let refused = member.is_learner() && etcd_service && !LEARNER_METHODS.contains(&path);
    refused.then(|| tonic::Status::from(RequestError::NotSupportedForLearner))
}
