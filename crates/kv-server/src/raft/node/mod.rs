//! The raft loop: one thread owns the RawNode and the durable log, and
//! turns proposals, read requests, peer messages and ticks into Readies.
//!
//! Each Ready is handled top to bottom by `handle_ready` and the steps it
//! calls, and nothing waits between `ready()` and `advance()` except the
//! WAL's fdatasync. Every input queue is bounded. The loop sends to peers
//! through an [`Outbox`] and hands committed entries to the apply stage;
//! it knows nothing of gRPC, so its tests run it over channels.
//!
//! The loop's body is [`Node::turn`], which is given the time: [`Node::run`]
//! drives it on the real clock, waiting on the input queue until
//! [`Node::next_wake`]; a caller with a clock of its own can drive it
//! turn by turn. A failure the member cannot go on after ends the loop
//! with a [`Fatal`] (see `crate::halt`); nothing here exits the process.
//!
//! This file holds the loop and its state; the steps of a turn are in
//! [`proposals`] (what a turn takes in), [`ready`] (a Ready handled top
//! to bottom) and [`log_compaction`] (snapshots and the in-memory log).

mod log_compaction;
mod proposals;
mod ready;

use std::collections::VecDeque;
use std::sync::mpsc::TrySendError;
use std::sync::Arc;
use std::time::{Duration, Instant};

use protobuf::Message as _;
use raft::prelude::{ConfChange, Entry, EntryType, HardState, Ready};
use raft::{Config as RaftConfig, RawNode, SnapshotStatus, StateRole, Storage};

use crate::apply::input::{ApplyInput, ApplySender, APPLY_BACKLOG_MAX};
use crate::error::{Error, RequestError};
use crate::halt::Fatal;
use crate::member::courier::Courier;
use crate::membership::conf_change_refused;
use crate::raft::events::Events;
use crate::raft::inbox::{Inbox, NodeReceiver, Waited};
use crate::raft::input::{NodeInput, Outbox, ReadWaiter};
use crate::raft::log::RaftLog;
use crate::raft::read_index::ReadIndexQueue;
use crate::raft::status::RaftStatus;
use crate::storage::durable_log::DurableLog;
use crate::storage::marker::SnapshotMarker;

/// Inputs taken per turn of the loop before handling a Ready: enough that
/// one Ready (one fdatasync) carries a whole burst of proposals, few
/// enough that ticks stay on time.
pub const INPUTS_PER_READY_MAX: usize = 4096;

/// etcd's `max_size_per_msg`: 1 MiB of entries per append message.
const MAX_SIZE_PER_MSG: u64 = 1 << 20;
/// etcd's `max_inflight_msgs`: appends in flight per follower.
const MAX_INFLIGHT_MSGS: usize = 512;

/// Applied entries kept in memory so that a follower slightly behind
/// catches up from the log rather than by a whole snapshot: etcd's
/// `SnapshotCatchUpEntries` and the default of its
/// `--experimental-snapshot-catchup-entries`. The window is never more
/// than `--snapshot-count`, so a member stopped while more than that many
/// entries are written does catch up by snapshot.
///
/// The in-memory log is compacted to this window as applies go (every
/// [`LOG_COMPACTION_INTERVAL_ENTRIES`]), not only at snapshots: a snapshot
/// here is the store as it stands, which can be sent at any time without a
/// snapshot record in the WAL, so holding `--snapshot-count` entries (up to
/// 100,000 by default, about 40 MB of raft entries at 256-byte puts)
/// bought nothing a follower within the window could use.
pub const SNAPSHOT_CATCH_UP_ENTRIES_DEFAULT: u64 = 5000;

/// Applied entries between compactions of the in-memory log: each one
/// moves the window's entries down in raft's vector, so not on every
/// apply; 1,000 bounds the excess over the window to a fifth of it.
pub const LOG_COMPACTION_INTERVAL_ENTRIES: u64 = 1000;

/// How often the loop retries handing its backlog to the apply stage
/// while the stage's queue is full: a millisecond adds little to an apply
/// already waiting on a busy store.
const APPLY_BACKLOG_RETRY: Duration = Duration::from_millis(1);

/// Proposals held while no usable leader is known, waiting for one: a
/// thousand clients' writes through an election. Past it, "no leader".
pub const HELD_PROPOSALS_MAX: usize = 4096;

/// How many election timeouts a proposal is held waiting for a leader:
/// two cover an election (one timeout, randomized up to twice); etcd's
/// members hold a proposal as long until its request times out, which
/// here would leave the client its timeout instead of "no leader".
pub const LEADER_WAIT_ELECTIONS: u32 = 2;

/// The loop's settings, from the member's flags.
#[derive(Debug, Clone, Copy)]
pub struct NodeConfig {
    pub id: u64,
    /// One raft tick: etcd's heartbeat interval.
    pub tick_interval: Duration,
    /// Ticks without a leader before a follower campaigns.
    pub election_ticks: usize,
    /// Applied entries between snapshots.
    pub snapshot_count: u64,
    /// Applied entries kept in memory for followers slightly behind (see
    /// [`SNAPSHOT_CATCH_UP_ENTRIES_DEFAULT`]).
    pub catch_up_entries: u64,
    /// How long a proposal waits for a leader (see
    /// [`LEADER_WAIT_ELECTIONS`]).
    pub leader_wait: Duration,
    /// Every election timeout exactly this many ticks (at least
    /// `election_ticks`), instead of raft's draw from `election_ticks`
    /// to twice that: raft-rs draws from a thread-local generator no seed
    /// reaches, so a simulator fixes each member's timeout and picks it
    /// from its own seed. `None` (raft's draw) for a real member.
    pub fixed_election_ticks: Option<usize>,
    /// Campaign with a pre-vote round first (`--pre-vote`, on by default
    /// as in etcd): a member cut off from a quorum then never raises its
    /// term, so its return does not depose a working leader.
    pub pre_vote: bool,
}

/// How the loop tells whoever stopped it that it has: sent once the
/// loop, and the WAL with it, is dropped.
pub type StopReply = tokio::sync::oneshot::Sender<()>;

/// What the loop is built from.
pub struct NodeParts {
    pub config: NodeConfig,
    pub log: DurableLog,
    pub store: Arc<mvcc::Store>,
    pub status: Arc<RaftStatus>,
    pub marker: Arc<SnapshotMarker>,
    pub outbox: Box<dyn Outbox>,
    pub apply: ApplySender,
    /// Where released reads' answers go.
    pub courier: Courier,
}

pub struct Node {
    raw: RawNode<RaftLog>,
    durable: DurableLog,
    log: RaftLog,
    config: NodeConfig,
    status: Arc<RaftStatus>,
    marker: Arc<SnapshotMarker>,
    outbox: Box<dyn Outbox>,
    apply: ApplySender,
    courier: Courier,
    reads: ReadIndexQueue,
    /// Index of the last snapshot taken or installed.
    snapshot_index: u64,
    /// The index the next committed entry handed to the apply stage has.
    next_to_apply: u64,
    /// Proposals waiting for a usable leader, oldest first, each with when
    /// it arrived.
    held: VecDeque<(Instant, NodeInput)>,
    /// The turn's writes, as (waiter sequence, entry data), proposed
    /// together at the end of the turn (`propose_pending`).
    proposals: Vec<(u64, Vec<u8>)>,
    /// Inputs for the apply stage that its full queue did not take yet,
    /// oldest first (see [`APPLY_BACKLOG_MAX`]).
    apply_backlog: VecDeque<ApplyInput>,
    /// When a snapshot's store flush was asked of the apply stage, until
    /// it answers (`NodeInput::Flushed`); the wait is logged with the
    /// snapshot.
    flush_pending: Option<std::time::Instant>,
    /// Set by [`NodeInput::Stop`]: the loop ends after this turn's Ready.
    stop: Option<StopReply>,
    /// When raft is next ticked; set by the first turn.
    next_tick: Option<Instant>,
    /// Set by a failure the member cannot go on after (`fail`): the loop
    /// takes no more inputs, handles no more Readies, and returns it.
    fault: Option<Fatal>,
    /// Late heartbeats and leader changes, logged as etcd logs them.
    events: Events,
}

impl Node {
    pub fn new(parts: NodeParts, logger: &slog::Logger) -> Result<Node, Error> {
        let hard_state = parts.log.memory.rl().hard_state().clone();
        let snapshot_index = hard_state.commit.min(parts.log.snapshot_index);
        let mut applied = parts.store.consistent_index().min(hard_state.commit);
        if applied > snapshot_index && crate::broken::double_apply() {
            applied -= 1;
        }
        let raft_config = RaftConfig {
            id: parts.config.id,
            election_tick: parts.config.election_ticks,
            // 0 is raft's default, the range from the election tick to
            // twice it.
            min_election_tick: parts.config.fixed_election_ticks.unwrap_or(0),
            max_election_tick: parts.config.fixed_election_ticks.map_or(0, |ticks| ticks + 1),
            heartbeat_tick: 1,
            applied,
            max_size_per_msg: MAX_SIZE_PER_MSG,
            max_inflight_msgs: MAX_INFLIGHT_MSGS,
            check_quorum: true,
            pre_vote: parts.config.pre_vote,
            // Off: raft-rs 0.7 merges a later append into an earlier one
            // for the same follower even when the earlier carries no
            // entries and the later starts at or below its index (a
            // resend after a rejection). The merged message claims the
            // entries follow its index; the follower acknowledges an index
            // it does not have, the leader counts it toward commit, and
            // the follower panics on a commit past its log. The simulator
            // found it (seed 135 of the first runs): `docs/robustness.md`.
            batch_append: false,
            ..RaftConfig::default()
        };
        raft_config.validate()?;
        let log = RaftLog::new(parts.log.memory.clone(), parts.store.clone());
        let raw = RawNode::new(&raft_config, log.clone(), logger)?;
        Ok(Node {
            events: Events::new(parts.config.id, parts.config.tick_interval),
            raw,
            durable: parts.log,
            log,
            config: parts.config,
            status: parts.status,
            marker: parts.marker,
            outbox: parts.outbox,
            apply: parts.apply,
            courier: parts.courier,
            reads: ReadIndexQueue::new(parts.config.id),
            snapshot_index,
            next_to_apply: applied + 1,
            held: VecDeque::new(),
            proposals: Vec::with_capacity(INPUTS_PER_READY_MAX),
            apply_backlog: VecDeque::new(),
            flush_pending: None,
            stop: None,
            next_tick: None,
            fault: None,
        })
    }

    /// Runs until every input sender is gone, or until told to stop, on
    /// the real clock: waits until the next wake for inputs, on its queue
    /// and on the peers' raft streams it reads itself (`raft::inbox`),
    /// takes every input then queued (up to [`INPUTS_PER_READY_MAX`]),
    /// and takes a turn. Returns the fault that stopped it, if one did: a failed WAL
    /// write or a stopped apply stage. Nothing more is written or sent
    /// after it.
    pub fn run(mut self, inputs: NodeReceiver) -> Result<(), Fatal> {
        let mut turn = Vec::with_capacity(INPUTS_PER_READY_MAX);
        let mut inbox = Inbox::new(inputs);
        loop {
            let now = Instant::now();
            let wait = self.next_wake(now).saturating_duration_since(now);
            let leads = self.raw.raft.state == StateRole::Leader;
            if let Waited::Closed = inbox.gather(wait, &mut turn, INPUTS_PER_READY_MAX, leads) {
                return self.close();
            }
            match self.turn(&mut turn, Instant::now()) {
                Ok(None) => {}
                Ok(Some(done)) => {
                    // Dropping the loop closes the WAL and ends the apply
                    // stage's input once it has applied what it was given.
                    drop(self);
                    let _ = done.send(());
                    return Ok(());
                }
                Err(fault) => {
                    self.refuse_held();
                    return Err(fault);
                }
            }
        }
    }

    /// The index of the last snapshot the loop recorded in the WAL (taken
    /// or installed). The simulator reads it (`crates/simulator/src/harness/member.rs`).
    pub fn snapshot_index(&self) -> u64 {
        self.snapshot_index
    }

    /// Whether this member leads and has committed an entry of its term:
    /// it then knows everything its predecessors committed. The simulator
    /// reads it (`crates/simulator/src/harness/cluster.rs`).
    pub fn leads_settled(&self) -> bool {
        let raft = &self.raw.raft;
        raft.state == StateRole::Leader && raft.commit_to_current_term()
    }

    /// When the loop has something to do with no input: the next tick,
    /// or, while the apply stage's backlog waits, a retry soon after
    /// `now`. Before the first turn, at once.
    pub fn next_wake(&self, now: Instant) -> Instant {
        let Some(next_tick) = self.next_tick else { return now };
        match self.apply_backlog.is_empty() {
            true => next_tick,
            false => next_tick.min(now + APPLY_BACKLOG_RETRY),
        }
    }

    /// One turn of the loop at `now`: takes `inputs` (leaving the vector
    /// empty), ticks raft if a tick is due, starts and retries ReadIndex
    /// rounds, releases held proposals, then handles the Ready. The clock
    /// is the caller's: the real one in [`Node::run`], a simulated one
    /// elsewhere. Returns the stop's reply once told to stop (everything
    /// of the turn is durable by then, and the loop must end), or the
    /// fault the member cannot go on after.
    pub fn turn(&mut self, inputs: &mut Vec<NodeInput>, now: Instant) -> Result<Option<StopReply>, Fatal> {
        if self.fault.is_some() {
            // Once failed, always: nothing more is taken or written.
            inputs.clear();
        }
        self.failed()?;
        let next_tick = *self.next_tick.get_or_insert(now + self.config.tick_interval);
        if !inputs.is_empty() {
            self.take_turn(inputs, now);
        }
        self.failed()?;
        if now >= next_tick {
            self.raw.tick();
            let after = next_tick + self.config.tick_interval;
            self.next_tick = Some(if after < now {
                now + self.config.tick_interval
            } else {
                after
            });
            for context in self.reads.retry(now) {
                self.raw.read_index(context);
            }
        }
        if let Some(context) = self.reads.start_round(now) {
            let raft = &self.raw.raft;
            // The broken build's check first: it is a constant false
            // outside it, so a real member's read round looks up nothing.
            if crate::broken::skip_read_term_check()
                && raft.state == StateRole::Leader
                && !raft.commit_to_current_term()
            {
                let index = raft.raft_log.committed;
                if let Some(waiters) = self.reads.answered(&context) {
                    self.release_reads(index, waiters);
                }
            } else {
                self.raw.read_index(context);
            }
        }
        self.release_held(now);
        self.drain_apply_backlog();
        if let Err(fault) = self.handle_ready() {
            self.fail(fault);
        }
        self.failed()?;
        let Some(done) = self.stop.take() else {
            return Ok(None);
        };
        // What still waits for a leader hears that the member stopped.
        self.refuse_held();
        self.hand_over_backlog();
        tracing::info!("raft loop stopped");
        Ok(Some(done))
    }

    /// Every input sender is gone: whoever still waits on a held proposal
    /// hears why, and the loop ends.
    pub fn close(mut self) -> Result<(), Fatal> {
        self.refuse_held();
        self.fault.take().map_or(Ok(()), Err)
    }

    /// The fault recorded, if any, as an error: once failed, every turn
    /// returns it.
    fn failed(&self) -> Result<(), Fatal> {
        self.fault.clone().map_or(Ok(()), Err)
    }

    /// Records `fault`, unless one is recorded already: the loop returns
    /// it at the end of the turn, before handling another Ready.
    fn fail(&mut self, fault: Fatal) {
        if self.fault.is_none() {
            self.fault = Some(fault);
        }
    }
}
