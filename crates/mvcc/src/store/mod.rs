//! The sled implementation of the store (layout in the crate docs).
//!
//! Concurrency: one `RwLock` guards the index and the revision counters.
//! Reads hold it shared while they read the index and load values, so a
//! compaction (which holds it exclusively) never removes a value under a
//! reader. An apply holds it exclusively from its first change until the
//! new revision is published.
//!
//! Applies write into one open batch ([`Batch`]) that stays in memory,
//! read through by every read, until it is due (see
//! [`OPEN_BATCH_REVISIONS_MAX`]); only then does sled get it, as one
//! atomic sled batch with the consistent index it reaches. This is etcd's
//! batched backend commit: sled writes out (and syncs the range of) its
//! log buffer for every batch it applies, which per raft entry cost CPU
//! on sled's I/O threads and disk time the WAL's fdatasync waited behind.
//!
//! The store is split along etcd's lines (its `storage/backend`,
//! `storage/schema` and `mvcc/kvstore*.go`); this file holds what all of
//! them share: the store's state, its meta keys, and its small accessors.
//! - `backend`: the open batch and its commit to sled, and reads
//!   through the batch;
//! - `schema`: the records the server owns (alarms, auth, membership,
//!   leases);
//! - `recovery`: open, and the rebuild of the index and leases;
//! - `apply`: applying writes (`StoreTxn`) and serving reads;
//! - `compact`: compaction in steps, its hashes, HashKV, reclaim;
//! - `snapshot`: the snapshot wire format, out and back in;
//! - `defragment`: the copy into the next generation and the switch.

mod apply;
mod backend;
mod compact;
mod defragment;
mod recovery;
mod schema;
mod snapshot;

use backend::*;
use recovery::*;
use schema::*;

pub(crate) use schema::lease_key;
pub use schema::ALARM_NOSPACE;
pub(crate) use snapshot::write_item;
pub use snapshot::{RESTORE_BATCH_BYTES, SNAPSHOT_PART_BYTES_MAX};

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::{RwLock, RwLockWriteGuard};

use crate::block::Record;
use crate::compaction::{Backlog, Step, COMPACTION_BATCH_LIMIT_DEFAULT, COMPACTION_BATCH_LIMIT_MAX};
use crate::count_cache::CountCache;
use crate::defrag::{self, Copying};
use crate::directory::Directory;
use crate::error::{Error, Result};
use crate::hash::{Hasher, Keep, KeyValueHash, COMPACTION_HASHES_KEPT};
use crate::index::{RangeEnd, TreeIndex};
use crate::key_index::Generation;
use crate::key_value::{Event, EventKind, KeyValue, StoredKeyValue};
use crate::kv::{ReadView, WriteTxn};
use crate::lease::{Lease, LeaseTable, LeaseTtl};
use crate::observer::Observer;
use crate::pacing;
use crate::range;
use crate::records::{self, Overlay};
use crate::request::{
    Alarm, AlarmRequest, AlarmResponse, Applied, CompactionRequest, CompactionResponse, DeleteRangeRequest,
    DeleteRangeResponse, LeaseCheckpointRequest, LeaseGrantRequest, LeaseGrantResponse, LeaseRevokeRequest,
    LeaseRevokeResponse, PutRequest, PutResponse, RangeRequest, RangeResponse, TxnRequest, TxnResponse, WriteRequest,
    WriteResponse,
};
use crate::revision::Revision;
use crate::txn;
use crate::validate;
use crate::value_files::{self, Pointer, ValueFiles, DEAD_FILES_RECLAIM_MIN, RECLAIM_LIVE_PERCENT};
use crate::wire::AnswerBytesMax;
use crate::writes::Writes;

/// Prefix of the space holding each lease's granted TTL.
const LEASE_SPACE: u8 = b'l';
// The metadata space is prefixed 'm'; its three keys are spelled whole.
const META_CONSISTENT_INDEX: &[u8] = b"mconsistent_index";
/// The raised alarms: 12 bytes each, member id (u64) and kind (i32), big-endian.
const META_ALARMS: &[u8] = b"malarms";
/// The cluster's membership, opaque to the store (see
/// [`WriteRequest::Membership`]).
const META_MEMBERSHIP: &[u8] = b"mmembership";
/// The auth state, opaque to the store (see [`WriteRequest::Auth`]).
const META_AUTH: &[u8] = b"mauth";
pub(crate) const META_CURRENT_REVISION: &[u8] = b"mcurrent_revision";
pub(crate) const META_COMPACT_REVISION: &[u8] = b"mcompact_revision";
/// Present while a snapshot is being restored (see `restore_from`).
const META_RESTORING: &[u8] = b"mrestoring";
/// Bytes of every key and value sled holds, this record included, i64 BE
/// (Status's `dbSizeInUse`): kept by each commit, in the same sled batch,
/// so that it matches whatever prefix of the batches sled recovers.
const META_STORED_BYTES: &[u8] = b"mstored_bytes";

/// How often, and how far apart, `open` retries sled's directory lock.
/// Dropping a sled handle releases the lock only once sled's background
/// threads (its flusher, which wakes every 500 ms, and its I/O pool) have
/// let go of the file, which under load was seen to take over a second.
/// 250 tries 20 ms apart wait out five seconds of that before a lock held
/// by a live process is reported. A member opens its store once, at start,
/// so only a reopen in the same process ever waits here.
const OPEN_LOCK_TRIES: usize = 250;
const OPEN_LOCK_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);

/// Revisions the open batch holds before it goes to sled: etcd's backend
/// commits after 10,000 writes, and at about 300 bytes a put that is a
/// few MiB held twice (encoded, and decoded for reads), a bound on memory
/// and on what a restart replays from the WAL.
pub const OPEN_BATCH_REVISIONS_MAX: usize = 10_000;
/// Encoded bytes the open batch holds before it goes to sled, whatever the
/// revision count: large values reach it first, keeping memory bounded.
pub const OPEN_BATCH_BYTES_MAX: usize = 4 << 20;
/// How long the open batch waits before it goes to sled: etcd's backend
/// batch interval. The server also commits an idle store this often
/// ([`Store::commit`]), so the batch never sits longer than about twice it.
pub const OPEN_BATCH_AGE_MAX: Duration = Duration::from_millis(100);

/// The revision of an empty store. The first write creates revision 2.
pub const EMPTY_STORE_REVISION: i64 = 1;

/// The compact revision of a store never compacted: -1, as etcd reports
/// it (HashKV shows it), so that compacting at 0 is still possible.
pub const NEVER_COMPACTED: i64 = -1;

/// sled's page cache, in bytes. The in-memory index answers which revision
/// to read, so the cache only serves value loads. At a million keys,
/// 64 MiB against 256 MiB cut the member's RSS after the fill by about a
/// quarter, with the 100,000-key range and the paginated list of every
/// key no slower (`docs/measurements.md`). Neither fits in
/// either: etcd's benchmark writes its keys as varints, so the first
/// 100,000 in key order are spread over every block of the store. sled's
/// own default is 1 GiB.
pub const SLED_CACHE_BYTES: u64 = 64 << 20;

struct State {
    index: TreeIndex,
    leases: LeaseTable,
    current_revision: i64,
    compact_revision: i64,
    consistent_index: u64,
    /// The hashes the last compactions took, oldest first, at most
    /// [`COMPACTION_HASHES_KEPT`]; in memory only, as in etcd.
    compaction_hashes: VecDeque<KeyValueHash>,
    /// Applied writes sled does not have yet (see the module docs).
    batch: Batch,
    /// Compaction work queued after its apply (see compaction.rs).
    compactions: Backlog,
    /// Counts of recent limited ranges (see count_cache.rs).
    counts: CountCache,
    /// The raised alarms, as stored under `META_ALARMS`.
    alarms: BTreeSet<Alarm>,
    /// The membership record, as stored under `META_MEMBERSHIP`.
    membership: Option<Vec<u8>>,
    /// Bytes of every key and value sled holds, as stored under
    /// `META_STORED_BYTES`.
    stored_bytes: u64,
    /// The auth record, as stored under `META_AUTH`.
    auth: Option<Vec<u8>>,
    /// A defragmentation under way, which every commit repeats into (see
    /// defrag.rs); a restore drops it, which aborts the defragmentation.
    copying: Option<Copying>,
    /// The files holding the blocks sled points to (value_files.rs).
    values: ValueFiles,
    /// sled's block pointers, in memory (directory.rs).
    directory: Directory,
    /// Value files being reclaimed, a step at a time (see
    /// [`Store::reclaim_step`]).
    reclaim: Option<Reclaim>,
}

/// Where the store's revisions and index stand: what the pre- and
/// postconditions of `apply`, `commit`, `compact_step` and `restore`
/// compare. These assertions stay on in release builds: a store that
/// broke one would go on serving wrong answers, so the member stops
/// instead, and the WAL replays into a fresh start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Position {
    current_revision: i64,
    compact_revision: i64,
    consistent_index: u64,
}

impl State {
    /// The position, checked against the invariant every state keeps: no
    /// compaction past the current revision.
    fn position(&self, during: &str) -> Position {
        assert!(
            self.compact_revision <= self.current_revision,
            "{during}: compact revision {} is past the current revision {}",
            self.compact_revision,
            self.current_revision
        );
        Position {
            current_revision: self.current_revision,
            compact_revision: self.compact_revision,
            consistent_index: self.consistent_index,
        }
    }
}

/// Value files being reclaimed: their blocks are moved into the newest
/// file in key order, a step at a time.
struct Reclaim {
    files: BTreeSet<u64>,
    /// The last block key looked at; `None` before the first step.
    after: Option<Vec<u8>>,
}

/// A multi-version store on sled with etcd's revision semantics.
pub struct Store {
    /// The store's base path; its current database is in the directory
    /// of its generation (see defrag.rs).
    path: PathBuf,
    /// The current generation, held for the whole of a defragmentation so
    /// that one runs at a time.
    generation: parking_lot::Mutex<u64>,
    /// Behind a lock only so that [`Store::defragment`] can swap it; taken
    /// after `state` by whoever takes both.
    db: RwLock<sled::Db>,
    state: RwLock<State>,
    max_txn_ops: usize,
    /// Set when sled failed to apply a batch: the index is then ahead of
    /// storage, so the store refuses everything until it is reopened.
    poisoned: AtomicBool,
    /// Whether writes still reach the disk (power.rs): once cut, the
    /// store refuses everything and closing it writes nothing.
    power: crate::power::Power,
    /// Whether lease checkpoints are stored as well as kept in memory
    /// (etcd's `--experimental-enable-lease-checkpoint-persist`): a
    /// setting of this member, not of the cluster, as in etcd.
    persist_lease_checkpoints: AtomicBool,
    /// A bit for each kind of alarm raised (`1 << kind`), kept with
    /// `State::alarms`, so that every write's check reads no lock.
    alarm_kinds: AtomicU32,
    /// Told of each apply and commit, once set (the server's metrics).
    observer: OnceLock<Arc<dyn Observer>>,
    /// `State::consistent_index` and `State::membership` as of the last
    /// apply or restore, copied out of the state's lock so that the raft
    /// loop, which asks for them, never waits behind a long holder of
    /// that lock (a defragmentation, a big range). Set under the state's
    /// write lock, so the pair is always one apply's.
    published: parking_lot::Mutex<(u64, Option<Vec<u8>>)>,
    /// The index in `published`, readable without a lock.
    published_index: AtomicU64,
    /// `State::current_revision` and `State::compact_revision` as of the
    /// last apply or restore, for every response header and the
    /// background tasks, which must not wait behind the state's lock.
    published_revision: AtomicI64,
    published_compact: AtomicI64,
    /// Whether `State::compactions` holds work, readable without a lock.
    compaction_queued: AtomicBool,
    /// Keys or revisions one compaction step takes (compaction.rs).
    compaction_batch_limit: AtomicUsize,
}

/// When a defragmentation copies sled (see defrag.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SledCopy {
    /// Only when its files hold several times its items
    /// ([`defrag::DEFRAG_SLED_BLOAT_RATIO`]): what etcd's Defragment does.
    WhenBloated,
    /// Every time (tests of the copy).
    Always,
}

/// Whom a restore is for.
enum RestoreFor {
    /// A member catching up: the leader's snapshot at this raft index.
    Member(u64),
    /// A new cluster's member, from a backup.
    NewCluster { raft_index: u64, membership: Vec<u8> },
}

use records::corrupt;

impl Drop for Store {
    /// A store closed in an orderly way keeps its open batch (a crash loses
    /// it, and the WAL replays it), and has unlinked the value files it
    /// retired: none of its threads outlives it, so a store opened again
    /// on the same directory in this process never races one.
    fn drop(&mut self) {
        for thread in self.state.get_mut().values.settle() {
            let _ = thread.join();
        }
        if self.poisoned.load(Ordering::Acquire) || self.power.is_cut() {
            return;
        }
        if let Err(error) = commit(self.db.get_mut(), &self.poisoned, self.state.get_mut(), None) {
            tracing::warn!(%error, "the open batch could not be written on close");
        }
    }
}

/// What a commit's writes change in what the store holds.
struct Change {
    /// Bytes held more (or fewer): each key's new size less the one it
    /// has now ([`held_bytes`]).
    bytes: i64,
    /// Pointers the writes replace or remove: their blocks are then dead.
    replaced: Vec<Pointer>,
    /// Pointers the writes add: their blocks are then live.
    added: Vec<Pointer>,
}

/// The open batch: applied writes, before sled has them.
#[derive(Default)]
struct Batch {
    /// When the first apply since the last commit began; `None` when
    /// there is nothing to commit.
    opened: Option<Instant>,
    /// Encoded bytes of `records`.
    bytes: usize,
    /// Writes besides the stored revisions: leases, alarms, records.
    writes: Writes,
    /// Where in `records` each revision this batch wrote is, so later
    /// requests read it. Only the encoded copy is kept, decoded on read:
    /// a put then costs one encode instead of an encode and a clone.
    pending: HashMap<Revision, usize>,
    /// The revisions this batch wrote, in order, stored when it is applied.
    records: Vec<Record>,
    /// Blocks a compaction in this batch rewrote (see `records.rs`).
    overlay: Overlay,
}

impl Batch {
    /// Whether sled should have it now: it is full or old enough. A block
    /// in the overlay counts as a full one.
    fn is_due(&self) -> bool {
        self.records.len() >= OPEN_BATCH_REVISIONS_MAX
            || self.bytes + self.overlay.len() * crate::block::BLOCK_BYTES_MAX >= OPEN_BATCH_BYTES_MAX
            || self.opened.is_some_and(|opened| opened.elapsed() >= OPEN_BATCH_AGE_MAX)
    }
}

/// A write transaction over the store's state and the open apply batch.
/// A read-only view of the store at its current revision, under the
/// read locks its creator holds.
struct StoreView<'a> {
    state: &'a State,
    db: &'a sled::Db,
}

struct StoreTxn<'a> {
    state: &'a mut State,
    db: &'a sled::Db,
    batch: &'a mut Batch,
    /// The current revision when the txn began.
    begin: i64,
    /// Changes made so far; also the next sub-revision.
    changes: i64,
    events: Vec<Event>,
}

impl Store {
    /// Sets who is told of each apply and commit; only the first call
    /// takes effect.
    pub fn observe_with(&self, observer: Arc<dyn Observer>) {
        let _ = self.observer.set(observer);
    }

    fn check_usable(&self) -> Result<()> {
        if self.poisoned.load(Ordering::Acquire) {
            return Err(Error::Storage(
                "poisoned by an earlier failed apply; reopen the store".into(),
            ));
        }
        if self.power.is_cut() {
            return Err(Error::Storage("the store's power was cut".into()));
        }
        Ok(())
    }

    /// The newest revision.
    pub fn current_revision(&self) -> i64 {
        self.published_revision.load(Ordering::Acquire)
    }

    /// Revisions below this have been compacted away ([`NEVER_COMPACTED`]
    /// if never).
    pub fn compact_revision(&self) -> i64 {
        self.published_compact.load(Ordering::Acquire)
    }

    /// The raft index of the last applied batch. The server replays only
    /// the log entries after it.
    pub fn consistent_index(&self) -> u64 {
        self.published_index.load(Ordering::Acquire)
    }

    /// Keys in the index, including deleted ones not yet compacted.
    pub fn indexed_keys(&self) -> usize {
        self.state.read().index.len()
    }

    /// Lease `id`: its granted TTL and attached keys, if it exists.
    pub fn lease(&self, id: i64) -> Option<Lease> {
        self.state.read().leases.get(id).cloned()
    }

    /// Every lease id with its granted TTL, in id order.
    pub fn leases(&self) -> Vec<(i64, i64)> {
        self.state.read().leases.list()
    }

    /// Every lease's granted and checkpointed TTLs, in id order.
    pub fn lease_ttls(&self) -> Vec<LeaseTtl> {
        self.state.read().leases.ttls()
    }

    /// Stores lease checkpoints from now on, as well as keeping them in
    /// memory (etcd's `--experimental-enable-lease-checkpoint-persist`).
    pub fn persist_lease_checkpoints(&self, persist: bool) {
        self.persist_lease_checkpoints.store(persist, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests;
