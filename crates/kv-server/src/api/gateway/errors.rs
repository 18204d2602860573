//! The gateway's answers when something fails, as etcd's gateway
//! (grpc-gateway 1.16) gives them:
//! - a failed call: the HTTP status its gRPC code maps to, and
//!   `{"error":msg,"code":N,"message":msg}`;
//! - a stream that fails: `{"error":{"grpc_code":N,"http_code":H,
//!   "message":msg,"http_status":"…"}}` as its last chunk;
//! - a path it does not serve, or a method it does not take: Go's plain
//!   text answers, `Not Found` and `Method Not Allowed`.

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use tonic::Code;

use crate::api::gateway::gojson::write_string;

/// The HTTP status of a gRPC code, as grpc-gateway maps it.
pub fn http_status(code: Code) -> StatusCode {
    match code {
        Code::Ok => StatusCode::OK,
        Code::Cancelled => StatusCode::REQUEST_TIMEOUT,
        Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => StatusCode::BAD_REQUEST,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::Unknown | Code::Internal | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// `"name":` then the value, after a comma unless it is the first.
fn member(out: &mut Vec<u8>, first: &mut bool, name: &str) {
    if !*first {
        out.push(b',');
    }
    *first = false;
    out.push(b'"');
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\":");
}

/// The body of a failed call. Fields at their default are left out, as
/// jsonpb leaves them out.
pub fn error_body(code: Code, message: &str) -> Vec<u8> {
    let mut out = vec![b'{'];
    let mut first = true;
    if !message.is_empty() {
        member(&mut out, &mut first, "error");
        write_string(&mut out, message);
    }
    if code != Code::Ok {
        member(&mut out, &mut first, "code");
        out.extend_from_slice((code as i32).to_string().as_bytes());
    }
    if !message.is_empty() {
        member(&mut out, &mut first, "message");
        write_string(&mut out, message);
    }
    out.push(b'}');
    out
}

/// The last chunk of a stream that failed.
pub fn stream_error_chunk(code: Code, message: &str) -> Vec<u8> {
    let status = http_status(code);
    let mut out = b"{\"error\":{".to_vec();
    let mut first = true;
    if code != Code::Ok {
        member(&mut out, &mut first, "grpc_code");
        out.extend_from_slice((code as i32).to_string().as_bytes());
    }
    member(&mut out, &mut first, "http_code");
    out.extend_from_slice(status.as_u16().to_string().as_bytes());
    if !message.is_empty() {
        member(&mut out, &mut first, "message");
        write_string(&mut out, message);
    }
    member(&mut out, &mut first, "http_status");
    write_string(&mut out, status.canonical_reason().unwrap_or(""));
    out.extend_from_slice(b"}}");
    out
}

/// A JSON answer with `status` and `body`. `call_headers` says the call's
/// response had headers (not a status alone), which etcd's gateway passes
/// on as `Grpc-Metadata-Content-Type: application/grpc`.
pub fn json_response(status: StatusCode, body: Body, call_headers: bool) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if call_headers {
        headers.insert(
            "grpc-metadata-content-type",
            HeaderValue::from_static("application/grpc"),
        );
    }
    response
}

/// Where a failure came from, which decides what etcd's gateway sends
/// with it to a client that asked for trailers (`TE: trailers`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Failure {
    /// The gateway refused the request before any call.
    Request,
    /// The call ended with a status alone: its metadata comes back as a
    /// `Grpc-Trailer-Content-Type` trailer.
    Call,
}

/// The answer to a failed call; `wants_trailers` is the request's
/// `TE: trailers`, which makes the answer chunked, as Go writes it.
pub fn call_failed(code: Code, message: &str, failure: Failure, wants_trailers: bool) -> Response {
    let body = error_body(code, message);
    if !wants_trailers {
        return json_response(http_status(code), Body::from(body), false);
    }
    let mut trailers = HeaderMap::new();
    if failure == Failure::Call {
        trailers.insert(
            "grpc-trailer-content-type",
            HeaderValue::from_static("application/grpc"),
        );
    }
    let has_trailers = !trailers.is_empty();
    let frames = [
        Ok::<_, std::convert::Infallible>(http_body::Frame::data(bytes::Bytes::from(body))),
        Ok(http_body::Frame::trailers(trailers)),
    ];
    let body = Body::new(http_body_util::StreamBody::new(tokio_stream::iter(frames)));
    let mut response = json_response(http_status(code), body, false);
    if has_trailers {
        response
            .headers_mut()
            .insert(header::TRAILER, HeaderValue::from_static("Grpc-Trailer-Content-Type"));
    }
    response
}

/// The answer to a stream whose call failed before its first message:
/// the error's status, and the error as the stream's one chunk.
pub fn stream_failed(code: Code, message: &str) -> Response {
    let chunk = bytes::Bytes::from(stream_error_chunk(code, message));
    let body = Body::from_stream(tokio_stream::iter([Ok::<_, std::convert::Infallible>(chunk)]));
    json_response(http_status(code), body, false)
}

/// Go's `http.Error`: `text` and a newline, as plain text.
pub fn plain(status: StatusCode, text: &str) -> Response {
    let mut response = Response::new(Body::from(format!("{text}\n")));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_grpc_gateways() {
        assert_eq!(
            String::from_utf8(error_body(Code::InvalidArgument, "illegal base64 data at input byte 0")).unwrap(),
            r#"{"error":"illegal base64 data at input byte 0","code":3,"message":"illegal base64 data at input byte 0"}"#
        );
        assert_eq!(
            String::from_utf8(stream_error_chunk(
                Code::NotFound,
                "etcdserver: requested lease not found"
            ))
            .unwrap(),
            r#"{"error":{"grpc_code":5,"http_code":404,"message":"etcdserver: requested lease not found","http_status":"Not Found"}}"#
        );
        assert_eq!(http_status(Code::Unauthenticated), StatusCode::UNAUTHORIZED);
        assert_eq!(http_status(Code::FailedPrecondition), StatusCode::BAD_REQUEST);
    }
}
