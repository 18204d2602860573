//! The member core: what every etcd service calls, as etcd's services call
//! its `EtcdServer`. It proposes writes and waits for them to apply,
//! linearizes reads, enforces the quota and the apply-lag bound, and
//! builds response headers. It never touches gRPC transport or the raft
//! loop's internals: it talks to the loop through its input queue only.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::TrySendError;
use std::sync::Arc;
use std::time::Duration;

use prost::Message as _;
use tokio::sync::{oneshot, Notify};

use crate::auth::{Auth, Caller};
use crate::clock::Clock;
use crate::config::Config;
use crate::error::RequestError;
use crate::halt::Halt;
use crate::lease::ids::LeaseIds;
use crate::lease::lessor::Lessor;
use crate::member::waiters::{ProposalResult, Waiters};
use crate::membership::SharedMembership;
use crate::peer::channels::PeerChannels;
use crate::peer::transport::PeerSet;
use crate::proto::etcdserverpb as pb;
use crate::proto::kvserverpb::{raft_request, RaftRequest};
use crate::raft::inbox::NodeSender;
use crate::raft::input::NodeInput;
use crate::raft::status::RaftStatus;
use crate::watch::hub::WatchHub;

/// etcd's bound on how far applying may fall behind committing, in
/// entries: past it, new proposals are refused with "too many requests"
/// so the backlog drains instead of growing.
pub const APPLY_LAG_ENTRIES_MAX: u64 = 5000;

/// How long a client waits for its write to apply or its read index to
/// come back before getting etcd's "request timed out": etcd waits 5 s
/// plus two election timeouts; 7 s matches its defaults.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(7);

/// How often a physical Compact looks whether the store's queued
/// compaction work is done: a step is about a millisecond, and a
/// compaction worth waiting for takes hundreds of them.
const PHYSICAL_COMPACTION_POLL: Duration = Duration::from_millis(10);

/// What the member core is made of. Each shared part is also held by the
/// thread that writes it: the raft loop (status), the apply stage
/// (waiters, lessor, watch hub, attributes).
pub struct MemberParts {
    pub config: Config,
    pub membership: Arc<SharedMembership>,
    pub store: Arc<mvcc::Store>,
    pub status: Arc<RaftStatus>,
    pub waiters: Arc<Waiters>,
    pub lessor: Arc<Lessor>,
    pub watch_hub: Arc<WatchHub>,
    pub node: NodeSender,
    pub peers: Arc<PeerSet>,
    pub auth: Arc<Auth>,
    /// Raised by the member's threads on a fault it cannot go on after.
    pub halt: Halt,
    /// Notified once the member is removed from the cluster (by the apply
    /// stage).
    pub stop: Arc<Notify>,
    /// The member's clock (`clock.rs`).
    pub clock: Arc<dyn Clock>,
}

/// The defragmentations that turn the gRPC health status NOT_SERVING.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Defrags {
    /// Running now.
    pub active: u32,
    /// Started since the member did: each one's number.
    pub started: u64,
}

/// One defragmentation counted in [`Defrags::active`] while it lives.
struct DefragRunning {
    member: Arc<Member>,
    started: u64,
}

impl DefragRunning {
    fn start(member: Arc<Member>) -> DefragRunning {
        let mut started = 0;
        member.defragmenting.send_modify(|defrags| {
            defrags.active += 1;
            defrags.started += 1;
            started = defrags.started;
        });
        DefragRunning { member, started }
    }
}

impl Drop for DefragRunning {
    fn drop(&mut self) {
        self.member.defragmenting.send_modify(|defrags| defrags.active -= 1);
    }
}

/// How long a defragmentation waits for the gRPC health status to turn
/// NOT_SERVING: the health task turns it as soon as it is told, in
/// microseconds; a second means that task is stuck, and the
/// defragmentation goes ahead rather than hang.
const HEALTH_REPORT_WAIT: Duration = Duration::from_secs(1);

pub struct Member {
    pub(crate) config: Config,
    /// This member's and its cluster's ids, fixed for its lifetime.
    pub(super) local_id: u64,
    pub(super) cluster_id: u64,
    /// The membership now; the apply stage changes it.
    pub(super) membership: Arc<SharedMembership>,
    /// The peers the raft loop sends to, and how long each has been up.
    pub(super) peers: Arc<PeerSet>,
    /// Notified once this member has been removed from the cluster: the
    /// server then stops.
    pub(super) stop: Arc<Notify>,
    pub(crate) store: Arc<mvcc::Store>,
    pub(crate) status: Arc<RaftStatus>,
    pub(super) waiters: Arc<Waiters>,
    pub(crate) lessor: Arc<Lessor>,
    pub(super) watch_hub: Arc<WatchHub>,
    /// Users, roles and tokens; the apply stage publishes changes.
    pub(crate) auth: Arc<Auth>,
    /// The store's size on disk, sampled by the server every 100 ms (the
    /// quota check reads this instead of asking sled per write).
    pub(super) disk_bytes: AtomicU64,
    /// Bytes of what the store holds (`Store::live_bytes`, kept by its
    /// commits), sampled with `disk_bytes` and after a defragmentation:
    /// Status's `dbSizeInUse`.
    pub(super) live_bytes: AtomicU64,
    pub(super) node: NodeSender,
    pub(crate) leader_channels: PeerChannels,
    pub(crate) lease_ids: LeaseIds,
    pub(super) clock: Arc<dyn Clock>,
    /// True while a defragmentation runs, with
    /// --experimental-stop-grpc-service-on-defrag: the gRPC health status
    /// follows it (`server/tasks.rs`).
    defragmenting: tokio::sync::watch::Sender<Defrags>,
    /// The last [`Defrags::started`] the health status accounted for
    /// while reporting NOT_SERVING: a defragmentation starts once its own
    /// is reported.
    defrag_reported: tokio::sync::watch::Sender<u64>,
    halt: Halt,
}

/// etcd's NOSPACE `AlarmType`, which the store also refuses writes by.
pub use mvcc::ALARM_NOSPACE;

/// A refused send to the raft loop's queue, as the client sees it.
pub fn queue_error<T>(error: TrySendError<T>) -> RequestError {
    match error {
        TrySendError::Full(_) => RequestError::TooManyRequests,
        TrySendError::Disconnected(_) => RequestError::Stopped,
    }
}

impl Member {
    /// The member's fault signal: the server waits on it, and stops.
    pub fn halt(&self) -> &Halt {
        &self.halt
    }

    pub fn new(parts: MemberParts) -> Member {
        let leader_channels = PeerChannels::new(parts.membership.clone(), REQUEST_TIMEOUT);
        let (local_id, cluster_id) = {
            let membership = parts.membership.get();
            (membership.local_id, membership.cluster_id)
        };
        Member {
            config: parts.config,
            local_id,
            cluster_id,
            membership: parts.membership,
            peers: parts.peers,
            stop: parts.stop,
            store: parts.store,
            status: parts.status,
            waiters: parts.waiters,
            lessor: parts.lessor,
            watch_hub: parts.watch_hub,
            auth: parts.auth,
            disk_bytes: AtomicU64::new(0),
            live_bytes: AtomicU64::new(0),
            halt: parts.halt,
            node: parts.node,
            leader_channels,
            lease_ids: LeaseIds::new(local_id, parts.clock.since_epoch()),
            clock: parts.clock,
            defragmenting: tokio::sync::watch::Sender::new(Defrags::default()),
            defrag_reported: tokio::sync::watch::Sender::new(0),
        }
    }

    pub fn member_id(&self) -> u64 {
        self.local_id
    }

    /// The leader's id, 0 while none is known.
    pub fn leader(&self) -> u64 {
        self.status.leader()
    }

    /// A response header at `revision`, with this member's identity and
    /// the current term: the one way headers are made.
    pub fn header(&self, revision: i64) -> Option<pb::ResponseHeader> {
        Some(pb::ResponseHeader {
            cluster_id: self.cluster_id,
            member_id: self.local_id,
            revision,
            raft_term: self.status.term(),
        })
    }

    /// A header at the store's current revision.
    pub fn current_header(&self) -> Option<pb::ResponseHeader> {
        self.header(self.store.current_revision())
    }

    /// Proposes a write and waits until it is applied here.
    pub async fn propose(&self, request: raft_request::Request) -> Result<mvcc::WriteResponse, RequestError> {
        self.propose_as(request, &Caller::default()).await
    }

    /// Proposes a write made by `caller`, whose permissions were checked
    /// at `caller.revision` (see `crate::auth`), and waits until it is
    /// applied here.
    pub async fn propose_as(
        &self,
        request: raft_request::Request,
        caller: &Caller,
    ) -> Result<mvcc::WriteResponse, RequestError> {
        self.refuse_if_corrupt(&request)?;
        let result = self.propose_unobserved(request, caller).await;
        if let Err(
            RequestError::TimedOut
            | RequestError::NoLeader
            | RequestError::LeaderChanged
            | RequestError::Stopped
            | RequestError::TooManyRequests,
        ) = &result
        {
            crate::metrics::metrics().server.proposals_failed.inc();
        }
        result
    }

    /// [`Member::propose_as`] without counting failures.
    async fn propose_unobserved(
        &self,
        request: raft_request::Request,
        caller: &Caller,
    ) -> Result<mvcc::WriteResponse, RequestError> {
        if self.status.committed().saturating_sub(self.status.applied()) > APPLY_LAG_ENTRIES_MAX {
            return Err(RequestError::TooManyRequests);
        }
        let (sequence, answer) = self.waiters.register();
        let data = RaftRequest {
            member: self.member_id(),
            sequence,
            request: Some(request),
            auth_revision: caller.revision,
            user: caller.user.clone(),
        }
        .encode_to_vec();
        if data.len() > self.config.max_request_bytes {
            self.waiters.forget(sequence);
            return Err(RequestError::RequestTooLarge);
        }
        if let Err(error) = self.node.try_send(NodeInput::Propose { sequence, data }) {
            self.waiters.forget(sequence);
            return Err(queue_error(error));
        }
        self.wait_for_answer(sequence, answer).await
    }

    /// Waits for the answer to proposal `sequence`, at most
    /// [`REQUEST_TIMEOUT`].
    pub(super) async fn wait_for_answer(
        &self,
        sequence: u64,
        answer: oneshot::Receiver<ProposalResult>,
    ) -> Result<mvcc::WriteResponse, RequestError> {
        match tokio::time::timeout(REQUEST_TIMEOUT, answer).await {
            Ok(Ok(Ok(applied))) => Ok(applied.response?),
            Ok(Ok(Err(error))) => Err(error),
            Ok(Err(_)) => Err(RequestError::Stopped),
            Err(_) => {
                self.waiters.forget(sequence);
                Err(RequestError::TimedOut)
            }
        }
    }

    /// Waits until this member has applied everything committed when the
    /// call began, as confirmed by the leader.
    pub async fn linearize(&self) -> Result<(), RequestError> {
        let (reply, answer) = oneshot::channel();
        self.node
            .try_send(NodeInput::ReadIndex { reply })
            .map_err(queue_error)?;
        match tokio::time::timeout(REQUEST_TIMEOUT, answer).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(RequestError::Stopped),
            Err(_) => Err(RequestError::TimedOut),
        }
    }

    /// Waits until this member has applied what was committed on entry, at
    /// most `timeout`.
    pub async fn wait_applied(&self, timeout: Duration) -> Result<(), RequestError> {
        let committed = self.status.committed();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // Registered before the check, so an apply between the check
            // and the wait still wakes it.
            let applied = self.status.applied_changed();
            tokio::pin!(applied);
            applied.as_mut().enable();
            if self.status.applied() >= committed {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, applied).await.is_err() {
                return Err(RequestError::TimedOut);
            }
        }
    }

    /// etcd's quota: a write that adds data is refused once the store has
    /// reached `--quota-backend-bytes`. Deletes and compactions still go
    /// through, so space can be won back.
    ///
    ///
    /// As etcd, a write refused for space first raises the NOSPACE alarm
    /// for this member through raft, and while any member's NOSPACE alarm
    /// is raised every member refuses such writes, until `alarm disarm`
    /// clears it.
    pub async fn check_quota(&self, added_bytes: usize) -> Result<(), RequestError> {
        // This member's own size first: over it, the member raises its own
        // alarm even when another's is raised, as etcd's members do.
        let size = self.disk_bytes.load(Ordering::Acquire);
        if size + added_bytes as u64 > self.config.quota_backend_bytes {
            self.raise_space_alarm().await;
            return Err(RequestError::NoSpace);
        }
        if self.store.has_alarm(ALARM_NOSPACE) {
            return Err(RequestError::NoSpace);
        }
        Ok(())
    }

    /// Proposes this member's NOSPACE alarm and waits for it to apply; a
    /// failed proposal is tried again at the next refusal.
    async fn raise_space_alarm(&self) {
        let alarm = pb::AlarmRequest {
            action: pb::alarm_request::AlarmAction::Activate as i32,
            member_id: self.member_id(),
            alarm: ALARM_NOSPACE,
        };
        match self.propose(raft_request::Request::Alarm(alarm)).await {
            Ok(_) => tracing::warn!("the store reached its quota: raised the NOSPACE alarm"),
            Err(error) => tracing::warn!(%error, "could not raise the NOSPACE alarm"),
        }
    }

    /// Waits until this member's store has done the work its compactions
    /// queued (mvcc's compaction.rs), as etcd's Compact with `physical`
    /// waits for its scheduled compaction. The apply stage does the work.
    pub async fn compacted_physically(&self) {
        while self.store.compaction_pending() {
            tokio::time::sleep(PHYSICAL_COMPACTION_POLL).await;
        }
    }

    /// The defragmentations running (with
    /// --experimental-stop-grpc-service-on-defrag), and their changes.
    pub fn defragmenting(&self) -> tokio::sync::watch::Receiver<Defrags> {
        self.defragmenting.subscribe()
    }

    /// The health status reports NOT_SERVING with every defragmentation
    /// up to the `started`th in view.
    pub fn report_defrag(&self, started: u64) {
        self.defrag_reported.send_replace(started);
    }

    /// etcd's Defragment, of this member's store only: writes and reads
    /// wait while it runs. The sizes Status reports are sampled again at
    /// once.
    pub async fn defragment(self: &Arc<Self>) -> Result<(), RequestError> {
        let running = self
            .config
            .experimental_stop_grpc_service_on_defrag
            .then(|| DefragRunning::start(self.clone()));
        if let Some(running) = &running {
            // etcd turns the status before it starts, so no client is
            // told SERVING while the defragmentation runs.
            let mut reported = self.defrag_reported.subscribe();
            let mine = running.started;
            let _ = tokio::time::timeout(HEALTH_REPORT_WAIT, reported.wait_for(|seen| *seen >= mine)).await;
        }
        let member = self.clone();
        // The guard goes with the work: a caller that gives up (its
        // deadline, a cancelled call) does not end the defragmentation,
        // and the status turns back when the work ends, not before.
        let done = tokio::task::spawn_blocking(move || {
            let _running = running;
            member.defragment_blocking()
        });
        done.await.map_err(|_| RequestError::Stopped)??;
        Ok(())
    }

    /// [`Member::defragment`]'s work, on the calling thread (the
    /// simulator's, where a blocking pool's thread would end at a time no
    /// seed fixes).
    pub fn defragment_blocking(&self) -> Result<(), mvcc::Error> {
        use crate::logging::go_duration;
        let path = self.config.layout().store().display().to_string();
        let (disk, live) = (self.store.size_on_disk()?, self.store.live_bytes()?);
        tracing::info!(
            path,
            "current-db-size-bytes" = disk,
            "current-db-size-in-use-bytes" = live,
            "defragmenting"
        );
        let started = std::time::Instant::now();
        self.store.defragment()?;
        self.sample_sizes()?;
        let (disk_after, live_after) = (self.store.size_on_disk()?, self.store.live_bytes()?);
        tracing::info!(
            path,
            "current-db-size-bytes-diff" = disk_after as i64 - disk as i64,
            "current-db-size-bytes" = disk_after,
            "current-db-size-in-use-bytes-diff" = live_after as i64 - live as i64,
            "current-db-size-in-use-bytes" = live_after,
            took = %go_duration(started.elapsed()),
            "finished defragmenting directory"
        );
        Ok(())
    }

    /// Samples the store's size on disk (for the quota and Status) and the
    /// bytes it holds.
    pub fn sample_sizes(&self) -> Result<(), mvcc::Error> {
        self.disk_bytes.store(self.store.size_on_disk()?, Ordering::Release);
        self.live_bytes.store(self.store.live_bytes()?, Ordering::Release);
        Ok(())
    }

    /// etcd's MoveLeader: only the leader takes it; the target must be a
    /// member; the answer comes once this member sees the target lead,
    /// looked for every raft tick, or "took too long" after
    /// [`REQUEST_TIMEOUT`].
    pub async fn move_leader(&self, target: u64) -> Result<(), RequestError> {
        if self.leader() != self.member_id() {
            return Err(RequestError::NotLeader);
        }
        if !self.membership.get().voter_ids().contains(&target) {
            return Err(RequestError::BadLeaderTransferee);
        }
        self.node
            .try_send(NodeInput::TransferLeader(target))
            .map_err(queue_error)?;
        if !self.await_leader(|leader| leader == target).await {
            return Err(RequestError::LeaderTransferTimedOut);
        }
        Ok(())
    }

    /// etcd's leadership transfer on stop: a leader with other voters hands
    /// leadership to the voter whose log matches its own furthest (the
    /// most caught-up, so the new leader needs the least catching up) and
    /// waits until it leads, at most [`REQUEST_TIMEOUT`] as etcd does.
    /// Returns the new leader, or `None` when there was nothing to hand
    /// over (a follower, or the only voter).
    pub async fn step_down(&self) -> Result<Option<u64>, RequestError> {
        let id = self.member_id();
        if self.leader() != id {
            return Ok(None);
        }
        let voters = self.membership.get().voter_ids();
        let target = self
            .raft_progress()
            .await?
            .into_iter()
            .filter(|(peer, _)| *peer != id && voters.contains(peer))
            .max_by_key(|(_, matched)| *matched)
            .map(|(peer, _)| peer);
        match target {
            Some(target) => self.move_leader(target).await.map(|()| Some(target)),
            None => Ok(None),
        }
    }

    /// The leader's view of how far each member's log matches its own, as
    /// (member id, matched index); empty on a follower.
    pub(super) async fn raft_progress(&self) -> Result<Vec<(u64, u64)>, RequestError> {
        let (reply, answer) = oneshot::channel();
        self.node.try_send(NodeInput::Progress { reply }).map_err(queue_error)?;
        answer.await.map_err(|_| RequestError::Stopped)
    }

    /// Ends the raft loop after its current turn (the last step of a
    /// graceful stop), then waits until the apply stage has applied what
    /// was committed, at most `within`. Whether both happened in time.
    pub async fn stop_raft(&self, within: Duration) -> bool {
        let (done, stopped) = oneshot::channel();
        if self.node.try_send(NodeInput::Stop(done)).is_err() {
            return false;
        }
        let deadline = tokio::time::Instant::now() + within;
        if tokio::time::timeout_at(deadline, stopped).await.is_err() {
            return false;
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        self.wait_applied(left).await.is_ok()
    }

    /// Waits until the leader this member knows (0 for none) satisfies
    /// `done`, looked at every raft tick, at most [`REQUEST_TIMEOUT`];
    /// whether it did.
    pub(super) async fn await_leader(&self, done: impl Fn(u64) -> bool) -> bool {
        let deadline = tokio::time::Instant::now() + REQUEST_TIMEOUT;
        while !done(self.leader()) {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(self.config.tick_interval()).await;
        }
        true
    }
}
