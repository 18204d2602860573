//! etcd's rule for a learner: until promoted it serves only Status,
//! Snapshot and serializable Range; every other etcd RPC is answered
//! "etcdserver: rpc not supported for learner" (Unavailable), as etcd's
//! gRPC interceptors answer. The method's path decides here; the KV
//! service tells serializable ranges apart.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;

use crate::error::RequestError;
use crate::member::core::Member;

/// The etcd methods a learner serves.
const LEARNER_METHODS: [&str; 3] = [
    "/etcdserverpb.Maintenance/Status",
    "/etcdserverpb.Maintenance/Snapshot",
    "/etcdserverpb.KV/Range",
];

/// The client port's one middleware layer: etcd's gRPC call counters
/// around the learner gate. One layer, not two: each axum `from_fn` layer
/// boxes a clone of the router it wraps on every request.
pub async fn gate_and_count(State(member): State<Arc<Member>>, request: Request, next: Next) -> Response {
    crate::metrics::grpc::count_around(request, |request| async move {
        match refusal(&member, request.uri().path()) {
            Some(refused) => refused,
            None => next.run(request).await,
        }
    })
    .await
}

/// The answer to a call this member may not serve: everything passes
/// while it votes.
fn refusal(member: &Member, path: &str) -> Option<Response> {
    let etcd_service = ["/etcdserverpb.", "/v3lockpb.", "/v3electionpb."]
        .iter()
        .any(|service| path.starts_with(service));
    let refused = member.is_learner() && etcd_service && !LEARNER_METHODS.contains(&path);
    refused.then(|| tonic::Status::from(RequestError::NotSupportedForLearner).into_http::<axum::body::Body>())
}
