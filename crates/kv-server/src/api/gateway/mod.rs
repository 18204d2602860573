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
use tonic::{Code, Status};

use crate::api::gateway::call::Call;
use crate::api::gateway::gojson::Next;
use crate::api::grpc::GrpcServices;
use crate::config::GRPC_OVERHEAD_BYTES;
use crate::connection_info::ConnectionInfo;

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

/// A stream's requests decoded and waiting for the call to take them. The
/// call takes each as it comes (a watch stream handles its requests one
/// by one without waiting on the client), so this only smooths a body
/// that carries several at once; past it, reading the body waits.
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

/// A new connection's bound on streams, which the client port puts in
/// each request's extensions (`connection_info`).
pub fn gateway_streams() -> Arc<Semaphore> {
    Arc::new(Semaphore::new(GATEWAY_STREAMS_PER_CONNECTION))
}

pub struct Gateway {
    /// The member's gRPC services, as a gRPC client reaches them.
    grpc: GrpcServices,
    streams: Arc<Semaphore>,
    body_max: usize,
    /// The gRPC receive limit a decoded request must fit in.
    message_max: usize,
}

impl Gateway {
    pub fn new(grpc: GrpcServices, max_request_bytes: usize) -> Gateway {
        Gateway {
            grpc,
            streams: Arc::new(Semaphore::new(GATEWAY_STREAMS_MAX)),
            body_max: body_bytes_max(max_request_bytes),
            message_max: max_request_bytes + GRPC_OVERHEAD_BYTES,
        }
    }
}

/// The gateway's routes: every path under `/v3/` (the client port's
/// front has rewritten `/v3beta/` to it: `api::access`).
pub fn routes(gateway: Arc<Gateway>) -> Router {
    Router::new()
        .route("/v3/", any(serve))
        .route("/v3/{*rest}", any(serve))
        .with_state(gateway)
}

/// gRPC's error for a message over its receive limit, in grpc-go's words.
fn too_large(size: usize, limit: usize) -> (Code, String) {
    (
        Code::ResourceExhausted,
        format!("grpc: received message larger than max ({size} vs. {limit})"),
    )
}

/// How one request is answered, from its headers.
#[derive(Clone, Copy)]
struct Manner {
    /// `TE: trailers`: errors are sent chunked, with trailers.
    wants_trailers: bool,
    /// HTTP/1.x: as etcd's Go server, a stream answers only once its
    /// request body has ended (or [`HALF_DUPLEX_READ_BYTES`] of it were
    /// read), since Go's HTTP/1 server reads the rest of a body before it
    /// writes an answer's head. HTTP/2 streams are full duplex.
    half_duplex: bool,
}

/// What Go's HTTP/1 server reads of a request body, at most, before it
/// writes an answer (`maxPostHandlerReadBytes`).
const HALF_DUPLEX_READ_BYTES: usize = 256 << 10;

async fn serve(State(gateway): State<Arc<Gateway>>, request: Request) -> Response {
    let Some(route) = ROUTES.get(request.uri().path()) else {
        return errors::plain(StatusCode::NOT_FOUND, "Not Found");
    };
    let headers = request.headers();
    let manner = Manner {
        wants_trailers: headers
            .get(axum::http::header::TE)
            .and_then(|te| te.to_str().ok())
            .is_some_and(|te| te.to_ascii_lowercase().contains("trailers")),
        half_duplex: request.version() < axum::http::Version::HTTP_2,
    };
    let fail =
        |code: Code, message: &str| errors::call_failed(code, message, errors::Failure::Request, manner.wants_trailers);
    // grpc-gateway's method override: a form POST may say it is another
    // method; as a POST it is read as a form, which leaves no body.
    let form = headers
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|ct| ct.as_bytes() == b"application/x-www-form-urlencoded");
    let overridden = headers
        .get("x-http-method-override")
        .filter(|_| form && request.method() == Method::POST)
        .map(|method| method.to_str().unwrap_or_default().to_ascii_uppercase());
    let method = overridden.clone().unwrap_or_else(|| request.method().to_string());
    if method != "POST" {
        return errors::plain(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed");
    }
    let metadata = call::outgoing_metadata(headers);
    let deadline = match headers.get("grpc-timeout") {
        None => None,
        Some(value) => match value.to_str().ok().and_then(call::parse_timeout) {
            Some(deadline) => Some(deadline),
            None => {
                let text = String::from_utf8_lossy(value.as_bytes()).to_string();
                return fail(Code::InvalidArgument, &format!("invalid grpc-timeout: {text}"));
            }
        },
    };
    let connection = ConnectionInfo::of(request.extensions()).map(|info| info.gateway_streams.clone());
    let body = if overridden.is_some() {
        Body::empty()
    } else {
        request.into_body()
    };
    let streaming = route.rule.client_streaming || route.rule.server_streaming;
    let permits = if streaming {
        match take_stream_permits(&gateway, connection) {
            Some(permits) => Some(permits),
            None => return fail(Code::ResourceExhausted, "etcdserver: too many open gateway streams"),
        }
    } else {
        None
    };
    if route.rule.client_streaming {
        return serve_bidi(&gateway, route, metadata, body, permits, manner).await;
    }
    let unary = serve_unary(&gateway, route, metadata, body, permits, manner);
    match deadline {
        Some(deadline) => tokio::time::timeout(deadline, unary)
            .await
            .unwrap_or_else(|_| fail(Code::DeadlineExceeded, "context deadline exceeded")),
        None => unary.await,
    }
}

fn take_stream_permits(gateway: &Gateway, connection: Option<Arc<Semaphore>>) -> Option<[OwnedSemaphorePermit; 2]> {
    let member = gateway.streams.clone().try_acquire_owned().ok()?;
    let connection = connection.unwrap_or_else(gateway_streams);
    let connection = connection.try_acquire_owned().ok()?;
    Some([member, connection])
}

/// A call of one request: read the body, make the call, answer.
async fn serve_unary(
    gateway: &Gateway,
    route: &Route,
    metadata: HeaderMap,
    body: Body,
    permits: Option<[OwnedSemaphorePermit; 2]>,
    manner: Manner,
) -> Response {
    let fail = |code: Code, message: &str, failure| errors::call_failed(code, message, failure, manner.wants_trailers);
    let mut reader = BodyReader::new(body, gateway.body_max);
    // etcd's gateway reads the whole body, then its first value; the
    // rest is ignored, and an empty body is an empty request.
    let message = match reader.read_to_end().await {
        Err((code, message)) => return fail(code, &message, errors::Failure::Request),
        Ok(()) => match reader.next_message(&route.input) {
            Ok(Some(message)) => message,
            Ok(None) => Vec::new(),
            Err(message) => return fail(Code::InvalidArgument, &message, errors::Failure::Request),
        },
    };
    if message.len() > gateway.message_max {
        let (code, text) = too_large(message.len(), gateway.message_max);
        return fail(code, &text, errors::Failure::Call);
    }
    let requests = Body::from(call::frame(&message));
    let call = call::start(&gateway.grpc, route.rule.grpc_path, metadata, requests).await;
    if route.rule.server_streaming {
        return answer_stream(route, call, permits).await;
    }
    let mut call = match call {
        Ok(call) => call,
        Err(status) => return fail(status.code(), status.message(), errors::Failure::Call),
    };
    let message = match call.next().await {
        Some(Ok(message)) => message,
        Some(Err(status)) => return fail(status.code(), status.message(), errors::Failure::Call),
        None => return fail(Code::Internal, "empty response", errors::Failure::Call),
    };
    // The status comes after the message.
    if let Some(Err(status)) = call.next().await {
        return fail(status.code(), status.message(), errors::Failure::Call);
    }
    let mut out = Vec::with_capacity(message.len() * 2);
    if let Err(error) = json::encode(&route.output, &message, &mut out) {
        return fail(Code::Internal, &error.to_string(), errors::Failure::Call);
    }
    errors::json_response(StatusCode::OK, Body::from(out), true)
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
    manner: Manner,
) -> Response {
    let mut reader = BodyReader::new(body, gateway.body_max);
    let first = match reader.next_streamed(&route.input).await {
        Ok(first) => first,
        // etcd's gateway returns the decoder's error as it is, which
        // gRPC's status mapping makes Unknown.
        Err(message) => {
            return errors::call_failed(Code::Unknown, &message, errors::Failure::Request, manner.wants_trailers)
        }
    };
    let (requests, queued) = mpsc::channel::<Result<Bytes, std::convert::Infallible>>(STREAM_REQUESTS_QUEUED);
    let (read, body_read) = tokio::sync::oneshot::channel::<()>();
    if let Some(first) = first {
        let _ = requests.send(Ok(call::frame(&first))).await;
        let input = route.input.clone();
        tokio::spawn(async move {
            // Later values go on until the body ends or one is bad; either
            // way the call's sending side closes, as etcd's gateway
            // closes it.
            let mut read = Some(read);
            while let Ok(Some(message)) = reader.next_streamed(&input).await {
                if reader.taken >= HALF_DUPLEX_READ_BYTES {
                    read.take().map(|read| read.send(()));
                }
                if requests.send(Ok(call::frame(&message))).await.is_err() {
                    return;
                }
            }
        });
    } else {
        drop((requests, read));
    }
    let requests = Body::from_stream(ReceiverStream::new(queued));
    let call = call::start(&gateway.grpc, route.rule.grpc_path, metadata, requests).await;
    if manner.half_duplex {
        // Ends (Err) when the body has ended, or when enough was read.
        let _ = body_read.await;
    }
    answer_stream(route, call, permits).await
}

/// A stream's answers: headers once the first message (or the end) is
/// there, as Go writes them on the first write; then each message as
/// `{"result":…}` and a newline, and a failure as a last error chunk
/// (alone, with the failure's status, if it came first).
async fn answer_stream(
    route: &Route,
    call: Result<Call, Status>,
    permits: Option<[OwnedSemaphorePermit; 2]>,
) -> Response {
    let mut call = match call {
        Ok(call) => call,
        Err(status) => return errors::stream_failed(status.code(), status.message()),
    };
    let first = match call.next().await {
        Some(Err(status)) => return errors::stream_failed(status.code(), status.message()),
        first => first,
    };
    let (chunks, body) = mpsc::channel::<Result<Bytes, std::convert::Infallible>>(STREAM_CHUNKS_QUEUED);
    let had_message = first.is_some();
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
    errors::json_response(
        StatusCode::OK,
        Body::from_stream(ReceiverStream::new(body)),
        had_message,
    )
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
    /// Bytes read from the body so far.
    taken: usize,
}

impl BodyReader {
    fn new(body: Body, limit: usize) -> BodyReader {
        BodyReader {
            body,
            buffer: BytesMut::new(),
            ended: false,
            limit,
            taken: 0,
        }
    }

    /// Reads one more piece; the error is the answer to a body over the
    /// limit or broken off.
    async fn fill(&mut self) -> Result<(), (Code, String)> {
        match self.body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    self.taken += data.len();
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
