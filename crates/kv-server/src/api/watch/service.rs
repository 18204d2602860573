//! etcd's `Watch` service: each call is a stream of its own
//! (`stream.rs`).

use std::sync::Arc;

use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::api::watch::stream;
use crate::error::RequestError;
use crate::member::core::Member;
use crate::proto::etcdserverpb as pb;
use crate::proto::etcdserverpb::watch_server::Watch;

/// The metadata key etcd's clients set for `WithRequireLeader`.
const REQUIRE_LEADER_KEY: &str = "hasleader";

#[derive(Clone)]
pub struct WatchService {
    pub member: Arc<Member>,
}

#[tonic::async_trait]
impl Watch for WatchService {
    type WatchStream = ReceiverStream<Result<pb::WatchResponse, Status>>;

    async fn watch(
        &self,
        request: Request<Streaming<pb::WatchRequest>>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let require_leader = request
            .metadata()
            .get(REQUIRE_LEADER_KEY)
            .is_some_and(|value| value.as_bytes() == b"true");
        if require_leader && self.member.leader() == 0 {
            return Err(RequestError::NoLeader.into());
        }
        let responses = stream::start(self.member.clone(), request.into_inner(), require_leader);
        Ok(Response::new(responses))
    }
}
