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

/// The client port's gate: passes everything while this member votes.
pub async fn gate(State(member): State<Arc<Member>>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let refused =
        member.membership.local_is_learner() && path.starts_with("/etcdserverpb.") && !LEARNER_METHODS.contains(&path);
    if refused {
        let status = tonic::Status::from(RequestError::NotSupportedForLearner);
        return status.into_http::<axum::body::Body>();
    }
    next.run(request).await
}
