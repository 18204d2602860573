//! etcd's `Maintenance` service: Alarm, Status, Defragment, Hash, HashKV,
//! Snapshot, MoveLeader and Downgrade (its validate and cancel; enabling
//! a downgrade answers Unimplemented: there is no older kv-server to go
//! back to). With auth on, Defragment, Hash, HashKV and Snapshot need the
//! root role, and refuse as etcd 3.5 does: with its auth store's own
//! errors (`auth: permission denied`), which gRPC sends as Unknown.

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

/// etcd 3.5's maintenance check for the root role: its auth store's
/// errors, as they are, so gRPC sends them as Unknown.
async fn admin(
    member: &Member,
    metadata: &tonic::metadata::MetadataMap,
    extensions: &tonic::Extensions,
) -> Result<(), Status> {
    let refused = match member.authorize_admin(metadata, extensions).await {
        Ok(_) => return Ok(()),
        Err(RequestError::UserEmpty) => "auth: user name is empty",
        Err(RequestError::UserNotFound) => "auth: user not found",
        Err(RequestError::PermissionDenied) => "auth: permission denied",
        Err(RequestError::InvalidAuthToken) => "auth: invalid auth token",
        Err(other) => return Err(other.into()),
    };
    Err(Status::unknown(refused))
}

/// A downgrade target as etcd reads it (`MAJOR.MINOR[.PATCH]`, the patch
/// dropped): its major and minor.
fn downgrade_target(version: &str) -> Result<(u64, u64), RequestError> {
    let semver = |text: &str| -> Option<(u64, u64)> {
        let core = text.split(['-', '+']).next()?;
        let parts: Vec<&str> = core.split('.').collect();
        let number = |part: &str| {
            (!part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()) && (part == "0" || !part.starts_with('0')))
                .then(|| part.parse::<u64>().ok())
                .flatten()
        };
        match parts.as_slice() {
            [major, minor, patch] => {
                number(patch)?;
                Some((number(major)?, number(minor)?))
            }
            _ => None,
        }
    };
    semver(version)
        .or_else(|| semver(&format!("{version}.0")))
        .ok_or(RequestError::DowngradeVersionFormat)
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
        admin(&self.member, request.metadata(), request.extensions()).await?;
        self.member.defragment().await?;
        // etcd answers with an empty response, no header.
        Ok(Response::new(pb::DefragmentResponse::default()))
    }

    /// etcd hashes its whole database file, which has no counterpart in
    /// this store: the hash here is HashKV's at the current revision,
    /// every revision the store holds and its compact revision, which
    /// differs between members exactly when their stores do.
    async fn hash(&self, request: Request<pb::HashRequest>) -> Result<Response<pb::HashResponse>, Status> {
        admin(&self.member, request.metadata(), request.extensions()).await?;
        let whole = self.member.hash_kv(0)?;
        Ok(Response::new(pb::HashResponse {
            header: whole.header,
            hash: whole.hash,
        }))
    }

    async fn hash_kv(&self, request: Request<pb::HashKvRequest>) -> Result<Response<pb::HashKvResponse>, Status> {
        admin(&self.member, request.metadata(), request.extensions()).await?;
        // etcd's answer: the hash, the compact revision it was taken with,
        // and the member's current revision in the header.
        Ok(Response::new(self.member.hash_kv(request.into_inner().revision)?))
    }

    type SnapshotStream = SnapshotStream;

    /// The store as a snapshot file (`storage::backup`), written to this
    /// member's disk, then streamed and removed, as etcd streams its
    /// database file.
    async fn snapshot(&self, request: Request<pb::SnapshotRequest>) -> Result<Response<SnapshotStream>, Status> {
        admin(&self.member, request.metadata(), request.extensions()).await?;
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
        tracing::info!(
            "total-bytes" = size,
            size = crate::logging::human_bytes(size),
            "sending database snapshot to client"
        );
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

    /// etcd 3.5's checks: the target must be one minor version below the
    /// cluster's (3.4 for 3.5), read after a linearizable round; no
    /// downgrade is ever in flight here, so cancelling has nothing to
    /// cancel and enabling one is not served.
    async fn downgrade(
        &self,
        request: Request<pb::DowngradeRequest>,
    ) -> Result<Response<pb::DowngradeResponse>, Status> {
        use pb::downgrade_request::DowngradeAction;
        let request = request.into_inner();
        let action = DowngradeAction::try_from(request.action).map_err(|_| Status::unimplemented("unknown method"))?;
        if action == DowngradeAction::Validate || action == DowngradeAction::Enable {
            let target = downgrade_target(&request.version)?;
            self.member.linearize().await?;
            let (major, minor) = downgrade_target(ETCD_CLUSTER_VERSION)?;
            if target != (major, minor.saturating_sub(1)) {
                return Err(RequestError::DowngradeTargetVersion.into());
            }
        } else {
            self.member.linearize().await?;
        }
        match action {
            DowngradeAction::Validate => Ok(Response::new(pb::DowngradeResponse {
                header: self.member.current_header(),
                version: ETCD_CLUSTER_VERSION.to_string(),
            })),
            DowngradeAction::Cancel => Err(RequestError::NoInflightDowngrade.into()),
            DowngradeAction::Enable => Err(Status::unimplemented(
                "etcdserver: downgrading is not served: there is no older kv-server to go back to",
            )),
        }
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

/// The snapshot file's trailer: the sha256 of the bytes before it.
const CHECKSUM_BYTES: u64 = 32;

/// Streams a snapshot file of `size` bytes as etcd streams its database:
/// the data in [`BACKUP_CHUNK_BYTES`] pieces, each saying how many data
/// bytes remain after it, then the sha256 of the data as a message of its
/// own (the file's trailer), with none remaining. Holds `permit` until
/// done.
async fn send_backup(
    mut file: tokio::fs::File,
    size: u64,
    out: mpsc::Sender<Result<pb::SnapshotResponse, Status>>,
    permit: OwnedSemaphorePermit,
) {
    let data = size.saturating_sub(CHECKSUM_BYTES);
    let started = std::time::Instant::now();
    let mut sent = 0u64;
    while sent < size {
        if sent == data {
            tracing::info!(
                "total-bytes" = size,
                "checksum-size" = CHECKSUM_BYTES,
                "sending database sha256 checksum to client"
            );
        }
        let left_in_part = if sent < data { data - sent } else { size - sent };
        let mut blob = vec![0u8; BACKUP_CHUNK_BYTES.min(left_in_part as usize)];
        if let Err(error) = file.read_exact(&mut blob).await {
            let _ = out
                .send(Err(Status::internal(format!("reading the snapshot: {error}"))))
                .await;
            break;
        }
        sent += blob.len() as u64;
        let response = pb::SnapshotResponse {
            header: None,
            remaining_bytes: data.saturating_sub(sent),
            blob,
        };
        if out.send(Ok(response)).await.is_err() {
            break;
        }
        if sent == size {
            tracing::info!(
                "total-bytes" = size,
                size = crate::logging::human_bytes(size),
                took = crate::logging::human_ago(started.elapsed()),
                "successfully sent database snapshot to client"
            );
        }
    }
    drop(permit);
}
