//! etcd's `Maintenance` service: Status and HashKV, and an Alarm that
//! reports no alarms. The rest answer Unimplemented until they exist.

use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::convert;
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
        let (hash, compact_revision, _) = self
            .state
            .store
            .hash_kv(request.into_inner().revision)
            .map_err(|e| convert::status(&e))?;
        Ok(Response::new(pb::HashKvResponse {
            header: self.state.header_fields().header(self.state.store.current_revision()),
            hash,
            compact_revision,
        }))
    }

    type SnapshotStream = SnapshotStream;

    async fn snapshot(&self, _: Request<pb::SnapshotRequest>) -> Result<Response<SnapshotStream>, Status> {
        Err(unimplemented("Snapshot"))
    }

    async fn move_leader(&self, _: Request<pb::MoveLeaderRequest>) -> Result<Response<pb::MoveLeaderResponse>, Status> {
        Err(unimplemented("MoveLeader"))
    }

    async fn downgrade(&self, _: Request<pb::DowngradeRequest>) -> Result<Response<pb::DowngradeResponse>, Status> {
        Err(unimplemented("Downgrade"))
    }
}
