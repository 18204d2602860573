//! etcd's `Watch` service, a thin adapter over the watch engine
//! (`crate::watch`), routed by hand rather than through the generated
//! server: its responses are encoded by `watch::codec` from pieces
//! encoded once, which the generated server's prost codec cannot take.
//! Each call is a stream of its own (`watch::stream`).

use std::convert::Infallible;
use std::sync::Arc;

use tonic::codegen::{http, Body, BoxFuture, Context, Poll, Service, StdError};
use tonic::server::{Grpc, NamedService, StreamingService};
use tonic::{Request, Response, Status, Streaming};

use crate::error::RequestError;
use crate::member::core::Member;
use crate::proto::etcdserverpb as pb;
use crate::watch::codec::WatchCodec;
use crate::watch::outbox::{Outgoing, Responses};
use crate::watch::stream;

/// The metadata key etcd's clients set for `WithRequireLeader`.
const REQUIRE_LEADER_KEY: &str = "hasleader";

/// The service's one method.
const WATCH_PATH: &str = "/etcdserverpb.Watch/Watch";

#[derive(Clone)]
pub struct WatchService {
    pub member: Arc<Member>,
    /// The largest request taken, as for every other service.
    pub max_decoding_message_size: usize,
}

impl NamedService for WatchService {
    const NAME: &'static str = "etcdserverpb.Watch";
}

impl<B> Service<http::Request<B>> for WatchService
where
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if request.uri().path() != WATCH_PATH {
            return Box::pin(async { Ok(Status::unimplemented("").into_http()) });
        }
        let call = WatchCall {
            member: self.member.clone(),
        };
        let limit = self.max_decoding_message_size;
        Box::pin(async move {
            let mut grpc = Grpc::new(WatchCodec).apply_max_message_size_config(Some(limit), None);
            Ok(grpc.streaming(call, request).await)
        })
    }
}

struct WatchCall {
    member: Arc<Member>,
}

impl StreamingService<pb::WatchRequest> for WatchCall {
    type Response = Outgoing;
    type ResponseStream = Responses;
    type Future = std::future::Ready<Result<Response<Responses>, Status>>;

    fn call(&mut self, request: Request<Streaming<pb::WatchRequest>>) -> Self::Future {
        let require_leader = request
            .metadata()
            .get(REQUIRE_LEADER_KEY)
            .is_some_and(|value| value.as_bytes() == b"true");
        if require_leader && self.member.leader() == 0 {
            return std::future::ready(Err(RequestError::NoLeader.into()));
        }
        let (metadata, extensions, requests) = request.into_parts();
        let opener = stream::Opener { metadata, extensions };
        let responses = stream::start(self.member.clone(), requests, require_leader, opener);
        std::future::ready(Ok(Response::new(responses)))
    }
}
