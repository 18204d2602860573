//! etcd's `Maintenance` service: Status, HashKV, MoveLeader, Snapshot and
//! Alarm. The rest answer Unimplemented until they exist. With auth on,
//! Defragment, HashKV and Snapshot need the root role, as in etcd.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::AsyncReadExt;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::api::errors::store_status;
use crate::error::RequestError;
use crate::member::core::Member;
use crate::proto::etcdserverpb as pb;
use crate::proto::etcdserverpb::maintenance_server::Maintenance;
use crate::proto::kvserverpb::raft_request;
use crate::storage::layout::DataDir;

/// The etcd version this server speaks. Clients and tools read it from
/// Status and `/version` to decide which API they may use, so it names the
/// etcd release whose API is implemented, not this crate's version.
pub const ETCD_API_VERSION: &str = "3.5.17";
/// The cluster version etcd 3.5 members agree on.
pub const ETCD_CLUSTER_VERSION: &str = "3.5.0";

/// Bytes of the snapshot file per response: etcd's clients take messages
/// of up to 2 GiB and gRPC's default is 4 MiB, so 1 MiB passes any client
/// and keeps the response count low.
pub const BACKUP_CHUNK_BYTES: usize = 1 << 20;

/// Snapshots taken for clients at once. Each writes a full copy of the
/// store to the member's disk before it is sent, so two at most.
pub const BACKUPS_AT_ONCE: usize = 2;

/// Chunks read ahead of the client per snapshot.
const BACKUP_CHUNKS_AHEAD: usize = 4;

pub struct MaintenanceService {
    pub member: Arc<Member>,
    /// Permits for [`BACKUPS_AT_ONCE`].
    pub backups: Arc<Semaphore>,
    /// Names each snapshot's file apart.
    pub next_backup: AtomicU64,
}

impl MaintenanceService {
    pub fn new(member: Arc<Member>) -> MaintenanceService {
        MaintenanceService {
            member,
            backups: Arc::new(Semaphore::new(BACKUPS_AT_ONCE)),
            next_backup: AtomicU64::new(0),
        }
    }
}

fn unimplemented(what: &str) -> Status {
    Status::unimplemented(format!("{what} is not supported by this server yet"))
}

type SnapshotStream = Pin<Box<dyn Stream<Item = Result<pb::SnapshotResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Maintenance for MaintenanceService {
    /// As etcd: GET lists the raised alarms of the kind asked (every kind
    /// for NONE), read linearizably; ACTIVATE and DEACTIVATE go through
    /// raft and answer the alarm raised, or the alarm cleared if it was.
    async fn alarm(&self, request: Request<pb::AlarmRequest>) -> Result<Response<pb::AlarmResponse>, Status> {
        // etcd 3.5 sends every alarm request through raft, which checks
        // the token and nothing more.
        self.member
            .authenticated(request.metadata(), request.extensions())
            .await?;
        let request = request.into_inner();
        let alarms: Vec<mvcc::Alarm> = if request.action == pb::alarm_request::AlarmAction::Get as i32 {
            self.member.linearize().await?;
            let kind = request.alarm;
            let raised = self.member.alarms().into_iter();
            raised.filter(|alarm| kind == 0 || alarm.kind == kind).collect()
        } else {
            match self.member.propose(raft_request::Request::Alarm(request)).await? {
                mvcc::WriteResponse::Alarm(response) => response.alarm.into_iter().collect(),
                other => unreachable!("an alarm answered {other:?}"),
            }
        };
        Ok(Response::new(pb::AlarmResponse {
            header: self.member.current_header(),
            alarms: alarms.into_iter().map(alarm_member).collect(),
        }))
    }

    async fn status(&self, _: Request<pb::StatusRequest>) -> Result<Response<pb::StatusResponse>, Status> {
        let member = &self.member;
        let db_size = member.size_on_disk().map_err(|e| store_status(&e))? as i64;
        Ok(Response::new(pb::StatusResponse {
            header: member.current_header(),
            version: ETCD_API_VERSION.to_string(),
            db_size,
            leader: member.leader(),
            raft_index: member.committed_index(),
            raft_term: member.term(),
            raft_applied_index: member.applied_index(),
            errors: status_errors(member),
            // Counted from time to time (see `Member::live_bytes`); never
            // more than the size.
            db_size_in_use: (member.sampled_sizes().1 as i64).min(db_size),
            is_learner: member.membership().local().is_some_and(|local| local.is_learner),
        }))
    }

    async fn defragment(
        &self,
        request: Request<pb::DefragmentRequest>,
    ) -> Result<Response<pb::DefragmentResponse>, Status> {
        self.member
            .authorize_admin(request.metadata(), request.extensions())
            .await?;
        self.member.defragment().await?;
        Ok(Response::new(pb::DefragmentResponse {
            header: self.member.current_header(),
        }))
    }

    async fn hash(&self, _: Request<pb::HashRequest>) -> Result<Response<pb::HashResponse>, Status> {
        Err(unimplemented("Hash"))
    }

    async fn hash_kv(&self, request: Request<pb::HashKvRequest>) -> Result<Response<pb::HashKvResponse>, Status> {
        self.member
            .authorize_admin(request.metadata(), request.extensions())
            .await?;
        // etcd's answer: the hash, the compact revision it was taken with,
        // and the member's current revision in the header.
        Ok(Response::new(self.member.hash_kv(request.into_inner().revision)?))
    }

    type SnapshotStream = SnapshotStream;

    /// The store as a snapshot file (`storage::backup`), written to this
    /// member's disk, then streamed and removed, as etcd streams its
    /// database file.
    async fn snapshot(&self, request: Request<pb::SnapshotRequest>) -> Result<Response<SnapshotStream>, Status> {
        self.member
            .authorize_admin(request.metadata(), request.extensions())
            .await?;
        let permit = self.backups.clone().acquire_owned().await.expect("never closed");
        let n = self.next_backup.fetch_add(1, Ordering::Relaxed);
        let path = DataDir::new(self.member.config().data_dir()).backup(n);
        let member = self.member.clone();
        let written = path.clone();
        let written = tokio::task::spawn_blocking(move || member.write_backup(&written))
            .await
            .map_err(|e| Status::internal(e.to_string()))?;
        // Unlinked at once: the open file lives until it is sent, and
        // nothing is left behind if the client goes away.
        let _ = std::fs::remove_file(&path);
        let (size, file) = written.map_err(|error| {
            tracing::error!(%error, "snapshot for a client failed");
            Status::internal(error.to_string())
        })?;
        tracing::info!(size, "sending a snapshot to a client");
        let (out, chunks) = mpsc::channel(BACKUP_CHUNKS_AHEAD);
        tokio::spawn(send_backup(tokio::fs::File::from_std(file), size, out, permit));
        Ok(Response::new(Box::pin(ReceiverStream::new(chunks))))
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

/// Status's `errors`, as etcd fills them: each raised alarm in its text
/// form, then "no leader" while the member knows of none.
fn status_errors(member: &Member) -> Vec<String> {
    let mut errors: Vec<String> = member
        .alarms()
        .into_iter()
        .map(|alarm| alarm_text(&alarm_member(alarm)))
        .collect();
    if member.leader() == 0 {
        errors.push(RequestError::NoLeader.to_string());
    }
    errors
}

fn alarm_member(alarm: mvcc::Alarm) -> pb::AlarmMember {
    pb::AlarmMember {
        member_id: alarm.member_id,
        alarm: alarm.kind,
    }
}

/// An alarm as etcd's Status lists it: the protobuf text form of its
/// `AlarmMember` (`memberID:8211f1d0f64f3269 alarm:NOSPACE `, the id in
/// decimal).
fn alarm_text(alarm: &pb::AlarmMember) -> String {
    let kind = pb::AlarmType::try_from(alarm.alarm)
        .map_or_else(|_| alarm.alarm.to_string(), |kind| kind.as_str_name().to_string());
    format!("memberID:{} alarm:{} ", alarm.member_id, kind)
}

/// Streams a snapshot file of `size` bytes in [`BACKUP_CHUNK_BYTES`]
/// pieces, each saying how many bytes remain after it; holds `permit`
/// until done.
async fn send_backup(
    mut file: tokio::fs::File,
    size: u64,
    out: mpsc::Sender<Result<pb::SnapshotResponse, Status>>,
    permit: OwnedSemaphorePermit,
) {
    let mut sent = 0u64;
    while sent < size {
        let mut blob = vec![0u8; BACKUP_CHUNK_BYTES.min((size - sent) as usize)];
        if let Err(error) = file.read_exact(&mut blob).await {
            let _ = out
                .send(Err(Status::internal(format!("reading the snapshot: {error}"))))
                .await;
            break;
        }
        sent += blob.len() as u64;
        let response = pb::SnapshotResponse {
            header: None,
            remaining_bytes: size - sent,
            blob,
        };
        if out.send(Ok(response)).await.is_err() {
            break;
        }
    }
    drop(permit);
}
