//! Plain HTTP on the client port, as etcd serves it: `/version`,
//! `/metrics`, and the health endpoints of `api::health`.

use std::sync::Arc;

use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use crate::api::maintenance::{ETCD_API_VERSION, ETCD_CLUSTER_VERSION};
use crate::member::core::Member;

/// `/metrics`: every metric as Prometheus text, with the gauges that
/// describe the member's state read now.
async fn metrics_text(member: Arc<Member>) -> impl axum::response::IntoResponse {
    let metrics = crate::metrics::metrics();
    let leader = member.leader();
    metrics.server.has_leader.set(i64::from(leader != 0));
    metrics.server.is_leader.set(i64::from(leader == member.member_id()));
    metrics.server.proposals_committed.set(member.committed_index() as i64);
    metrics.server.proposals_applied.set(member.applied_index() as i64);
    metrics.server.proposals_pending.set(member.pending_proposals() as i64);
    let mvcc = &metrics.mvcc;
    let (disk_bytes, live_bytes) = member.sampled_sizes();
    mvcc.db_total_size.set(disk_bytes as i64);
    mvcc.db_total_size_in_use.set(live_bytes as i64);
    mvcc.keys_total.set(member.indexed_keys() as i64);
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        metrics.encode(),
    )
}

/// The routes a `--listen-metrics-urls` listener serves: `/metrics` and
/// the health endpoints, as etcd's metrics listeners do.
pub fn metrics_routes(member: Arc<Member>) -> Router {
    let for_health = member.clone();
    Router::new()
        .route("/metrics", get(move || metrics_text(member.clone())))
        .merge(crate::api::health::routes(for_health))
}

pub fn routes(member: Arc<Member>) -> Router {
    let for_metrics = member.clone();
    Router::new()
        .route("/metrics", get(move || metrics_text(for_metrics.clone())))
        .merge(crate::api::health::routes(member))
        .route(
            "/version",
            get(|| async { Json(json!({"etcdserver": ETCD_API_VERSION, "etcdcluster": ETCD_CLUSTER_VERSION})) }),
        )
}
