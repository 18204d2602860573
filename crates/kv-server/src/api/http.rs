//! Plain HTTP on the client port, as etcd serves it: `/health` and
//! `/version`.
//!
//! `/health` answers as etcd 3.5 does: unhealthy with reason
//! `RAFT NO LEADER` when no leader is known, or `QGET ERROR:<cause>` when a
//! linearizable read does not complete within a second; otherwise healthy.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::api::maintenance::{ETCD_API_VERSION, ETCD_CLUSTER_VERSION};
use crate::member::core::Member;

/// How long `/health`'s linearizable read may take, as in etcd.
pub const HEALTH_READ_TIMEOUT: Duration = Duration::from_secs(1);

async fn health(member: Arc<Member>) -> (StatusCode, Json<Value>) {
    let unhealthy = |reason: String| {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"health": "false", "reason": reason})),
        )
    };
    if member.leader() == 0 {
        return unhealthy("RAFT NO LEADER".into());
    }
    match tokio::time::timeout(HEALTH_READ_TIMEOUT, member.linearize()).await {
        Ok(Ok(())) => (StatusCode::OK, Json(json!({"health": "true", "reason": ""}))),
        Ok(Err(error)) => unhealthy(format!("QGET ERROR:{error}")),
        Err(_) => unhealthy("QGET ERROR:context deadline exceeded".into()),
    }
}

pub fn routes(member: Arc<Member>) -> Router {
    Router::new()
        .route("/health", get(move || health(member.clone())))
        .route(
            "/version",
            get(|| async { Json(json!({"etcdserver": ETCD_API_VERSION, "etcdcluster": ETCD_CLUSTER_VERSION})) }),
        )
}
