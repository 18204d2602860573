//! gRPC call counts as go-grpc-prometheus reports them in etcd:
//! `grpc_server_started_total` when a call arrives and
//! `grpc_server_handled_total` when it ends, with its code, labelled by
//! method, service and type. Every method of etcd's services starts at 0,
//! with every code, as go-grpc-prometheus initialises them.
//!
//! A call ends when its response body does: its status is in the
//! trailers, or in the headers for an answer made of trailers alone. A
//! body dropped before it ends (the client went away) counts as
//! `Canceled`.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http_body::Frame;
use prometheus::{Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, Opts};

/// gRPC's codes, by number, as go-grpc-prometheus names them.
const CODES: [&str; 17] = [
    "OK",
    "Canceled",
    "Unknown",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "Internal",
    "Unavailable",
    "DataLoss",
    "Unauthenticated",
];

/// Every method etcd serves: (service, method, type).
const METHODS: &[(&str, &str, &str)] = &[
    ("etcdserverpb.KV", "Range", "unary"),
    ("etcdserverpb.KV", "Put", "unary"),
    ("etcdserverpb.KV", "DeleteRange", "unary"),
    ("etcdserverpb.KV", "Txn", "unary"),
    ("etcdserverpb.KV", "Compact", "unary"),
    ("etcdserverpb.Watch", "Watch", "bidi_stream"),
    ("etcdserverpb.Lease", "LeaseGrant", "unary"),
    ("etcdserverpb.Lease", "LeaseRevoke", "unary"),
    ("etcdserverpb.Lease", "LeaseKeepAlive", "bidi_stream"),
    ("etcdserverpb.Lease", "LeaseTimeToLive", "unary"),
    ("etcdserverpb.Lease", "LeaseLeases", "unary"),
    ("etcdserverpb.Cluster", "MemberAdd", "unary"),
    ("etcdserverpb.Cluster", "MemberRemove", "unary"),
    ("etcdserverpb.Cluster", "MemberUpdate", "unary"),
    ("etcdserverpb.Cluster", "MemberList", "unary"),
    ("etcdserverpb.Cluster", "MemberPromote", "unary"),
    ("etcdserverpb.Maintenance", "Alarm", "unary"),
    ("etcdserverpb.Maintenance", "Status", "unary"),
    ("etcdserverpb.Maintenance", "Defragment", "unary"),
    ("etcdserverpb.Maintenance", "Hash", "unary"),
    ("etcdserverpb.Maintenance", "HashKV", "unary"),
    ("etcdserverpb.Maintenance", "Snapshot", "server_stream"),
    ("etcdserverpb.Maintenance", "MoveLeader", "unary"),
    ("etcdserverpb.Maintenance", "Downgrade", "unary"),
    ("etcdserverpb.Auth", "AuthEnable", "unary"),
    ("etcdserverpb.Auth", "AuthDisable", "unary"),
    ("etcdserverpb.Auth", "AuthStatus", "unary"),
    ("etcdserverpb.Auth", "Authenticate", "unary"),
    ("etcdserverpb.Auth", "UserAdd", "unary"),
    ("etcdserverpb.Auth", "UserGet", "unary"),
    ("etcdserverpb.Auth", "UserList", "unary"),
    ("etcdserverpb.Auth", "UserDelete", "unary"),
    ("etcdserverpb.Auth", "UserChangePassword", "unary"),
    ("etcdserverpb.Auth", "UserGrantRole", "unary"),
    ("etcdserverpb.Auth", "UserRevokeRole", "unary"),
    ("etcdserverpb.Auth", "RoleAdd", "unary"),
    ("etcdserverpb.Auth", "RoleGet", "unary"),
    ("etcdserverpb.Auth", "RoleList", "unary"),
    ("etcdserverpb.Auth", "RoleDelete", "unary"),
    ("etcdserverpb.Auth", "RoleGrantPermission", "unary"),
    ("etcdserverpb.Auth", "RoleRevokePermission", "unary"),
    ("grpc.health.v1.Health", "Check", "unary"),
    ("grpc.health.v1.Health", "Watch", "server_stream"),
];

/// Whether the call at `path` (`/etcdserverpb.KV/Range`) is one of
/// etcd's unary methods; streams and unknown paths are not.
pub fn is_unary(path: &str) -> bool {
    let Some((service, method)) = path.strip_prefix('/').and_then(|p| p.split_once('/')) else {
        return false;
    };
    METHODS
        .iter()
        .chain(COUNTED_ONCE_CALLED)
        .any(|(s, m, kind)| *s == service && *m == method && *kind == "unary")
}

/// etcd's Lock and Election services: counted as every call is, but
/// their series appear only once called, since etcd registers them after
/// go-grpc-prometheus has initialised the methods of its own services.
const COUNTED_ONCE_CALLED: &[(&str, &str, &str)] = &[
    ("v3lockpb.Lock", "Lock", "unary"),
    ("v3lockpb.Lock", "Unlock", "unary"),
    ("v3electionpb.Election", "Campaign", "unary"),
    ("v3electionpb.Election", "Proclaim", "unary"),
    ("v3electionpb.Election", "Leader", "unary"),
    ("v3electionpb.Election", "Observe", "server_stream"),
    ("v3electionpb.Election", "Resign", "unary"),
];

/// One method's counters, made once so a call costs one map lookup.
struct MethodCounters {
    started: IntCounter,
    handled: [IntCounter; 17],
    /// With `--metrics=extensive`, the time from the call's start to its
    /// end (a stream's whole life), as go-grpc-prometheus times it.
    handling: OnceLock<Histogram>,
}

/// `grpc_server_handling_seconds`'s buckets: Prometheus's default ones,
/// which go-grpc-prometheus uses in etcd.
const HANDLING_BUCKETS: [f64; 11] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

pub struct GrpcMetrics {
    pub started: IntCounterVec,
    pub handled: IntCounterVec,
    /// By request path (`/etcdserverpb.KV/Put`).
    methods: HashMap<String, MethodCounters>,
    /// With `--metrics=extensive`, `grpc_server_handling_seconds`.
    handling: OnceLock<HistogramVec>,
    /// [`COUNTED_ONCE_CALLED`] by request path: their labels, and their
    /// counters once made.
    later: HashMap<String, (MethodLabels, OnceLock<MethodCounters>)>,
}

/// A method's labels: `grpc_service`, `grpc_method`, `grpc_type`.
type MethodLabels = (&'static str, &'static str, &'static str);

impl GrpcMetrics {
    /// The counters of the method at `path`, if it is counted.
    fn counters(&self, path: &str) -> Option<&MethodCounters> {
        if let Some(counters) = self.methods.get(path) {
            return Some(counters);
        }
        let ((service, method, kind), counters) = self.later.get(path)?;
        Some(counters.get_or_init(|| {
            let handling = OnceLock::new();
            if let Some(histogram) = self.handling.get() {
                let _ = handling.set(histogram.with_label_values(&[kind, service, method]));
            }
            MethodCounters {
                started: self.started.with_label_values(&[kind, service, method]),
                handled: CODES.map(|code| self.handled.with_label_values(&[kind, service, method, code])),
                handling,
            }
        }))
    }

    /// `--metrics=extensive`: `grpc_server_handling_seconds`, every method
    /// of etcd's services at zero from now on; returns the histogram to
    /// register. Once per process.
    pub fn enable_handling_histogram(&self) -> Option<HistogramVec> {
        let opts = HistogramOpts::new(
            "grpc_server_handling_seconds",
            "Histogram of response latency (seconds) of gRPC that had been application-level handled by the server.",
        )
        .buckets(HANDLING_BUCKETS.to_vec());
        let histogram =
            HistogramVec::new(opts, &["grpc_type", "grpc_service", "grpc_method"]).expect("valid histogram");
        self.handling.set(histogram.clone()).ok()?;
        for &(service, method, kind) in METHODS {
            if let Some(counters) = self.methods.get(&format!("/{service}/{method}")) {
                let _ = counters
                    .handling
                    .set(histogram.with_label_values(&[kind, service, method]));
            }
        }
        Some(histogram)
    }
}

impl Default for GrpcMetrics {
    fn default() -> GrpcMetrics {
        let started = IntCounterVec::new(
            Opts::new(
                "grpc_server_started_total",
                "Total number of RPCs started on the server.",
            ),
            &["grpc_type", "grpc_service", "grpc_method"],
        )
        .expect("valid counter");
        let handled = IntCounterVec::new(
            Opts::new(
                "grpc_server_handled_total",
                "Total number of RPCs completed on the server, regardless of success or failure.",
            ),
            &["grpc_type", "grpc_service", "grpc_method", "grpc_code"],
        )
        .expect("valid counter");
        let methods = METHODS
            .iter()
            .map(|&(service, method, kind)| {
                let counters = MethodCounters {
                    started: started.with_label_values(&[kind, service, method]),
                    handled: CODES.map(|code| handled.with_label_values(&[kind, service, method, code])),
                    handling: OnceLock::new(),
                };
                (format!("/{service}/{method}"), counters)
            })
            .collect();
        let later = COUNTED_ONCE_CALLED
            .iter()
            .map(|&(service, method, kind)| {
                (
                    format!("/{service}/{method}"),
                    ((service, method, kind), OnceLock::new()),
                )
            })
            .collect();
        GrpcMetrics {
            started,
            handled,
            methods,
            handling: OnceLock::new(),
            later,
        }
    }
}

/// A call whose start is counted; [`end`] counts its end.
pub struct Counting {
    counters: &'static MethodCounters,
    /// When the call started, if its handling time is observed.
    started: Option<Instant>,
}

/// Counts the start of the call to `path` (`/etcdserverpb.KV/Put`), if
/// it is one of the counted methods; `api::grpc` calls it first.
pub fn start(path: &str) -> Option<Counting> {
    if !cfg!(feature = "metrics") {
        return None;
    }
    let counters = super::metrics().grpc.counters(path)?;
    counters.started.inc();
    Some(Counting {
        counters,
        started: counters.handling.get().map(|_| Instant::now()),
    })
}

/// `response` as the client port sends it, its call counted as handled
/// when its body ends (`counting`, if the call is counted).
pub fn end<B>(counting: Option<Counting>, response: axum::http::Response<B>) -> Response
where
    B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<axum::BoxError>,
{
    let Some(counting) = counting else {
        return response.map(Body::new);
    };
    let code_in_headers = grpc_status(response.headers());
    response.map(|body| {
        Body::new(CountedBody {
            inner: body,
            counters: Some(counting.counters),
            code_in_headers,
            started: counting.started,
        })
    })
}

/// The `grpc-status` in `headers`, if any.
fn grpc_status(headers: &axum::http::HeaderMap) -> Option<usize> {
    headers
        .get("grpc-status")
        .and_then(|value| value.to_str().ok())
        .and_then(|text| text.parse().ok())
}

/// A response body that counts its call as handled when it ends.
struct CountedBody<B: http_body::Body<Data = Bytes> + Unpin> {
    inner: B,
    /// Taken when the call is counted.
    counters: Option<&'static MethodCounters>,
    code_in_headers: Option<usize>,
    /// When the call started, if its handling time is observed.
    started: Option<Instant>,
}

impl<B: http_body::Body<Data = Bytes> + Unpin> CountedBody<B> {
    fn count(&mut self, code: usize) {
        if let Some(counters) = self.counters.take() {
            counters.handled[code.min(CODES.len() - 1)].inc();
            if let (Some(histogram), Some(started)) = (counters.handling.get(), self.started) {
                histogram.observe(started.elapsed().as_secs_f64());
            }
        }
    }
}

impl<B> http_body::Body for CountedBody<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<axum::BoxError>,
{
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(context).map_err(axum::Error::new);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(code) = frame.trailers_ref().and_then(grpc_status) {
                    self.count(code);
                }
            }
            Poll::Ready(Some(Err(_))) => self.count(2),
            Poll::Ready(None) => {
                let code = self.code_in_headers.unwrap_or(0);
                self.count(code);
            }
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl<B: http_body::Body<Data = Bytes> + Unpin> Drop for CountedBody<B> {
    fn drop(&mut self) {
        match self.code_in_headers {
            // An answer of trailers alone may be dropped once its headers
            // are sent: it ended with its code.
            Some(code) => self.count(code),
            None => self.count(1),
        }
    }
}
