//! One simulated member: wired as the server wires one
//! (`server::wiring`), but not spawned. The simulator holds its raft
//! loop, its apply stage and their input queues, and takes their turns
//! itself on one thread, at simulated times: the raft loop's queued inputs
//! into one `Node::turn`, then every queued apply input into
//! `Stage::take`, a due compaction step, and the open batch's commit once
//! the stage's wait would have ended without input. This mirrors
//! `Node::run` and `Stage::run` step for step, with the clock and the
//! queue waits made the simulator's.
//!
//! A crash tears the member down in the running process: the disk stops
//! making syncs durable, the store loses its open batch (what it handed
//! sled stays: sled's own recovery is not simulated), the loop, the stage
//! and the core are dropped,
//! their waiting callers hear the member stopped, and once nothing holds
//! the store any more the disk loses or tears what was not synced. A
//! restart opens the same directory, as a restarted process would.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tokio::sync::broadcast;

use super::clock::SimClock;
use super::disk::SimDisk;
use super::network::SimOutbox;
use super::rng::SeededEntropy;
use kv_server::config::Config;
use kv_server::driver::{
    membership_from, wire, ApplyReceiver, DataDir, Error, Fatal, Member, Node, NodeInput, NodeReceiver, NodeSender,
    Published, Stage, World, INPUTS_PER_READY_MAX,
};
use kv_server::proto::kvserverpb::MembershipRecord;

/// WAL segments of a simulated member: small, so that a run cuts and
/// releases segments, and a temporary file system holds many members.
pub const SIM_SEGMENT_BYTES: u64 = 256 << 10;

/// A healthy disk's fdatasync, in microseconds: a datacenter SSD's.
pub const SYNC_LATENCY_US: (u64, u64) = (50, 500);

/// A member's parts while it runs.
struct Running {
    member: Arc<Member>,
    node: Node,
    node_inputs: NodeReceiver,
    node_sender: NodeSender,
    stage: Stage,
    apply_inputs: ApplyReceiver,
    /// When the stage's wait for input would end (then it commits).
    stage_wake: Instant,
    store: Weak<mvcc::Store>,
    /// The store's power: cut when the member is torn down.
    power: mvcc::Power,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// What the apply stage publishes to the watch streams, every batch
    /// from the member's start on: the simulator's record of what each
    /// revision changed (`SimCluster::applied_events`).
    changes: broadcast::Receiver<Arc<Published>>,
}

/// How a member's turn ended badly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stopped {
    /// A fault stopped it (`halt.rs`).
    Fault(String),
    /// Its loop or stage panicked: an assertion failed.
    Panic(String),
}

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stopped::Fault(what) => write!(f, "fault: {what}"),
            Stopped::Panic(what) => write!(f, "panic: {what}"),
        }
    }
}

pub struct SimMember {
    pub id: u64,
    config: Config,
    pub disk: Arc<SimDisk>,
    outbox: SimOutbox,
    running: Option<Running>,
    /// Until when the raft loop is blocked in the last turn's sync: no
    /// turn of the loop before then (the apply stage, a thread of its own,
    /// goes on).
    busy_until: Option<Instant>,
    /// What the loop sent after that sync began: it leaves when the sync
    /// is over, and is lost if the member crashes first.
    held: Vec<raft::prelude::Message>,
    /// Until when the whole member is paused (as a stopped process, or a
    /// long stall of its machine): no turn of either thread before then;
    /// what peers send it waits in its queue.
    paused_until: Option<Instant>,
    /// The disk's latency per sync, drawn per sync between these bounds
    /// (in microseconds).
    pub sync_latency_us: (u64, u64),
}

impl SimMember {
    pub fn new(id: u64, config: Config) -> SimMember {
        let disk = Arc::new(SimDisk::default());
        SimMember {
            id,
            config,
            outbox: SimOutbox::new(disk.clone()),
            disk,
            running: None,
            busy_until: None,
            held: Vec::new(),
            paused_until: None,
            sync_latency_us: SYNC_LATENCY_US,
        }
    }

    pub fn is_running(&self) -> bool {
        self.running.is_some()
    }

    /// Pauses the member until `until`.
    pub fn pause(&mut self, until: Instant) {
        self.paused_until = Some(until);
    }

    /// Whether its raft loop is blocked in a sync at `now`.
    pub fn is_syncing(&self, now: Instant) -> bool {
        self.busy_until.is_some_and(|busy| now < busy)
    }

    /// Whether the member runs, leads, and has committed an entry of its
    /// term.
    pub fn leads_settled(&self) -> bool {
        self.running.as_ref().is_some_and(|r| r.node.leads_settled())
    }

    /// The core, while the member runs.
    pub fn member(&self) -> Option<&Arc<Member>> {
        self.running.as_ref().map(|r| &r.member)
    }

    /// Opens the data directory and wires the member on `clock`, its
    /// election timeout `election_ticks`, its randomness seeded with
    /// `entropy_seed`; a member joining a running
    /// cluster learns it from `members`, a running member's membership.
    pub fn start(
        &mut self,
        clock: SimClock,
        election_ticks: usize,
        entropy_seed: u64,
        members: Option<MembershipRecord>,
    ) -> Result<(), Error> {
        let options = wal::Options {
            segment_size_bytes: SIM_SEGMENT_BYTES,
            disk: self.disk.clone(),
        };
        // A member joining learns the membership from a running member's,
        // as it would ask one over gRPC.
        let join = move |config: &Config, known_id: Option<u64>| match &members {
            Some(record) => membership_from(config, record.clone(), known_id),
            None => Err(Error::Join("no member runs to ask for the membership".into())),
        };
        let power = mvcc::Power::default();
        let opened = kv_server::driver::open(&self.config, options, power.clone(), &join)?;
        let store = Arc::downgrade(&opened.store);
        let world = World {
            outbox: Some(Box::new(self.outbox.clone())),
            clock: Arc::new(clock),
            election_ticks: Some(election_ticks),
            entropy: Arc::new(SeededEntropy::new(entropy_seed)),
        };
        let wired = wire(&self.config, opened, &tokio::runtime::Handle::current(), world)?;
        let tasks = vec![tokio::spawn(wired.member.clone().revoke_expired_leases())];
        let changes = wired.member.subscribe_changes();
        let now = kv_server::driver::Clock::now(&clock);
        self.running = Some(Running {
            stage_wake: wired.stage.next_wake(now),
            member: wired.member,
            node: wired.node,
            node_inputs: wired.node_inputs,
            node_sender: wired.node_sender,
            stage: wired.stage,
            apply_inputs: wired.apply_inputs,
            store,
            power,
            tasks,
            changes,
        });
        self.busy_until = None;
        self.held.clear();
        // The start's syncs (a new log's, a replay's) returned before it
        // went on, as a starting process's do: the simulator never crashes
        // a member part way through its start.
        self.disk.settle();
        Ok(())
    }

    /// What the apply stage published since the last call, and how many
    /// batches it published that the record missed (it keeps
    /// `WATCH_HUB_BATCHES`, far more than a round applies).
    pub fn take_changes(&mut self) -> (Vec<Arc<Published>>, u64) {
        let mut taken = Vec::new();
        let mut missed = 0;
        if let Some(running) = &mut self.running {
            loop {
                match running.changes.try_recv() {
                    Ok(published) => taken.push(published),
                    Err(broadcast::error::TryRecvError::Lagged(count)) => missed += count,
                    Err(_) => break,
                }
            }
        }
        (taken, missed)
    }

    /// Delivers a raft message; a full queue drops it, as the transport
    /// would.
    pub fn deliver(&self, message: raft::prelude::Message) {
        if let Some(running) = &self.running {
            let _ = running.node_sender.try_send(NodeInput::Message(Box::new(message)));
        }
    }

    /// Tells the raft loop how sending a snapshot to `to` ended.
    pub fn snapshot_sent(&self, to: u64, failed: bool) {
        if let Some(running) = &self.running {
            let _ = running.node_sender.try_send(NodeInput::SnapshotStatus { to, failed });
        }
    }

    /// The store's contents for a snapshot (`peer::snapshot_send`'s dump).
    pub fn store_snapshot(&self) -> Option<Vec<u8>> {
        let running = self.running.as_ref()?;
        running.member.store_snapshot().ok().map(|(_, data)| data)
    }

    /// Receives a snapshot as `peer::snapshot_receive` does: the data to
    /// the pending file its message names, then the message to the raft
    /// loop. Whether the member took it.
    pub fn receive_snapshot(&self, message: raft::prelude::Message, data: &[u8]) -> bool {
        let Some(running) = &self.running else { return false };
        let metadata = message.get_snapshot().get_metadata();
        let dir = DataDir::new(self.config.data_dir());
        let temporary = dir.incoming_snapshot(metadata.index);
        let written = std::fs::write(&temporary, data)
            .and_then(|()| std::fs::rename(&temporary, dir.pending_snapshot(metadata.index, metadata.term)));
        written.is_ok()
            && running
                .node_sender
                .try_send(NodeInput::Message(Box::new(message)))
                .is_ok()
    }

    /// When the member next has something to do without input.
    pub fn next_wake(&self, now: Instant) -> Option<Instant> {
        let running = self.running.as_ref()?;
        let node = running.node.next_wake(now);
        let node = self.busy_until.map_or(node, |busy| node.max(busy));
        let wake = node.min(running.stage_wake);
        Some(self.paused_until.map_or(wake, |paused| wake.max(paused)))
    }

    /// Takes the member's turns due at `now`: whether it did anything, and
    /// the messages that leave it now.
    pub fn step(
        &mut self,
        now: Instant,
        latency: &mut dyn FnMut(u64, u64) -> u64,
    ) -> Result<(bool, Vec<raft::prelude::Message>), Stopped> {
        let Some(running) = self.running.as_mut() else {
            return Ok((false, Vec::new()));
        };
        if self.paused_until.is_some_and(|paused| now < paused) {
            return Ok((false, Vec::new()));
        }
        self.paused_until = None;
        let mut out = Vec::new();
        let blocked = self.busy_until.is_some_and(|busy| now < busy);
        if !blocked && self.busy_until.take().is_some() {
            self.disk.settle();
            out.append(&mut self.held);
        }
        self.outbox.begin();
        let syncs = self.disk.syncs();
        let snapshot_index = running.node.snapshot_index();
        let busy = guarded(|| running.step(now, !blocked))?;
        if running.node.snapshot_index() != snapshot_index {
            // The turn recorded a snapshot and, after that sync, wrote the
            // snapshot marker (or handed the apply stage a snapshot to
            // install), which this model cannot take back: a crash may
            // not cut that sync short.
            self.disk.settle();
        }
        let (before_sync, after_sync) = self.outbox.take();
        out.extend(before_sync);
        if self.disk.syncs() > syncs && self.sync_latency_us.1 > 0 {
            let (low, high) = self.sync_latency_us;
            self.busy_until = Some(now + Duration::from_micros(latency(low, high)));
            self.held.extend(after_sync);
        } else {
            if !blocked {
                // No sync under way: what this turn synced (with no
                // latency) is durable now.
                self.disk.settle();
            }
            out.extend(after_sync);
        }
        Ok((busy, out))
    }

    /// Tears the member down (see the module docs). Returns what still
    /// holds its store: the caller waits for it to go before
    /// [`SimDisk::crash`].
    pub fn tear_down(&mut self) -> Option<Weak<mvcc::Store>> {
        let running = self.running.take()?;
        self.disk.freeze();
        // The store loses its open batch, as a killed process's does.
        running.power.cut();
        for task in &running.tasks {
            task.abort();
        }
        running.member.abandon_waiters();
        let store = running.store.clone();
        drop(running);
        let _ = self.outbox.take();
        self.held.clear();
        // A stopped member is in no sync: the fault that crashes a member
        // in the middle of one must not pick it (seed 318549 crashed a
        // member lost to a flipped bit, which brought it back into the
        // restart schedule).
        self.busy_until = None;
        Some(store)
    }
}

/// Runs `body`, a panic in it made a [`Stopped::Panic`] and a fault a
/// [`Stopped::Fault`].
fn guarded<T>(body: impl FnOnce() -> Result<T, Fatal>) -> Result<T, Stopped> {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(fatal)) => Err(Stopped::Fault(fatal.to_string())),
        Err(panic) => {
            let text = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic".into());
            Err(Stopped::Panic(text))
        }
    }
}

impl Running {
    /// `Node::run`'s body at `now` (unless the loop is blocked in a sync)
    /// and `Stage::run`'s.
    fn step(&mut self, now: Instant, node_free: bool) -> Result<bool, Fatal> {
        let mut busy = false;
        let due = node_free && self.node.next_wake(now) <= now;
        let mut inputs: Vec<NodeInput> = match node_free {
            true => self.node_inputs.try_iter().take(INPUTS_PER_READY_MAX).collect(),
            false => Vec::new(),
        };
        if !inputs.is_empty() || due {
            busy = true;
            if let Some(done) = self.node.turn(&mut inputs, now)? {
                let _ = done.send(());
            }
        }
        let mut took = false;
        while let Ok(input) = self.apply_inputs.try_recv() {
            self.stage.prepare()?;
            self.stage.take(Some(input))?;
            took = true;
        }
        self.stage.prepare()?;
        if took {
            self.stage_wake = self.stage.next_wake(now);
        } else if now >= self.stage_wake {
            self.stage.take(None)?;
            self.stage_wake = self.stage.next_wake(now);
        }
        Ok(busy || took)
    }
}
