//! The simulated network between members: every raft message a member's
//! loop sends is queued with a delay drawn from the seed, and may be
//! dropped, duplicated (the copy with its own delay) or, through the
//! delays, reordered; a partition cuts pairs of members both ways, for
//! messages in flight too.
//!
//! A proposal a follower forwards to the leader (`MsgPropose`) is never
//! duplicated: the real transport is a TCP stream that never resends a
//! batch (`peer/transport.rs`, `peer/link.rs`), and raft appends a proposal as often as it
//! arrives, so a copy would apply the write twice. (The simulator found
//! this: a put answered at one revision, and the key held it at the next.)
//! Every other message raft must take twice, and does. Delivery is in (time, send order), so the same
//! seed delivers the same messages in the same order.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use raft::prelude::{Message, MessageType};

use super::disk::SimDisk;
use super::rng::Rng;
use kv_server::driver::Outbox;

/// Messages in flight at most; past it the network drops what is sent, as
/// a full socket buffer would. Far above what 5 members exchange between
/// two deliveries.
pub const IN_FLIGHT_MAX: usize = 100_000;

/// How the network misbehaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetFaults {
    pub drop_per_million: u32,
    pub duplicate_per_million: u32,
    pub delay_min: Duration,
    pub delay_max: Duration,
}

impl Default for NetFaults {
    /// A healthy loopback: a tenth of a millisecond to a millisecond.
    fn default() -> NetFaults {
        NetFaults {
            drop_per_million: 0,
            duplicate_per_million: 0,
            delay_min: Duration::from_micros(100),
            delay_max: Duration::from_millis(1),
        }
    }
}

/// What the network did, counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetStats {
    pub sent: u64,
    pub delivered: u64,
    pub dropped: u64,
    pub duplicated: u64,
    /// Snapshot messages, carried apart (`cluster.rs`).
    pub snapshots: u64,
}

/// A member's outbox: what its raft loop sent in a turn, until the
/// simulator takes it into the network, split by whether the loop sent it
/// before or after the turn's first WAL sync (those after leave only once
/// the sync is over).
#[derive(Debug, Clone)]
pub struct SimOutbox {
    sent: Arc<Mutex<Sent>>,
    disk: Arc<SimDisk>,
}

#[derive(Debug, Default)]
struct Sent {
    /// The disk's sync count when the turn began.
    syncs_before: u64,
    before_sync: Vec<Message>,
    after_sync: Vec<Message>,
}

impl SimOutbox {
    pub fn new(disk: Arc<SimDisk>) -> SimOutbox {
        SimOutbox {
            sent: Arc::default(),
            disk,
        }
    }

    /// A turn begins.
    pub fn begin(&self) {
        self.sent.lock().syncs_before = self.disk.syncs();
    }

    /// What the turn sent: (before its first sync, after it).
    pub fn take(&self) -> (Vec<Message>, Vec<Message>) {
        let mut sent = self.sent.lock();
        (
            std::mem::take(&mut sent.before_sync),
            std::mem::take(&mut sent.after_sync),
        )
    }
}

impl Outbox for SimOutbox {
    fn send(&mut self, messages: Vec<Message>) {
        let synced = self.disk.syncs();
        let mut sent = self.sent.lock();
        match synced > sent.syncs_before {
            true => sent.after_sync.extend(messages),
            false => sent.before_sync.extend(messages),
        }
    }
}

/// The network.
#[derive(Debug)]
pub struct Network {
    rng: Rng,
    faults: NetFaults,
    /// Pairs (lower id, higher id) that cannot reach each other.
    cut: BTreeSet<(u64, u64)>,
    in_flight: BTreeMap<(Instant, u64), Message>,
    sends: u64,
    stats: NetStats,
}

fn pair(a: u64, b: u64) -> (u64, u64) {
    (a.min(b), a.max(b))
}

impl Network {
    pub fn new(rng: Rng) -> Network {
        Network {
            rng,
            faults: NetFaults::default(),
            cut: BTreeSet::new(),
            in_flight: BTreeMap::new(),
            sends: 0,
            stats: NetStats::default(),
        }
    }

    pub fn set_faults(&mut self, faults: NetFaults) {
        self.faults = faults;
    }

    pub fn faults(&self) -> NetFaults {
        self.faults
    }

    pub fn stats(&self) -> NetStats {
        self.stats
    }

    /// Cuts every member of `side` off from every member not in it.
    pub fn partition(&mut self, side: &[u64], members: &[u64]) {
        for &a in side {
            for &b in members.iter().filter(|b| !side.contains(b)) {
                self.cut.insert(pair(a, b));
            }
        }
    }

    /// Ends every partition.
    pub fn heal(&mut self) {
        self.cut.clear();
    }

    pub fn is_cut(&self, a: u64, b: u64) -> bool {
        self.cut.contains(&pair(a, b))
    }

    /// Queues what a member sent at `now`; returns its snapshot messages,
    /// which the caller carries with the store's contents, as the real
    /// transport streams them apart from the raft messages.
    pub fn send(&mut self, now: Instant, messages: Vec<Message>) -> Vec<Message> {
        let mut snapshots = Vec::new();
        for message in messages {
            self.stats.sent += 1;
            if message.get_msg_type() == MessageType::MsgSnapshot {
                self.stats.snapshots += 1;
                snapshots.push(message);
                continue;
            }
            if self.is_cut(message.from, message.to)
                || self.rng.chance(self.faults.drop_per_million)
                || self.in_flight.len() >= IN_FLIGHT_MAX
            {
                self.stats.dropped += 1;
                continue;
            }
            let proposal = message.get_msg_type() == MessageType::MsgPropose;
            if !proposal && self.rng.chance(self.faults.duplicate_per_million) {
                self.stats.duplicated += 1;
                self.queue(now, message.clone());
            }
            self.queue(now, message);
        }
        snapshots
    }

    /// When a snapshot sent at `now` arrives: its transfer takes a few
    /// deliveries' time.
    pub fn snapshot_arrival(&mut self, now: Instant) -> Instant {
        let high = (self.faults.delay_max.as_micros() as u64).max(1) * 4;
        now + Duration::from_micros(self.rng.between(high / 4, high))
    }

    fn queue(&mut self, now: Instant, message: Message) {
        let low = self.faults.delay_min.as_micros() as u64;
        let high = (self.faults.delay_max.as_micros() as u64).max(low);
        let at = now + Duration::from_micros(self.rng.between(low, high));
        self.sends += 1;
        self.in_flight.insert((at, self.sends), message);
    }

    /// The messages due by `now`, in delivery order; those between members
    /// cut off since they were sent are dropped.
    pub fn due(&mut self, now: Instant) -> Vec<Message> {
        let mut due = Vec::new();
        while let Some(entry) = self.in_flight.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let message = entry.remove();
            if self.is_cut(message.from, message.to) {
                self.stats.dropped += 1;
                continue;
            }
            self.stats.delivered += 1;
            due.push(message);
        }
        due
    }

    /// When the next message is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.in_flight.keys().next().map(|(at, _)| *at)
    }
}
