//! etcd's health endpoints, `/health`, `/livez` and `/readyz`, served as
//! etcd 3.7.3 serves them (`etcdserver/api/etcdhttp/health.go`), on the
//! client URLs and on `--listen-metrics-urls`. kubelet probes a kubeadm
//! member with `/livez` (liveness) and `/readyz` (readiness, startup) on
//! the metrics port; older kubeadm and many runbooks use `/health`.
//!
//! `/livez` and `/readyz` run named checks:
//! - livez: `serializable_read` (the local store answers a read);
//! - readyz: `data_corruption` (no CORRUPT alarm on any member),
//!   `serializable_read`, `linearizable_read` (a ReadIndex round and a
//!   read, which fails without a leader), and `non_learner` (3.7's check:
//!   a learner is not ready; 3.5.17 has no such check and calls a
//!   learner ready. We follow the newest etcd).
//!
//! The answer is `ok\n` (200), or with `?verbose` a `[+]name ok` line
//! per check before it. A failure is 503 with every check's line
//! (`[-]name failed: reason`) and Go's `http.Error` newline. `?exclude=`
//! (repeatable, one name each) skips a check; `/livez/NAME` and
//! `/readyz/NAME` run one. The checks run in the order above (etcd's order
//! is a Go map's, so it varies from call to call).
//!
//! `/health` answers `{"health":"true","reason":""}`, or 503 with the
//! first of: an active alarm of any member (`ALARM NOSPACE`,
//! `ALARM CORRUPT`) unless `?exclude=` names it; `RAFT NO LEADER` unless
//! `?serializable=true`; `RANGE ERROR:<cause>` when the read (linearizable
//! unless `?serializable=true`) fails within the request timeout.
//!
//! A NOSPACE alarm fails only `/health`: the probes stay healthy, so
//! kubelet does not restart a member that needs a compaction and a
//! defrag. Every method but GET gets 405, as etcd's handlers answer.

use std::sync::Arc;

use axum::extract::{Path, RawQuery};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;

use crate::member::core::{Member, ALARM_NOSPACE, REQUEST_TIMEOUT};
use crate::member::corruption::ALARM_CORRUPT;

/// The checks `/livez` runs, in order.
pub const LIVEZ_CHECKS: &[&str] = &["serializable_read"];
/// The checks `/readyz` runs, in order.
pub const READYZ_CHECKS: &[&str] = &[
    "data_corruption",
    "serializable_read",
    "linearizable_read",
    "non_learner",
];

/// The health routes, for the client and the metrics listeners.
pub fn routes(member: Arc<Member>) -> Router {
    let for_health = member.clone();
    let router = Router::new().route(
        "/health",
        any(move |method: Method, RawQuery(query): RawQuery| health(for_health.clone(), method, query)),
    );
    let router = probe_routes(router, "/livez", LIVEZ_CHECKS, &member);
    probe_routes(router, "/readyz", READYZ_CHECKS, &member)
}

/// `root` (all of `checks`) and `root/{check}` (one of them).
fn probe_routes(router: Router, root: &str, checks: &'static [&'static str], member: &Arc<Member>) -> Router {
    let (for_all, for_one) = (member.clone(), member.clone());
    router
        .route(
            root,
            any(move |method: Method, RawQuery(query): RawQuery| probe(for_all.clone(), method, query, checks, None)),
        )
        .route(
            &format!("{root}/{{check}}"),
            any(
                move |method: Method, RawQuery(query): RawQuery, Path(check): Path<String>| {
                    probe(for_one.clone(), method, query, checks, Some(check))
                },
            ),
        )
}

/// Go's `http.Error`: plain text, `nosniff`, and a newline after `text`.
fn go_error(code: StatusCode, text: &str) -> Response {
    go_text(code, format!("{text}\n"))
}

/// 405 for anything but GET, as etcd's health handlers answer.
fn not_get(method: &Method) -> Option<Response> {
    (method != Method::GET).then(|| {
        let mut response = go_error(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed");
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET"));
        response
    })
}

/// The values of `name` in a query string, in order (Go's `Query()[name]`).
fn query_values(query: &Option<String>, name: &str) -> Vec<String> {
    let Some(query) = query else {
        return Vec::new();
    };
    query
        .split('&')
        .filter_map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(key) == name).then(|| decode(value))
        })
        .collect()
}

/// Percent- and plus-decoding of one query component.
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match u8::from_str_radix(&text[i + 1..i + 3], 16) {
                Ok(byte) => {
                    out.push(byte);
                    i += 2;
                }
                Err(_) => out.push(b'%'),
            },
            byte => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn probe(
    member: Arc<Member>,
    method: Method,
    query: Option<String>,
    checks: &'static [&'static str],
    one: Option<String>,
) -> Response {
    if let Some(refused) = not_get(&method) {
        return refused;
    }
    let run: Vec<&str> = match &one {
        Some(name) => match checks.iter().find(|check| *check == name) {
            Some(check) => vec![*check],
            None => return go_error(StatusCode::NOT_FOUND, "404 page not found"),
        },
        None => {
            let excluded = query_values(&query, "exclude");
            let missing: Vec<&String> = excluded
                .iter()
                .filter(|name| !checks.contains(&name.as_str()))
                .collect();
            if !missing.is_empty() {
                tracing::warn!(?missing, "some health checks cannot be excluded");
            }
            checks
                .iter()
                .copied()
                .filter(|check| !excluded.iter().any(|name| name == check))
                .collect()
        }
    };
    let mut lines = String::new();
    let mut failed = false;
    for check in run {
        match run_check(&member, check).await {
            Ok(()) => lines.push_str(&format!("[+]{check} ok\n")),
            Err(reason) => {
                failed = true;
                lines.push_str(&format!("[-]{check} failed: {reason}\n"));
            }
        }
    }
    if failed {
        return go_error(StatusCode::SERVICE_UNAVAILABLE, &lines);
    }
    let verbose = !query_values(&query, "verbose").is_empty();
    let body = if verbose {
        format!("{lines}ok\n")
    } else {
        "ok\n".to_string()
    };
    go_text(StatusCode::OK, body)
}

/// A plain-text answer with the headers Go's handlers set.
fn go_text(code: StatusCode, body: String) -> Response {
    (
        code,
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            ),
            (header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
        ],
        body,
    )
        .into_response()
}

/// One named check: `Err` carries the reason etcd prints for it.
async fn run_check(member: &Member, check: &str) -> Result<(), String> {
    match check {
        "serializable_read" => local_read(member),
        "linearizable_read" => {
            member.linearize().await.map_err(|error| error.to_string())?;
            local_read(member)
        }
        "data_corruption" => match member.has_alarm(ALARM_CORRUPT) {
            true => Err("alarm activated: CORRUPT".into()),
            false => Ok(()),
        },
        "non_learner" => match member.is_learner() {
            true => Err("not supported for learner".into()),
            false => Ok(()),
        },
        _ => Ok(()),
    }
}

/// A keys-only read of one key from the local store, as etcd's checks do
/// (etcd reads the empty key, which its store takes below the API's
/// checks; ours refuses an empty key, so the read names one).
fn local_read(member: &Member) -> Result<(), String> {
    let request = mvcc::RangeRequest {
        key: b"health".to_vec(),
        limit: 1,
        keys_only: true,
        ..Default::default()
    };
    member
        .read_range(&request)
        .map(|_| ())
        .map_err(|error| error.to_string())
}

/// etcd's name of an alarm kind, as `/health` reports it.
fn alarm_name(kind: i32) -> &'static str {
    match kind {
        ALARM_NOSPACE => "NOSPACE",
        ALARM_CORRUPT => "CORRUPT",
        _ => "UNKNOWN",
    }
}

async fn health(member: Arc<Member>, method: Method, query: Option<String>) -> Response {
    if let Some(refused) = not_get(&method) {
        return refused;
    }
    let serializable = query_values(&query, "serializable")
        .first()
        .is_some_and(|value| value == "true");
    let excluded = query_values(&query, "exclude");
    let metrics = &crate::metrics::metrics().server;
    let reason = health_reason(&member, serializable, &excluded).await;
    match reason {
        None => {
            metrics.health_success.inc();
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                r#"{"health":"true","reason":""}"#,
            )
                .into_response()
        }
        Some(reason) => {
            metrics.health_failures.inc();
            let body = serde_json::json!({"health": "false", "reason": reason});
            go_error(StatusCode::SERVICE_UNAVAILABLE, &body.to_string())
        }
    }
}

/// Why `/health` is unhealthy, or `None`: etcd's steps in etcd's order.
async fn health_reason(member: &Member, serializable: bool, excluded: &[String]) -> Option<String> {
    let alarm = member
        .alarms()
        .into_iter()
        .map(|alarm| alarm_name(alarm.kind))
        .find(|name| !excluded.iter().any(|excluded| excluded == name));
    if let Some(name) = alarm {
        return Some(format!("ALARM {name}"));
    }
    if !serializable && member.leader() == 0 {
        return Some("RAFT NO LEADER".into());
    }
    let read = async {
        if !serializable {
            member.linearize().await.map_err(|error| error.to_string())?;
        }
        local_read(member)
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, read).await {
        Ok(Ok(())) => None,
        Ok(Err(cause)) => Some(format!("RANGE ERROR:{cause}")),
        Err(_) => Some("RANGE ERROR:context deadline exceeded".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: query values read as Go's URL.Query reads them.
    #[test]
    fn go_query() {
        let query = Some("exclude=a&exclude=b%2Cc&verbose&x=1+2".to_string());
        assert_eq!(query_values(&query, "exclude"), ["a", "b,c"]);
        assert_eq!(query_values(&query, "x"), ["1 2"]);
        assert!(query_values(&query, "verbose").len() == 1);
        assert!(query_values(&None, "exclude").is_empty());
        assert_eq!(decode("100%"), "100%");
    }
}
