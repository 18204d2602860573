//! One gRPC connection: an HTTP/2 connection of hyper's, used directly.
//!
//! tonic's `Channel` puts a buffer task between callers and the connection
//! so that it can reconnect and balance. Every request then takes one more
//! task hop, and requests reach the connection one at a time, each written
//! with its own syscall. Measured against etcd's tool (which uses grpc-go,
//! whose writer batches every pending frame into one write), that made
//! loadgen 10–20 % slower at 1000 clients over 100 connections, with three
//! times the syscalls per request. Used directly, hyper's connection takes
//! requests from every client at once and writes what is pending together.
//!
//! A connection that cannot be made is not fatal, as with etcd's client:
//! each request sent on it fails with `Unavailable`, counted as an error.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tonic::body::Body;

use crate::cork::Corked;

/// A connection, or why there is none.
#[derive(Clone)]
pub enum Connection {
    Open(SendRequest<Body>),
    Failed(String),
}

pub type ResponseFuture = Pin<Box<dyn Future<Output = Result<http::Response<hyper::body::Incoming>, BoxError>> + Send>>;
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl Connection {
    /// Connects to `host:port` (a URL's scheme and path are ignored).
    pub async fn open(endpoint: &str, timeout: Duration) -> Connection {
        let address = endpoint
            .trim()
            .trim_start_matches("http://")
            .trim_start_matches("https://")
            .trim_end_matches('/');
        let connected = async {
            let stream = crate::dial::connect(address, b"h2").await.map_err(|e| e.to_string())?;
            let (sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
                .handshake(TokioIo::new(Corked::new(stream)))
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(async move {
                let _ = connection.await;
            });
            Ok::<_, String>(sender)
        };
        match tokio::time::timeout(timeout, connected).await {
            Ok(Ok(sender)) => Connection::Open(sender),
            Ok(Err(error)) => Connection::Failed(format!("connecting to {address}: {error}")),
            Err(_) => Connection::Failed(format!("connecting to {address}: timed out")),
        }
    }
}

impl tower_service::Service<http::Request<Body>> for Connection {
    type Response = http::Response<hyper::body::Incoming>;
    type Error = BoxError;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        match self {
            Connection::Open(sender) => sender.poll_ready(cx).map_err(Into::into),
            Connection::Failed(_) => Poll::Ready(Ok(())),
        }
    }

    fn call(&mut self, request: http::Request<Body>) -> ResponseFuture {
        match self {
            Connection::Open(sender) => {
                let response = sender.send_request(crate::dial::with_token(request));
                Box::pin(async move { response.await.map_err(Into::into) })
            }
            Connection::Failed(error) => {
                let status = tonic::Status::unavailable(error.clone());
                Box::pin(async move { Err(status.into()) })
            }
        }
    }
}
