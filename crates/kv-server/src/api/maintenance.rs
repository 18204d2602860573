//! etcd's `Maintenance` service: Status, HashKV, MoveLeader, and an Alarm
//! that reports no alarms. The rest answer Unimplemented until they exist.

use std::pin::Pin;
use std::sync::Arc;

use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::api::errors::store_status;
use crate::member::core::Member;
use crate::proto::etcdserverpb as pb;
use crate::proto::etcdserverpb::maintenance_server::Maintenance;

/// The etcd version this server speaks. Clients and tools read it from
/// Status and `/version` to decide which API they may use, so it names the
/// etcd release whose API is implemented, not this crate's version.
pub const ETCD_API_VERSION: &str = "3.5.17";
/// The cluster version etcd 3.5 members agree on.
pub const ETCD_CLUSTER_VERSION: &str = "3.5.0";

pub struct MaintenanceService {
    pub member: Arc<Member>,
}

fn unimplemented(what: &str) -> Status {
    Status::unimplemented(format!("{what} is not supported by this server yet"))
}

type SnapshotStream = Pin<Box<dyn Stream<Item = Result<pb::SnapshotResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Maintenance for MaintenanceService {
    async fn alarm(&self, _: Request<pb::AlarmRequest>) -> Result<Response<pb::AlarmResponse>, Status> {
        Ok(Response::new(pb::AlarmResponse {
            header: self.member.current_header(),
            alarms: Vec::new(),
        }))
    }

    async fn status(&self, _: Request<pb::StatusRequest>) -> Result<Response<pb::StatusResponse>, Status> {
        let member = &self.member;
        let db_size = member.store.size_on_disk().map_err(|e| store_status(&e))? as i64;
        Ok(Response::new(pb::StatusResponse {
            header: member.current_header(),
            version: ETCD_API_VERSION.to_string(),
            db_size,
            leader: member.leader(),
            raft_index: member.status.committed(),
            raft_term: member.status.term(),
            raft_applied_index: member.status.applied(),
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
            .member
            .store
            .hash_kv(request.into_inner().revision)
            .map_err(|e| store_status(&e))?;
        Ok(Response::new(pb::HashKvResponse {
            header: self.member.header(current),
            hash: hash.hash,
            compact_revision: hash.compact_revision,
        }))
    }

    type SnapshotStream = SnapshotStream;

    async fn snapshot(&self, _: Request<pb::SnapshotRequest>) -> Result<Response<SnapshotStream>, Status> {
        Err(unimplemented("Snapshot"))
    }

    /// As etcd: see `Member::move_leader`.
    async fn move_leader(
        &self,
        request: Request<pb::MoveLeaderRequest>,
    ) -> Result<Response<pb::MoveLeaderResponse>, Status> {
        self.member.move_leader(request.into_inner().target_id).await?;
        // etcd answers with an empty response, no header.
        Ok(Response::new(pb::MoveLeaderResponse::default()))
    }

    async fn downgrade(&self, _: Request<pb::DowngradeRequest>) -> Result<Response<pb::DowngradeResponse>, Status> {
        Err(unimplemented("Downgrade"))
    }
}
