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
use crate::error::{Error, Result};
use crate::hash::{Hasher, Keep, KeyValueHash, COMPACTION_HASHES_KEPT};
use crate::index::{RangeEnd, TreeIndex};
use crate::key_index::Generation;
use crate::key_value::{Event, EventKind, KeyValue};
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
use crate::value_files::{self, Pointer, ValueFiles, RECLAIM_LIVE_PERCENT};
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

/// Bytes of keys and values per sled batch while restoring a snapshot:
/// large enough that a restore is a few hundred batches for a full 2 GiB
/// store, small enough to keep one batch's memory modest.
pub const RESTORE_BATCH_BYTES: usize = 64 << 20;

/// Largest key or stored value a snapshot may hold. Values are bounded by
/// the server's `--max-request-bytes` (1.5 MiB by default, and etcd's docs
/// advise at most 10 MiB); 256 MiB stops a corrupt length from asking for
/// gigabytes while leaving room for any sane setting.
pub const SNAPSHOT_PART_BYTES_MAX: usize = 256 << 20;

/// Writes one sled item in the snapshot layout: each of key and value as
/// a u32 BE length, then its bytes.
pub(crate) fn write_item(out: &mut impl std::io::Write, key: &[u8], value: &[u8]) -> std::io::Result<()> {
    for part in [key, value] {
        let length = u32::try_from(part.len())
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "an item over 4 GiB"))?;
        out.write_all(&length.to_be_bytes())?;
        out.write_all(part)?;
    }
    Ok(())
}

/// Reads one length-prefixed part of a snapshot; `None` at a clean end.
fn read_part(input: &mut impl std::io::Read) -> Result<Option<Vec<u8>>> {
    let mut length = [0u8; 4];
    let mut filled = 0;
    while filled < 4 {
        match input.read(&mut length[filled..]) {
            Ok(0) if filled == 0 => return Ok(None),
            Ok(0) => return Err(corrupt("snapshot cut short")),
            Ok(n) => filled += n,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => return Err(Error::Storage(format!("reading a snapshot: {error}"))),
        }
    }
    let length = u32::from_be_bytes(length) as usize;
    if length > SNAPSHOT_PART_BYTES_MAX {
        return Err(corrupt("snapshot part over its bound"));
    }
    let mut part = vec![0u8; length];
    input.read_exact(&mut part).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => corrupt("snapshot cut short"),
        _ => Error::Storage(format!("reading a snapshot: {e}")),
    })?;
    Ok(Some(part))
}

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
    /// Value files being reclaimed, a step at a time (see
    /// [`Store::reclaim_step`]).
    reclaim: Option<Reclaim>,
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

/// Reads the raised alarms from storage.
/// Keeps the server's opaque membership or auth record (see
/// [`WriteRequest::Membership`], [`WriteRequest::Auth`]).
fn keep_record(state: &mut State, batch: &mut Batch, request: &WriteRequest, record: &[u8]) -> Applied {
    let (key, kept, response) = match request {
        WriteRequest::Membership(_) => (META_MEMBERSHIP, &mut state.membership, WriteResponse::Membership),
        _ => (META_AUTH, &mut state.auth, WriteResponse::Auth),
    };
    batch.writes.insert(key, record);
    *kept = Some(record.to_vec());
    Applied {
        response: Ok(response),
        events: Vec::new(),
    }
}

fn read_alarms(db: &sled::Db) -> Result<BTreeSet<Alarm>> {
    let Some(bytes) = db.get(META_ALARMS)? else {
        return Ok(BTreeSet::new());
    };
    if bytes.len() % 12 != 0 {
        return Err(corrupt("alarm records are not 12 bytes each"));
    }
    Ok(bytes
        .chunks_exact(12)
        .map(|record| Alarm {
            member_id: u64::from_be_bytes(record[..8].try_into().expect("8 bytes")),
            kind: i32::from_be_bytes(record[8..].try_into().expect("4 bytes")),
        })
        .collect())
}

fn encode_alarms(alarms: &BTreeSet<Alarm>) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(alarms.len() * 12);
    for alarm in alarms {
        bytes.extend_from_slice(&alarm.member_id.to_be_bytes());
        bytes.extend_from_slice(&alarm.kind.to_be_bytes());
    }
    bytes
}

/// The bits of `alarm_kinds` for `alarms` (kinds outside 0..32 have none).
fn kinds_of(alarms: &BTreeSet<Alarm>) -> u32 {
    alarms
        .iter()
        .filter(|alarm| (0..32).contains(&alarm.kind))
        .fold(0, |kinds, alarm| kinds | 1 << alarm.kind)
}

pub(crate) fn lease_key(id: i64) -> [u8; 9] {
    let mut key = [LEASE_SPACE; 9];
    key[1..].copy_from_slice(&id.to_be_bytes());
    key
}

/// A lease's stored value: its TTL, then its checkpointed remaining TTL
/// when one is set (see `lease.rs`).
fn lease_record(ttl: i64, remaining_ttl: i64) -> Vec<u8> {
    let mut record = ttl.to_be_bytes().to_vec();
    if remaining_ttl != 0 {
        record.extend_from_slice(&remaining_ttl.to_be_bytes());
    }
    record
}

/// The TTL and remaining TTL of a stored lease value, if it is one.
fn decode_lease_record(value: &[u8]) -> Option<(i64, i64)> {
    let word = |at: usize| {
        value
            .get(at..at + 8)
            .map(|bytes| i64::from_be_bytes(bytes.try_into().unwrap()))
    };
    match value.len() {
        8 => Some((word(0)?, 0)),
        16 => Some((word(0)?, word(8)?)),
        _ => None,
    }
}

/// Rebuilds the in-memory index from every stored revision, and the lease
/// table from the stored leases and the values naming them; reads the
/// current and compact revisions.
fn rebuild(db: &sled::Db, values: &mut ValueFiles) -> Result<(TreeIndex, LeaseTable, i64, i64)> {
    let mut leases = LeaseTable::default();
    for item in db.scan_prefix([LEASE_SPACE]) {
        let (key, value) = item?;
        let id = key[1..].try_into().map(i64::from_be_bytes);
        match (id, decode_lease_record(&value)) {
            (Ok(id), Some((ttl, remaining_ttl))) => {
                leases.grant(id, ttl);
                leases.checkpoint(id, remaining_ttl);
            }
            _ => return Err(corrupt("lease record is not two or three i64s")),
        }
    }
    let mut index = TreeIndex::default();
    let mut highest = 0;
    records::scan(db, values, |revision, tombstone, kv| {
        if tombstone {
            index.tombstone(&kv.key, revision);
            leases.detach(&kv.key);
        } else {
            index.put_rebuilt(&kv.key, revision, kv.create_revision);
            leases.attach(&kv.key, kv.lease);
        }
        highest = revision.main;
        Ok(())
    })?;
    index.shrink_to_fit();
    let current_revision = read_i64(db, META_CURRENT_REVISION)?.unwrap_or(EMPTY_STORE_REVISION);
    assert!(
        current_revision >= highest,
        "stored revision {highest} above current {current_revision}"
    );
    let compact_revision = read_i64(db, META_COMPACT_REVISION)?.unwrap_or(NEVER_COMPACTED);
    Ok((index, leases, current_revision, compact_revision))
}

/// Opens the sled database at `path`, waiting out a lock that a handle
/// being dropped still holds.
fn open_db(path: &Path) -> Result<sled::Db> {
    let config = sled::Config::new()
        .path(path)
        .cache_capacity(SLED_CACHE_BYTES)
        .mode(sled::Mode::HighThroughput);
    let mut tries = 0;
    loop {
        match config.open() {
            Err(sled::Error::Io(error)) if is_lock_held(&error) && tries + 1 < OPEN_LOCK_TRIES => {
                tries += 1;
                std::thread::sleep(OPEN_LOCK_PAUSE);
            }
            result => return Ok(result?),
        }
    }
}

/// Whether sled refused to open because another handle holds the lock.
/// sled reports it as `ErrorKind::Other` with this message, its only sign.
fn is_lock_held(error: &std::io::Error) -> bool {
    error.to_string().contains("could not acquire lock")
}

fn read_i64(db: &sled::Db, key: &[u8]) -> Result<Option<i64>> {
    match db.get(key)? {
        None => Ok(None),
        Some(bytes) => {
            let bytes: [u8; 8] = bytes
                .as_ref()
                .try_into()
                .map_err(|_| corrupt("metadata is not 8 bytes"))?;
            Ok(Some(i64::from_be_bytes(bytes)))
        }
    }
}

use records::corrupt;

impl Store {
    /// Opens (or creates) the store in `path` and rebuilds the index from
    /// every stored revision.
    pub fn open(path: &Path) -> Result<Store> {
        Store::open_with(path, validate::MAX_TXN_OPS_DEFAULT)
    }

    /// As [`Store::open`], with etcd's `--max-txn-ops`.
    pub fn open_with(path: &Path, max_txn_ops: usize) -> Result<Store> {
        let generation = defrag::recover(path)?;
        let db = open_db(&defrag::generation_dir(path, generation))?;
        records::upgrade(&db)?;
        let consistent_index = read_i64(&db, META_CONSISTENT_INDEX)?.unwrap_or(0) as u64;
        let values = ValueFiles::open(&value_files::dir_of(path))?;
        let state = load_state(&db, values, consistent_index)?;
        Ok(Store {
            path: path.to_path_buf(),
            generation: parking_lot::Mutex::new(generation),
            db: RwLock::new(db),
            alarm_kinds: AtomicU32::new(kinds_of(&state.alarms)),
            max_txn_ops,
            poisoned: AtomicBool::new(false),
            persist_lease_checkpoints: AtomicBool::new(false),
            observer: OnceLock::new(),
            published: parking_lot::Mutex::new((consistent_index, state.membership.clone())),
            published_index: AtomicU64::new(consistent_index),
            published_revision: AtomicI64::new(state.current_revision),
            published_compact: AtomicI64::new(state.compact_revision),
            compaction_queued: AtomicBool::new(!state.compactions.is_empty()),
            compaction_batch_limit: AtomicUsize::new(COMPACTION_BATCH_LIMIT_DEFAULT),
            state: RwLock::new(state),
        })
    }

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

    /// A serializable read at the current revision (or the request's).
    pub fn range(&self, request: &RangeRequest) -> Result<RangeResponse> {
        self.check_usable()?;
        let state = self.state.read();
        let db = self.db.read();
        StoreView { state: &state, db: &db }.range(request)
    }

    /// A read-only txn (every operation a range: see
    /// [`TxnRequest::is_read_only`]) at the current revision: its compares
    /// and its chosen branch's ranges read one view, under the read lock,
    /// as etcd serves such a txn without raft. It creates no revision.
    pub fn read_txn(&self, request: &TxnRequest) -> Result<TxnResponse> {
        self.check_usable()?;
        let state = self.state.read();
        let db = self.db.read();
        let view = StoreView { state: &state, db: &db };
        let path = txn::plan(&view, request)?;
        Ok(txn::execute_read_only(&view, request, &path))
    }

    /// Every change to keys in the range of `key` and `range_end` (as a
    /// range request reads them) at main revisions `from..=to`, in
    /// revision order, each with the key's previous value when `prev_kv`:
    /// what a watcher that is behind the store still has to see. Read from
    /// the revision space under the read lock, so a compaction cannot cut
    /// it short. Fails with [`Error::Compacted`] when `from` is below the
    /// compact revision, as etcd's watchers are cancelled then. The caller
    /// bounds `to - from`: the scan visits every change in between.
    pub fn changes(
        &self,
        key: &[u8],
        range_end: &[u8],
        from: i64,
        to: i64,
        prev_kv: bool,
    ) -> Result<Vec<(Event, Option<KeyValue>)>> {
        self.check_usable()?;
        let state = self.state.read();
        if from < state.compact_revision {
            return Err(Error::Compacted);
        }
        let to = to.min(state.current_revision);
        let mut changes = Vec::new();
        if from > to {
            return Ok(changes);
        }
        let end = RangeEnd::parse(range_end);
        let db = self.db.read();
        visit_through(
            &db,
            &state.values,
            &state.batch,
            Revision::new(from, 0),
            to,
            |revision, tombstone, kv| {
                if !end.contains(key, &kv.key) {
                    return Ok(());
                }
                let previous = if prev_kv {
                    previous_value(&db, &state, &kv.key, revision.main)?
                } else {
                    None
                };
                let kind = if tombstone { EventKind::Delete } else { EventKind::Put };
                changes.push((Event { kind, kv }, previous));
                Ok(())
            },
        )?;
        Ok(changes)
    }

    /// `key`'s value just before main revision `revision`, if it existed
    /// then and is not compacted away: a watch event's `prev_kv`.
    pub fn value_before(&self, key: &[u8], revision: i64) -> Result<Option<KeyValue>> {
        self.check_usable()?;
        let state = self.state.read();
        previous_value(&self.db.read(), &state, key, revision)
    }

    /// Applies the requests of one raft batch, in order, into the open
    /// batch, which then records `raft_index` as the consistent index. Each
    /// request gets its answer and the events it caused. A request that
    /// fails its checks changes nothing and answers its error. When the
    /// open batch is due, sled gets it, atomically (see the module docs).
    ///
    /// Nothing is flushed here: the WAL is the durable source, so after a
    /// crash the store may be behind, and the server replays the WAL
    /// entries after [`Store::consistent_index`]. See [`Store::flush`].
    pub fn apply(&self, raft_index: u64, requests: &[WriteRequest]) -> Result<Vec<Applied>> {
        self.check_usable()?;
        let mut state = self.state.write();
        // Tests stall the store here, its lock held (`mvcc::apply=…`).
        fail::fail_point!("mvcc::apply");
        assert!(
            raft_index >= state.consistent_index,
            "raft index {raft_index} goes back from {}",
            state.consistent_index
        );
        let mut batch = std::mem::take(&mut state.batch);
        batch.opened.get_or_insert_with(Instant::now);
        let mut results = Vec::with_capacity(requests.len());
        let observer = self.observer.get();
        for request in requests {
            let started = observer.map(|_| Instant::now());
            let applied = self.apply_one(&mut state, &mut batch, request);
            if let (Some(observer), Some(started)) = (observer, started) {
                observer.applied(request, &applied.response, started.elapsed());
            }
            results.push(applied);
        }
        state.batch = batch;
        state.consistent_index = raft_index;
        let membership_changed = requests.iter().any(|r| matches!(r, WriteRequest::Membership(_)));
        self.publish(&state, membership_changed);
        if state.batch.is_due() {
            commit(&self.db.read(), &self.poisoned, &mut state, self.observer.get())?;
        }
        Ok(results)
    }

    /// Hands the open batch to sled now, if there is one (not flushed:
    /// see [`Store::flush`]). The server calls it when applies pause, so
    /// an idle store's batch waits no longer than [`OPEN_BATCH_AGE_MAX`].
    pub fn commit(&self) -> Result<()> {
        self.check_usable()?;
        // The state first, then the database: the order `defragment` takes
        // them in (arguments are evaluated left to right).
        let mut state = self.state.write();
        commit(&self.db.read(), &self.poisoned, &mut state, self.observer.get())
    }

    /// Why `request` is refused before it is applied, if it is: it is
    /// not valid, or it adds data while a NOSPACE alarm is raised (etcd's
    /// capped applier: refused here too, not only when it arrives, so one
    /// checked just before the alarm was raised does not slip through;
    /// every member applies the alarm at the same index, so every member
    /// refuses the same writes).
    fn refusal(&self, state: &State, request: &WriteRequest) -> Option<Error> {
        if let Err(error) = validate::check_write(request, self.max_txn_ops) {
            return Some(error);
        }
        let no_space = state.alarms.iter().any(|alarm| alarm.kind == ALARM_NOSPACE);
        (no_space && adds_data(request)).then_some(Error::NoSpace)
    }

    fn apply_one(&self, state: &mut State, batch: &mut Batch, request: &WriteRequest) -> Applied {
        if let Some(error) = self.refusal(state, request) {
            return Applied {
                response: Err(error),
                events: Vec::new(),
            };
        }
        match request {
            WriteRequest::Compaction(compaction) => {
                return Applied {
                    response: self.compact(state, compaction).map(WriteResponse::Compaction),
                    events: Vec::new(),
                }
            }
            WriteRequest::LeaseGrant(grant) => {
                return Applied {
                    response: grant_lease(state, batch, grant).map(WriteResponse::LeaseGrant),
                    events: Vec::new(),
                }
            }
            WriteRequest::LeaseCheckpoint(checkpoint) => {
                let persist = self.persist_lease_checkpoints.load(Ordering::Relaxed);
                return Applied {
                    response: Ok(checkpoint_leases(state, batch, checkpoint, persist)),
                    events: Vec::new(),
                };
            }
            WriteRequest::Membership(record) | WriteRequest::Auth(record) => {
                return keep_record(state, batch, request, record);
            }
            WriteRequest::Alarm(request) => {
                let response = change_alarm(state, batch, request);
                self.alarm_kinds.store(kinds_of(&state.alarms), Ordering::Release);
                return Applied {
                    response: Ok(WriteResponse::Alarm(response)),
                    events: Vec::new(),
                };
            }
            _ => {}
        }
        let db = self.db.read();
        let mut txn = StoreTxn {
            begin: state.current_revision,
            changes: 0,
            state,
            db: &db,
            batch,
            events: Vec::new(),
        };
        let response = match request {
            WriteRequest::Put(put) => txn.put(put).map(WriteResponse::Put),
            WriteRequest::DeleteRange(delete) => txn.delete_range(delete).map(WriteResponse::DeleteRange),
            WriteRequest::Txn(request) => {
                txn::plan(&txn, request).map(|path| WriteResponse::Txn(txn::execute(&mut txn, request, &path)))
            }
            WriteRequest::LeaseRevoke(revoke) => txn.revoke_lease(revoke).map(WriteResponse::LeaseRevoke),
            WriteRequest::Compaction(_)
            | WriteRequest::LeaseGrant(_)
            | WriteRequest::LeaseCheckpoint(_)
            | WriteRequest::Alarm(_)
            | WriteRequest::Membership(_)
            | WriteRequest::Auth(_) => {
                unreachable!("handled above")
            }
        };
        let revision = txn.revision();
        let events = std::mem::take(&mut txn.events);
        state.current_revision = revision;
        Applied { response, events }
    }

    /// Compacts at the request's revision: the index drops what no read at
    /// or after it needs, and the batch removes those revisions from
    /// storage. Before removing anything it hashes what is stored at or
    /// below the revision, as etcd does while it compacts, and remembers
    /// that hash for HashKV (see `hash.rs`).
    ///
    /// Cost: the hash reads every stored revision at or below the compact
    /// revision, under the write lock, so a compaction pauses applies and
    /// reads for about as long as a HashKV of the whole store takes.
    fn compact(&self, state: &mut State, request: &CompactionRequest) -> Result<CompactionResponse> {
        if request.revision <= state.compact_revision {
            return Err(Error::Compacted);
        }
        if request.revision > state.current_revision {
            return Err(Error::FutureRevision);
        }
        // The work is queued, and done in steps (see compaction.rs).
        state
            .compactions
            .push_compaction(state.compact_revision, request.revision);
        self.compaction_queued.store(true, Ordering::Release);
        state.compact_revision = request.revision;
        Ok(CompactionResponse {
            revision: state.current_revision,
        })
    }

    /// The hash etcd takes while compacting at `at`, and HashKV's at `at`
    /// (see `hash.rs`): every revision stored at or below `at` (through the
    /// overlay of an earlier compaction in this batch), then what this
    /// batch wrote (all newer than anything stored).
    /// HashKV's hash at `at` with `kept`'s compact revision and keep set,
    /// in one pass over the stored revisions.
    fn compaction_hash(&self, values: &ValueFiles, batch: &Batch, at: i64, kept: Keep) -> Result<KeyValueHash> {
        let mut hasher = Hasher::new(at, kept);
        let db = self.db.read();
        each_through(
            &db,
            values,
            batch,
            Revision::new(1, 0),
            at,
            |revision, tombstone, value| {
                feed(&mut hasher, revision, tombstone, value)?;
                Ok(ControlFlow::Continue(()))
            },
        )?;
        Ok(hasher.finish())
    }

    /// Whether compaction work is queued (see compaction.rs). Reads no
    /// lock.
    pub fn compaction_pending(&self) -> bool {
        self.compaction_queued.load(Ordering::Acquire)
    }

    /// Sets etcd's `--experimental-compaction-batch-limit`: the keys or
    /// revisions one compaction step takes; 0 is etcd's default, and a
    /// limit above [`COMPACTION_BATCH_LIMIT_MAX`] is lowered to it.
    pub fn set_compaction_batch_limit(&self, limit: usize) {
        let limit = match limit {
            0 => COMPACTION_BATCH_LIMIT_DEFAULT,
            _ => limit.min(COMPACTION_BATCH_LIMIT_MAX),
        };
        self.compaction_batch_limit.store(limit, Ordering::Relaxed);
    }

    /// Does one step of the queued compaction work, at most the batch
    /// limit's keys or revisions, under the state lock; whether more
    /// remains. The server's apply stage calls it between applies.
    pub fn compact_step(&self) -> Result<bool> {
        if !self.compaction_pending() {
            return Ok(false);
        }
        self.check_usable()?;
        let mut state = self.state.write();
        let started = Instant::now();
        let limit = self.compaction_batch_limit.load(Ordering::Relaxed);
        if state.compactions.is_empty() {
            // What is left is reclaiming the space the compaction freed.
            let more = state.reclaim.is_some() && self.reclaim_step(&mut state)?;
            self.compaction_queued.store(more, Ordering::Release);
            if let Some(observer) = self.observer.get() {
                observer.compaction_step(false, 0, started.elapsed());
            }
            return Ok(more);
        }
        let mut kind = (false, 0);
        if let Some(mut step) = state.compactions.next_step(limit) {
            self.run_step(&mut state, &mut step, limit)?;
            kind = match &step {
                Step::Index { .. } => (true, 0),
                Step::Hash { .. } => (false, 0),
                Step::Remove(removed) => (false, removed.len()),
            };
            fail::fail_point!("mvcc::compaction_step", |_| std::process::abort());
            // An index step records its own progress (`run_step`).
            let finished = match step {
                Step::Index { .. } => None,
                _ => state.compactions.done(&step),
            };
            if let Some(hash) = finished {
                state.compaction_hashes.push_back(hash);
                if state.compaction_hashes.len() > COMPACTION_HASHES_KEPT {
                    state.compaction_hashes.pop_front();
                }
            }
        }
        if state.compactions.is_empty() && state.reclaim.is_none() {
            // Its removals counted first: they are what leaves bytes dead.
            commit(&self.db.read(), &self.poisoned, &mut state, self.observer.get())?;
            start_reclaim(&mut state, RECLAIM_LIVE_PERCENT);
        }
        let more = !state.compactions.is_empty() || state.reclaim.is_some();
        self.compaction_queued.store(more, Ordering::Release);
        if let Some(observer) = self.observer.get() {
            observer.compaction_step(kind.0, kind.1, started.elapsed());
        }
        Ok(more)
    }

    /// One step of the reclaim under way (value_files.rs): moves about
    /// [`records::MOVE_BYTES_MAX`] of its files' blocks into the newest
    /// file and commits; once none is left, makes sled durable and retires
    /// the files (unlinked off this thread). Whether more remains.
    fn reclaim_step(&self, state: &mut State) -> Result<bool> {
        let Some(job) = state.reclaim.take() else {
            return Ok(false);
        };
        let db = self.db.read();
        // The open batch's own blocks go to the newest file, never to one
        // being reclaimed, and blocks its overlay rewrites are skipped:
        // what is moved is sled's, with no commit first.
        let State { values, batch, .. } = &mut *state;
        let rewrites = batch.overlay.len();
        let next = records::move_blocks(&db, values, &mut batch.overlay, &job.files, job.after.as_deref())?;
        // The last step commits whatever the batch rewrites: a block it
        // rewrites was skipped above, and sled must not keep a durable
        // pointer into the files once they go.
        if batch.overlay.len() > rewrites || next.is_none() {
            batch.opened.get_or_insert_with(Instant::now);
            commit(&db, &self.poisoned, state, self.observer.get())?;
        }
        if let Some(after) = next {
            state.reclaim = Some(Reclaim {
                after: Some(after),
                ..job
            });
            return Ok(true);
        }
        // Once sled's state is durable, no pointer it may recover names
        // the files.
        db.flush()?;
        for file in job.files {
            match state.values.live(file) {
                0 => state.values.retire(file),
                live => tracing::warn!(file, live, "a reclaimed value file still holds live bytes; kept"),
            }
        }
        Ok(false)
    }

    /// Reclaims every value file under
    /// [`value_files::DEFRAG_RECLAIM_LIVE_PERCENT`] live, the newest
    /// included, a step at a time under the state lock, paced as the copy
    /// is: the first part of a defragmentation, which leaves the value
    /// files holding little but what is live.
    fn reclaim_all(&self) -> Result<()> {
        {
            let mut state = self.state.write();
            commit(&self.db.read(), &self.poisoned, &mut state, self.observer.get())?;
            state.values.seal();
            if state.reclaim.is_none() {
                start_reclaim(&mut state, value_files::DEFRAG_RECLAIM_LIVE_PERCENT);
            }
        }
        loop {
            let started = Instant::now();
            let mut state = self.state.write();
            let more = self.reclaim_step(&mut state)?;
            RwLockWriteGuard::unlock_fair(state);
            if !more {
                self.wait_for_unlinks();
                return Ok(());
            }
            std::thread::sleep(pacing::pause_after(started.elapsed(), defrag::DEFRAG_CPU_PERCENT));
        }
    }

    /// Does every step of the queued compaction work, and waits for the
    /// files it retired to be unlinked.
    pub fn finish_compactions(&self) -> Result<()> {
        while self.compact_step()? {}
        self.wait_for_unlinks();
        Ok(())
    }

    /// Waits, outside the state lock, for the value files retired so far
    /// to be unlinked ([`ValueFiles::retire`]).
    fn wait_for_unlinks(&self) {
        let unlinking = self.state.write().values.settle();
        for thread in unlinking {
            // An unlink's failure is logged by its thread, never fatal.
            let _ = thread.join();
        }
    }

    /// Does `step`; a hash step's `to_main` becomes where it ended.
    fn run_step(&self, state: &mut State, step: &mut Step, limit: usize) -> Result<()> {
        let db = self.db.read();
        match step {
            Step::Index { at, after } => {
                let State { compactions, index, .. } = state;
                let into = compactions.compacted().expect("an index step is of an index job");
                let last = index.compact_some(*at, after.as_deref(), limit, into);
                compactions.index_done(last);
                Ok(())
            }
            Step::Hash { from, to_main } => {
                let State {
                    compactions,
                    batch,
                    values,
                    ..
                } = state;
                let hasher = compactions.hasher().expect("a hash step is of a hash job");
                *to_main = hash_step(&db, values, batch, *from, *to_main, limit, hasher)?;
                Ok(())
            }
            Step::Remove(revisions) => {
                // What it removes must be in sled, not in the open batch,
                // whose records are all newer than sled's: a commit (and
                // its sync) only when the batch holds one of them.
                let last = revisions.last().copied();
                if state
                    .batch
                    .records
                    .first()
                    .is_some_and(|first| Some(first.revision) <= last)
                {
                    commit(&db, &self.poisoned, state, self.observer.get())?;
                }
                let State { values, batch, .. } = state;
                if let Err(error) = records::drop_revisions(&db, values, &mut batch.overlay, revisions.clone()) {
                    // The index has moved on without storage: refuse everything.
                    self.poisoned.store(true, Ordering::Release);
                    return Err(error);
                }
                state.batch.opened.get_or_insert_with(Instant::now);
                if state.batch.is_due() {
                    commit(&db, &self.poisoned, state, self.observer.get())?;
                }
                Ok(())
            }
        }
    }

    /// The hashes the last compactions recorded (at most
    /// [`COMPACTION_HASHES_KEPT`]), newest first, for the leader's
    /// compaction hash check.
    pub fn compaction_hashes(&self) -> Vec<KeyValueHash> {
        let mut hashes: Vec<KeyValueHash> = self.state.read().compaction_hashes.iter().copied().collect();
        hashes.sort_by_key(|hash| std::cmp::Reverse(hash.revision));
        hashes
    }

    /// etcd's HashKV: a hash of the stored key-values at or below
    /// `revision` (0 for the current one), equal to etcd's for the same
    /// history (see `hash.rs`), with the current revision.
    ///
    /// As in etcd, a revision that a remembered compaction hash covers is
    /// answered with that hash before anything else is checked; otherwise
    /// a revision below the compact revision is compacted and one above
    /// the current revision is a future one. A negative revision hashes
    /// nothing, as in etcd.
    pub fn hash_kv(&self, revision: i64) -> Result<(KeyValueHash, i64)> {
        self.check_usable()?;
        // Queued compaction work first, so that a compaction's hash is
        // remembered and storage holds what the index does (hash.rs).
        let mut state = self.state.read();
        for _ in 0..HASH_DRAIN_TRIES_MAX {
            if state.compactions.is_empty() {
                break;
            }
            drop(state);
            self.finish_compactions()?;
            state = self.state.read();
        }
        let current = state.current_revision;
        if let Some(remembered) = state.compaction_hashes.iter().find(|hash| hash.revision == revision) {
            return Ok((*remembered, current));
        }
        if revision > 0 && revision < state.compact_revision {
            return Err(Error::Compacted);
        }
        if revision > current {
            return Err(Error::FutureRevision);
        }
        let at = if revision == 0 { current } else { revision };
        let keep = state.index.keep(at, state.compact_revision);
        let hash = self.compaction_hash(&state.values, &state.batch, at, keep)?;
        Ok((hash, current))
    }

    /// Everything the store holds, for a raft snapshot, and the raft index
    /// it reflects (the consistent index). See [`Store::snapshot_to`].
    pub fn snapshot(&self) -> Result<(u64, Vec<u8>)> {
        let mut data = Vec::new();
        let index = self.snapshot_to(&mut data)?;
        Ok((index, data))
    }

    /// Writes everything the store holds to `out`, metadata included, and
    /// returns the raft index it reflects (the consistent index). Layout: a
    /// sequence of `key length u32 BE, key, value length u32 BE, value`
    /// for every sled key, a block's value being the block itself, never
    /// a pointer into this member's value files, and the format declared
    /// the one of blocks in sled ([`records::FORMAT_BLOCKS_IN_SLED`]).
    /// Taken under the read lock, so it is one consistent point; applies wait meanwhile, so `out` should be local
    /// (a file), not a network peer. The open batch goes to sled first.
    pub fn snapshot_to(&self, out: &mut impl std::io::Write) -> Result<u64> {
        self.check_usable()?;
        let mut state = self.state.write();
        commit(&self.db.read(), &self.poisoned, &mut state, self.observer.get())?;
        let state = RwLockWriteGuard::downgrade(state);
        let io = |e: std::io::Error| Error::Storage(format!("writing a snapshot: {e}"));
        for item in self.db.read().iter() {
            let (key, value) = item?;
            let value = match pointer_of(&key, &value) {
                Some(pointer) => state.values.read(&pointer)?.into(),
                None if key == records::META_FORMAT => records::FORMAT_BLOCKS_IN_SLED.to_be_bytes()[..].into(),
                None => value,
            };
            write_item(out, &key, &value).map_err(io)?;
        }
        Ok(state.consistent_index)
    }

    /// Replaces everything with a snapshot taken by [`Store::snapshot`] on
    /// another member. See [`Store::restore_from`].
    pub fn restore(&self, raft_index: u64, data: &[u8]) -> Result<()> {
        self.restore_from(raft_index, data)
    }

    /// Replaces everything with a snapshot read from `input` (written by
    /// [`Store::snapshot_to`] on another member) for raft index
    /// `raft_index`, then rebuilds the index. The consistent index becomes
    /// the snapshot's own when that is higher: the leader may have applied
    /// more by the time it wrote the snapshot, and those entries must then
    /// be skipped here.
    ///
    /// A snapshot can be larger than memory, so it goes in in batches of
    /// [`RESTORE_BATCH_BYTES`]. The first batch clears the store and sets
    /// the `restoring` mark; the last sets the consistent index and clears
    /// the mark, then everything is flushed. A store opened with the mark
    /// set ([`Store::is_restoring`]) holds part of a snapshot, and must be
    /// restored again before use.
    pub fn restore_from(&self, raft_index: u64, input: impl std::io::Read) -> Result<()> {
        self.restore_items(RestoreFor::Member(raft_index), input)
    }

    /// Replaces everything with a snapshot read from `input`, for a new
    /// cluster (a backup restored into new members): the data and its
    /// revisions are the snapshot's, but the consistent index is
    /// `raft_index`, where the new cluster's raft log starts, the
    /// membership is the new cluster's, and no alarm is kept (alarms name
    /// the old cluster's members).
    pub fn restore_for_new_cluster(
        &self,
        input: impl std::io::Read,
        raft_index: u64,
        membership: Vec<u8>,
    ) -> Result<()> {
        self.restore_items(RestoreFor::NewCluster { raft_index, membership }, input)
    }

    /// Restores for [`Store::restore_from`] or
    /// [`Store::restore_for_new_cluster`].
    fn restore_items(&self, target: RestoreFor, mut input: impl std::io::Read) -> Result<()> {
        self.check_usable()?;
        let mut state = self.state.write();
        // What the open batch holds is replaced with the rest, and a
        // defragmentation under way is abandoned.
        state.batch = Batch::default();
        state.copying = None;
        let mut batch = sled::Batch::default();
        for item in self.db.read().iter() {
            batch.remove(item?.0);
        }
        batch.insert(META_RESTORING, &[1u8][..]);
        self.apply_restore_batch(&mut state.values, batch)?;
        // Crash tests stop the process here, the store marked.
        fail::fail_point!("mvcc::restore_started", |_| std::process::abort());
        let (mut batch, snapshot_index) = self.restore_load(&mut state.values, &mut input)?;
        let consistent_index = match target {
            RestoreFor::Member(index) => index.max(snapshot_index),
            RestoreFor::NewCluster { raft_index, membership } => {
                batch.remove(META_ALARMS);
                batch.insert(META_MEMBERSHIP, membership);
                raft_index
            }
        };
        batch.insert(META_CONSISTENT_INDEX, &(consistent_index as i64).to_be_bytes());
        batch.remove(META_RESTORING);
        self.apply_restore_batch(&mut state.values, batch)?;
        // A snapshot from a member of an older format is upgraded here.
        records::upgrade(&self.db.read())?;
        // sled's flush, not `Store::flush`: this holds the state lock, and
        // there is no open batch to commit.
        self.db.read().flush()?;
        // Remembered compaction hashes describe the replaced history.
        let values = std::mem::replace(&mut state.values, ValueFiles::closed());
        *state = match load_state(&self.db.read(), values, consistent_index) {
            Ok(loaded) => loaded,
            Err(error) => {
                self.poisoned.store(true, Ordering::Release);
                return Err(error);
            }
        };
        self.compaction_queued
            .store(!state.compactions.is_empty(), Ordering::Release);
        self.alarm_kinds.store(kinds_of(&state.alarms), Ordering::Release);
        self.publish(&state, true);
        Ok(())
    }

    /// Loads a snapshot's items into the store, a batch at a time, and
    /// returns the last batch (still to apply) and the snapshot's
    /// consistent index.
    fn restore_load(&self, values: &mut ValueFiles, input: &mut impl std::io::Read) -> Result<(sled::Batch, u64)> {
        let mut batch = sled::Batch::default();
        let mut batch_bytes = 0;
        let mut snapshot_index = 0;
        while let Some(key) = read_part(input)? {
            let value = read_part(input)?.ok_or_else(|| corrupt("snapshot cut short"))?;
            if key == META_STORED_BYTES {
                // The sender's count; this store counts its own once loaded.
                continue;
            }
            if key == META_CONSISTENT_INDEX {
                let bytes: [u8; 8] = value[..].try_into().map_err(|_| corrupt("metadata is not 8 bytes"))?;
                snapshot_index = i64::from_be_bytes(bytes) as u64;
                continue;
            }
            batch_bytes += key.len() + value.len();
            if crate::block::first_of(&key).is_some() {
                let pointer = values.append(&value)?;
                batch.insert(key, &pointer.encode()[..]);
            } else {
                batch.insert(key, value);
            }
            if batch_bytes >= RESTORE_BATCH_BYTES {
                self.apply_restore_batch(values, std::mem::take(&mut batch))?;
                batch_bytes = 0;
            }
        }
        Ok((batch, snapshot_index))
    }

    /// Hands sled one batch of a restore, once the blocks it points to
    /// are synced.
    fn apply_restore_batch(&self, values: &mut ValueFiles, batch: sled::Batch) -> Result<()> {
        let applied = values.sync().and_then(|()| Ok(self.db.read().apply_batch(batch)?));
        if applied.is_err() {
            self.poisoned.store(true, Ordering::Release);
        }
        applied
    }

    /// Whether the store holds part of a snapshot: a restore was under way
    /// when the process stopped. See [`Store::restore_from`].
    pub fn is_restoring(&self) -> Result<bool> {
        Ok(self.db.read().contains_key(META_RESTORING)?)
    }

    /// The auth record last applied (see [`WriteRequest::Auth`]), if
    /// auth was ever changed.
    pub fn auth(&self) -> Option<Vec<u8>> {
        self.state.read().auth.clone()
    }

    /// The membership record last applied (see
    /// [`WriteRequest::Membership`]) and the consistent index it stands
    /// at, read together.
    pub fn membership(&self) -> (u64, Option<Vec<u8>>) {
        self.published.lock().clone()
    }

    /// Copies the state's index and membership out of its lock (see
    /// `published`); the membership only when `membership_changed`.
    fn publish(&self, state: &State, membership_changed: bool) {
        let mut published = self.published.lock();
        published.0 = state.consistent_index;
        if membership_changed {
            published.1.clone_from(&state.membership);
        }
        self.published_index.store(state.consistent_index, Ordering::Release);
        self.published_revision.store(state.current_revision, Ordering::Release);
        self.published_compact.store(state.compact_revision, Ordering::Release);
    }

    /// The raised alarms, by member then kind.
    pub fn alarms(&self) -> Vec<Alarm> {
        self.state.read().alarms.iter().copied().collect()
    }

    /// Whether some member's alarm of this kind is raised; reads no lock.
    pub fn has_alarm(&self, kind: i32) -> bool {
        (0..32).contains(&kind) && self.alarm_kinds.load(Ordering::Acquire) & 1 << kind != 0
    }

    /// etcd's Defragment: reclaims the value files holding dead blocks,
    /// then, when sled's files are bloated, copies sled into a fresh
    /// database holding only what is live, and switches to it, while
    /// applies and reads go on; each waits at most one step of the
    /// reclaim or chunk of the copy, or the switch (see defrag.rs). One runs at a time; a second waits for the first. A
    /// restore meanwhile abandons it, with an error. A failure after the
    /// new generation became current leaves the store unusable until it
    /// is reopened.
    pub fn defragment(&self) -> Result<()> {
        self.defragment_as(SledCopy::WhenBloated)
    }

    /// [`Store::defragment`], copying sled as `copy` says.
    pub fn defragment_as(&self, copy: SledCopy) -> Result<()> {
        self.check_usable()?;
        let mut generation = self.generation.lock();
        // What a compaction queued is not kept, only to be removed after.
        self.finish_compactions()?;
        self.reclaim_all()?;
        // Crash tests stop the process here, the value files reclaimed.
        fail::fail_point!("mvcc::defrag_reclaimed", |_| std::process::abort());
        if copy == SledCopy::WhenBloated && !self.sled_is_bloated()? {
            return Ok(());
        }
        let next = *generation + 1;
        let dir = defrag::generation_dir(&self.path, next);
        defrag::discard(&dir)?;
        let copied = self.copy_into(&dir);
        if copied.is_err() {
            self.state.write().copying = None;
            defrag::discard(&dir)?;
            return copied;
        }
        // Crash tests stop the process here, the copy complete.
        fail::fail_point!("mvcc::defrag_copied", |_| std::process::abort());
        let old = match self.switch_to(next) {
            Ok(old) => old,
            Err(error) => {
                if !self.poisoned.load(Ordering::Acquire) {
                    defrag::discard(&dir)?;
                }
                return Err(error);
            }
        };
        *generation = next;
        // Crash tests stop the process here, the old generation not yet gone.
        fail::fail_point!("mvcc::defrag_switched", |_| std::process::abort());
        drop(old);
        defrag::discard(&defrag::generation_dir(&self.path, next - 1))
    }

    /// Copies the store into a fresh database in `dir`, chunk by chunk,
    /// leaving it in `State::copying`, complete and kept equal by every
    /// commit, its files flushed and its directories synced.
    fn copy_into(&self, dir: &Path) -> Result<()> {
        let fresh = open_db(dir)?;
        {
            let mut state = self.state.write();
            commit(&self.db.read(), &self.poisoned, &mut state, self.observer.get())?;
            state.copying = Some(Copying::new(fresh.clone()));
        }
        loop {
            let started = Instant::now();
            let mut state = self.state.write();
            let copying = state.copying.as_mut().ok_or_else(abandoned)?;
            let complete = copying.copy_chunk(&self.db.read())?;
            // Handed straight to a waiting applier or reader.
            RwLockWriteGuard::unlock_fair(state);
            if complete {
                break;
            }
            std::thread::sleep(pacing::pause_after(started.elapsed(), defrag::DEFRAG_CPU_PERCENT));
        }
        // Most of the flush, outside the lock; the switch flushes the rest.
        fresh.flush()?;
        defrag::sync_tree(dir)
    }

    /// Whether sled's files hold so much more than its items that a
    /// defragmentation should copy it ([`defrag::DEFRAG_SLED_BLOAT_RATIO`]).
    /// Its items' bytes are those the store holds less the blocks value
    /// files hold. Crash tests force the copy (`mvcc::defrag_copy_sled`).
    fn sled_is_bloated(&self) -> Result<bool> {
        let forced = (|| {
            fail::fail_point!("mvcc::defrag_copy_sled", |_| true);
            false
        })();
        let on_disk = self.db.read().size_on_disk()?;
        let items = {
            let state = self.state.read();
            state.stored_bytes.saturating_sub(state.values.live_total())
        };
        Ok(forced || on_disk > items.saturating_mul(defrag::DEFRAG_SLED_BLOAT_RATIO) + defrag::DEFRAG_SLED_SLACK_BYTES)
    }

    /// Makes generation `next`, whose copy is complete, the store's
    /// database, and returns the old one. Under the state lock: commits
    /// the open batch into both, flushes the fresh one and replaces the
    /// pointer file. A failure once the pointer may have changed poisons
    /// the store.
    fn switch_to(&self, next: u64) -> Result<sled::Db> {
        let mut state = self.state.write();
        commit(&self.db.read(), &self.poisoned, &mut state, self.observer.get())?;
        let copying = state.copying.take().ok_or_else(abandoned)?;
        copying.fresh.flush()?;
        if let Err(error) = defrag::switch_to(&self.path, next) {
            self.poisoned.store(true, Ordering::Release);
            return Err(error);
        }
        Ok(std::mem::replace(&mut *self.db.write(), copying.fresh))
    }

    /// Bytes of what sled holds now (keys and values as stored, the open
    /// batch not yet): what a defragmentation would leave, short of sled's
    /// own overhead. Kept by every commit (`META_STORED_BYTES`): counting
    /// them by reading every item, as this once did about every second,
    /// pulled the whole store through sled's cache, which then kept most
    /// of it (`docs/measurements.md`).
    pub fn live_bytes(&self) -> Result<u64> {
        Ok(self.state.read().stored_bytes)
    }

    /// Bytes the store occupies on disk: sled's, and its value files'.
    pub fn size_on_disk(&self) -> Result<u64> {
        let values = self.state.read().values.size_on_disk();
        Ok(self.db.read().size_on_disk()? + values)
    }

    /// What killing the process does to the store, for a simulated crash:
    /// from now on it refuses every call, and closing it writes nothing,
    /// so the open batch is lost, as a killed process loses it (what sled
    /// already has stays). The member's WAL replays what was lost.
    pub fn kill(&self) {
        self.poisoned.store(true, Ordering::Release);
    }

    /// Makes everything applied so far durable in sled, the open batch
    /// included. The server calls it before it releases WAL segments, since
    /// after that the WAL can no longer replay what the store lost. sled
    /// also flushes on its own every 500 ms (its default), which only
    /// shortens replay after a crash.
    pub fn flush(&self) -> Result<()> {
        self.commit()?;
        self.db.read().flush()?;
        Ok(())
    }
}

impl Drop for Store {
    /// A store closed in an orderly way keeps its open batch (a crash loses
    /// it, and the WAL replays it), and has unlinked the value files it
    /// retired: none of its threads outlives it, so a store opened again
    /// on the same directory in this process never races one.
    fn drop(&mut self) {
        for thread in self.state.get_mut().values.settle() {
            let _ = thread.join();
        }
        if self.poisoned.load(Ordering::Acquire) {
            return;
        }
        if let Err(error) = commit(self.db.get_mut(), &self.poisoned, self.state.get_mut(), None) {
            tracing::warn!(%error, "the open batch could not be written on close");
        }
    }
}

/// How many times HashKV finishes queued compaction work before it hashes
/// anyway: compactions come minutes apart, so a second try is already
/// rare; the bound keeps a stream of them from holding HashKV forever.
const HASH_DRAIN_TRIES_MAX: usize = 10;

/// The compaction work a store opened or restored with `index`, rebuilt
/// from storage, still has: the revisions at or below `compact_revision`
/// that a compaction dropped from the index but a stop cut short before
/// storage lost them (see compaction.rs). Compacts `index` again to find
/// them.
fn leftovers(index: &mut TreeIndex, compact_revision: i64) -> Backlog {
    let mut backlog = Backlog::default();
    backlog.push_removal(index.compact(compact_revision).removable);
    backlog
}

/// The in-memory state of the store `db` and `values` hold, at raft
/// index `consistent_index`: the index rebuilt from every stored
/// revision, and the compaction work a stop left (see [`leftovers`]).
/// What `db` holds must be durable: the value files it names none of
/// are deleted.
fn load_state(db: &sled::Db, mut values: ValueFiles, consistent_index: u64) -> Result<State> {
    let (mut index, leases, current_revision, compact_revision) = rebuild(db, &mut values)?;
    values.remove_unreferenced()?;
    let compactions = leftovers(&mut index, compact_revision);
    Ok(State {
        index,
        leases,
        current_revision,
        compact_revision,
        consistent_index,
        compaction_hashes: VecDeque::new(),
        batch: Batch::default(),
        compactions,
        counts: CountCache::default(),
        alarms: read_alarms(db)?,
        membership: db.get(META_MEMBERSHIP)?.map(|bytes| bytes.to_vec()),
        auth: db.get(META_AUTH)?.map(|bytes| bytes.to_vec()),
        stored_bytes: match read_i64(db, META_STORED_BYTES)? {
            Some(bytes) => bytes as u64,
            None => count_stored_bytes(db)?,
        },
        copying: None,
        values,
        reclaim: None,
    })
}

/// Bytes an item of sled holds: its key and value, and the block bytes a
/// pointer under a block key names.
fn held_bytes(key: &[u8], value: &[u8]) -> usize {
    let pointed = match key.first() {
        Some(&crate::block::BLOCK_SPACE) => Pointer::decode(value).map_or(0, |p| p.length as usize),
        _ => 0,
    };
    key.len() + value.len() + pointed
}

/// The pointer an item of sled is, if it is one.
fn pointer_of(key: &[u8], value: &[u8]) -> Option<Pointer> {
    (key.first() == Some(&crate::block::BLOCK_SPACE))
        .then(|| Pointer::decode(value))
        .flatten()
}

/// Bytes of every key and value in `db`, with the blocks its pointers
/// name, counted by reading every item: for a store that has not
/// recorded them (written by an older build, or just restored), once when
/// it is loaded.
fn count_stored_bytes(db: &sled::Db) -> Result<u64> {
    let mut bytes = 0u64;
    for item in db.iter() {
        let (key, value) = item?;
        bytes += held_bytes(&key, &value) as u64;
    }
    Ok(bytes)
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

/// See [`Change`].
fn stored_bytes_change(db: &sled::Db, writes: &Writes) -> Result<Change> {
    let mut change = Change {
        bytes: 0,
        replaced: Vec::new(),
        added: Vec::new(),
    };
    for (key, value) in writes.outcome() {
        let old = match db.get(key)? {
            Some(old) => {
                change.replaced.extend(pointer_of(key, &old));
                held_bytes(key, &old)
            }
            None => 0,
        };
        let new = match value {
            Some(value) => {
                change.added.extend(pointer_of(key, value));
                held_bytes(key, value)
            }
            None => 0,
        };
        change.bytes += new as i64 - old as i64;
    }
    Ok(change)
}

/// Starts reclaiming the value files holding less than `percent` of their
/// bytes live (value_files.rs), if there are any.
fn start_reclaim(state: &mut State, percent: u64) {
    let files: BTreeSet<u64> = state.values.reclaimable(percent).into_iter().collect();
    if !files.is_empty() {
        state.reclaim = Some(Reclaim { files, after: None });
    }
}

/// The error of a defragmentation a restore abandoned.
fn abandoned() -> Error {
    Error::Storage("the defragmentation was abandoned: a snapshot was restored meanwhile".into())
}

/// Hands the open batch to sled as one atomic batch, with the current and
/// compact revisions and the consistent index it reaches. A failure
/// poisons the store: its index is then ahead of storage.
fn commit(db: &sled::Db, poisoned: &AtomicBool, state: &mut State, observer: Option<&Arc<dyn Observer>>) -> Result<()> {
    if state.batch.opened.is_none() {
        return Ok(());
    }
    let started = Instant::now();
    let batch = std::mem::take(&mut state.batch);
    let mut writes = batch.writes;
    // The blocks go to their file, synced, before sled may hold a pointer
    // to them (value_files.rs); a failure is fatal to the store.
    let written = records::write(&mut writes, &mut state.values, batch.overlay, &batch.records)
        .and_then(|()| state.values.sync());
    if let Err(error) = written {
        poisoned.store(true, Ordering::Release);
        tracing::error!(%error, "the value files failed a write; the store is poisoned");
        return Err(error);
    }
    writes.insert(META_CURRENT_REVISION, &state.current_revision.to_be_bytes());
    writes.insert(META_COMPACT_REVISION, &state.compact_revision.to_be_bytes());
    writes.insert(META_CONSISTENT_INDEX, &(state.consistent_index as i64).to_be_bytes());
    // The record of the bytes held counts itself: its key and 8 bytes.
    writes.remove(META_STORED_BYTES);
    let Change {
        bytes: change,
        replaced,
        added,
    } = stored_bytes_change(db, &writes)?;
    let change = change + (META_STORED_BYTES.len() + 8) as i64;
    let stored_bytes = (state.stored_bytes as i64 + change).max(0) as u64;
    writes.insert(META_STORED_BYTES, &(stored_bytes as i64).to_be_bytes());
    if let Some(error) = state.copying.as_ref().and_then(|copying| copying.tee(&writes).err()) {
        // The store itself is intact: only the defragmentation ends.
        tracing::warn!(%error, "a defragmentation's fresh database failed a write; abandoning it");
        state.copying = None;
    }
    if let Err(error) = db.apply_batch(writes.into_batch()) {
        poisoned.store(true, Ordering::Release);
        tracing::error!(%error, "sled failed to apply a batch; the store is poisoned");
        return Err(error.into());
    }
    state.stored_bytes = stored_bytes;
    for pointer in replaced {
        state.values.count_live(&pointer, -(pointer.length as i64));
    }
    for pointer in added {
        state.values.count_live(&pointer, pointer.length as i64);
    }
    if let Some(observer) = observer {
        observer.committed(started.elapsed());
    }
    Ok(())
}

/// The stored key-value at `revision`: from the open batch if it wrote
/// it, else from sled.
fn load_through(db: &sled::Db, values: &ValueFiles, batch: &Batch, revision: Revision) -> Result<KeyValue> {
    match batch.pending.get(&revision) {
        Some(&position) => records::decode(&batch.records[position].value),
        None => records::load(db, values, revision),
    }
}

/// The stored key-values at `revisions`, in their order: those the open
/// batch wrote from it, the rest from sled in one sorted pass.
fn load_many(db: &sled::Db, values: &ValueFiles, batch: &Batch, revisions: &[Revision]) -> Result<Vec<KeyValue>> {
    let mut kvs: Vec<Option<KeyValue>> = vec![None; revisions.len()];
    let mut stored = Vec::new();
    for (position, revision) in revisions.iter().enumerate() {
        match batch.pending.get(revision) {
            Some(&record) => kvs[position] = Some(records::decode(&batch.records[record].value)?),
            None => stored.push((*revision, position)),
        }
    }
    stored.sort_unstable();
    let sorted: Vec<Revision> = stored.iter().map(|(revision, _)| *revision).collect();
    records::load_sorted(db, values, &sorted, |at, kv| kvs[stored[at].1] = Some(kv))?;
    kvs.into_iter()
        .map(|kv| kv.ok_or_else(|| records::corrupt("indexed revision missing")))
        .collect()
}

/// [`records::each`] over sled as the open batch changes it (its
/// compactions' rewrites), then over the open batch's own revisions (all
/// newer than sled's), until `each` returns `Break`.
fn each_through(
    db: &sled::Db,
    values: &ValueFiles,
    batch: &Batch,
    from: Revision,
    to_main: i64,
    mut each: impl FnMut(Revision, bool, &[u8]) -> Result<ControlFlow<()>>,
) -> Result<()> {
    if records::each(db, values, &batch.overlay, from, to_main, &mut each)?.is_break() {
        return Ok(());
    }
    for record in &batch.records {
        if record.revision >= from
            && record.revision.main <= to_main
            && each(record.revision, record.tombstone, &record.value)?.is_break()
        {
            break;
        }
    }
    Ok(())
}

/// Calls `visit(revision, tombstone, key-value)` for every stored revision
/// in `from..=to_main` ([`each_through`]), in order.
fn visit_through(
    db: &sled::Db,
    values: &ValueFiles,
    batch: &Batch,
    from: Revision,
    to_main: i64,
    mut visit: impl FnMut(Revision, bool, KeyValue) -> Result<()>,
) -> Result<()> {
    each_through(db, values, batch, from, to_main, |revision, tombstone, value| {
        visit(revision, tombstone, records::decode(value)?)?;
        Ok(ControlFlow::Continue(()))
    })
}

/// One hash step: feeds `hasher` the stored revisions from `from` on,
/// about `limit` of them, and returns the main revision it ended at: that
/// of the `limit`-th stored at or after `from` (every sub-revision of it
/// is taken too), or `to_main` when fewer are stored through it. Counts
/// what is stored ([`each_through`]), not revision numbers: after
/// compactions the kept revisions lie far apart. One walk, so each block
/// is read once.
fn hash_step(
    db: &sled::Db,
    values: &ValueFiles,
    batch: &Batch,
    from: Revision,
    to_main: i64,
    limit: usize,
    hasher: &mut Hasher,
) -> Result<i64> {
    let (mut counted, mut end) = (0, to_main);
    each_through(db, values, batch, from, to_main, |revision, tombstone, value| {
        if counted >= limit && revision.main != end {
            return Ok(ControlFlow::Break(()));
        }
        feed(hasher, revision, tombstone, value)?;
        counted += 1;
        if counted >= limit {
            end = revision.main;
        }
        Ok(ControlFlow::Continue(()))
    })?;
    Ok(end)
}

/// Feeds `hasher` one stored revision, decoding its record only when the
/// hasher takes it.
fn feed(hasher: &mut Hasher, revision: Revision, tombstone: bool, value: &[u8]) -> Result<()> {
    if hasher.wants(revision, tombstone) {
        hasher.write(revision, tombstone, &records::read_stored(value)?);
    }
    Ok(())
}

/// `key`'s value at `revision - 1`, if it existed then and the revision
/// is not below the compact revision.
fn previous_value(db: &sled::Db, state: &State, key: &[u8], revision: i64) -> Result<Option<KeyValue>> {
    let at = revision - 1;
    if at < state.compact_revision {
        return Ok(None);
    }
    match state.index.get(key, at) {
        Some(previous) => load_through(db, &state.values, &state.batch, previous).map(Some),
        None => Ok(None),
    }
}

/// Grants a lease: a new lease record, no revision.
fn grant_lease(state: &mut State, batch: &mut Batch, request: &LeaseGrantRequest) -> Result<LeaseGrantResponse> {
    if state.leases.contains(request.id) {
        return Err(Error::LeaseExists);
    }
    state.leases.grant(request.id, request.ttl);
    batch.writes.insert(&lease_key(request.id), &request.ttl.to_be_bytes());
    Ok(LeaseGrantResponse {
        revision: state.current_revision,
        id: request.id,
        ttl: request.ttl,
    })
}

/// Applies lease checkpoints: each lease that still exists takes its
/// remaining TTL, stored too when `persist`. No revision.
fn checkpoint_leases(
    state: &mut State,
    batch: &mut Batch,
    request: &LeaseCheckpointRequest,
    persist: bool,
) -> WriteResponse {
    for checkpoint in &request.checkpoints {
        if state.leases.checkpoint(checkpoint.id, checkpoint.remaining_ttl) && persist {
            let ttl = state.leases.get(checkpoint.id).map_or(0, |lease| lease.ttl);
            batch
                .writes
                .insert(&lease_key(checkpoint.id), lease_record(ttl, checkpoint.remaining_ttl));
        }
    }
    WriteResponse::LeaseCheckpoint {
        revision: state.current_revision,
    }
}

/// etcd's NOSPACE alarm kind (`AlarmType_NOSPACE`).
pub const ALARM_NOSPACE: i32 = 1;

/// Whether `request` adds data, as the server's quota counts it when the
/// request arrives: a put, a lease grant, or a txn with a put in either
/// branch (nested txns included).
fn adds_data(request: &WriteRequest) -> bool {
    match request {
        WriteRequest::Put(_) | WriteRequest::LeaseGrant(_) => true,
        WriteRequest::Txn(txn) => txn.put_bytes() > 0,
        _ => false,
    }
}

/// etcd's `AlarmType_NONE`: raising it changes nothing.
const ALARM_NONE: i32 = 0;

/// Raises or clears an alarm, as etcd's alarm store does.
fn change_alarm(state: &mut State, batch: &mut Batch, request: &AlarmRequest) -> AlarmResponse {
    if request.activate && request.alarm.kind == ALARM_NONE {
        return AlarmResponse { alarm: None };
    }
    let raised_before = state.alarms.iter().any(|alarm| alarm.kind == request.alarm.kind);
    let changed = if request.activate {
        state.alarms.insert(request.alarm);
        Some(request.alarm)
    } else {
        state.alarms.remove(&request.alarm).then_some(request.alarm)
    };
    // etcd's lines, on the kind's first raise and its last clear.
    let raised_after = state.alarms.iter().any(|alarm| alarm.kind == request.alarm.kind);
    let kind = match request.alarm.kind {
        1 => "NOSPACE",
        2 => "CORRUPT",
        _ => "NONE",
    };
    let from = format!("{:x}", request.alarm.member_id);
    match (raised_before, raised_after) {
        (false, true) => tracing::warn!(alarm = kind, from, "alarm raised"),
        (true, false) => tracing::warn!(alarm = kind, from, "alarm disarmed"),
        _ => {}
    }
    batch.writes.insert(META_ALARMS, encode_alarms(&state.alarms));
    AlarmResponse { alarm: changed }
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

impl ReadView for StoreView<'_> {
    fn revision(&self) -> i64 {
        self.state.current_revision
    }

    fn compact_revision(&self) -> i64 {
        self.state.compact_revision
    }

    fn range(&self, request: &RangeRequest) -> Result<RangeResponse> {
        range::range(
            request,
            &self.state.index,
            self.state.current_revision,
            self.state.compact_revision,
            Some(&self.state.counts),
            |revisions| load_many(self.db, &self.state.values, &self.state.batch, revisions),
        )
    }

    fn lease_exists(&self, id: i64) -> bool {
        self.state.leases.contains(id)
    }
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

impl StoreTxn<'_> {
    /// Deletes the lease's keys in key order, all under one revision, then
    /// the lease.
    fn revoke_lease(&mut self, request: &LeaseRevokeRequest) -> Result<LeaseRevokeResponse> {
        let lease = self.state.leases.revoke(request.id).ok_or(Error::LeaseNotFound)?;
        for key in lease.keys {
            self.delete_range(&DeleteRangeRequest {
                key: key.into_vec(),
                ..DeleteRangeRequest::default()
            })?;
        }
        self.batch.writes.remove(&lease_key(request.id));
        Ok(LeaseRevokeResponse {
            revision: self.revision(),
        })
    }

    fn load(&self, revision: Revision) -> Result<KeyValue> {
        load_through(self.db, &self.state.values, self.batch, revision)
    }

    /// The key's value now, if it exists.
    fn live(&self, key: &[u8]) -> Result<Option<KeyValue>> {
        match self.state.index.latest(key) {
            Some(slot) if !slot.is_tombstone() => self.load(slot.revision()).map(Some),
            _ => Ok(None),
        }
    }

    fn next_revision(&mut self) -> Revision {
        let revision = Revision::new(self.begin + 1, self.changes);
        self.changes += 1;
        revision
    }

    fn write(&mut self, revision: Revision, tombstone: bool, kv: KeyValue) {
        let record = Record::new(revision, tombstone, &kv);
        self.batch.bytes += record.value.len();
        self.batch.pending.insert(revision, self.batch.records.len());
        self.batch.records.push(record);
        let kind = if tombstone { EventKind::Delete } else { EventKind::Put };
        self.events.push(Event { kind, kv });
    }
}

impl ReadView for StoreTxn<'_> {
    fn revision(&self) -> i64 {
        self.begin + i64::from(self.changes > 0)
    }

    fn compact_revision(&self) -> i64 {
        self.state.compact_revision
    }

    fn range(&self, request: &RangeRequest) -> Result<RangeResponse> {
        range::range(
            request,
            &self.state.index,
            self.revision(),
            self.state.compact_revision,
            None,
            |revisions| load_many(self.db, &self.state.values, self.batch, revisions),
        )
    }

    fn lease_exists(&self, id: i64) -> bool {
        self.state.leases.contains(id)
    }
}

impl WriteTxn for StoreTxn<'_> {
    fn put(&mut self, request: &PutRequest) -> Result<PutResponse> {
        validate::check_put(request)?;
        if request.lease != crate::lease::NO_LEASE && !self.state.leases.contains(request.lease) {
            return Err(Error::LeaseNotFound);
        }
        // The index usually knows the key's generation; storage is read
        // only when the request needs the previous key-value or a
        // compaction hid the generation's start (see key_index.rs).
        let needs_previous = request.prev_kv || request.ignore_value || request.ignore_lease;
        let generation = match self.state.index.generation(&request.key) {
            Generation::Unknown => None,
            _ if needs_previous => None,
            known => Some(known),
        };
        let previous = match generation {
            Some(_) => None,
            None => self.live(&request.key)?,
        };
        if (request.ignore_value || request.ignore_lease) && previous.is_none() {
            return Err(Error::KeyNotFound);
        }
        let revision = self.next_revision();
        let (create_revision, version) = match (generation, &previous) {
            (Some(Generation::Live { created, version }), _) => (created, version + 1),
            (None, Some(previous)) => (previous.create_revision, previous.version + 1),
            _ => (revision.main, 1),
        };
        if cfg!(debug_assertions) {
            if let Some(known) = generation {
                let stored = self.live(&request.key)?.map(|p| (p.create_revision, p.version));
                let indexed = match known {
                    Generation::Live { created, version } => Some((created, version)),
                    _ => None,
                };
                assert_eq!(
                    indexed, stored,
                    "the index's generation of {:?} disagrees with storage",
                    request.key
                );
            }
        }
        let kv = KeyValue {
            key: request.key.clone(),
            create_revision,
            mod_revision: revision.main,
            version,
            value: match (&previous, request.ignore_value) {
                (Some(previous), true) => previous.value.clone(),
                _ => request.value.clone(),
            },
            lease: match (&previous, request.ignore_lease) {
                (Some(previous), true) => previous.lease,
                _ => request.lease,
            },
        };
        self.state.index.put(&request.key, revision);
        self.state.leases.attach(&request.key, kv.lease);
        self.write(revision, false, kv);
        Ok(PutResponse {
            revision: revision.main,
            prev_kv: if request.prev_kv { previous } else { None },
        })
    }

    fn delete_range(&mut self, request: &DeleteRangeRequest) -> Result<DeleteRangeResponse> {
        validate::check_delete_range(request)?;
        let mut doomed = Vec::new();
        self.state.index.visit(
            &request.key,
            RangeEnd::parse(&request.range_end),
            i64::MAX,
            |key, revision| {
                doomed.push((key.to_vec(), revision));
                true
            },
        );
        let mut prev_kvs = Vec::new();
        for (key, previous) in &doomed {
            if request.prev_kv {
                prev_kvs.push(self.load(*previous)?);
            }
            let revision = self.next_revision();
            self.state.index.tombstone(key, revision);
            self.state.leases.detach(key);
            let tombstone = KeyValue {
                key: key.clone(),
                mod_revision: revision.main,
                ..KeyValue::default()
            };
            self.write(revision, true, tombstone);
        }
        Ok(DeleteRangeResponse {
            revision: self.revision(),
            deleted: doomed.len() as i64,
            prev_kvs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: lease checkpoints as etcd keeps them: applied, a lease's
    // remaining TTL is in memory on every member; stored only where the
    // member persists them, so only there does it survive a reopen; 0
    // clears it, and a checkpoint of a revoked lease changes nothing.
    // Method: the same checkpoints on a persisting and a non-persisting
    // store, each reopened.
    #[test]
    fn lease_checkpoints_persist_only_when_asked() {
        let checkpoint = |id, remaining_ttl| {
            WriteRequest::LeaseCheckpoint(LeaseCheckpointRequest {
                checkpoints: vec![crate::LeaseCheckpoint { id, remaining_ttl }],
            })
        };
        let ttls = |store: &Store| -> Vec<(i64, i64, i64)> {
            store
                .lease_ttls()
                .iter()
                .map(|lease| (lease.id, lease.ttl, lease.remaining_ttl))
                .collect()
        };
        for persist in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("kv");
            let store = Store::open(&path).unwrap();
            store.persist_lease_checkpoints(persist);
            let grant = |id| WriteRequest::LeaseGrant(LeaseGrantRequest { id, ttl: 600 });
            store.apply(1, &[grant(1), grant(2), grant(3)]).unwrap();
            let applied = store
                .apply(2, &[checkpoint(1, 300), checkpoint(2, 200), checkpoint(9, 100)])
                .unwrap();
            assert!(applied.iter().all(|applied| applied.response.is_ok()));
            store
                .apply(
                    3,
                    &[
                        checkpoint(2, 0),
                        WriteRequest::LeaseRevoke(LeaseRevokeRequest { id: 3 }),
                    ],
                )
                .unwrap();
            assert_eq!(
                ttls(&store),
                [(1, 600, 300), (2, 600, 0)],
                "in memory, persist={persist}"
            );
            assert_eq!(store.current_revision(), 1, "checkpoints make no revision");
            store.commit().unwrap();
            drop(store);
            let reopened = Store::open(&path).unwrap();
            let kept = if persist { 300 } else { 0 };
            assert_eq!(
                ttls(&reopened),
                [(1, 600, kept), (2, 600, 0)],
                "reopened, persist={persist}"
            );
        }
    }

    // Goal: the lock check recognises the error this sled version really
    // gives when a second handle opens a directory. Method: open twice.
    #[test]
    fn lock_error_is_recognised() {
        let dir = tempfile::tempdir().unwrap();
        let _first = sled::Config::new().path(dir.path()).open().unwrap();
        match sled::Config::new().path(dir.path()).open() {
            Err(sled::Error::Io(error)) => assert!(is_lock_held(&error), "{error}"),
            other => panic!("expected a lock error, got {other:?}"),
        }
    }

    // Goal: a defragmentation wins back the space of what was deleted and
    // compacted, keeps everything live (keys, revisions, the consistent
    // index, the membership), and leaves a store that takes writes and
    // reopens.
    // Method: 4,000 puts of 1 KiB, most deleted and compacted, flushed;
    // sled's size before and after, and reads and writes after.
    #[test]
    fn defragment_shrinks_and_keeps_everything() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kv");
        let store = Store::open(&path).unwrap();
        let put = |i: usize| {
            WriteRequest::Put(PutRequest {
                key: format!("k{i:05}").into_bytes(),
                value: vec![b'v'; 1024],
                ..PutRequest::default()
            })
        };
        let mut index = 0;
        for chunk in (0..4000).collect::<Vec<_>>().chunks(100) {
            index += 1;
            store
                .apply(index, &chunk.iter().map(|&i| put(i)).collect::<Vec<_>>())
                .unwrap();
        }
        let delete = WriteRequest::DeleteRange(DeleteRangeRequest {
            key: b"k00100".to_vec(),
            range_end: b"l".to_vec(),
            prev_kv: false,
        });
        store.apply(index + 1, &[delete]).unwrap();
        let revision = store.current_revision();
        let compact = WriteRequest::Compaction(CompactionRequest { revision });
        store
            .apply(index + 2, &[compact, WriteRequest::Membership(b"m".to_vec())])
            .unwrap();
        store.flush().unwrap();
        let before = store.size_on_disk().unwrap();
        store.defragment().unwrap();
        let after = store.size_on_disk().unwrap();
        assert!(after * 2 <= before, "{before} bytes, then {after}");
        let everything = RangeRequest {
            key: vec![0],
            range_end: vec![0],
            ..RangeRequest::default()
        };
        let kept = store.range(&everything).unwrap();
        assert_eq!(kept.kvs.len(), 100);
        assert_eq!(store.current_revision(), revision);
        assert_eq!(store.membership(), (index + 2, Some(b"m".to_vec())));
        store.apply(index + 3, &[put(7000)]).unwrap();
        drop(store);
        let reopened = Store::open(&path).unwrap();
        assert_eq!(reopened.range(&everything).unwrap().kvs.len(), 101);
        assert_eq!(reopened.current_revision(), revision + 1);
    }

    // Goal: writes applied while a defragmentation copies (overwrites of
    // keys the copy has passed and has not, deletes, new keys) are all in
    // the store after the switch and after reopening, and each
    // defragmentation leaves only its own generation on disk.
    #[test]
    fn defragment_while_writing_loses_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kv");
        let store = Arc::new(Store::open(&path).unwrap());
        let put = |key: String, value: usize| {
            WriteRequest::Put(PutRequest {
                key: key.into_bytes(),
                value: format!("{value:01000}").into_bytes(),
                ..PutRequest::default()
            })
        };
        for batch in 0..100 {
            let puts: Vec<_> = (0..100).map(|i| put(format!("k{:05}", batch * 100 + i), 0)).collect();
            store.apply(batch as u64 + 1, &puts).unwrap();
        }
        let done = Arc::new(AtomicBool::new(false));
        let writer = {
            let (store, done) = (store.clone(), done.clone());
            std::thread::spawn(move || {
                let mut index = 100u64;
                let mut during = 0;
                while !done.load(Ordering::Acquire) && index < 100_000 {
                    index += 1;
                    let n = index as usize;
                    let delete = WriteRequest::DeleteRange(DeleteRangeRequest {
                        key: format!("k{:05}", n * 7919 % 10_000).into_bytes(),
                        range_end: Vec::new(),
                        prev_kv: false,
                    });
                    let writes = [
                        put(format!("k{:05}", n * 31 % 10_000), n),
                        put(format!("n{n:06}"), n),
                        delete,
                    ];
                    store.apply(index, &writes).unwrap();
                    during += 1;
                }
                (index, during)
            })
        };
        store.defragment_as(SledCopy::Always).unwrap();
        store.defragment_as(SledCopy::Always).unwrap();
        done.store(true, Ordering::Release);
        let (index, during) = writer.join().unwrap();
        assert!(during > 10, "only {during} applies ran during the defragmentations");
        let everything = RangeRequest {
            key: vec![0],
            range_end: vec![0],
            ..RangeRequest::default()
        };
        let served = store.range(&everything).unwrap();
        assert_eq!(store.consistent_index(), index);
        drop(store);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(
            names
                .iter()
                .filter(|name| name.starts_with("kv") && *name != "kv.current" && *name != "kv.values")
                .count(),
            1,
            "{names:?}"
        );
        assert!(names.contains(&"kv.2".to_string()), "{names:?}");
        let reopened = Store::open(&path).unwrap();
        assert_eq!(reopened.range(&everything).unwrap(), served);
        assert_eq!(reopened.consistent_index(), index);
    }

    // Goal: a compaction's removals, done in steps by the store that
    // applied it or left queued by a stop and done after reopening,
    // leave storage holding the same revisions; reads meanwhile see the
    // compacted history; the hash taken at compaction is HashKV's at its
    // revision before it.
    #[test]
    fn compaction_in_steps_and_after_a_stop_ends_the_same() {
        let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
        let stores: Vec<Store> = dirs
            .iter()
            .map(|dir| Store::open(&dir.path().join("kv")).unwrap())
            .collect();
        let mut index = 0;
        for round in 0..5 {
            for chunk in (0..1000).collect::<Vec<_>>().chunks(250) {
                index += 1;
                let puts: Vec<_> = chunk.iter().map(|&key| put_in_round(key, round)).collect();
                stores.iter().for_each(|store| drop(store.apply(index, &puts).unwrap()));
            }
        }
        let at = stores[0].current_revision() - 10;
        let (before, _) = stores[0].hash_kv(at).unwrap();
        let compact = WriteRequest::Compaction(CompactionRequest { revision: at });
        index += 1;
        stores
            .iter()
            .for_each(|store| drop(store.apply(index, std::slice::from_ref(&compact)).unwrap()));
        assert!(stores.iter().all(Store::compaction_pending));
        let everything = RangeRequest {
            key: vec![0],
            range_end: vec![0],
            ..RangeRequest::default()
        };
        let served = stores[0].range(&everything).unwrap();
        // etcd's batch limit sets the steps' size: 1000 keys and 4990
        // revisions, about 4000 of them removed, are about 100 steps of
        // 100 (and 10 of the default 1000).
        stores[0].set_compaction_batch_limit(100);
        let mut steps = 0;
        while stores[0].compact_step().unwrap() {
            steps += 1;
            assert_eq!(stores[0].range(&everything).unwrap(), served);
        }
        assert!((90..=110).contains(&steps), "{steps} steps");
        assert_eq!(stores[0].hash_kv(at).unwrap().0, before);
        let mut stores = stores.into_iter();
        let (first, second) = (stores.next().unwrap(), stores.next().unwrap());
        drop(second);
        let reopened = Store::open(&dirs[1].path().join("kv")).unwrap();
        assert!(reopened.compaction_pending(), "the removals were lost with the stop");
        reopened.finish_compactions().unwrap();
        assert_eq!(reopened.range(&everything).unwrap(), served);
        assert_eq!(stored_revisions(&first), stored_revisions(&reopened));
        assert_eq!(first.compact_revision(), reopened.compact_revision());
        assert_eq!(first.current_revision(), reopened.current_revision());
    }

    /// Every stored revision, with whether it is a tombstone and its
    /// record, in revision order: what a store holds, whatever the layout
    /// of its blocks (which depends on when its commits came).
    fn stored_revisions(store: &Store) -> Vec<(Revision, bool, Vec<u8>)> {
        store.commit().unwrap();
        let state = store.state.read();
        let mut all = Vec::new();
        let each = |revision, tombstone, record: &[u8]| {
            all.push((revision, tombstone, record.to_vec()));
            Ok(ControlFlow::Continue(()))
        };
        let last = state.current_revision;
        each_through(
            &store.db.read(),
            &state.values,
            &state.batch,
            Revision::new(1, 0),
            last,
            each,
        )
        .unwrap();
        all
    }

    // Goal: the bytes in use the commits keep equal a count of every
    // item, through puts, deletes, leases, a compaction's removals, a
    // defragmentation, a reopen and a restore on another store.
    // Method: compare Store::live_bytes with a walk after each step.
    #[test]
    fn kept_stored_bytes_equal_a_count_of_every_item() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kv");
        let store = Store::open(&path).unwrap();
        let counted = |store: &Store| {
            store.flush().unwrap();
            (
                store.live_bytes().unwrap(),
                count_stored_bytes(&store.db.read()).unwrap(),
            )
        };
        let mut index = 0;
        let mut apply = |store: &Store, requests: &[WriteRequest]| {
            index += 1;
            drop(store.apply(index, requests).unwrap());
        };
        for round in 0..3 {
            let puts: Vec<_> = (0..300).map(|key| put_in_round(key, round)).collect();
            apply(&store, &puts);
            let (kept, walked) = counted(&store);
            assert_eq!(kept, walked, "after round {round}");
        }
        apply(
            &store,
            &[WriteRequest::LeaseGrant(LeaseGrantRequest { id: 5, ttl: 60 })],
        );
        apply(
            &store,
            &[WriteRequest::DeleteRange(DeleteRangeRequest {
                key: b"k0000".to_vec(),
                range_end: b"k0100".to_vec(),
                prev_kv: false,
            })],
        );
        let (kept, walked) = counted(&store);
        assert_eq!(kept, walked, "after a lease and deletes");
        let at = store.current_revision();
        apply(&store, &[WriteRequest::Compaction(CompactionRequest { revision: at })]);
        store.finish_compactions().unwrap();
        let (kept, walked) = counted(&store);
        assert_eq!(kept, walked, "after a compaction");
        store.defragment_as(SledCopy::Always).unwrap();
        assert_eq!(counted(&store).0, counted(&store).1, "after a defragmentation");
        let (_, snapshot) = store.snapshot().unwrap();
        let before_reopen = store.live_bytes().unwrap();
        drop(store);
        let store = Store::open(&path).unwrap();
        assert_eq!(store.live_bytes().unwrap(), before_reopen, "read back on open");
        let other = Store::open(&dir.path().join("other")).unwrap();
        other.restore(1, &snapshot).unwrap();
        let (kept, walked) = counted(&other);
        assert_eq!(kept, walked, "after a restore");
        apply(&other, &[put_in_round(1, 9)]);
        let (kept, walked) = counted(&other);
        assert_eq!(kept, walked, "after a commit following the restore");
    }

    /// The value files of the store at `path`, by number.
    fn value_file_numbers(path: &Path) -> Vec<u64> {
        let mut numbers: Vec<u64> = std::fs::read_dir(value_files::dir_of(path))
            .unwrap()
            .filter_map(|entry| {
                let name = entry.unwrap().file_name().into_string().unwrap();
                name.strip_suffix(".values")?.parse().ok()
            })
            .collect();
        numbers.sort_unstable();
        numbers
    }

    fn everything(store: &Store) -> Vec<KeyValue> {
        let all = RangeRequest {
            key: vec![0],
            range_end: vec![0],
            ..RangeRequest::default()
        };
        store.range(&all).unwrap().kvs
    }

    // Goal: a value file a compaction left mostly dead is reclaimed: its
    // live blocks move to the newest file and it is deleted, with every
    // value still read, counted and kept across a reopen; a file left
    // wholly dead goes too.
    // Method: each open starts a new file, so reopening between rounds
    // puts each round in its own file. 1 KiB values make 4 to a block:
    // round 0 puts 300 keys, round 1 overwrites 200 of them. A compaction
    // leaves round 0's file a third live (its last 25 blocks).
    #[test]
    fn value_files_a_compaction_emptied_are_reclaimed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kv");
        let put = |key: usize, round: usize| {
            WriteRequest::Put(PutRequest {
                key: format!("k{key:04}").into_bytes(),
                value: vec![b'a' + round as u8; 1000],
                ..PutRequest::default()
            })
        };
        let store = Store::open(&path).unwrap();
        drop(
            store
                .apply(1, &(0..300).map(|key| put(key, 0)).collect::<Vec<_>>())
                .unwrap(),
        );
        drop(store);
        let store = Store::open(&path).unwrap();
        drop(
            store
                .apply(2, &(0..200).map(|key| put(key, 1)).collect::<Vec<_>>())
                .unwrap(),
        );
        store.flush().unwrap();
        let before = value_file_numbers(&path);
        assert_eq!(before.len(), 2, "one file a round: {before:?}");
        let expected = everything(&store);
        let at = store.current_revision();
        drop(
            store
                .apply(3, &[WriteRequest::Compaction(CompactionRequest { revision: at })])
                .unwrap(),
        );
        store.finish_compactions().unwrap();
        let after = value_file_numbers(&path);
        assert!(!after.contains(&before[0]), "round 0's file is reclaimed: {after:?}");
        assert!(after.contains(&before[1]), "round 1's file is all live: {after:?}");
        assert_eq!(everything(&store), expected);
        store.flush().unwrap();
        assert_eq!(
            store.live_bytes().unwrap(),
            count_stored_bytes(&store.db.read()).unwrap()
        );
        let files_bytes = store.state.read().values.size_on_disk();
        assert!(
            files_bytes <= 300 * 1100,
            "the files hold about the live values: {files_bytes} bytes"
        );
        drop(store);
        let store = Store::open(&path).unwrap();
        assert_eq!(everything(&store), expected);

        // Everything overwritten and compacted: both files are dead.
        drop(
            store
                .apply(4, &(0..300).map(|key| put(key, 2)).collect::<Vec<_>>())
                .unwrap(),
        );
        let at = store.current_revision();
        drop(
            store
                .apply(5, &[WriteRequest::Compaction(CompactionRequest { revision: at })])
                .unwrap(),
        );
        store.finish_compactions().unwrap();
        let last = value_file_numbers(&path);
        assert!(last.iter().all(|n| !after.contains(n)), "{after:?} then {last:?}");
        assert_eq!(everything(&store).len(), 300);
    }

    // Goal: a flipped bit in a value file is reported when the store
    // opens, not served.
    #[test]
    fn a_flipped_bit_in_a_value_file_fails_the_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kv");
        let store = Store::open(&path).unwrap();
        drop(
            store
                .apply(1, &(0..50).map(|key| put_in_round(key, 0)).collect::<Vec<_>>())
                .unwrap(),
        );
        drop(store);
        let file = value_files::dir_of(&path).join(format!("{:020}.values", value_file_numbers(&path)[0]));
        let mut bytes = std::fs::read(&file).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0x01;
        std::fs::write(&file, bytes).unwrap();
        let error = Store::open(&path).err().expect("the open fails").to_string();
        assert!(error.contains("checksum"), "{error}");
    }

    /// Key `key`'s put in writing round `round`: the compaction tests'
    /// keys, each rewritten once a round.
    fn put_in_round(key: usize, round: usize) -> WriteRequest {
        WriteRequest::Put(PutRequest {
            key: format!("k{key:04}").into_bytes(),
            value: format!("value {round}").into_bytes(),
            ..PutRequest::default()
        })
    }

    // Goal: after a compaction, the next one's hash takes steps in
    // proportion to the revisions still stored, not to the revision
    // numbers they span, and its hash is still HashKV's at its revision.
    // Method: 100 keys put 50 times each, compacted; 10 keys put again and
    // a second compaction with a batch limit of 10. About 110 revisions
    // are stored below it, among 5,000 numbers: about 11 hash steps, where
    // steps of 10 revision numbers would be 500.
    #[test]
    fn a_compactions_hash_steps_over_what_is_stored() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("kv")).unwrap();
        let mut index = 0;
        for round in 0..50 {
            index += 1;
            let puts: Vec<_> = (0..100).map(|key| put_in_round(key, round)).collect();
            drop(store.apply(index, &puts).unwrap());
        }
        let compact = |at| WriteRequest::Compaction(CompactionRequest { revision: at });
        index += 1;
        drop(store.apply(index, &[compact(store.current_revision())]).unwrap());
        store.finish_compactions().unwrap();
        index += 1;
        let puts: Vec<_> = (0..10).map(|key| put_in_round(key, 50)).collect();
        drop(store.apply(index, &puts).unwrap());
        let at = store.current_revision();
        let (before, _) = store.hash_kv(at).unwrap();
        store.set_compaction_batch_limit(10);
        index += 1;
        drop(store.apply(index, &[compact(at)]).unwrap());
        let mut steps = 0;
        while store.compact_step().unwrap() {
            steps += 1;
            assert!(steps < 100, "{steps} steps and more");
        }
        // 10 index steps, about 11 hash steps, 1 removal.
        assert!((15..=30).contains(&steps), "{steps} steps");
        assert_eq!(store.hash_kv(at).unwrap().0, before);
    }

    fn alarm(member_id: u64, kind: i32, activate: bool) -> WriteRequest {
        WriteRequest::Alarm(AlarmRequest {
            activate,
            alarm: Alarm { member_id, kind },
        })
    }

    fn answer(store: &Store, index: u64, request: WriteRequest) -> Option<Alarm> {
        match store.apply(index, &[request]).unwrap().remove(0).response {
            Ok(WriteResponse::Alarm(response)) => response.alarm,
            other => panic!("{other:?}"),
        }
    }

    // Goal: while a NOSPACE alarm is raised, the store refuses at apply
    // what etcd's capped applier refuses (puts, txns with a put in either
    // branch, lease grants) and applies the rest (reads in txns, deletes,
    // compactions); once it is cleared, puts apply again.
    // Method: one store, an alarm raised and cleared through apply.
    #[test]
    fn a_nospace_alarm_refuses_writes_that_add_data() {
        use crate::request::{RequestOp, TxnRequest};
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("a")).unwrap();
        let put = |key: &[u8]| PutRequest {
            key: key.to_vec(),
            value: b"v".to_vec(),
            ..PutRequest::default()
        };
        let range = RangeRequest {
            key: b"k".to_vec(),
            ..RangeRequest::default()
        };
        let txn = |success: Vec<RequestOp>| {
            WriteRequest::Txn(TxnRequest {
                compare: Vec::new(),
                success,
                failure: Vec::new(),
            })
        };
        let refused = |index: u64, request: WriteRequest| {
            let applied = store.apply(index, &[request]).unwrap().remove(0);
            applied.response.err()
        };
        assert_eq!(refused(1, WriteRequest::Put(put(b"k"))), None);
        answer(&store, 2, alarm(7, ALARM_NOSPACE, true));
        let revision = store.current_revision();
        assert_eq!(refused(3, WriteRequest::Put(put(b"k"))), Some(Error::NoSpace));
        let grant = WriteRequest::LeaseGrant(LeaseGrantRequest { id: 5, ttl: 60 });
        assert_eq!(refused(4, grant), Some(Error::NoSpace));
        let nested = txn(vec![RequestOp::Txn(TxnRequest {
            compare: Vec::new(),
            success: vec![RequestOp::Put(put(b"n"))],
            failure: Vec::new(),
        })]);
        assert_eq!(refused(5, nested), Some(Error::NoSpace));
        assert_eq!(store.current_revision(), revision, "nothing refused applied");
        assert_eq!(refused(6, txn(vec![RequestOp::Range(range.clone())])), None);
        let delete = WriteRequest::DeleteRange(DeleteRangeRequest {
            key: b"k".to_vec(),
            range_end: Vec::new(),
            prev_kv: false,
        });
        assert_eq!(refused(7, delete), None);
        assert_eq!(store.current_revision(), revision + 1, "the delete applied");
        answer(&store, 8, alarm(7, ALARM_NOSPACE, false));
        assert_eq!(refused(9, WriteRequest::Put(put(b"k"))), None);
        assert_eq!(store.range(&range).unwrap().kvs.len(), 1);
    }

    // Goal: alarms are raised and cleared as etcd's alarm store does them
    // (a raise answers the alarm even when it was raised; a clear answers
    // it only when it was), leave the revision alone, survive a reopen,
    // travel in a snapshot, and are dropped by a restore for a new
    // cluster, whose members are others.
    #[test]
    fn alarms_are_replicated_state() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("a")).unwrap();
        let revision = store.current_revision();
        assert!(!store.has_alarm(1));
        assert_eq!(
            answer(&store, 1, alarm(7, 1, true)),
            Some(Alarm { member_id: 7, kind: 1 })
        );
        assert_eq!(
            answer(&store, 2, alarm(7, 1, true)),
            Some(Alarm { member_id: 7, kind: 1 })
        );
        assert_eq!(
            answer(&store, 3, alarm(9, 2, true)),
            Some(Alarm { member_id: 9, kind: 2 })
        );
        assert_eq!(
            answer(&store, 4, alarm(9, 1, false)),
            None,
            "not raised, so not cleared"
        );
        assert!(store.has_alarm(1) && store.has_alarm(2) && !store.has_alarm(3));
        assert_eq!(store.current_revision(), revision);
        drop(store);

        let store = Store::open(&dir.path().join("a")).unwrap();
        assert_eq!(store.alarms().len(), 2, "kept across a reopen");
        let (index, data) = store.snapshot().unwrap();
        let copy = Store::open(&dir.path().join("b")).unwrap();
        copy.restore(index, &data).unwrap();
        assert_eq!(copy.alarms(), store.alarms());
        assert!(copy.has_alarm(2));
        assert_eq!(
            answer(&copy, index + 1, alarm(9, 2, false)),
            Some(Alarm { member_id: 9, kind: 2 })
        );
        assert!(!copy.has_alarm(2) && copy.has_alarm(1));

        let fresh = Store::open(&dir.path().join("c")).unwrap();
        fresh
            .restore_for_new_cluster(&data[..], 3, b"members".to_vec())
            .unwrap();
        assert!(fresh.alarms().is_empty() && !fresh.has_alarm(1));
        assert_eq!(fresh.membership(), (3, Some(b"members".to_vec())));
    }
}
