//! The simulated cluster: its members (`member.rs`), the network between
//! them (`network.rs`) and the clients' way in (`clients.rs`), on one
//! thread and one simulated clock. [`SimCluster::run_for`] is the loop:
//! let the clients' tasks run, deliver the messages due, take every
//! member's due turns in id order, and when nothing is left to do at this
//! instant, move the clock to the next thing due (a member's wake, a
//! delivery), at most [`QUANTUM`] ahead, so that the clients' own timers
//! fire close to their time.

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::clients::{Clients, Slot};
use super::clock::SimClock;
use super::disk::CrashLoss;
use super::member::{SimMember, Stopped};
use super::network::{NetFaults, NetStats, Network};
use super::rng::Rng;
use super::watch::end_streams;
use kv_server::driver::{Clock, Published};

/// The longest step of the simulated clock: tokio's timers are kept at
/// millisecond precision, so nothing due is passed by more than that.
pub const QUANTUM: Duration = Duration::from_millis(1);

/// Times the loop runs at one instant while members still have work,
/// before it moves the clock on anyway: messages take at least their
/// delay, so work at one instant ends; this only bounds a bug.
const SAME_INSTANT_ROUNDS_MAX: usize = 64;

/// Times the clients' tasks are let run between rounds: a call's hop from
/// a woken task to the member's queue takes one.
const CLIENT_YIELDS: usize = 2;

/// Yields a crash waits for the torn-down member's callers to let go of
/// its store before it counts as a failure.
const RELEASE_YIELDS_MAX: usize = 256;

/// Conflicting revisions kept for the report: one shows the bug.
pub const EVENT_CONFLICTS_KEPT: usize = 10;

/// The cluster's shape and timing.
#[derive(Debug, Clone)]
pub struct SimSpec {
    pub members: usize,
    pub seed: u64,
    /// Where the members' data directories go (a temporary file system).
    pub root: PathBuf,
    pub heartbeat: Duration,
    /// The election timeout, in heartbeats.
    pub election_ticks: usize,
    /// `--snapshot-count`: applied entries between snapshots.
    pub snapshot_count: u64,
    /// `--experimental-snapshot-catchup-entries`: entries kept for a
    /// follower behind; one further behind gets a snapshot.
    pub catch_up_entries: u64,
}

/// Why a member did not start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartError {
    /// It is joining and learned no membership that lists it (no member
    /// ran, or those that ran are behind): a real one would keep asking,
    /// so start it again later.
    NotJoinedYet(String),
    /// It refused to start, and why.
    Refused(String),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::NotJoinedYet(why) => write!(f, "could not join yet: {why}"),
            StartError::Refused(why) => write!(f, "{why}"),
        }
    }
}

/// What ends a seed as failed, whatever the clients saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// A member stopped on a fault the run did not inject, or panicked.
    Stopped { member: usize, why: Stopped },
    /// A crashed member's store was still held by something.
    StoreHeld { member: usize },
    /// The data directory could not be set up.
    Setup(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Stopped { member, why } => write!(f, "member {member} stopped: {why}"),
            Failure::StoreHeld { member } => write!(f, "member {member}'s store outlived its crash"),
            Failure::Setup(why) => write!(f, "setup: {why}"),
        }
    }
}

/// What happened to the members, counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimStats {
    pub rounds: u64,
    pub crashes: u64,
    pub restarts: u64,
    /// Members stopped by an injected fsync failure.
    pub fsync_faults: u64,
    pub loss: CrashLoss,
    /// Applied entries crashes took from the stores (their open batches),
    /// which the WAL gave back at the restart.
    pub entries_replayed: u64,
    /// Applied batches the record of changes missed (see
    /// `SimMember::take_changes`): a revision only they changed is then
    /// missing from `SimCluster::applied_events`.
    pub changes_missed: u64,
}

/// A snapshot on its way: when it arrives, from and to which member, the
/// message and the store's contents.
struct SnapshotInFlight {
    at: Instant,
    from: usize,
    to: usize,
    message: raft::prelude::Message,
    data: Vec<u8>,
}

pub struct SimCluster {
    spec: SimSpec,
    snapshots: Vec<SnapshotInFlight>,
    clock: SimClock,
    rng: Rng,
    network: Network,
    members: Vec<SimMember>,
    ids: Vec<u64>,
    slots: Arc<Mutex<Vec<Slot>>>,
    stats: SimStats,
    /// Members that joined after the start ([`SimCluster::replace`]).
    joined: u32,
    /// Each member's applied index when it last crashed.
    applied_at_crash: Vec<Option<u64>>,
    /// Every revision's changes (`record_changes`).
    events: BTreeMap<i64, Vec<mvcc::Event>>,
    event_conflicts: Vec<String>,
    _root: tempfile::TempDir,
}

impl SimCluster {
    /// Creates and starts the members. Must run on the simulator's
    /// runtime (current-thread, time paused).
    pub fn new(spec: SimSpec) -> Result<SimCluster, Failure> {
        let setup = |e: &dyn std::fmt::Display| Failure::Setup(e.to_string());
        let root = tempfile::Builder::new()
            .prefix("kv-sim-")
            .tempdir_in(&spec.root)
            .map_err(|e| setup(&e))?;
        let mut rng = Rng::new(spec.seed);
        let clock = SimClock::start();
        let mut members = Vec::new();
        for index in 0..spec.members {
            let config = member_config(&spec, index, &root.path().join(format!("m{index}"))).map_err(|e| setup(&e))?;
            members.push(SimMember::new(0, config));
        }
        let network = Network::new(rng.fork());
        let size = spec.members;
        let slots = Arc::new(Mutex::new(vec![Slot::default(); size]));
        let mut cluster = SimCluster {
            spec,
            snapshots: Vec::new(),
            clock,
            rng,
            network,
            ids: vec![0; size],
            members,
            slots,
            stats: SimStats::default(),
            joined: 0,
            applied_at_crash: vec![None; size],
            events: BTreeMap::new(),
            event_conflicts: Vec::new(),
            _root: root,
        };
        for index in 0..cluster.members.len() {
            cluster.start(index).map_err(|e| Failure::Setup(e.to_string()))?;
        }
        Ok(cluster)
    }

    pub fn clients(&self) -> Clients {
        Clients {
            slots: self.slots.clone(),
            clock: self.clock,
        }
    }

    /// Member `index`'s raft id.
    pub fn id(&self, index: usize) -> u64 {
        self.ids[index]
    }

    pub fn size(&self) -> usize {
        self.members.len()
    }

    pub fn elapsed(&self) -> Duration {
        self.clock.elapsed()
    }

    pub fn stats(&self) -> SimStats {
        self.stats.clone()
    }

    pub fn net_stats(&self) -> NetStats {
        self.network.stats()
    }

    pub fn is_running(&self, member: usize) -> bool {
        self.members[member].is_running()
    }

    /// Whether every member runs and has applied the same membership, with
    /// no learner in it. It sees only changes the members have applied:
    /// with no replacement under way (every change the simulator makes is
    /// one), none is then still on its way to a member.
    pub fn membership_settled(&self) -> bool {
        let mut views = self.members.iter().map(|m| {
            m.member().map(|member| {
                let membership = member.membership();
                let mut voters = membership.voter_ids();
                voters.sort_unstable();
                (voters, membership.learner_count())
            })
        });
        let Some(Some(first)) = views.next() else {
            return false;
        };
        first.1 == 0 && views.all(|view| view.as_ref() == Some(&first))
    }

    /// The members whose raft loop is blocked in a WAL sync now.
    pub fn syncing(&self) -> Vec<usize> {
        let now = self.clock.now();
        (0..self.members.len())
            .filter(|&m| self.members[m].is_syncing(now))
            .collect()
    }

    /// Starts member `member` from its data directory, its election
    /// timeout drawn anew; why it could not.
    fn start(&mut self, index: usize) -> Result<(), StartError> {
        let low = self.spec.election_ticks as u64;
        let ticks = self.rng.between(low, 2 * low - 1) as usize;
        let entropy_seed = self.rng.next_u64();
        // A joining member asks a running member for the membership: the
        // one furthest along.
        let members = self
            .members
            .iter()
            .filter_map(|m| m.member())
            .max_by_key(|running| running.applied_index())
            .map(|running| running.membership().record());
        let member = &mut self.members[index];
        member
            .start(self.clock, ticks, entropy_seed, members)
            .map_err(|error| match error {
                kv_server::driver::Error::Join(why) => StartError::NotJoinedYet(why),
                other => StartError::Refused(other.to_string()),
            })?;
        let core = member.member().expect("just started").clone();
        member.id = core.member_id();
        self.ids[index] = member.id;
        self.slots.lock()[index].member = Some(core);
        Ok(())
    }

    /// The peer URL of the next member to join (each new member has its
    /// own): what a member add names before [`SimCluster::replace`].
    pub fn next_joining_url(&self) -> String {
        kv_server::driver::peer_url(self.joining_number())
    }

    /// The number (`m<number>`, its URL and directory) of the next member
    /// to join: the first members are numbered from 0, each joiner after.
    fn joining_number(&self) -> usize {
        self.spec.members + self.joined as usize
    }

    /// Replaces member `index`, which must be down and removed from the
    /// membership, with a new member of empty data joining at
    /// [`SimCluster::next_joining_url`] (which a member add has named),
    /// as an operator replaces a lost member; why it could not start.
    pub fn replace(&mut self, index: usize) -> Result<(), String> {
        if self.members[index].is_running() {
            return Err(format!("member {index} still runs"));
        }
        let number = self.joining_number();
        let dir = self._root.path().join(format!("m{number}"));
        let config = joining_config(&self.spec, number, &dir)?;
        let previous = std::mem::replace(&mut self.members[index], SimMember::new(0, config));
        if let Err(why) = self.start(index) {
            self.members[index] = previous;
            return Err(why.to_string());
        }
        self.joined += 1;
        Ok(())
    }

    /// Runs the cluster for `span` of simulated time.
    pub async fn run_for(&mut self, span: Duration) -> Result<(), Failure> {
        let end = self.clock.now() + span;
        let mut rounds_here = 0;
        loop {
            for _ in 0..CLIENT_YIELDS {
                tokio::task::yield_now().await;
            }
            let now = self.clock.now();
            let busy = self.round(now).await?;
            self.stats.rounds += 1;
            if busy && rounds_here < SAME_INSTANT_ROUNDS_MAX {
                rounds_here += 1;
                continue;
            }
            rounds_here = 0;
            if now >= end {
                return Ok(());
            }
            let next = self.next_due(now, end);
            tokio::time::advance(next.saturating_duration_since(now).max(Duration::from_micros(1))).await;
        }
    }

    /// When something is next due after `now`, at most a quantum on, and
    /// not past `end`.
    fn next_due(&self, now: Instant, end: Instant) -> Instant {
        let mut next = (now + QUANTUM).min(end);
        if let Some(due) = self.network.next_due() {
            next = next.min(due);
        }
        for snapshot in &self.snapshots {
            next = next.min(snapshot.at);
        }
        for member in &self.members {
            if let Some(wake) = member.next_wake(now) {
                next = next.min(wake);
            }
        }
        next
    }

    /// Starts carrying a snapshot `from` sent: the store's contents now
    /// (as the real sender dumps them when it starts), arriving later.
    fn send_snapshot(&mut self, now: Instant, from: usize, message: raft::prelude::Message) {
        let to = self.ids.iter().position(|id| *id == message.to);
        match (to, self.members[from].store_snapshot()) {
            (Some(to), Some(data)) => {
                let at = self.network.snapshot_arrival(now);
                self.snapshots.push(SnapshotInFlight {
                    at,
                    from,
                    to,
                    message,
                    data,
                });
            }
            _ => self.members[from].snapshot_sent(message.to, true),
        }
    }

    /// Delivers the snapshots due at `now`, in the order they were sent,
    /// and tells each sender how its transfer ended.
    fn deliver_snapshots(&mut self, now: Instant) {
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.snapshots)
            .into_iter()
            .partition(|s| s.at <= now);
        self.snapshots = later;
        for snapshot in due {
            let to_id = snapshot.message.to;
            let cut = self.network.is_cut(snapshot.message.from, to_id);
            let taken = !cut && self.members[snapshot.to].receive_snapshot(snapshot.message, &snapshot.data);
            self.members[snapshot.from].snapshot_sent(to_id, !taken);
        }
    }

    /// One round at `now`: deliveries, then each member's turns.
    async fn round(&mut self, now: Instant) -> Result<bool, Failure> {
        self.deliver_snapshots(now);
        for message in self.network.due(now) {
            if let Some(index) = self.ids.iter().position(|id| *id == message.to) {
                self.members[index].deliver(message);
            }
        }
        let mut busy = false;
        for index in 0..self.members.len() {
            let rng = &mut self.rng;
            let stepped = self.members[index].step(now, &mut |low, high| rng.between(low, high));
            match stepped {
                Ok((did, sent)) => {
                    busy |= did;
                    self.record_changes(index);
                    for snapshot in self.network.send(now, sent) {
                        self.send_snapshot(now, index, snapshot);
                    }
                }
                Err(why) => self.stopped(index, why).await?,
            }
        }
        Ok(busy)
    }

    /// Adds what member `index` applied since the last look to the record
    /// of every revision's changes; a revision it applied otherwise than
    /// another member did is a conflict.
    fn record_changes(&mut self, index: usize) {
        let (taken, missed) = self.members[index].take_changes();
        self.stats.changes_missed += missed;
        for published in taken {
            let Published::Changes(changes) = &*published else {
                continue;
            };
            let Some(events) = &changes.events else {
                self.stats.changes_missed += 1;
                continue;
            };
            for revision in changes.first..=changes.last {
                let at: Vec<mvcc::Event> = events
                    .iter()
                    .filter(|e| e.kv.mod_revision == revision)
                    .cloned()
                    .collect();
                match self.events.entry(revision) {
                    Entry::Vacant(vacant) => {
                        vacant.insert(at);
                    }
                    Entry::Occupied(known) if *known.get() != at => {
                        if self.event_conflicts.len() < EVENT_CONFLICTS_KEPT {
                            self.event_conflicts.push(format!(
                                "member {index} applied revision {revision} as {at:?}, another member as {:?}",
                                known.get()
                            ));
                        }
                    }
                    Entry::Occupied(_) => {}
                }
            }
        }
    }

    /// Every revision's changes, as the members' apply stages published
    /// them: what happened, for the watchers' checks.
    pub fn applied_events(&self) -> &BTreeMap<i64, Vec<mvcc::Event>> {
        &self.events
    }

    /// Revisions members applied differently (at most
    /// [`EVENT_CONFLICTS_KEPT`]).
    pub fn event_conflicts(&self) -> &[String] {
        &self.event_conflicts
    }

    /// Member `index` stopped: fine if on an fsync failure the run
    /// injected (it is then down, as a crashed member), a failure if not.
    async fn stopped(&mut self, index: usize, why: Stopped) -> Result<(), Failure> {
        let injected = matches!(&why, Stopped::Fault(_)) && self.members[index].disk.failed_syncs() > 0;
        if !injected {
            return Err(Failure::Stopped { member: index, why });
        }
        self.stats.fsync_faults += 1;
        self.crash(index).await.map(|_| ())
    }

    /// Crashes member `index` (see `member.rs`); what its disk lost.
    pub async fn crash(&mut self, index: usize) -> Result<CrashLoss, Failure> {
        self.record_changes(index);
        self.applied_at_crash[index] = self.applied_index(index);
        let crashed = {
            let mut slots = self.slots.lock();
            slots[index].member = None;
            end_streams(&mut slots[index].streams);
            slots[index].crashed.clone()
        };
        crashed.notify_waiters();
        let Some(store) = self.members[index].tear_down() else {
            return Ok(CrashLoss::default());
        };
        let mut yields = 0;
        while store.strong_count() > 0 {
            if yields == RELEASE_YIELDS_MAX {
                return Err(Failure::StoreHeld { member: index });
            }
            tokio::task::yield_now().await;
            yields += 1;
        }
        let loss = self.members[index]
            .disk
            .crash(&mut self.rng)
            .map_err(|e| Failure::Setup(format!("reverting member {index}'s unsynced writes: {e}")))?;
        self.stats.crashes += 1;
        self.stats.loss.unsynced += loss.unsynced;
        self.stats.loss.cut_short += loss.cut_short;
        self.stats.loss.lost += loss.lost;
        self.stats.loss.torn += loss.torn;
        Ok(loss)
    }

    /// Restarts a crashed member; why it would not start, if it did not
    /// (for a member whose disk flipped a bit, it must not).
    pub fn restart(&mut self, index: usize) -> Result<(), StartError> {
        if self.members[index].is_running() {
            return Ok(());
        }
        self.start(index)?;
        let at_crash = self.applied_at_crash[index].take().unwrap_or(0);
        let now = self.applied_index(index).unwrap_or(0);
        self.stats.entries_replayed += at_crash.saturating_sub(now);
        self.stats.restarts += 1;
        Ok(())
    }

    /// Makes member `index`'s disk fail every fdatasync from now on, until
    /// the member's crash.
    pub fn fail_syncs(&mut self, index: usize) {
        self.members[index].disk.fail_syncs();
    }

    /// Pauses member `index` for `span`.
    pub fn pause(&mut self, index: usize, span: Duration) {
        let until = self.clock.now() + span;
        self.members[index].pause(until);
    }

    /// Makes member `index`'s fdatasync work again.
    pub fn mend_syncs(&mut self, index: usize) {
        self.members[index].disk.mend();
    }

    /// Flips a bit of a crashed member's synced log; where, if it could.
    pub fn flip_bit(&mut self, index: usize) -> Option<(u64, u64)> {
        self.members[index].disk.flip_bit(&mut self.rng).ok().flatten()
    }

    /// Each sync of member `index`'s disk takes between these bounds.
    pub fn set_sync_latency(&mut self, index: usize, low: Duration, high: Duration) {
        self.members[index].sync_latency_us = (low.as_micros() as u64, high.as_micros() as u64);
    }

    /// Member `index`'s disk syncs as a healthy one again.
    pub fn heal_sync_latency(&mut self, index: usize) {
        self.members[index].sync_latency_us = super::member::SYNC_LATENCY_US;
    }

    pub fn set_net_faults(&mut self, faults: NetFaults) {
        self.network.set_faults(faults);
    }

    /// Cuts the members in `side` off from the rest.
    pub fn partition(&mut self, side: &[usize]) {
        let side: Vec<u64> = side.iter().map(|&i| self.ids[i]).collect();
        self.network.partition(&side, &self.ids);
    }

    pub fn heal(&mut self) {
        self.network.heal();
    }

    /// The leader member `index` knows of (0: none, or down).
    pub fn leader(&self, index: usize) -> u64 {
        self.members[index].member().map_or(0, |m| m.leader())
    }

    /// Member `index`'s store's current revision, if it runs.
    pub fn current_revision(&self, index: usize) -> Option<i64> {
        self.members[index].member().map(|m| m.current_revision())
    }

    /// The raft index member `index` applied, if it runs.
    pub fn applied_index(&self, index: usize) -> Option<u64> {
        self.members[index].member().map(|m| m.applied_index())
    }

    /// The member that leads and has committed an entry of its term (so
    /// its commit index covers everything committed before it), if one
    /// does.
    pub fn settled_leader(&self) -> Option<usize> {
        (0..self.members.len()).find(|&m| self.members[m].leads_settled())
    }

    /// Member `index`'s commit index, as its raft loop last saw it.
    pub fn committed_index(&self, index: usize) -> Option<u64> {
        self.members[index].member().map(|m| m.committed_index())
    }

    /// Member `index`'s hash of its keys at `revision` (etcd's HashKV):
    /// the hash and the compact revision.
    pub fn hash_kv(&self, index: usize, revision: i64) -> Result<(u32, i64), String> {
        let member = self.members[index].member().ok_or("the member is down")?;
        let hash = member.hash_kv(revision).map_err(|e| e.to_string())?;
        Ok((hash.hash, hash.compact_revision))
    }

    /// Every key member `index`'s store holds now, whole (key, value,
    /// create, mod revision, version, lease), read directly.
    pub fn all_keys(&self, index: usize) -> Result<Vec<mvcc::KeyValue>, String> {
        let member = self.members[index].member().ok_or("the member is down")?;
        let request = mvcc::RangeRequest {
            key: vec![0],
            range_end: vec![0],
            ..Default::default()
        };
        Ok(member.read_range(&request).map_err(|e| e.to_string())?.kvs)
    }

    /// What `key` held at `revision` in member `index`'s store, read
    /// directly (no ReadIndex).
    pub fn read_at(&self, index: usize, key: &str, revision: i64) -> Result<Option<(String, i64)>, String> {
        let member = self.members[index].member().ok_or("the member is down")?;
        let request = mvcc::RangeRequest {
            key: key.as_bytes().to_vec(),
            revision,
            ..Default::default()
        };
        let response = member.read_range(&request).map_err(|e| e.to_string())?;
        Ok(response
            .kvs
            .first()
            .map(|kv| (String::from_utf8_lossy(&kv.value).into_owned(), kv.mod_revision)))
    }

    /// Defragments member `index`'s store, on this thread.
    pub fn defragment(&self, index: usize) -> Result<(), String> {
        let member = self.members[index].member().ok_or("the member is down")?;
        member.defragment_blocking().map_err(|e| e.to_string())
    }

    /// Draws from the cluster's generator (for a caller's choices that
    /// must follow the seed too).
    pub fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }
}

/// Member `index`'s flags (`flags::loopback`: the simulated network
/// carries the messages), with the spec's timing and snapshot window.
fn member_config(spec: &SimSpec, index: usize, dir: &std::path::Path) -> Result<kv_server::config::Config, String> {
    let election = spec.heartbeat * spec.election_ticks as u32;
    let args = kv_server::driver::member_args(spec.members, index, dir, spec.heartbeat, election);
    parse_config(spec, args)
}

/// The flags of the member numbered `number` (counting the first
/// members), joining the running cluster with empty data in `dir`.
fn joining_config(spec: &SimSpec, number: usize, dir: &std::path::Path) -> Result<kv_server::config::Config, String> {
    let election = spec.heartbeat * spec.election_ticks as u32;
    let args = kv_server::driver::joining_args(spec.members, number, dir, spec.heartbeat, election);
    parse_config(spec, args)
}

/// Parses a member's flags with the cluster's own: its snapshot settings,
/// and membership changes not refused for a lack of calm (the faults never
/// leave the 5 s the strict check wants; see `member/reconfigure.rs`).
fn parse_config(spec: &SimSpec, mut args: Vec<String>) -> Result<kv_server::config::Config, String> {
    args.extend([
        "--snapshot-count".into(),
        spec.snapshot_count.to_string(),
        "--experimental-snapshot-catchup-entries".into(),
        spec.catch_up_entries.to_string(),
        "--strict-reconfig-check=false".into(),
    ]);
    kv_server::flags::parse(&args, &[])
        .map(|parsed| parsed.config)
        .map_err(|e| e.to_string())
}
