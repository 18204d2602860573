//! What a client URL serves, split at the front of each request as etcd
//! splits it: an HTTP/2 request whose content type is gRPC's goes to the
//! gRPC services (behind the learner gate and call counters); every other
//! request is plain HTTP (`/health`, `/version`, `/metrics`, and the
//! gRPC-JSON gateway) behind etcd's access controller. So a JSON client
//! never gets a gRPC answer, and a gRPC client never meets the HTTP
//! routes.
//!
//! Each connection's requests carry who the connection is
//! (`ConnectInfo<ClientIdentity>`) and the connection's own bound on
//! gateway streams (`ConnectionStreams`).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::extract::{ConnectInfo, Request};
use axum::http::{header, Version};
use axum::response::Response;
use axum::serve::IncomingStream;
use axum::Router;
use tower::{Service, ServiceExt};

use crate::api::gateway::ConnectionStreams;
use crate::server::listener::BoundedListener;
use crate::tls::ClientIdentity;

/// The two sides of a client URL.
#[derive(Clone)]
pub struct ClientPort {
    pub grpc: Router,
    pub http: Router,
}

/// Whether `request` is a gRPC call.
fn is_grpc(request: &Request) -> bool {
    request.version() == Version::HTTP_2
        && request
            .headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|value| value.as_bytes().starts_with(b"application/grpc"))
}

/// One connection's service.
#[derive(Clone)]
pub struct ClientConnection {
    port: ClientPort,
    identity: ClientIdentity,
    streams: ConnectionStreams,
}

impl Service<Request> for ClientConnection {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
        let extensions = request.extensions_mut();
        extensions.insert(ConnectInfo(self.identity.clone()));
        extensions.insert(self.streams.clone());
        let side = if is_grpc(&request) {
            self.port.grpc.clone()
        } else {
            self.port.http.clone()
        };
        Box::pin(side.oneshot(request))
    }
}

impl<'a> Service<IncomingStream<'a, BoundedListener>> for ClientPort {
    type Response = ClientConnection;
    type Error = Infallible;
    type Future = std::future::Ready<Result<ClientConnection, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, incoming: IncomingStream<'a, BoundedListener>) -> Self::Future {
        std::future::ready(Ok(ClientConnection {
            port: self.clone(),
            identity: incoming.io().identity().clone(),
            streams: ConnectionStreams::default(),
        }))
    }
}
