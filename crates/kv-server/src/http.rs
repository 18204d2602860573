//! Plain HTTP on the client port, as etcd serves it: `/health` and
//! `/version`.

use std::sync::Arc;

use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use crate::maintenance_service::{ETCD_API_VERSION, ETCD_CLUSTER_VERSION};
use crate::state::MemberState;

pub fn routes(state: Arc<MemberState>) -> Router {
    Router::new()
        .route(
            "/health",
            get(move || {
                let healthy = state.leader() != 0;
                async move {
                    if healthy {
                        (StatusCode::OK, Json(json!({"health": "true", "reason": ""})))
                    } else {
                        (
                            StatusCode::SERVICE_UNAVAILABLE,
                            Json(json!({"health": "false", "reason": "RAFT NO LEADER"})),
                        )
                    }
                }
            }),
        )
        .route(
            "/version",
            get(|| async { Json(json!({"etcdserver": ETCD_API_VERSION, "etcdcluster": ETCD_CLUSTER_VERSION})) }),
        )
}
