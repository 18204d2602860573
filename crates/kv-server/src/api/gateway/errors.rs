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

/// A JSON answer with `status` and `body`, carrying the call's response
/// headers as etcd's gateway does (`Grpc-Metadata-Content-Type`, …).
pub fn json_response(status: StatusCode, body: Body, call_headers: &HeaderMap) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    for (name, value) in call_headers {
        let name = name.as_str();
        if name.starts_with("grpc-") {
            continue;
        }
        if let Ok(name) = axum::http::HeaderName::from_bytes(format!("grpc-metadata-{name}").as_bytes()) {
            headers.append(name, value.clone());
        }
    }
    response
}

/// The answer to a failed call.
pub fn call_failed(code: Code, message: &str, call_headers: &HeaderMap) -> Response {
    json_response(http_status(code), Body::from(error_body(code, message)), call_headers)
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
