//! The apply stage: a thread apart from the raft loop that applies
//! committed entries to the store in batches, answers the clients waiting
//! on them, installs snapshots from the leader, and releases linearizable
//! reads once the member has applied up to their read index.
//!
//! Per batch of entries, in this order: the store applies every write
//! into its open batch (which records the raft index reached, and goes to
//! sled when due, or when the stage has waited `mvcc::OPEN_BATCH_AGE_MAX`
//! for input); the
//! leader's lease deadlines follow grants and revocations; watchers hear
//! of the changes; then the writers are answered, and the applied index
//! moves. A store that cannot apply stops the member.

use std::sync::mpsc::{RecvTimeoutError, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use raft::prelude::Entry;
use tokio::sync::Notify;

use crate::apply::decode::{decode, Decoded};
use crate::apply::input::{ApplyInput, ApplyReceiver};
use crate::auth::state::AuthState;
use crate::auth::{Auth, Caller};
use crate::clock::Clock;
use crate::error::RequestError;
use crate::halt::Fatal;
use crate::lease::lessor::Lessor;
use crate::member::courier::Delivery;
use crate::member::waiters::Waiters;
use crate::membership::{Change, Membership, SharedMembership};
use crate::peer::transport::PeerSet;
use crate::proto::kvserverpb::auth_request::Request as AuthChange;
use crate::raft::inbox::NodeSender;
use crate::raft::input::{NodeInput, ReadWaiter};
use crate::raft::status::RaftStatus;
use crate::storage::layout::DataDir;
use crate::storage::marker::SnapshotMarker;
use crate::storage::pending;
use crate::watch::hub::{Published, WatchHub};

/// The least pause between two steps of queued compaction work: etcd's
/// default `--experimental-compaction-sleep-interval`. While the member
/// applies writes, a step waits longer, to keep compaction within mvcc's
/// `COMPACTION_CPU_PERCENT` of a core (see [`Stage::compaction_pause`]).
pub const COMPACTION_SLEEP_INTERVAL_DEFAULT: Duration = Duration::from_millis(10);

/// What the stage works with; it alone writes the store, answers writers
/// and moves the applied index.
pub struct StageParts {
    pub member_id: u64,
    pub dir: DataDir,
    pub store: Arc<mvcc::Store>,
    pub status: Arc<RaftStatus>,
    pub waiters: Arc<Waiters>,
    pub lessor: Arc<Lessor>,
    pub watch_hub: Arc<WatchHub>,
    pub marker: Arc<SnapshotMarker>,
    pub membership: Arc<SharedMembership>,
    pub peers: Arc<PeerSet>,
    /// The auth state the API serves from, and the tokens logins make.
    pub auth: Arc<Auth>,
    /// Notified when this member is removed.
    pub stop: Arc<Notify>,
    /// The raft loop's input, for answering its flush requests.
    pub node: NodeSender,
    /// The least pause between compaction steps
    /// (`--experimental-compaction-sleep-interval`).
    pub compaction_sleep: Duration,
    /// `--quota-backend-bytes`: compaction takes more of a core as the
    /// store nears it (mvcc's `compaction_cpu_percent`).
    pub quota_bytes: u64,
}

/// Why an entry was refused before it reached the store.
enum Refused {
    Store(mvcc::Error),
    Server(RequestError),
}

/// A batch of entries, decoded: the writes for the store, in entry order
/// who waits for each entry's answer and whether it was refused before
/// reaching the store, and the membership after the batch if it changed.
#[derive(Default)]
struct Batch {
    requests: Vec<mvcc::WriteRequest>,
    outcomes: Vec<(Option<u64>, Option<Refused>)>,
    membership: Option<Membership>,
    auth: Option<AuthState>,
}

/// The stage: its parts, and what its loop carries from one input to the
/// next.
pub struct Stage {
    parts: StageParts,
    /// Linearizable reads waiting for the applied index to reach theirs.
    reads: Vec<(u64, Vec<ReadWaiter>)>,
    /// A flush's answer the raft loop's full queue did not take yet.
    flushed: Option<NodeInput>,
    /// When the next step of queued compaction work may run.
    next_step: Option<Instant>,
    /// Whether entries came since the last compaction step: a member
    /// that applied none is idle, and compacts at etcd's pace.
    applied_since_step: bool,
    /// The time, for pacing compaction and for the waits.
    clock: Arc<dyn Clock>,
    /// No entries applied yet since the member started (for the broken
    /// build `kv::double_apply`, `broken.rs`).
    fresh: bool,
    /// The compaction applied last and when, until its work is done: for
    /// etcd's "finished scheduled compaction" line.
    compacting: std::cell::Cell<Option<(i64, std::time::Instant)>>,
}

impl Stage {
    /// The stage on `clock` (the real one, `clock::RealClock`, for a
    /// running member).
    pub fn new(parts: StageParts, clock: Arc<dyn Clock>) -> Stage {
        parts.status.set_applied(parts.store.consistent_index());
        Stage {
            parts,
            reads: Vec::new(),
            flushed: None,
            next_step: None,
            applied_since_step: false,
            clock,
            fresh: true,
            compacting: std::cell::Cell::new(None),
        }
    }

    /// Runs until the raft loop closes the queue, or until the store
    /// fails: then it returns the fault, and closing its queue tells the
    /// raft loop. [`Stage::prepare`], [`Stage::next_wake`] and
    /// [`Stage::take`] are the loop's body, for a caller that delivers
    /// the inputs itself.
    pub fn run(mut self, inputs: ApplyReceiver) -> Result<(), Fatal> {
        loop {
            let started = Instant::now();
            self.prepare()?;
            log_if_slow("compaction step", started);
            let now = self.clock.now();
            let wait = self.next_wake(now).saturating_duration_since(now);
            let received = inputs.recv_timeout(wait);
            let started = Instant::now();
            let work = match received {
                Ok(input) => {
                    let work = input.kind();
                    self.take(Some(input))?;
                    work
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.take(None)?;
                    "commit"
                }
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
            };
            log_if_slow(work, started);
        }
    }

    /// Before waiting for input: hands the raft loop a flush's answer its
    /// queue did not take, and runs a step of queued compaction work if
    /// one is due (a step at a time, paced, between inputs: mvcc's
    /// compaction.rs).
    pub fn prepare(&mut self) -> Result<(), Fatal> {
        if let Some(answer) = self.flushed.take() {
            self.flushed = self.tell_raft(answer);
        }
        if !self.parts.store.compaction_pending() {
            return Ok(());
        }
        let started = self.clock.now();
        if started < *self.next_step.get_or_insert(started) {
            return Ok(());
        }
        self.compact_step()?;
        let now = self.clock.now();
        let took = now.saturating_duration_since(started);
        self.next_step = Some(now + self.compaction_pause(took, self.applied_since_step));
        self.applied_since_step = false;
        Ok(())
    }

    /// Until when the stage, at `now`, waits for input: the next
    /// compaction step, if there is work, and no longer than the open
    /// batch's age bound, after which it commits.
    pub fn next_wake(&self, now: Instant) -> Instant {
        let latest = now + mvcc::OPEN_BATCH_AGE_MAX;
        match (self.parts.store.compaction_pending(), self.next_step) {
            (true, Some(step)) => step.max(now).min(latest),
            (true, None) => now,
            (false, _) => latest,
        }
    }

    /// Takes one input; `None` when the wait ended without one, which
    /// commits the store's open batch. Then answers the reads the applied
    /// index has reached.
    pub fn take(&mut self, input: Option<ApplyInput>) -> Result<(), Fatal> {
        let Some(input) = input else {
            return self
                .parts
                .store
                .commit()
                .map_err(|error| Fatal::new("the store failed to write applied entries", &error));
        };
        match input {
            ApplyInput::Entries(entries) => {
                self.applied_since_step = true;
                self.apply_entries(entries)?;
                self.fresh = false;
            }
            ApplyInput::Restore { index, term } => self.restore(index, term)?,
            ApplyInput::Read { index, waiters } => self.reads.push((index, waiters)),
            ApplyInput::Dropped { sequence, error } => self.parts.waiters.answer(sequence, Err(error)),
            ApplyInput::Flush { index, term } => {
                if let Err(error) = self.parts.store.flush() {
                    return Err(Fatal::new("the store could not flush", &error));
                }
                self.flushed = self.tell_raft(NodeInput::Flushed { index, term });
            }
        }
        let applied = self.parts.status.applied();
        let mut released = Vec::new();
        self.reads.retain_mut(|(index, waiters)| {
            if *index > applied {
                return true;
            }
            released.extend(waiters.drain(..).map(|waiter| Delivery::Read(waiter, Ok(()))));
            false
        });
        self.parts.waiters.courier().send(released);
        Ok(())
    }

    /// The pause after a compaction step that took `took`: etcd's sleep
    /// interval, or, when entries were `applied` since the step before,
    /// longer, so that steps take at most their share of a core beside
    /// the writes: `mvcc::compaction::COMPACTION_CPU_PERCENT`, more as the
    /// store nears its quota (`compaction_cpu_percent`). An idle member
    /// compacts as fast as etcd's.
    fn compaction_pause(&self, took: Duration, applied: bool) -> Duration {
        if !applied {
            return self.parts.compaction_sleep;
        }
        // Its size on disk: sled's file and the value files' lengths, a
        // few microseconds beside a step's millisecond. A failure to
        // read it leaves the least share.
        let size = self.parts.store.size_on_disk().unwrap_or(0);
        let percent = mvcc::compaction::compaction_cpu_percent(size, self.parts.quota_bytes);
        let share = mvcc::pacing::pause_after(took, percent);
        self.parts.compaction_sleep.max(share)
    }

    /// One step of the store's queued compaction work; a failure is the
    /// store's, and fatal, as a failed apply is.
    fn compact_step(&self) -> Result<(), Fatal> {
        let more = self
            .parts
            .store
            .compact_step()
            .map_err(|error| Fatal::new("the store failed a step of compaction", &error))?;
        if !more {
            if let Some((revision, started)) = self.compacting.take() {
                let took = crate::logging::go_duration(started.elapsed());
                tracing::info!("compact-revision" = revision, took = %took, "finished scheduled compaction");
            }
        }
        Ok(())
    }

    /// Hands `answer` to the raft loop without waiting: it comes back when
    /// the loop's queue is full, to be tried again on the next turn. A
    /// stopped loop needs no answer.
    fn tell_raft(&self, answer: NodeInput) -> Option<NodeInput> {
        match self.parts.node.try_send(answer) {
            Err(TrySendError::Full(answer)) => Some(answer),
            _ => None,
        }
    }

    fn apply_entries(&self, entries: Vec<Entry>) -> Result<(), Fatal> {
        let Some(last_index) = entries.last().map(|e| e.index) else {
            return Ok(());
        };
        let mut already = self.parts.store.consistent_index();
        if self.fresh && crate::broken::double_apply() {
            // Broken on purpose: the first batch after a start is applied
            // whole, whatever the store already holds.
            already = already.min(entries[0].index.saturating_sub(1));
        }
        assert!(
            entries.windows(2).all(|pair| pair[1].index == pair[0].index + 1),
            "committed entries are contiguous"
        );
        assert!(
            entries[0].index <= already + 1,
            "entries from {} leave a gap after the applied {already}",
            entries[0].index
        );
        if last_index <= already {
            return Ok(());
        }
        let batch = self.decode_batch(&entries, already);
        // Tests stall the apply stage here (`kv::apply=1*sleep(ms)`) to hold
        // the applied index still while raft commits more; the robustness
        // suite crashes the member around the apply.
        fail::fail_point!("kv::apply");
        fail::fail_point!("kv::crash_before_apply", |_| std::process::abort());
        let applied = self.apply_to_store(last_index, &batch.requests)?;
        fail::fail_point!("kv::crash_after_apply", |_| std::process::abort());
        if let Some(membership) = batch.membership {
            self.publish_membership(membership);
        }
        if let Some(auth) = batch.auth {
            self.parts.auth.publish(auth);
        }
        if batch
            .requests
            .iter()
            .any(|r| matches!(r, mvcc::WriteRequest::Compaction(_)))
        {
            fail::fail_point!("kv::crash_after_compact", |_| std::process::abort());
        }
        self.answer(batch.outcomes, applied);
        assert!(
            last_index > self.parts.status.applied(),
            "the applied index moves forward"
        );
        self.parts.status.set_applied(last_index);
        Ok(())
    }

    /// Decodes the entries after `already`. Membership changes (members'
    /// attributes among them) and auth changes apply to a copy, in order,
    /// each becoming a write of the whole record after it. A request whose
    /// permissions were checked at an older auth revision is refused.
    fn decode_batch(&self, entries: &[Entry], already: u64) -> Batch {
        let mut batch = Batch::default();
        let before = self.parts.membership.get();
        let auth_before = self.parts.auth.state();
        for entry in entries.iter().filter(|entry| entry.index > already) {
            let current = batch.membership.as_ref().unwrap_or(&before);
            let proposal = decode(entry, self.parts.member_id, current);
            let owner = proposal.owner;
            let auth = batch.auth.as_ref().unwrap_or(&auth_before);
            let stale = auth.enabled && proposal.caller.revision != 0 && proposal.caller.revision < auth.revision;
            // A client's write checked while auth was off carries no
            // revision; once auth is on it is nobody's, as in etcd.
            let unchecked = auth.enabled && proposal.caller.revision == 0 && proposal.client_write;
            let refusal = match (stale, unchecked) {
                (true, _) => Some(RequestError::AuthOldRevision),
                (_, true) => Some(RequestError::UserEmpty),
                _ => None,
            };
            if let Some(error) = refusal {
                batch.outcomes.push((owner, Some(Refused::Server(error))));
                continue;
            }
            let change = match proposal.decoded {
                Decoded::Write(Ok(request)) => {
                    batch.requests.push(request);
                    batch.outcomes.push((owner, None));
                    continue;
                }
                Decoded::Write(Err(error)) => {
                    batch.outcomes.push((owner, Some(Refused::Store(error))));
                    continue;
                }
                Decoded::Nothing => continue,
                Decoded::Auth(request) => {
                    let mut next = batch.auth.take().unwrap_or_else(|| (*auth_before).clone());
                    let outcome = self.apply_auth(&mut next, &request, &proposal.caller, entry.index);
                    if outcome.is_none() {
                        batch.requests.push(mvcc::WriteRequest::Auth(next.encode()));
                    }
                    batch.outcomes.push((owner, outcome));
                    batch.auth = Some(next);
                    continue;
                }
                Decoded::Attributes(attributes) => Change::Attributes {
                    id: attributes.id,
                    name: attributes.name,
                    client_urls: attributes.client_urls,
                },
                Decoded::Membership(change) => change,
            };
            let mut next = batch.membership.take().unwrap_or_else(|| (*before).clone());
            match next.apply(&change) {
                Ok(()) => {
                    batch.requests.push(mvcc::WriteRequest::Membership(next.encode()));
                    batch.outcomes.push((owner, None));
                }
                Err(error) => batch.outcomes.push((owner, Some(Refused::Server(error)))),
            }
            batch.membership = Some(next);
        }
        batch
    }

    /// Applies one auth change (or login) at raft `index` to `state`, as
    /// etcd's auth applier does: management needs the root role once auth
    /// is on; a login makes its token on this member; a user deleted or
    /// given a new password loses its tokens.
    fn apply_auth(&self, state: &mut AuthState, request: &AuthChange, caller: &Caller, index: u64) -> Option<Refused> {
        if !matches!(request, AuthChange::Authenticate(_)) {
            if let Err(error) = state.admin(&caller.user) {
                return Some(Refused::Server(error));
            }
        }
        if let Err(error) = state.apply(request) {
            return Some(Refused::Server(error));
        }
        match request {
            AuthChange::Authenticate(login) => {
                self.parts.auth.tokens.assign(&login.token_prefix, index, &login.name);
            }
            AuthChange::UserDelete(delete) => self.parts.auth.tokens.invalidate_user(&delete.name),
            AuthChange::UserChangePassword(change) => self.parts.auth.tokens.invalidate_user(&change.name),
            // At once, not when the batch is published: an enable later in
            // the batch must not bring back tokens made before.
            AuthChange::Disable(_) => self.parts.auth.tokens.clear(),
            _ => {}
        }
        None
    }

    /// The membership changed: every member's view and the peers raft
    /// sends to follow it; a member removed stops.
    fn publish_membership(&self, membership: Membership) {
        self.parts.peers.update(&membership);
        let removed = membership.local().is_none();
        self.parts.membership.set(membership);
        if removed {
            tracing::warn!("this member was removed from the cluster; stopping");
            self.parts.stop.notify_one();
        }
    }

    /// Applies the batch's writes up to raft index `last_index`, keeps the
    /// leader's lease deadlines in step, and tells watchers.
    fn apply_to_store(&self, last_index: u64, requests: &[mvcc::WriteRequest]) -> Result<Vec<mvcc::Applied>, Fatal> {
        let first = self.parts.store.current_revision() + 1;
        let mut applied = match self.parts.store.apply(last_index, requests) {
            Ok(applied) => applied,
            Err(error) => return Err(Fatal::new("the store failed to apply committed entries", &error)),
        };
        for (request, result) in requests.iter().zip(&applied) {
            match (request, &result.response) {
                (mvcc::WriteRequest::LeaseGrant(grant), Ok(_)) => self.parts.lessor.granted(grant.id, grant.ttl),
                (mvcc::WriteRequest::LeaseRevoke(revoke), Ok(_)) => self.parts.lessor.revoked(revoke.id),
                (mvcc::WriteRequest::LeaseCheckpoint(request), Ok(_)) => {
                    self.parts.lessor.checkpointed(&request.checkpoints)
                }
                (mvcc::WriteRequest::Compaction(compaction), Ok(_)) => {
                    tracing::info!(revision = compaction.revision, "compact tree index");
                    self.compacting
                        .set(Some((compaction.revision, std::time::Instant::now())));
                }
                _ => {}
            }
        }
        // Watchers hear of the changes before the writers are answered, as
        // etcd notifies them when the write's transaction ends.
        let last = self.parts.store.current_revision();
        if last >= first {
            let events = applied
                .iter_mut()
                .flat_map(|result| std::mem::take(&mut result.events))
                .collect();
            self.parts.watch_hub.publish_changes(first, last, events);
        }
        Ok(applied)
    }

    /// Answers every waiter of the batch, in entry order.
    fn answer(&self, outcomes: Vec<(Option<u64>, Option<Refused>)>, applied: Vec<mvcc::Applied>) {
        let mut applied = applied.into_iter();
        let mut answers = Vec::with_capacity(outcomes.len());
        for (owner, refused) in outcomes {
            let result = match refused {
                None => Ok(applied.next().expect("one result per request")),
                Some(Refused::Store(error)) => Ok(mvcc::Applied {
                    response: Err(error),
                    events: Vec::new(),
                }),
                Some(Refused::Server(error)) => Err(error),
            };
            if let Some(sequence) = owner {
                answers.push((sequence, result));
            }
        }
        debug_assert!(applied.next().is_none(), "every result has its entry");
        self.parts.waiters.answer_all(answers);
    }

    /// Installs a leader's snapshot: the store takes the pending file's
    /// contents (and flushes them), then the marker records it, so a restart
    /// replays from there, and the file goes.
    fn restore(&self, index: u64, term: u64) -> Result<(), Fatal> {
        // Tests stop the member here (`kv::restore=return`): the WAL holds the
        // snapshot's record, the store does not yet hold its contents.
        fail::fail_point!("kv::restore", |_| {
            Err(Fatal::new(
                "failpoint kv::restore",
                &"stopping before installing a snapshot",
            ))
        });
        if let Err(error) = pending::restore(&self.parts.store, index, &self.parts.dir.pending_snapshot(index, term)) {
            return Err(Fatal::new("could not install a snapshot", &error));
        }
        if let Err(error) = self.parts.marker.record(index, term) {
            return Err(Fatal::new("could not record a snapshot", &error));
        }
        pending::remove_through(&self.parts.dir, index);
        match self
            .parts
            .store
            .membership()
            .1
            .map(|bytes| Membership::decode(&bytes, self.parts.member_id))
        {
            Some(Ok(membership)) => self.publish_membership(membership),
            Some(Err(error)) => return Err(Fatal::new("a snapshot's membership does not decode", &error)),
            None => tracing::warn!("a snapshot without a membership"),
        }
        match AuthState::decode(self.parts.store.auth().as_deref()) {
            Ok(auth) => self.parts.auth.publish(auth),
            Err(error) => return Err(Fatal::new("a snapshot's auth state does not decode", &error)),
        }
        self.parts.watch_hub.publish(Published::Restored);
        let applied = self.parts.store.consistent_index();
        self.parts.status.set_applied(applied);
        tracing::info!(index, term, applied, "installed a snapshot from the leader");
        Ok(())
    }
}

/// Logs one piece of the stage's work, begun at `started`, that held up
/// the applies behind it for longer than `--warning-apply-duration`
/// (etcd's per-request line, `metrics::store_observer`, cannot name a
/// stall between requests: a compaction step, a commit to sled, a
/// snapshot's flush). Every write waiting to apply waited this long.
fn log_if_slow(work: &'static str, started: Instant) {
    let took = started.elapsed();
    let threshold = crate::metrics::warning_apply_duration();
    if took > threshold {
        tracing::warn!(
            work,
            took = %crate::logging::go_duration(took),
            "expected-duration" = %crate::logging::go_duration(threshold),
            "apply stage held up the applies behind it"
        );
    }
}
