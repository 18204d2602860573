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
//!
//! `grpc_server_msg_received_total` and `grpc_server_msg_sent_total`
//! count the messages of each call as go-grpc-prometheus counts those
//! its stream reads and sends: here, the gRPC messages in the request
//! body as the service reads them, and in the response body as it goes
//! out ([`Messages`] finds them by their 5-byte prefixes). A unary call
//! answered with an error sends none, as in etcd; a call refused before
//! its service reads the request (a learner's) receives none.

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

use crate::proto::GRPC_MESSAGE_PREFIX_BYTES;

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
    received: IntCounter,
    sent: IntCounter,
    /// With `--metrics=extensive`, the time from the call's start to its
    /// end (a stream's whole life), as go-grpc-prometheus times it.
    handling: OnceLock<Histogram>,
}

/// `grpc_server_handling_seconds`'s buckets: Prometheus's default ones,
/// which go-grpc-prometheus uses in etcd.
const HANDLING_BUCKETS: [f64; 11] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// The counter families go-grpc-prometheus serves, each by method.
struct CounterVecs {
    started: IntCounterVec,
    handled: IntCounterVec,
    received: IntCounterVec,
    sent: IntCounterVec,
}

/// A family labelled by method: `grpc_type`, `grpc_service`,
/// `grpc_method`.
fn by_method(name: &str, help: &str) -> IntCounterVec {
    IntCounterVec::new(Opts::new(name, help), &["grpc_type", "grpc_service", "grpc_method"]).expect("valid counter")
}

impl CounterVecs {
    fn new() -> CounterVecs {
        CounterVecs {
            started: by_method(
                "grpc_server_started_total",
                "Total number of RPCs started on the server.",
            ),
            handled: IntCounterVec::new(
                Opts::new(
                    "grpc_server_handled_total",
                    "Total number of RPCs completed on the server, regardless of success or failure.",
                ),
                &["grpc_type", "grpc_service", "grpc_method", "grpc_code"],
            )
            .expect("valid counter"),
            received: by_method(
                "grpc_server_msg_received_total",
                "Total number of RPC stream messages received on the server.",
            ),
            sent: by_method(
                "grpc_server_msg_sent_total",
                "Total number of gRPC stream messages sent by the server.",
            ),
        }
    }

    /// The counters of the method `labels` names, timed with `handling`.
    fn method(&self, (service, method, kind): MethodLabels, handling: OnceLock<Histogram>) -> MethodCounters {
        MethodCounters {
            started: self.started.with_label_values(&[kind, service, method]),
            handled: CODES.map(|code| self.handled.with_label_values(&[kind, service, method, code])),
            received: self.received.with_label_values(&[kind, service, method]),
            sent: self.sent.with_label_values(&[kind, service, method]),
            handling,
        }
    }
}

pub struct GrpcMetrics {
    counters: CounterVecs,
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
        let (labels, counters) = self.later.get(path)?;
        Some(counters.get_or_init(|| {
            let (service, method, kind) = *labels;
            let handling = OnceLock::new();
            if let Some(histogram) = self.handling.get() {
                let _ = handling.set(histogram.with_label_values(&[kind, service, method]));
            }
            self.counters.method(*labels, handling)
        }))
    }

    /// The counter families, to register.
    pub fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        let CounterVecs {
            started,
            handled,
            received,
            sent,
        } = &self.counters;
        vec![
            Box::new(started.clone()),
            Box::new(handled.clone()),
            Box::new(received.clone()),
            Box::new(sent.clone()),
        ]
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
        let counters = CounterVecs::new();
        let methods = METHODS
            .iter()
            .map(|&labels @ (service, method, _)| {
                (format!("/{service}/{method}"), counters.method(labels, OnceLock::new()))
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
            counters,
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

/// `request` with the messages its body carries counted as received, as
/// the service reads them (if the call is counted).
pub fn receiving<B>(
    counting: &Option<Counting>,
    request: axum::http::Request<B>,
) -> axum::http::Request<ReceivedBody<B>> {
    let counter = counting.as_ref().map(|counting| &counting.counters.received);
    request.map(|inner| ReceivedBody {
        inner,
        counter,
        messages: Messages::default(),
    })
}

/// A request body whose gRPC messages are counted as they are read.
pub struct ReceivedBody<B> {
    inner: B,
    counter: Option<&'static IntCounter>,
    messages: Messages,
}

impl<B> http_body::Body for ReceivedBody<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(context);
        if let (Poll::Ready(Some(Ok(frame))), Some(counter)) = (&polled, self.counter) {
            self.messages.tally(frame, counter);
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

/// Where a stream of gRPC messages stands: each message is its prefix
/// ([`GRPC_MESSAGE_PREFIX_BYTES`]: a compressed flag and a big-endian
/// length) and that many bytes, and a message's parts may fall in
/// different frames.
#[derive(Debug, Default)]
pub struct Messages {
    /// The prefix read so far, while one is incomplete.
    prefix: [u8; GRPC_MESSAGE_PREFIX_BYTES],
    prefix_read: usize,
    /// Bytes of the current message's body not yet seen.
    left: usize,
}

impl Messages {
    /// Counts on `counter` the messages that start in `frame`'s data.
    fn tally(&mut self, frame: &Frame<Bytes>, counter: &IntCounter) {
        if let Some(data) = frame.data_ref() {
            let found = self.count(data);
            if found > 0 {
                counter.inc_by(found);
            }
        }
    }

    /// Takes the next bytes of the stream; returns how many messages
    /// start in them.
    pub fn count(&mut self, mut data: &[u8]) -> u64 {
        let mut found = 0;
        while !data.is_empty() {
            if self.left > 0 {
                let skipped = self.left.min(data.len());
                self.left -= skipped;
                data = &data[skipped..];
                continue;
            }
            let taken = (self.prefix.len() - self.prefix_read).min(data.len());
            self.prefix[self.prefix_read..self.prefix_read + taken].copy_from_slice(&data[..taken]);
            self.prefix_read += taken;
            data = &data[taken..];
            if self.prefix_read == self.prefix.len() {
                found += 1;
                self.prefix_read = 0;
                self.left =
                    u32::from_be_bytes([self.prefix[1], self.prefix[2], self.prefix[3], self.prefix[4]]) as usize;
            }
        }
        found
    }
}

/// `response` as the client port sends it, its call counted as handled
/// when its body ends (`counting`, if the call is counted), and the
/// messages it carries counted as sent.
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
            counters: counting.counters,
            handled: false,
            messages: Messages::default(),
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
    counters: &'static MethodCounters,
    /// Whether the call's end is counted.
    handled: bool,
    /// The messages sent.
    messages: Messages,
    code_in_headers: Option<usize>,
    /// When the call started, if its handling time is observed.
    started: Option<Instant>,
}

impl<B: http_body::Body<Data = Bytes> + Unpin> CountedBody<B> {
    fn count(&mut self, code: usize) {
        if std::mem::replace(&mut self.handled, true) {
            return;
        }
        let counters = self.counters;
        counters.handled[code.min(CODES.len() - 1)].inc();
        if let (Some(histogram), Some(started)) = (counters.handling.get(), self.started) {
            histogram.observe(started.elapsed().as_secs_f64());
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
                let sent = &self.counters.sent;
                self.messages.tally(frame, sent);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `body` framed as gRPC messages.
    fn framed(bodies: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for body in bodies {
            out.push(0);
            out.extend_from_slice(&(body.len() as u32).to_be_bytes());
            out.extend_from_slice(body);
        }
        out
    }

    // Goal: messages are counted once each, whole or split across frames
    // at any byte, an empty message included. Method: three messages cut
    // at every pair of points, against counting them whole.
    #[test]
    fn messages_are_counted_however_the_frames_cut_them() {
        let stream = framed(&[b"put", b"", &[7u8; 300]]);
        assert_eq!(Messages::default().count(&stream), 3);
        for first in 0..=stream.len() {
            for second in first..=stream.len() {
                let mut messages = Messages::default();
                let counted = messages.count(&stream[..first])
                    + messages.count(&stream[first..second])
                    + messages.count(&stream[second..]);
                assert_eq!(counted, 3, "cut at {first} and {second}");
            }
        }
        let mut messages = Messages::default();
        assert_eq!(messages.count(&stream[..4]), 0, "a prefix not yet whole is no message");
    }
}
