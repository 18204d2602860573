//! The raft loop: one thread owns the RawNode and the WAL, and turns
//! proposals, read requests, peer messages and ticks into Readies.
//!
//! Each Ready is handled top to bottom in one function, `handle_ready`,
//! and nothing waits between `ready()` and `advance()` except the WAL's
//! fdatasync. Every input queue is bounded.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use raft::prelude::{Entry, Message};
use raft::{Config as RaftConfig, RawNode, SnapshotStatus, Storage};

use crate::apply::ApplyInput;
use crate::errors;
use crate::log_store::LogStore;
use crate::raft_storage::RaftStorage;
use crate::state::{MemberState, ReadWaiter};
use crate::transport::Transport;

/// Inputs the loop accepts. Senders never block: a full queue answers the
/// client "too many requests" instead.
pub enum NodeInput {
    /// A client write, already registered as a waiter under `sequence`.
    Propose { sequence: u64, data: Vec<u8> },
    /// A linearizable read: answered once the member has applied up to a
    /// read index confirmed by the leader.
    ReadIndex { reply: ReadWaiter },
    /// A raft message from a peer.
    Message(Box<Message>),
    /// The transport could not reach this peer.
    Unreachable(u64),
    /// How sending a snapshot to a peer ended.
    SnapshotStatus { to: u64, failed: bool },
    /// Hand leadership to this member (Maintenance.MoveLeader).
    TransferLeader(u64),
}

/// Capacity of the loop's input queue. 8192 covers a thousand clients with
/// several requests each in flight plus peer traffic; past it, clients get
/// etcd's "too many requests" and retry, instead of queueing without bound.
pub const NODE_INPUT_CAPACITY: usize = 8192;

/// Inputs taken per turn of the loop before handling a Ready: enough that
/// one Ready (one fdatasync) carries a whole burst of proposals, few
/// enough that ticks stay on time.
pub const INPUTS_PER_READY_MAX: usize = 4096;

/// etcd's `max_size_per_msg`: 1 MiB of entries per append message.
const MAX_SIZE_PER_MSG: u64 = 1 << 20;
/// etcd's `max_inflight_msgs`: appends in flight per follower.
const MAX_INFLIGHT_MSGS: usize = 512;

/// A read batch whose ReadIndex got no answer this long is asked again:
/// raft drops a ReadIndex when there is no leader, or when the leader has
/// not yet committed an entry in its term.
const READ_INDEX_RETRY: Duration = Duration::from_millis(300);
/// A read batch is abandoned after this long; clients time out on their own.
const READ_INDEX_EXPIRY: Duration = Duration::from_secs(10);

/// Entries kept in memory behind a snapshot so that a follower slightly
/// behind catches up from the log rather than by a whole snapshot: etcd's
/// `SnapshotCatchUpEntries`, but never more than `--snapshot-count`, so a
/// member stopped while more than that many entries are written does
/// catch up by snapshot.
pub const SNAPSHOT_CATCH_UP_ENTRIES_MAX: u64 = 5000;

struct ReadBatch {
    waiters: Vec<ReadWaiter>,
    issued: Instant,
    created: Instant,
}

pub struct Node {
    raw: RawNode<LogStore>,
    storage_wal: RaftStorage,
    log: LogStore,
    /// Index of the last snapshot taken or installed.
    snapshot_index: u64,
    state: Arc<MemberState>,
    transport: Transport,
    apply: SyncSender<ApplyInput>,
    pending_reads: Vec<ReadWaiter>,
    reads_in_flight: HashMap<u64, ReadBatch>,
    next_read_context: u64,
}

impl Node {
    pub fn new(
        storage: RaftStorage,
        state: Arc<MemberState>,
        transport: Transport,
        apply: SyncSender<ApplyInput>,
        logger: &slog::Logger,
    ) -> Result<Node, String> {
        let config = RaftConfig {
            id: state.member_id(),
            election_tick: state.config.election_ticks(),
            heartbeat_tick: 1,
            applied: state
                .store
                .consistent_index()
                .min(storage.memory.rl().hard_state().commit),
            max_size_per_msg: MAX_SIZE_PER_MSG,
            max_inflight_msgs: MAX_INFLIGHT_MSGS,
            check_quorum: true,
            pre_vote: true,
            ..RaftConfig::default()
        };
        config.validate().map_err(|e| e.to_string())?;
        let log = LogStore::new(storage.memory.clone(), state.store.clone());
        let snapshot_index = storage.memory.rl().hard_state().commit.min(storage.snapshot_index);
        state.set_recorded_snapshot(snapshot_index);
        let raw = RawNode::new(&config, log.clone(), logger).map_err(|e| e.to_string())?;
        Ok(Node {
            raw,
            storage_wal: storage,
            log,
            snapshot_index,
            state,
            transport,
            apply,
            pending_reads: Vec::new(),
            reads_in_flight: HashMap::new(),
            next_read_context: 1,
        })
    }

    /// Runs until every input sender is gone.
    pub fn run(mut self, inputs: Receiver<NodeInput>) {
        let tick = self.state.config.tick_interval();
        let mut next_tick = Instant::now() + tick;
        loop {
            let wait = next_tick.saturating_duration_since(Instant::now());
            match inputs.recv_timeout(wait) {
                Ok(input) => {
                    self.take(input);
                    for input in inputs.try_iter().take(INPUTS_PER_READY_MAX - 1) {
                        self.take(input);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            if Instant::now() >= next_tick {
                self.raw.tick();
                next_tick += tick;
                if next_tick < Instant::now() {
                    next_tick = Instant::now() + tick;
                }
                self.retry_reads();
            }
            self.issue_reads();
            self.handle_ready();
        }
    }

    fn take(&mut self, input: NodeInput) {
        match input {
            NodeInput::Propose { sequence, data } => {
                if let Err(error) = self.raw.propose(Vec::new(), data) {
                    tracing::debug!(%error, "proposal dropped");
                    let status = if self.raw.raft.leader_id == raft::INVALID_ID {
                        errors::no_leader()
                    } else {
                        errors::leader_changed()
                    };
                    self.state.answer(sequence, Err(status));
                }
            }
            NodeInput::ReadIndex { reply } => self.pending_reads.push(reply),
            NodeInput::Message(message) => {
                if let Err(error) = self.raw.step(*message) {
                    tracing::debug!(%error, "peer message refused");
                }
            }
            NodeInput::Unreachable(peer) => self.raw.report_unreachable(peer),
            NodeInput::TransferLeader(to) => self.raw.transfer_leader(to),
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

    /// One ReadIndex for every read that arrived since the last one. Only
    /// one is in flight at a time, as in etcd: reads arriving meanwhile
    /// wait and share the next, so a busy member sends one heartbeat round
    /// per batch, not one per read.
    fn issue_reads(&mut self) {
        if self.pending_reads.is_empty() || !self.reads_in_flight.is_empty() {
            return;
        }
        let context = self.next_read_context;
        self.next_read_context += 1;
        let now = Instant::now();
        self.reads_in_flight.insert(
            context,
            ReadBatch {
                waiters: std::mem::take(&mut self.pending_reads),
                issued: now,
                created: now,
            },
        );
        self.raw.read_index(self.read_context_bytes(context));
    }

    /// A ReadIndex context as raft sees it: this member's id, then the
    /// batch number. The leader keeps pending ReadIndex requests by context
    /// and silently drops one whose context is already pending, so contexts
    /// must be unique across members, not only within one.
    fn read_context_bytes(&self, context: u64) -> Vec<u8> {
        let mut bytes = self.state.member_id().to_be_bytes().to_vec();
        bytes.extend_from_slice(&context.to_be_bytes());
        bytes
    }

    fn retry_reads(&mut self) {
        let now = Instant::now();
        self.reads_in_flight.retain(|_, batch| {
            if now.duration_since(batch.created) > READ_INDEX_EXPIRY {
                for waiter in batch.waiters.drain(..) {
                    let _ = waiter.send(Err(errors::timed_out()));
                }
                return false;
            }
            true
        });
        let stale: Vec<u64> = self
            .reads_in_flight
            .iter()
            .filter(|(_, batch)| now.duration_since(batch.issued) > READ_INDEX_RETRY)
            .map(|(context, _)| *context)
            .collect();
        for context in stale {
            if let Some(batch) = self.reads_in_flight.get_mut(&context) {
                batch.issued = now;
            }
            self.raw.read_index(self.read_context_bytes(context));
        }
    }

    /// Handles one Ready in the order raft-rs documents, with etcd's
    /// leader optimisation (Raft thesis §10.2.1).
    fn handle_ready(&mut self) {
        if !self.raw.has_ready() {
            return;
        }
        let mut ready = self.raw.ready();

        // 1. Messages first. On a leader these are appends, and sending
        //    them before our own fsync lets followers write in parallel
        //    with us; a leader's entry counts toward commit only once its
        //    own WAL has it, so this is safe.
        self.send(ready.take_messages());

        // 2. A snapshot from the leader: recorded in the WAL, handed to
        //    raft's log, and queued for the apply stage ahead of the
        //    entries that follow it, which restores the store from it.
        if !ready.snapshot().is_empty() {
            let snapshot = ready.snapshot().clone();
            let metadata = snapshot.get_metadata();
            let record = snapshot_record(metadata.index, metadata.term, metadata.get_conf_state());
            if let Err(error) = self.storage_wal.wal.save_snapshot(&record) {
                tracing::error!(%error, "WAL write failed; stopping the member");
                std::process::exit(1);
            }
            let (index, term) = (metadata.index, metadata.term);
            self.storage_wal
                .memory
                .wl()
                .apply_snapshot(snapshot.clone())
                .expect("a leader's snapshot is newer than our log");
            self.snapshot_index = index;
            let path = std::path::PathBuf::from(String::from_utf8_lossy(&snapshot.data).into_owned());
            self.send_apply(ApplyInput::Restore { index, term, path });
        }

        // 3. Committed entries go to the apply stage. They are durable on
        //    a quorum already, so applying them need not wait for our own
        //    fsync below.
        self.send_committed(ready.take_committed_entries());

        // 4. New entries and the hard state: one WAL write and one
        //    fdatasync for the whole Ready. A failure stops the member.
        let entries = ready.take_entries();
        let hard_state = ready.hs().cloned();
        tracing::debug!(entries = entries.len(), "ready");
        if let Err(error) = self.storage_wal.persist(&entries, hard_state.as_ref()) {
            tracing::error!(%error, "WAL write failed; stopping the member");
            std::process::exit(1);
        }

        // 5. Read states: each answers one batch of reads once applied.
        for read_state in ready.take_read_states() {
            let context = read_state
                .request_ctx
                .strip_prefix(&self.state.member_id().to_be_bytes()[..])
                .and_then(|rest| rest.try_into().ok())
                .map(u64::from_be_bytes);
            if let Some(batch) = context.and_then(|c| self.reads_in_flight.remove(&c)) {
                self.send_apply(ApplyInput::Read {
                    index: read_state.index,
                    waiters: batch.waiters,
                });
            }
        }

        // 6. Messages that may only leave after the fsync: a follower's
        //    append acknowledgements and votes.
        self.send(ready.take_persisted_messages());

        // 7. Advance, then the light ready: commit index, more messages and
        //    committed entries.
        let mut light = self.raw.advance(ready);
        if let Some(commit) = light.commit_index() {
            self.storage_wal.memory.wl().mut_hard_state().commit = commit;
        }
        self.send(light.take_messages());
        self.send_committed(light.take_committed_entries());
        self.raw.advance_apply();
        self.maybe_snapshot();

        self.state.term.store(self.raw.raft.term, Ordering::Release);
        self.state.leader.store(self.raw.raft.leader_id, Ordering::Release);
        self.state
            .committed_index
            .store(self.raw.raft.raft_log.committed, Ordering::Release);
    }

    /// Sends messages to peers. A snapshot's transfer reports back with
    /// `NodeInput::SnapshotStatus` when it ends.
    fn send(&mut self, messages: Vec<Message>) {
        self.transport.send(messages);
    }

    /// Every `--snapshot-count` applied entries: flush the store, record a
    /// snapshot at the applied index in the WAL and the marker, release the
    /// WAL segments replay no longer needs, and compact raft's in-memory
    /// log, keeping some entries for followers slightly behind.
    fn maybe_snapshot(&mut self) {
        let applied = self.state.applied_index.load(Ordering::Acquire);
        let count = self.state.config.snapshot_count.max(1);
        if applied < self.snapshot_index + count {
            return;
        }
        let Ok(term) = self.log.term(applied) else { return };
        if let Err(error) = self.state.store.flush() {
            tracing::error!(%error, "could not flush the store; stopping the member");
            std::process::exit(1);
        }
        let conf_state = self.log.conf_state();
        let record = snapshot_record(applied, term, &conf_state);
        let wal = &mut self.storage_wal.wal;
        if let Err(error) = wal.save_snapshot(&record) {
            tracing::error!(%error, "WAL write failed; stopping the member");
            std::process::exit(1);
        }
        if let Err(error) = self.state.record_snapshot(applied, term) {
            tracing::error!(%error, "could not record a snapshot; stopping the member");
            std::process::exit(1);
        }
        let released = match wal.release_to(applied) {
            Ok(released) => released,
            Err(error) => {
                tracing::error!(%error, "could not release WAL segments; stopping the member");
                std::process::exit(1);
            }
        };
        let keep = count.min(SNAPSHOT_CATCH_UP_ENTRIES_MAX);
        let first_kept = applied.saturating_sub(keep).max(1);
        if let Err(error) = self.log.compact(first_kept) {
            tracing::warn!(%error, "could not compact the in-memory log");
        }
        self.snapshot_index = applied;
        tracing::info!(index = applied, term, released, first_kept, "took a snapshot");
    }

    fn send_committed(&mut self, entries: Vec<Entry>) {
        if !entries.is_empty() {
            tracing::debug!(entries = entries.len(), "committed");
            self.send_apply(ApplyInput::Entries(entries));
        }
    }

    fn send_apply(&mut self, input: ApplyInput) {
        // The apply queue is bounded; blocking here slows raft to the
        // store's pace, which is the backpressure wanted.
        if self.apply.send(input).is_err() {
            tracing::error!("the apply stage stopped; stopping the member");
            std::process::exit(1);
        }
    }
}

/// The WAL's record of a raft snapshot at `index`.
fn snapshot_record(index: u64, term: u64, conf_state: &raft::prelude::ConfState) -> wal::SnapshotMeta {
    wal::SnapshotMeta {
        index,
        term,
        conf_state: wal::ConfState {
            voters: conf_state.voters.clone(),
            learners: conf_state.learners.clone(),
            ..wal::ConfState::default()
        },
    }
}
