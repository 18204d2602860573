//! etcd's `Maintenance` service: Status, HashKV, MoveLeader, and an Alarm
//! that reports no alarms. The rest answer Unimplemented until they exist.

use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::mpsc::SyncSender;
use std::sync::Arc;

use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::convert;
use crate::errors;
use crate::kv_service::{queue_error, REQUEST_TIMEOUT};
use crate::node::NodeInput;
use crate::proto::etcdserverpb as pb;
use crate::proto::etcdserverpb::maintenance_server::Maintenance;
use crate::state::MemberState;

/// The etcd version this server speaks. Clients and tools read it from
/// Status and `/version` to decide which API they may use, so it names the
/// etcd release whose API is implemented, not this crate's version.
pub const ETCD_API_VERSION: &str = "3.5.17";
/// The cluster version etcd 3.5 members agree on.
pub const ETCD_CLUSTER_VERSION: &str = "3.5.0";

pub struct MaintenanceService {
    pub state: Arc<MemberState>,
    pub node: SyncSender<NodeInput>,
}

fn unimplemented(what: &str) -> Status {
    Status::unimplemented(format!("{what} is not supported by this server yet"))
}

type SnapshotStream = Pin<Box<dyn Stream<Item = Result<pb::SnapshotResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Maintenance for MaintenanceService {
    async fn alarm(&self, _: Request<pb::AlarmRequest>) -> Result<Response<pb::AlarmResponse>, Status> {
        Ok(Response::new(pb::AlarmResponse {
            header: self.state.header_fields().header(self.state.store.current_revision()),
            alarms: Vec::new(),
        }))
    }

    async fn status(&self, _: Request<pb::StatusRequest>) -> Result<Response<pb::StatusResponse>, Status> {
        let store = &self.state.store;
        let db_size = store.size_on_disk().map_err(|e| convert::status(&e))? as i64;
        Ok(Response::new(pb::StatusResponse {
            header: self.state.header_fields().header(store.current_revision()),
            version: ETCD_API_VERSION.to_string(),
            db_size,
            leader: self.state.leader(),
            raft_index: self.state.committed_index.load(Ordering::Acquire),
            raft_term: self.state.term.load(Ordering::Acquire),
            raft_applied_index: self.state.applied_index.load(Ordering::Acquire),
            errors: Vec::new(),
            db_size_in_use: db_size,
            is_learner: false,
        }))
    }

    async fn defragment(&self, _: Request<pb::DefragmentRequest>) -> Result<Response<pb::DefragmentResponse>, Status> {
        Err(unimplemented("Defragment"))
    }

    async fn hash(&self, _: Request<pb::HashRequest>) -> Result<Response<pb::HashResponse>, Status> {
        Err(unimplemented("Hash"))
    }

    async fn hash_kv(&self, request: Request<pb::HashKvRequest>) -> Result<Response<pb::HashKvResponse>, Status> {
        // etcd's answer: the hash, the compact revision it was taken with,
        // and the member's current revision in the header.
        let (hash, current) = self
            .state
            .store
            .hash_kv(request.into_inner().revision)
            .map_err(|e| convert::status(&e))?;
        Ok(Response::new(pb::HashKvResponse {
            header: self.state.header_fields().header(current),
            hash: hash.hash,
            compact_revision: hash.compact_revision,
        }))
    }

    type SnapshotStream = SnapshotStream;

    async fn snapshot(&self, _: Request<pb::SnapshotRequest>) -> Result<Response<SnapshotStream>, Status> {
        Err(unimplemented("Snapshot"))
    }

    /// As etcd: only the leader takes it; the target must be a member;
    /// the answer comes once this member sees the target lead, looked for
    /// every raft tick, or "took too long" after [`REQUEST_TIMEOUT`].
    async fn move_leader(
        &self,
        request: Request<pb::MoveLeaderRequest>,
    ) -> Result<Response<pb::MoveLeaderResponse>, Status> {
        let target = request.into_inner().target_id;
        let state = &self.state;
        if state.leader() != state.member_id() {
            return Err(errors::not_leader());
        }
        if !state.membership.voter_ids().contains(&target) {
            return Err(errors::bad_leader_transferee());
        }
        self.node
            .try_send(NodeInput::TransferLeader(target))
            .map_err(queue_error)?;
        let deadline = tokio::time::Instant::now() + REQUEST_TIMEOUT;
        while state.leader() != target {
            if tokio::time::Instant::now() >= deadline {
                return Err(errors::leader_transfer_timed_out());
            }
            tokio::time::sleep(state.config.tick_interval()).await;
        }
        // etcd answers with an empty response, no header.
        Ok(Response::new(pb::MoveLeaderResponse::default()))
    }

    async fn downgrade(&self, _: Request<pb::DowngradeRequest>) -> Result<Response<pb::DowngradeResponse>, Status> {
        Err(unimplemented("Downgrade"))
    }
}
