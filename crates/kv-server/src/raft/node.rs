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

use std::collections::VecDeque;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use protobuf::Message as _;
use raft::prelude::{ConfChange, Entry, EntryType, HardState, Ready};
use raft::{Config as RaftConfig, RawNode, SnapshotStatus, StateRole, Storage};

use crate::apply::input::{ApplyInput, APPLY_BACKLOG_MAX};
use crate::error::{Error, RequestError};
use crate::halt::Fatal;
use crate::membership::conf_change_refused;
use crate::raft::events::Events;
use crate::raft::input::{NodeInput, Outbox};
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
    pub apply: SyncSender<ApplyInput>,
}

pub struct Node {
    raw: RawNode<RaftLog>,
    durable: DurableLog,
    log: RaftLog,
    config: NodeConfig,
    status: Arc<RaftStatus>,
    marker: Arc<SnapshotMarker>,
    outbox: Box<dyn Outbox>,
    apply: SyncSender<ApplyInput>,
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
    /// A snapshot's store flush was asked of the apply stage and has not
    /// been answered (`NodeInput::Flushed`).
    flush_pending: bool,
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
            reads: ReadIndexQueue::new(parts.config.id),
            snapshot_index,
            next_to_apply: applied + 1,
            held: VecDeque::new(),
            proposals: Vec::with_capacity(INPUTS_PER_READY_MAX),
            apply_backlog: VecDeque::new(),
            flush_pending: false,
            stop: None,
            next_tick: None,
            fault: None,
        })
    }

    /// Runs until every input sender is gone, or until told to stop, on
    /// the real clock: waits for inputs until the next wake, takes every
    /// input then queued (up to [`INPUTS_PER_READY_MAX`]), and takes a
    /// turn. Returns the fault that stopped it, if one did: a failed WAL
    /// write or a stopped apply stage. Nothing more is written or sent
    /// after it.
    pub fn run(mut self, inputs: Receiver<NodeInput>) -> Result<(), Fatal> {
        let mut turn = Vec::with_capacity(INPUTS_PER_READY_MAX);
        loop {
            let now = Instant::now();
            let wait = self.next_wake(now).saturating_duration_since(now);
            match inputs.recv_timeout(wait) {
                Ok(input) => {
                    turn.push(input);
                    // Let whoever else is runnable on this core (client
                    // handlers proposing) run first, so the turn takes
                    // their inputs too; returns at once on an idle core.
                    std::thread::yield_now();
                    turn.extend(inputs.try_iter().take(INPUTS_PER_READY_MAX - 1));
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return self.close(),
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
    /// or installed). The simulator reads it (`sim/member.rs`).
    #[cfg_attr(not(feature = "sim"), allow(dead_code))]
    pub fn snapshot_index(&self) -> u64 {
        self.snapshot_index
    }

    /// Whether this member leads and has committed an entry of its term:
    /// it then knows everything its predecessors committed. The simulator
    /// reads it (`sim/cluster.rs`).
    #[cfg_attr(not(feature = "sim"), allow(dead_code))]
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
                    self.send_apply(ApplyInput::Read { index, waiters });
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

    /// Whoever waits on a held proposal hears that the member stopped
    /// (through the apply stage, if it still runs).
    fn refuse_held(&mut self) {
        for (_, input) in std::mem::take(&mut self.held) {
            self.refuse(input, RequestError::Stopped);
        }
    }

    /// Whether proposals can go to a leader: one is known, and it is a
    /// voter (a leader that removed itself drops what it is sent).
    fn leader_usable(&self) -> bool {
        let raft = &self.raw.raft;
        raft.leader_id != raft::INVALID_ID
            && (raft.leader_id == self.config.id || raft.prs().conf().voters().contains(raft.leader_id))
    }

    /// Proposes what was held once a leader is usable; answers "no leader"
    /// for what waited longer than `leader_wait`.
    fn release_held(&mut self, now: Instant) {
        if self.held.is_empty() {
            return;
        }
        if self.leader_usable() {
            for (_, input) in std::mem::take(&mut self.held) {
                self.take(input, now);
            }
            self.propose_pending();
            return;
        }
        while let Some((arrived, _)) = self.held.front() {
            if now.duration_since(*arrived) < self.config.leader_wait {
                break;
            }
            let (_, input) = self.held.pop_front().expect("checked");
            self.refuse(input, RequestError::NoLeader);
        }
    }

    /// Answers a proposal with `error`.
    fn refuse(&mut self, input: NodeInput, error: RequestError) {
        match input {
            NodeInput::Propose { sequence, .. } | NodeInput::ProposeConfChange { sequence, .. } => {
                self.send_apply(ApplyInput::Dropped { sequence, error });
            }
            _ => unreachable!("only proposals are held"),
        }
    }

    /// Takes one turn's inputs. Peer messages are stepped first and the
    /// turn's proposals go to raft afterwards as one message, so that
    /// their appends (one per follower) carry whatever commit index the
    /// messages advanced; meanwhile raft need
    /// not broadcast that commit on its own (TiKV's toggle). A turn
    /// without proposals broadcasts commits as usual.
    fn take_turn(&mut self, turn: &mut Vec<NodeInput>, now: Instant) {
        let proposing = self.leader_usable() && turn.iter().any(|input| matches!(input, NodeInput::Propose { .. }));
        self.raw.skip_bcast_commit(proposing);
        for input in turn.drain(..) {
            if self.fault.is_some() {
                // The member is stopping: what is left of the turn is
                // dropped with the loop.
                continue;
            }
            self.take(input, now);
        }
        self.propose_pending();
        self.raw.skip_bcast_commit(false);
    }

    /// Proposes the turn's writes as one raft message (one append per
    /// follower instead of one per write); if raft drops it, each of its
    /// waiters hears why.
    fn propose_pending(&mut self) {
        if self.proposals.is_empty() {
            return;
        }
        let mut message = raft::prelude::Message::default();
        message.set_msg_type(raft::prelude::MessageType::MsgPropose);
        message.from = self.config.id;
        let entries: Vec<Entry> = self
            .proposals
            .iter_mut()
            .map(|(_, data)| Entry {
                data: std::mem::take(data).into(),
                ..Entry::default()
            })
            .collect();
        message.set_entries(entries.into());
        if let Err(error) = self.raw.raft.step(message) {
            tracing::debug!(%error, count = self.proposals.len(), "proposals dropped");
            let error = if self.raw.raft.leader_id == raft::INVALID_ID {
                RequestError::NoLeader
            } else {
                RequestError::LeaderChanged
            };
            for (sequence, _) in std::mem::take(&mut self.proposals) {
                self.send_apply(ApplyInput::Dropped {
                    sequence,
                    error: error.clone(),
                });
            }
        }
        self.proposals.clear();
    }

    /// Takes one input that arrived by `now`.
    fn take(&mut self, input: NodeInput, now: Instant) {
        let proposal = matches!(input, NodeInput::Propose { .. } | NodeInput::ProposeConfChange { .. });
        if proposal && !self.leader_usable() {
            if self.held.len() >= HELD_PROPOSALS_MAX {
                self.refuse(input, RequestError::NoLeader);
            } else {
                self.held.push_back((now, input));
            }
            return;
        }
        match input {
            NodeInput::Propose { sequence, data } => {
                if self.proposals.len() >= INPUTS_PER_READY_MAX {
                    self.propose_pending();
                }
                self.proposals.push((sequence, data));
            }
            NodeInput::ProposeConfChange { sequence, change } => self.propose_conf_change(sequence, change),
            NodeInput::Progress { reply } => {
                let raft = &self.raw.raft;
                let progress = if raft.state == StateRole::Leader {
                    raft.prs()
                        .iter()
                        .map(|(id, progress)| (*id, progress.matched))
                        .collect()
                } else {
                    Vec::new()
                };
                let _ = reply.send(progress);
            }
            NodeInput::ReadIndex { reply } => self.reads.push(reply),
            NodeInput::Message(message) => self.step(*message),
            NodeInput::Messages(messages) => {
                for message in messages {
                    self.step(message);
                }
            }
            NodeInput::Unreachable(peer) => self.raw.report_unreachable(peer),
            NodeInput::TransferLeader(to) => self.raw.transfer_leader(to),
            NodeInput::AdvanceTicks(ticks) => {
                for _ in 0..ticks {
                    self.raw.tick();
                }
            }
            NodeInput::Stop(done) => self.stop = Some(done),
            NodeInput::Flushed { index, term } => self.snapshot_flushed(index, term),
            NodeInput::SnapshotStatus { to, failed } => {
                let status = if failed {
                    SnapshotStatus::Failure
                } else {
                    SnapshotStatus::Finish
                };
                self.raw.report_snapshot(to, status);
            }
        }
    }

    fn step(&mut self, message: raft::prelude::Message) {
        if let Err(error) = self.raw.step(message) {
            tracing::debug!(%error, "peer message refused");
        }
    }

    /// Proposes a membership change. Raft takes one at a time: while one
    /// is unapplied, raft would turn another into an empty entry, and its
    /// client would wait in vain, so it is refused here as etcd's client
    /// would see it end, timed out.
    fn propose_conf_change(&mut self, sequence: u64, change: ConfChange) {
        let error = if self.raw.raft.has_pending_conf() {
            Some(RequestError::TimedOut)
        } else if let Err(error) = self.raw.propose_conf_change(Vec::new(), change) {
            tracing::debug!(%error, "membership change dropped");
            Some(if self.raw.raft.leader_id == raft::INVALID_ID {
                RequestError::NoLeader
            } else {
                RequestError::LeaderChanged
            })
        } else {
            None
        };
        if let Some(error) = error {
            self.send_apply(ApplyInput::Dropped { sequence, error });
        }
    }

    /// Applies the committed configuration changes among `entries` to
    /// raft, unless refused (see `membership::conf_change_refused`; the
    /// apply stage refuses the same ones), and keeps raft's storage's
    /// configuration in step for the snapshots it records.
    fn apply_conf_changes(&mut self, entries: &[Entry]) -> Result<(), Fatal> {
        for entry in entries {
            if entry.get_entry_type() != EntryType::EntryConfChange {
                continue;
            }
            let change = ConfChange::parse_from_bytes(&entry.data).expect("committed conf changes decode");
            let conf = self.raw.raft.prs().conf().to_conf_state();
            if conf_change_refused(&conf, &change) {
                tracing::info!(
                    index = entry.index,
                    node = change.node_id,
                    "refused a membership change"
                );
                continue;
            }
            match self.raw.apply_conf_change(&change) {
                Ok(conf) => self.durable.memory.wl().set_conf_state(conf),
                Err(error) => return Err(Fatal::new("raft refused a membership change", &error)),
            }
        }
        Ok(())
    }

    /// Handles one Ready in the order raft-rs documents, with etcd's
    /// leader optimisation (Raft thesis §10.2.1). A fault ends it where it
    /// happens: nothing after a failed WAL write is sent or advanced.
    fn handle_ready(&mut self) -> Result<(), Fatal> {
        if !self.raw.has_ready() {
            return Ok(());
        }
        let mut ready = self.raw.ready();

        // 1. Messages first. On a leader these are appends, and sending
        //    them before our own fsync lets followers write in parallel
        //    with us; a leader's entry counts toward commit only once its
        //    own WAL has it, so this is safe.
        let messages = ready.take_messages();
        self.events.sending(&messages, Instant::now());
        self.outbox.send(messages);

        // 2. A snapshot from the leader, ahead of the entries after it.
        if !ready.snapshot().is_empty() {
            self.install_snapshot(&ready)?;
        }

        // 3. Committed entries go to the apply stage. They are durable on
        //    a quorum already, so applying them need not wait for our own
        //    fsync below.
        self.send_committed(ready.take_committed_entries())?;

        // 4. New entries and the hard state: one WAL write and one
        //    fdatasync for the whole Ready.
        let early = crate::broken::ack_before_fsync();
        if early {
            self.outbox.send(ready.take_persisted_messages());
        }
        self.persist(&ready.take_entries(), ready.hs())?;

        // 5. Read states: each answers one round of reads once applied.
        for read_state in ready.take_read_states() {
            if let Some(waiters) = self.reads.answered(&read_state.request_ctx) {
                self.send_apply(ApplyInput::Read {
                    index: read_state.index,
                    waiters,
                });
            }
        }

        // 6. Messages that may only leave after the fsync: a follower's
        //    append acknowledgements and votes.
        if !early {
            self.outbox.send(ready.take_persisted_messages());
        }

        // 7. Advance, then the light ready: commit index, more messages and
        //    committed entries.
        let mut light = self.raw.advance(ready);
        if let Some(commit) = light.commit_index() {
            self.durable.memory.wl().mut_hard_state().commit = commit;
        }
        let messages = light.take_messages();
        self.events.sending(&messages, Instant::now());
        self.outbox.send(messages);
        self.send_committed(light.take_committed_entries())?;
        self.raw.advance_apply();
        self.maybe_snapshot();
        self.maybe_compact_log();
        let raft = &self.raw.raft;
        self.status.set_raft(raft.term, raft.leader_id, raft.raft_log.committed);
        self.events.leader(raft.leader_id, raft.term);
        Ok(())
    }

    /// A snapshot from the leader: recorded in the WAL, handed to raft's
    /// log, and queued for the apply stage ahead of the entries that
    /// follow it, which restores the store from the pending file.
    fn install_snapshot(&mut self, ready: &Ready) -> Result<(), Fatal> {
        let snapshot = ready.snapshot().clone();
        let metadata = snapshot.get_metadata();
        let (index, term) = (metadata.index, metadata.term);
        assert!(index > self.snapshot_index, "a leader's snapshot moves forward");
        if let Err(error) = self.durable.save_snapshot(index, term, metadata.get_conf_state()) {
            return Err(Fatal::new("WAL write failed", &error));
        }
        self.durable
            .memory
            .wl()
            .apply_snapshot(snapshot)
            .expect("a leader's snapshot is newer than our log");
        self.snapshot_index = index;
        self.next_to_apply = index + 1;
        self.send_apply(ApplyInput::Restore { index, term });
        Ok(())
    }

    /// Makes a Ready's entries and hard state durable. A failure stops the
    /// member: going on could acknowledge writes that are not on disk.
    fn persist(&mut self, entries: &[Entry], hard_state: Option<&HardState>) -> Result<(), Fatal> {
        assert!(
            entries.windows(2).all(|pair| pair[1].index == pair[0].index + 1),
            "a Ready's entries are contiguous"
        );
        assert!(
            entries
                .first()
                .is_none_or(|first| first.index <= self.durable.memory.last_index().unwrap_or(0) + 1),
            "new entries leave no gap after the log"
        );
        assert!(
            hard_state.is_none_or(|hs| hs.commit >= self.durable.memory.rl().hard_state().commit),
            "the commit index never goes back"
        );
        tracing::debug!(entries = entries.len(), "ready");
        self.durable
            .persist(entries, hard_state)
            .map_err(|error| Fatal::new("WAL write failed", &error))
    }

    /// Every `--snapshot-count` applied entries: asks the apply stage to
    /// flush the store, and once it has (`snapshot_flushed`), records a
    /// snapshot there. The loop itself never waits for the store.
    fn maybe_snapshot(&mut self) {
        let applied = self.status.applied();
        let count = self.config.snapshot_count.max(1);
        if self.flush_pending || applied < self.snapshot_index + count {
            return;
        }
        let Ok(term) = self.log.term(applied) else { return };
        self.flush_pending = true;
        self.send_apply(ApplyInput::Flush { index: applied, term });
    }

    /// The store is durable through `index`: records a snapshot there in
    /// the WAL and the marker, releases the WAL segments replay no longer
    /// needs, and compacts raft's in-memory log, keeping some entries for
    /// followers slightly behind.
    fn snapshot_flushed(&mut self, index: u64, term: u64) {
        self.flush_pending = false;
        if index <= self.snapshot_index {
            return;
        }
        let conf_state = self.log.conf_state();
        if let Err(error) = self.durable.save_snapshot(index, term, &conf_state) {
            return self.fail(Fatal::new("WAL write failed", &error));
        }
        if let Err(error) = self.marker.record(index, term) {
            return self.fail(Fatal::new("the snapshot marker could not be written", &error));
        }
        let released = match self.durable.release_to(index) {
            Ok(released) => released,
            Err(error) => return self.fail(Fatal::new("the WAL could not release segments", &error)),
        };
        self.compact_log(index);
        self.snapshot_index = index;
        tracing::info!(index, term, released, "took a snapshot");
    }

    /// Every [`LOG_COMPACTION_INTERVAL_ENTRIES`] applied entries, drops
    /// the in-memory entries behind the catch-up window.
    fn maybe_compact_log(&mut self) {
        let Ok(first) = self.log.first_index() else { return };
        let applied = self.status.applied();
        if log_compaction_due(applied, first, self.catch_up_window()) {
            self.compact_log(applied);
        }
    }

    /// Entries kept behind the applied index: the catch-up setting, but
    /// never more than `--snapshot-count`.
    fn catch_up_window(&self) -> u64 {
        self.config.catch_up_entries.min(self.config.snapshot_count.max(1))
    }

    fn compact_log(&mut self, applied: u64) {
        let first_kept = first_kept(applied, self.catch_up_window());
        if let Err(error) = self.log.compact(first_kept) {
            tracing::warn!(%error, "could not compact the in-memory log");
        }
    }

    fn send_committed(&mut self, entries: Vec<Entry>) -> Result<(), Fatal> {
        let Some(first) = entries.first() else {
            return Ok(());
        };
        self.apply_conf_changes(&entries)?;
        assert_eq!(
            first.index, self.next_to_apply,
            "committed entries follow the last ones"
        );
        assert!(
            entries.windows(2).all(|pair| pair[1].index == pair[0].index + 1),
            "committed entries are contiguous"
        );
        self.next_to_apply = entries.last().map_or(self.next_to_apply, |last| last.index + 1);
        tracing::debug!(entries = entries.len(), "committed");
        self.send_apply(ApplyInput::Entries(entries));
        Ok(())
    }

    /// Hands `input` to the apply stage without waiting: what its full
    /// queue does not take waits in the backlog, in order, unless the
    /// backlog is at its bound.
    fn send_apply(&mut self, input: ApplyInput) {
        if self.apply_backlog.is_empty() {
            match self.apply.try_send(input) {
                Ok(()) => return,
                Err(TrySendError::Full(input)) => self.apply_backlog.push_back(input),
                Err(TrySendError::Disconnected(_)) => return self.apply_stage_gone(),
            }
        } else {
            self.apply_backlog.push_back(input);
        }
        if self.apply_backlog.len() > APPLY_BACKLOG_MAX {
            tracing::warn!(
                inputs = self.apply_backlog.len(),
                "the apply stage is far behind; waiting for it"
            );
            if !self.hand_over_backlog() {
                self.apply_stage_gone();
            }
        }
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

    /// The apply stage's queue is closed: the stage stopped on a fault of
    /// its own (which it raised), and nothing committed can be applied
    /// and answered any more.
    fn apply_stage_gone(&mut self) {
        self.apply_backlog.clear();
        self.fail(Fatal::new("the apply stage stopped", &"its queue is closed"));
    }

    /// The apply stage gets the whole backlog, waiting for room: past the
    /// backlog's bound, and on stopping, so that what was committed is
    /// applied and answered. False if the stage has stopped.
    fn hand_over_backlog(&mut self) -> bool {
        while let Some(input) = self.apply_backlog.pop_front() {
            if self.apply.send(input).is_err() {
                return false;
            }
        }
        true
    }

    /// Moves what the apply stage's queue now has room for out of the
    /// backlog.
    fn drain_apply_backlog(&mut self) {
        while let Some(input) = self.apply_backlog.pop_front() {
            match self.apply.try_send(input) {
                Ok(()) => {}
                Err(TrySendError::Full(input)) => {
                    self.apply_backlog.push_front(input);
                    return;
                }
                Err(TrySendError::Disconnected(_)) => return self.apply_stage_gone(),
            }
        }
    }
}

/// Whether the in-memory log, whose first entry is `first`, holds
/// [`LOG_COMPACTION_INTERVAL_ENTRIES`] or more applied entries beyond the
/// `window` kept behind `applied`.
fn log_compaction_due(applied: u64, first: u64, window: u64) -> bool {
    applied >= first + window + LOG_COMPACTION_INTERVAL_ENTRIES
}

/// The first entry the in-memory log keeps: `window` entries behind
/// `applied`, and never index 0 (raft's dummy entry).
fn first_kept(applied: u64, window: u64) -> u64 {
    applied.saturating_sub(window).max(1)
}

#[cfg(test)]
mod compaction_tests {
    use super::*;

    // Goal: the in-memory log is compacted once it holds an interval of
    // applied entries past the window, and keeps exactly the window.
    #[test]
    fn the_log_keeps_the_catch_up_window() {
        let window = SNAPSHOT_CATCH_UP_ENTRIES_DEFAULT;
        let interval = LOG_COMPACTION_INTERVAL_ENTRIES;
        assert!(!log_compaction_due(window + interval, 1, window));
        assert!(log_compaction_due(window + interval + 1, 1, window));
        assert_eq!(first_kept(window + interval + 1, window), interval + 1);
        // After compacting, the next one waits for another interval.
        let first = first_kept(20_000, window);
        assert!(!log_compaction_due(20_000 + interval - 1, first, window));
        assert!(log_compaction_due(20_000 + interval, first, window));
        // A young log is never compacted below index 1.
        assert_eq!(first_kept(3, window), 1);
    }
}
