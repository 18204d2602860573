//! etcd's gRPC-JSON gateway: every HTTP rule of etcd 3.5.17's protos
//! (`POST /v3/kv/range`, `/v3/watch`, `/v3/lock/lock`, …, and the same
//! under `/v3beta/`, which etcd rewrites to `/v3/`), served as JSON over
//! HTTP/1.1 and HTTP/2 on the client URLs beside gRPC. Patroni, APISIX,
//! etcd3gw and etcd's own curl examples speak it.
//!
//! A request is read as etcd's gateway reads it: its first JSON value
//! (`gojson`) becomes the call's request message (`json`), its
//! `Authorization` header the token the call carries; the call is made on
//! the member's gRPC services in process (`call`), as etcd's gateway
//! makes it over loopback, so it passes every check a gRPC call passes
//! and is counted as one; the answer is written back as JSON:
//! - a unary call's message, or its error (`errors`);
//! - a stream's messages, each as `{"result":…}` and a newline, flushed
//!   one by one, and an error as a last `{"error":{…}}` chunk. A stream
//!   that takes requests (Watch, LeaseKeepAlive) reads further JSON
//!   values from the request body as they arrive; its end is the client's
//!   end of sending, and the stream goes on, as etcd's does.
//!
//! Bounds: a request body (or one value of a stream's body) is at most
//! [`body_bytes_max`]; at most [`GATEWAY_STREAMS_MAX`] streams are open
//! on a member and [`GATEWAY_STREAMS_PER_CONNECTION`] on one connection;
//! a stream's answers wait in a queue of [`STREAM_CHUNKS_QUEUED`] chunks,
//! so a client that stops reading holds back only its own stream, whose
//! watch pauses as a slow gRPC watcher's does (bounded by the watch
//! outbox) and catches up once it reads again.
//!
//! - [`gojson`]: JSON as Go reads and writes it, with Go's errors.
//! - [`json`]: etcd's JSON mapping of its messages, from their descriptors.
//! - [`call`]: the in-process gRPC call.
//! - [`errors`]: HTTP statuses and error bodies.

pub mod call;
pub mod errors;
pub mod gojson;
pub mod json;

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;
use axum::routing::any;
use axum::Router;
use bytes::{Bytes, BytesMut};
use etcd_proto::gateway::{HttpRule, HTTP_RULES};
use http_body_util::BodyExt;
use prost::Message;
use prost_reflect::MessageDescriptor;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;

use crate::api::gateway::call::Call;
use crate::api::gateway::gojson::Next;
use crate::config::GRPC_OVERHEAD_BYTES;

/// Gateway streams (Watch, LeaseKeepAlive, Observe, Snapshot) open on a
/// member at once. Each holds a task, a queue of at most
/// [`STREAM_CHUNKS_QUEUED`] answers and, for a watch, a watch stream's
/// bounded outbox; 1024 covers every Patroni or APISIX deployment (one
/// watch each per member) with room to spare, and bounds the worst case
/// to about the memory 1024 stalled gRPC watch streams take.
pub const GATEWAY_STREAMS_MAX: usize = 1024;

/// Gateway streams open on one connection: HTTP/1.1 carries one at a time
/// anyway; an HTTP/2 client gets as many as a gRPC client's usual watch
/// and keep-alive streams, so one connection cannot take the member's
/// whole [`GATEWAY_STREAMS_MAX`].
pub const GATEWAY_STREAMS_PER_CONNECTION: usize = 64;

/// A stream's answers (one JSON chunk each) waiting for the client to
/// read them. A watch's events merge in its outbox while these wait, so
/// a few suffice; more would only hold more memory for a slow reader.
pub const STREAM_CHUNKS_QUEUED: usize = 4;

/// A stream's requests decoded and waiting for the call to take them.
const STREAM_REQUESTS_QUEUED: usize = 16;

/// The largest request body, or value of a stream's body, taken:
/// etcd's gRPC receive limit (`--max-request-bytes` plus its 512 KiB of
/// framing) times two, plus 64 KiB. JSON carries bytes as base64 (4/3 of
/// their size) and names every field, so any request under the gRPC
/// limit fits; a larger one is refused as the gRPC limit refuses it.
pub fn body_bytes_max(max_request_bytes: usize) -> usize {
    2 * (max_request_bytes + GRPC_OVERHEAD_BYTES) + (64 << 10)
}

/// One route: a rule and its messages' descriptors.
struct Route {
    rule: &'static HttpRule,
    input: MessageDescriptor,
    output: MessageDescriptor,
}

/// Every rule by path.
static ROUTES: LazyLock<HashMap<&'static str, Route>> = LazyLock::new(|| {
    HTTP_RULES
        .iter()
        .map(|rule| {
            let route = Route {
                rule,
                input: json::message(rule.input),
                output: json::message(rule.output),
            };
            (rule.path, route)
        })
        .collect()
});

/// The per-connection bound on streams, which the client port puts in
/// each request's extensions.
#[derive(Clone)]
pub struct ConnectionStreams(pub Arc<Semaphore>);

impl Default for ConnectionStreams {
    fn default() -> ConnectionStreams {
        ConnectionStreams(Arc::new(Semaphore::new(GATEWAY_STREAMS_PER_CONNECTION)))
    }
}

pub struct Gateway {
    /// The member's gRPC services, as a gRPC client reaches them.
    grpc: Router,
    streams: Arc<Semaphore>,
    body_max: usize,
    /// The gRPC receive limit a decoded request must fit in.
    message_max: usize,
}

impl Gateway {
    pub fn new(grpc: Router, max_request_bytes: usize) -> Gateway {
        Gateway {
            grpc,
            streams: Arc::new(Semaphore::new(GATEWAY_STREAMS_MAX)),
            body_max: body_bytes_max(max_request_bytes),
            message_max: max_request_bytes + GRPC_OVERHEAD_BYTES,
        }
    }
}

/// The gateway's routes: every path under `/v3/` and `/v3beta/`.
pub fn routes(gateway: Arc<Gateway>) -> Router {
    Router::new()
        .route("/v3/{*rest}", any(serve))
        .route("/v3beta/{*rest}", any(serve))
        .with_state(gateway)
}

/// gRPC's error for a message over its receive limit, in grpc-go's words.
fn too_large(size: usize, limit: usize) -> (Code, String) {
    (
        Code::ResourceExhausted,
        format!("grpc: received message larger than max ({size} vs. {limit})"),
    )
}

async fn serve(State(gateway): State<Arc<Gateway>>, request: Request) -> Response {
    let path = request.uri().path();
    let path = match path.strip_prefix("/v3beta/") {
        Some(rest) => format!("/v3/{rest}"),
        None => path.to_string(),
    };
    let Some(route) = ROUTES.get(path.as_str()) else {
        return errors::plain(StatusCode::NOT_FOUND, "Not Found");
    };
    if request.method() != Method::POST {
        return errors::plain(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed");
    }
    let metadata = call::outgoing_metadata(request.headers());
    let deadline = request
        .headers()
        .get("grpc-timeout")
        .and_then(|value| value.to_str().ok())
        .and_then(call::parse_timeout);
    let connection = request.extensions().get::<ConnectionStreams>().cloned();
    let body = request.into_body();
    let streaming = route.rule.client_streaming || route.rule.server_streaming;
    let permits = if streaming {
        match take_stream_permits(&gateway, connection) {
            Some(permits) => Some(permits),
            None => {
                let message = "etcdserver: too many open gateway streams";
                return errors::call_failed(Code::ResourceExhausted, message, &HeaderMap::new());
            }
        }
    } else {
        None
    };
    if route.rule.client_streaming {
        return serve_bidi(&gateway, route, metadata, body, permits).await;
    }
    let unary = serve_unary(&gateway, route, metadata, body, permits);
    match deadline {
        Some(deadline) => tokio::time::timeout(deadline, unary).await.unwrap_or_else(|_| {
            errors::call_failed(Code::DeadlineExceeded, "context deadline exceeded", &HeaderMap::new())
        }),
        None => unary.await,
    }
}

fn take_stream_permits(gateway: &Gateway, connection: Option<ConnectionStreams>) -> Option<[OwnedSemaphorePermit; 2]> {
    let member = gateway.streams.clone().try_acquire_owned().ok()?;
    let connection = connection.unwrap_or_default();
    let connection = connection.0.try_acquire_owned().ok()?;
    Some([member, connection])
}

/// A call of one request: read the body, make the call, answer.
async fn serve_unary(
    gateway: &Gateway,
    route: &Route,
    metadata: HeaderMap,
    body: Body,
    permits: Option<[OwnedSemaphorePermit; 2]>,
) -> Response {
    let mut reader = BodyReader::new(body, gateway.body_max);
    // etcd's gateway reads the whole body, then its first value; the
    // rest is ignored, and an empty body is an empty request.
    let message = match reader.read_to_end().await {
        Err((code, message)) => return errors::call_failed(code, &message, &HeaderMap::new()),
        Ok(()) => match reader.next_message(&route.input) {
            Ok(Some(message)) => message,
            Ok(None) => Vec::new(),
            Err(message) => return errors::call_failed(Code::InvalidArgument, &message, &HeaderMap::new()),
        },
    };
    if message.len() > gateway.message_max {
        let (code, text) = too_large(message.len(), gateway.message_max);
        return errors::call_failed(code, &text, &HeaderMap::new());
    }
    let requests = Body::from(call::frame(&message));
    let call = match call::start(&gateway.grpc, route.rule.grpc_path, metadata, requests).await {
        Ok(call) => call,
        Err((status, headers)) => return errors::call_failed(status.code(), status.message(), &headers),
    };
    if route.rule.server_streaming {
        return answer_stream(route, call, permits).await;
    }
    answer_unary(route, call).await
}

async fn answer_unary(route: &Route, mut call: Call) -> Response {
    let message = match call.next().await {
        Some(Ok(message)) => message,
        Some(Err(status)) => return errors::call_failed(status.code(), status.message(), &call.headers),
        None => return errors::call_failed(Code::Internal, "empty response", &call.headers),
    };
    // The status comes after the message.
    if let Some(Err(status)) = call.next().await {
        return errors::call_failed(status.code(), status.message(), &call.headers);
    }
    let mut out = Vec::with_capacity(message.len() * 2);
    if let Err(error) = json::encode(&route.output, &message, &mut out) {
        return errors::call_failed(Code::Internal, &error.to_string(), &call.headers);
    }
    errors::json_response(StatusCode::OK, Body::from(out), &call.headers)
}

/// A stream that takes requests: the first value of the body is read
/// before the call (a bad one fails the request, as etcd's gateway fails
/// it), the rest as they arrive.
async fn serve_bidi(
    gateway: &Gateway,
    route: &'static Route,
    metadata: HeaderMap,
    body: Body,
    permits: Option<[OwnedSemaphorePermit; 2]>,
) -> Response {
    let mut reader = BodyReader::new(body, gateway.body_max);
    let first = match reader.next_streamed(&route.input).await {
        Ok(first) => first,
        // etcd's gateway returns the decoder's error as it is, which
        // gRPC's status mapping makes Unknown.
        Err(message) => return errors::call_failed(Code::Unknown, &message, &HeaderMap::new()),
    };
    let (requests, queued) = mpsc::channel::<Result<Bytes, std::convert::Infallible>>(STREAM_REQUESTS_QUEUED);
    if let Some(first) = first {
        let _ = requests.send(Ok(call::frame(&first))).await;
        let input = route.input.clone();
        tokio::spawn(async move {
            // Later values go on until the body ends or one is bad; either
            // way the call's sending side closes, as etcd's gateway
            // closes it.
            while let Ok(Some(message)) = reader.next_streamed(&input).await {
                if requests.send(Ok(call::frame(&message))).await.is_err() {
                    return;
                }
            }
        });
    } else {
        drop(requests);
    }
    let requests = Body::from_stream(ReceiverStream::new(queued));
    match call::start(&gateway.grpc, route.rule.grpc_path, metadata, requests).await {
        Ok(call) => answer_stream(route, call, permits).await,
        Err((status, headers)) => errors::call_failed(status.code(), status.message(), &headers),
    }
}

/// A stream's answers: headers once the first message (or the end) is
/// there, as Go writes them on the first write; then each message as
/// `{"result":…}` and a newline, and a failure as a last error chunk.
async fn answer_stream(route: &Route, mut call: Call, permits: Option<[OwnedSemaphorePermit; 2]>) -> Response {
    let first = call.next().await;
    let status = match &first {
        Some(Err(status)) => errors::http_status(status.code()),
        _ => StatusCode::OK,
    };
    let (chunks, body) = mpsc::channel::<Result<Bytes, std::convert::Infallible>>(STREAM_CHUNKS_QUEUED);
    let headers = std::mem::take(&mut call.headers);
    let output = route.output.clone();
    tokio::spawn(async move {
        let _permits = permits;
        let mut next = first;
        while let Some(item) = next {
            let chunk = match item {
                Ok(message) => result_chunk(&output, &message),
                Err(status) => Bytes::from(errors::stream_error_chunk(status.code(), status.message())),
            };
            if chunks.send(Ok(chunk)).await.is_err() {
                return;
            }
            next = call.next().await;
        }
    });
    errors::json_response(status, Body::from_stream(ReceiverStream::new(body)), &headers)
}

/// `{"result":<message>}` and a newline.
fn result_chunk(output: &MessageDescriptor, message: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(message.len() * 2 + 12);
    out.extend_from_slice(b"{\"result\":");
    if json::encode(output, message, &mut out).is_err() {
        return Bytes::from(errors::stream_error_chunk(
            Code::Internal,
            "a message could not be read",
        ));
    }
    out.extend_from_slice(b"}\n");
    Bytes::from(out)
}

/// A request body, read in pieces as it arrives, and the JSON values in
/// it, each decoded into a request message as etcd's gateway decodes it.
struct BodyReader {
    body: Body,
    buffer: BytesMut,
    ended: bool,
    limit: usize,
}

impl BodyReader {
    fn new(body: Body, limit: usize) -> BodyReader {
        BodyReader {
            body,
            buffer: BytesMut::new(),
            ended: false,
            limit,
        }
    }

    /// Reads one more piece; the error is the answer to a body over the
    /// limit or broken off.
    async fn fill(&mut self) -> Result<(), (Code, String)> {
        match self.body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    self.buffer.extend_from_slice(&data);
                }
                if self.buffer.len() > self.limit {
                    return Err(too_large(self.buffer.len(), self.limit));
                }
                Ok(())
            }
            Some(Err(error)) => Err((Code::InvalidArgument, error.to_string())),
            None => {
                self.ended = true;
                Ok(())
            }
        }
    }

    async fn read_to_end(&mut self) -> Result<(), (Code, String)> {
        while !self.ended {
            self.fill().await?;
        }
        Ok(())
    }

    /// The next value decoded from what has been read: None at the end
    /// of the body, Go's error for a bad value.
    fn next_message(&mut self, input: &MessageDescriptor) -> Result<Option<Vec<u8>>, String> {
        match gojson::next_value(&self.buffer, self.ended)? {
            Next::End | Next::More => Ok(None),
            Next::Value { start, end } => {
                let value = gojson::parse(&self.buffer[start..end]);
                let message = json::decode(input, &value)?;
                let _ = self.buffer.split_to(end);
                Ok(Some(message.encode_to_vec()))
            }
        }
    }

    /// The next value of a streamed body, waiting for more of it as
    /// needed.
    async fn next_streamed(&mut self, input: &MessageDescriptor) -> Result<Option<Vec<u8>>, String> {
        loop {
            match gojson::next_value(&self.buffer, self.ended)? {
                Next::End => return Ok(None),
                Next::More => self.fill().await.map_err(|(_, message)| message)?,
                Next::Value { .. } => return self.next_message(input),
            }
        }
    }
}
