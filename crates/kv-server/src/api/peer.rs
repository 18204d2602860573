//! The peer service: what other members send this one. Raft messages
//! arrive in batches on one stream per peer and go to the raft loop;
//! snapshots arrive as files (`peer::snapshot_receive`); followers forward
//! lease keep-alives, time-to-live and member promotions here when this
//! member leads; a joining member asks for the membership.

use std::sync::Arc;

use protobuf::Message as _;
use raft::prelude::Message;
use tonic::{Request, Response, Status, Streaming};

use crate::member::core::Member;
use crate::peer::frames::{PEER_MESSAGE_BYTES_MAX, REMOVED_MESSAGE};
use crate::peer::snapshot_receive;
use crate::proto::etcdserverpb as pb;
use crate::proto::kvserverpb::peer_server::{Peer, PeerServer};
use crate::proto::kvserverpb::{MembersRequest, MembershipRecord, PeerAck, RaftBatch, SnapshotChunk};
use crate::raft::inbox::NodeSender;
use crate::raft::input::NodeInput;
use crate::storage::layout::DataDir;

pub struct PeerService {
    pub node: NodeSender,
    pub member: Arc<Member>,
    pub dir: DataDir,
}

impl PeerService {
    /// The service, taking messages up to [`PEER_MESSAGE_BYTES_MAX`].
    pub fn server(self) -> PeerServer<PeerService> {
        PeerServer::new(self).max_decoding_message_size(PEER_MESSAGE_BYTES_MAX)
    }
}

#[tonic::async_trait]
impl Peer for PeerService {
    async fn stream(&self, request: Request<Streaming<RaftBatch>>) -> Result<Response<PeerAck>, Status> {
        let mut stream = request.into_inner();
        let mut received: Option<(u64, crate::metrics::handles::Counter)> = None;
        while let Some(batch) = stream.message().await? {
            let removed = self.member.membership().removed.contains(&batch.from);
            let counter = match &received {
                Some((from, counter)) if *from == batch.from => counter,
                _ => {
                    let from = format!("{:x}", batch.from);
                    let counter = crate::metrics::metrics()
                        .network
                        .peer_received_bytes
                        .with_label_values(&[&from]);
                    &received.insert((batch.from, counter)).1
                }
            };
            counter.inc_by(batch.messages.iter().map(|m| m.len() as u64).sum());
            let messages = batch
                .messages
                .iter()
                .map(|bytes| Message::parse_from_bytes(bytes))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| Status::invalid_argument(format!("bad raft message: {e}")))?;
            // A full queue drops the batch, as a lossy network would.
            let _ = self.node.try_send(NodeInput::Messages(messages));
            // A removed member is told so, and stops (`peer::transport`).
            // Its last batch still goes to raft: a leader that removed
            // itself hands leadership over in it.
            if removed {
                return Err(Status::failed_precondition(REMOVED_MESSAGE));
            }
        }
        Ok(Response::new(PeerAck {}))
    }

    async fn snapshot(&self, request: Request<Streaming<SnapshotChunk>>) -> Result<Response<PeerAck>, Status> {
        snapshot_receive::receive(&self.dir, &self.node, request.into_inner()).await?;
        Ok(Response::new(PeerAck {}))
    }

    async fn lease_keep_alive(
        &self,
        request: Request<pb::LeaseKeepAliveRequest>,
    ) -> Result<Response<pb::LeaseKeepAliveResponse>, Status> {
        let id = request.into_inner().id;
        Ok(Response::new(self.member.keep_alive_as_leader(id).await?))
    }

    async fn lease_time_to_live(
        &self,
        request: Request<pb::LeaseTimeToLiveRequest>,
    ) -> Result<Response<pb::LeaseTimeToLiveResponse>, Status> {
        let request = request.into_inner();
        Ok(Response::new(self.member.time_to_live_as_leader(request).await?))
    }

    async fn hash_kv(&self, request: Request<pb::HashKvRequest>) -> Result<Response<pb::HashKvResponse>, Status> {
        Ok(Response::new(self.member.hash_kv(request.into_inner().revision)?))
    }

    async fn members(&self, _: Request<MembersRequest>) -> Result<Response<MembershipRecord>, Status> {
        Ok(Response::new(self.member.membership().record()))
    }

    async fn member_promote(
        &self,
        request: Request<pb::MemberPromoteRequest>,
    ) -> Result<Response<pb::MemberPromoteResponse>, Status> {
        let members = self.member.promote_member_as_leader(request.into_inner().id).await?;
        Ok(Response::new(pb::MemberPromoteResponse {
            header: self.member.header(0),
            members,
        }))
    }
}
