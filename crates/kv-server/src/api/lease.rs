//! etcd's `Lease` service: LeaseGrant, LeaseRevoke, LeaseKeepAlive (a
//! stream), LeaseTimeToLive and LeaseLeases. The work is the member
//! core's (`lease::operations`); this serves it over gRPC.

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::member::core::Member;
use crate::proto::etcdserverpb as pb;
use crate::proto::etcdserverpb::lease_server::Lease;

/// Keep-alive answers queued per client stream. A client sends one
/// keep-alive per lease every third of its TTL; 16 answers is slack enough
/// for a burst, and a client that stops reading holds back its own stream
/// only.
pub const KEEP_ALIVE_QUEUE: usize = 16;

#[derive(Clone)]
pub struct LeaseService {
    pub member: Arc<Member>,
}

#[tonic::async_trait]
impl Lease for LeaseService {
    async fn lease_grant(
        &self,
        request: Request<pb::LeaseGrantRequest>,
    ) -> Result<Response<pb::LeaseGrantResponse>, Status> {
        self.member
            .authenticated(request.metadata(), request.extensions())
            .await?;
        let request = request.into_inner();
        let granted = self.member.lease_grant(request.ttl, request.id).await?;
        Ok(Response::new(pb::LeaseGrantResponse {
            header: self.member.header(granted.revision),
            id: granted.id,
            ttl: granted.ttl,
            error: String::new(),
        }))
    }

    async fn lease_revoke(
        &self,
        request: Request<pb::LeaseRevokeRequest>,
    ) -> Result<Response<pb::LeaseRevokeResponse>, Status> {
        let caller = self
            .member
            .authorize_lease_revoke(request.metadata(), request.extensions(), request.get_ref().id)
            .await?;
        let revoked = self.member.lease_revoke_as(request.into_inner().id, &caller).await?;
        Ok(Response::new(pb::LeaseRevokeResponse {
            header: self.member.header(revoked.revision),
        }))
    }

    type LeaseKeepAliveStream = ReceiverStream<Result<pb::LeaseKeepAliveResponse, Status>>;

    async fn lease_keep_alive(
        &self,
        request: Request<Streaming<pb::LeaseKeepAliveRequest>>,
    ) -> Result<Response<Self::LeaseKeepAliveStream>, Status> {
        let mut requests = request.into_inner();
        let (answers, stream) = mpsc::channel(KEEP_ALIVE_QUEUE);
        let member = self.member.clone();
        tokio::spawn(async move {
            loop {
                let request = match requests.message().await {
                    Ok(Some(request)) => request,
                    Ok(None) => return,
                    Err(status) => {
                        tracing::debug!(%status, "keep-alive stream broke");
                        return;
                    }
                };
                let answer = member.lease_keep_alive(request.id).await.map_err(Status::from);
                let failed = answer.is_err();
                if answers.send(answer).await.is_err() || failed {
                    return;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(stream)))
    }

    async fn lease_time_to_live(
        &self,
        request: Request<pb::LeaseTimeToLiveRequest>,
    ) -> Result<Response<pb::LeaseTimeToLiveResponse>, Status> {
        self.member
            .authorize_lease_time_to_live(request.metadata(), request.extensions(), request.get_ref().id)
            .await?;
        let response = self.member.lease_time_to_live(request.into_inner()).await?;
        Ok(Response::new(response))
    }

    async fn lease_leases(
        &self,
        _request: Request<pb::LeaseLeasesRequest>,
    ) -> Result<Response<pb::LeaseLeasesResponse>, Status> {
        let leases = self
            .member
            .leases()
            .into_iter()
            .map(|(id, _)| pb::LeaseStatus { id })
            .collect();
        Ok(Response::new(pb::LeaseLeasesResponse {
            header: self.member.current_header(),
            leases,
        }))
    }
}
