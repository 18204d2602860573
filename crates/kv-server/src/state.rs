//! What every part of a member shares: its identity, the store, raft's
//! latest term, leader and indexes, and the clients waiting on entries.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::oneshot;
use tonic::Status;

use crate::config::Config;
use crate::convert::HeaderFields;
use crate::lessor::Lessor;
use crate::membership::Membership;
use crate::watch_hub::WatchHub;

/// How a proposal ends: applied (with the store's answer), or failed.
pub type ProposalResult = Result<mvcc::Applied, Status>;

/// A linearizable read waiting for the member to apply up to its index.
pub type ReadWaiter = oneshot::Sender<Result<(), Status>>;

/// A member's client URLs as it published them through raft.
pub type ClientUrls = HashMap<u64, Vec<String>>;

pub struct MemberState {
    pub config: Config,
    pub membership: Membership,
    pub store: Arc<mvcc::Store>,
    pub term: AtomicU64,
    /// 0 while no leader is known.
    pub leader: AtomicU64,
    pub committed_index: AtomicU64,
    /// The store's size on disk, sampled by the server every 100 ms (the
    /// quota check reads this instead of asking sled per write).
    pub disk_bytes: AtomicU64,
    pub applied_index: AtomicU64,
    /// Woken each time the apply stage moves `applied_index`.
    pub applied: tokio::sync::Notify,
    /// Clients waiting for their proposal to apply, by sequence number.
    pub waiters: Mutex<HashMap<u64, oneshot::Sender<ProposalResult>>>,
    next_sequence: AtomicU64,
    /// Every member's published client URLs.
    pub client_urls: Mutex<ClientUrls>,
    /// Lease deadlines, kept while this member leads.
    pub lessor: Lessor,
    /// Index of the snapshot the marker records; serialises marker writes
    /// from the raft loop (local snapshots) and the apply stage (installs).
    snapshot_marker: Mutex<u64>,
    /// Where the apply stage publishes changes for watch streams.
    pub watch_hub: WatchHub,
}

impl MemberState {
    pub fn new(
        config: Config,
        membership: Membership,
        store: Arc<mvcc::Store>,
        client_urls: ClientUrls,
    ) -> MemberState {
        // Sequences start from the clock so that an entry proposed before a
        // restart never finds a waiter registered after it.
        let start = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        MemberState {
            config,
            membership,
            store,
            term: AtomicU64::new(0),
            leader: AtomicU64::new(0),
            committed_index: AtomicU64::new(0),
            disk_bytes: AtomicU64::new(0),
            applied_index: AtomicU64::new(0),
            applied: tokio::sync::Notify::new(),
            waiters: Mutex::new(HashMap::new()),
            next_sequence: AtomicU64::new(start),
            client_urls: Mutex::new(client_urls),
            lessor: Lessor::default(),
            snapshot_marker: Mutex::new(0),
            watch_hub: WatchHub::default(),
        }
    }

    /// Records a snapshot in the marker, unless a newer one is recorded.
    pub fn record_snapshot(&self, index: u64, term: u64) -> std::io::Result<()> {
        let mut recorded = self.snapshot_marker.lock();
        if index <= *recorded {
            return Ok(());
        }
        crate::raft_storage::write_marker(&self.config.data_dir(), index, term)?;
        *recorded = index;
        Ok(())
    }

    pub fn set_recorded_snapshot(&self, index: u64) {
        *self.snapshot_marker.lock() = index;
    }

    pub fn member_id(&self) -> u64 {
        self.membership.local_id
    }

    pub fn leader(&self) -> u64 {
        self.leader.load(Ordering::Acquire)
    }

    pub fn header_fields(&self) -> HeaderFields {
        HeaderFields {
            cluster_id: self.membership.cluster_id,
            member_id: self.membership.local_id,
            raft_term: self.term.load(Ordering::Acquire),
        }
    }

    /// Registers a waiter and returns its sequence number.
    pub fn register(&self) -> (u64, oneshot::Receiver<ProposalResult>) {
        let sequence = self.next_sequence.fetch_add(1, Ordering::Relaxed);
        let (sender, receiver) = oneshot::channel();
        self.waiters.lock().insert(sequence, sender);
        (sequence, receiver)
    }

    /// Answers the waiter for `sequence`, if it still waits.
    pub fn answer(&self, sequence: u64, result: ProposalResult) {
        if let Some(waiter) = self.waiters.lock().remove(&sequence) {
            let _ = waiter.send(result);
        }
    }

    pub fn forget(&self, sequence: u64) {
        self.waiters.lock().remove(&sequence);
    }
}
