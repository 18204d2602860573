//! One gateway call made on the member's gRPC services, in process: what
//! etcd's gateway does over a loopback connection to its own gRPC server,
//! without the connection. The call goes through the same service stack
//! as a client's gRPC call (the learner gate, the call counters, the
//! service's own checks), framed as gRPC frames it.

use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, Method, Request, Version};
use bytes::{Buf, Bytes, BytesMut};
use http_body_util::BodyExt;
use tonic::Status;

use crate::api::grpc::GrpcServices;
use crate::proto::GRPC_MESSAGE_PREFIX_BYTES;

/// One message framed for a gRPC body.
pub fn frame(message: &[u8]) -> Bytes {
    let mut framed = BytesMut::with_capacity(GRPC_MESSAGE_PREFIX_BYTES + message.len());
    framed.extend_from_slice(&[0]);
    framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
    framed.extend_from_slice(message);
    framed.freeze()
}

/// An ongoing call: its messages, then its status.
pub struct Call {
    body: Body,
    buffer: BytesMut,
    done: bool,
}

/// Calls `path` (`/etcdserverpb.KV/Range`) on `grpc` with `metadata`
/// (the gRPC headers the call carries) and `requests` (framed messages).
/// An answer made of a status alone (the call failed before it began)
/// is the error.
pub async fn start(grpc: &GrpcServices, path: &str, metadata: HeaderMap, requests: Body) -> Result<Call, Status> {
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(path)
        .version(Version::HTTP_2)
        .body(requests)
        .expect("a valid request");
    *request.headers_mut() = metadata;
    let Ok(response) = grpc.serve(request).await;
    let (parts, body) = response.into_parts();
    if let Some(status) = Status::from_header_map(&parts.headers) {
        if status.code() != tonic::Code::Ok {
            return Err(status);
        }
    }
    Ok(Call {
        body,
        buffer: BytesMut::new(),
        done: false,
    })
}

impl Call {
    /// The next message; None once the call ended well, the status once
    /// it ended badly.
    pub async fn next(&mut self) -> Option<Result<Bytes, Status>> {
        loop {
            if let Some(message) = self.take_message() {
                return Some(Ok(message));
            }
            if self.done {
                return None;
            }
            match self.body.frame().await {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => self.buffer.extend_from_slice(&data),
                    Err(frame) => {
                        self.done = true;
                        let trailers = frame.into_trailers().unwrap_or_default();
                        match Status::from_header_map(&trailers) {
                            Some(status) if status.code() != tonic::Code::Ok => return Some(Err(status)),
                            _ => continue,
                        }
                    }
                },
                Some(Err(error)) => {
                    self.done = true;
                    return Some(Err(Status::internal(error.to_string())));
                }
                None => {
                    self.done = true;
                    if !self.buffer.is_empty() {
                        return Some(Err(Status::internal("the call ended inside a message")));
                    }
                }
            }
        }
    }

    fn take_message(&mut self) -> Option<Bytes> {
        if self.buffer.len() < GRPC_MESSAGE_PREFIX_BYTES {
            return None;
        }
        let length = u32::from_be_bytes(self.buffer[1..5].try_into().expect("four bytes")) as usize;
        if self.buffer.len() < GRPC_MESSAGE_PREFIX_BYTES + length {
            return None;
        }
        self.buffer.advance(GRPC_MESSAGE_PREFIX_BYTES);
        Some(self.buffer.split_to(length).freeze())
    }
}

/// How long a client may ask a call to take (`Grpc-Timeout`), read as
/// gRPC writes it: digits and a unit (`H`, `M`, `S`, `m`, `u`, `n`).
pub fn parse_timeout(text: &str) -> Option<Duration> {
    let (digits, unit) = text.split_at(text.len().checked_sub(1)?);
    let amount: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(amount.checked_mul(3600)?),
        "M" => Duration::from_secs(amount.checked_mul(60)?),
        "S" => Duration::from_secs(amount),
        "m" => Duration::from_millis(amount),
        "u" => Duration::from_micros(amount),
        "n" => Duration::from_nanos(amount),
        _ => return None,
    })
}

/// The gRPC headers of a gateway request: its `Authorization` header as
/// the `authorization` metadata etcd reads a token from, and each
/// `Grpc-Metadata-<key>` header as metadata `<key>`, as etcd's gateway
/// passes them on.
pub fn outgoing_metadata(headers: &HeaderMap) -> HeaderMap {
    let mut metadata = HeaderMap::new();
    metadata.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    metadata.insert(header::TE, HeaderValue::from_static("trailers"));
    if let Some(token) = headers.get(header::AUTHORIZATION) {
        metadata.insert("authorization", token.clone());
    }
    for (name, value) in headers {
        let Some(key) = name.as_str().strip_prefix("grpc-metadata-") else {
            continue;
        };
        // The call's own framing is not the client's to set.
        if key.is_empty() || key.starts_with("grpc-") || key == "content-type" || key == "te" {
            continue;
        }
        if let Ok(key) = axum::http::HeaderName::from_bytes(key.as_bytes()) {
            metadata.append(key, value.clone());
        }
    }
    metadata
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_read_as_grpc_writes_them() {
        assert_eq!(parse_timeout("5S"), Some(Duration::from_secs(5)));
        assert_eq!(parse_timeout("100m"), Some(Duration::from_millis(100)));
        assert_eq!(parse_timeout("x"), None);
        assert_eq!(parse_timeout(""), None);
    }

    #[test]
    fn metadata_keeps_the_token_and_grpc_metadata_headers() {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("tok.3"));
        headers.insert("grpc-metadata-hasleader", HeaderValue::from_static("true"));
        headers.insert("grpc-metadata-grpc-status", HeaderValue::from_static("0"));
        headers.insert("accept", HeaderValue::from_static("*/*"));
        let metadata = outgoing_metadata(&headers);
        assert_eq!(metadata.get("authorization").unwrap(), "tok.3");
        assert_eq!(metadata.get("hasleader").unwrap(), "true");
        assert!(metadata.get("grpc-status").is_none());
        assert!(metadata.get("accept").is_none());
        assert_eq!(metadata.get("content-type").unwrap(), "application/grpc");
    }
}
