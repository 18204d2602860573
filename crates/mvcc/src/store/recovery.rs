//! Opening a store: its generation after a cut-short defragmentation, the
//! in-memory index and lease table rebuilt from what is stored, and the
//! compaction work a stop left queued.

use super::*;
use crate::index_build::IndexBuild;

/// Rebuilds the in-memory index from every stored revision, and the lease
/// table from the stored leases and the values naming them, and the
/// block directory; reads the current and compact revisions.
pub(super) fn rebuild(db: &sled::Db, values: &mut ValueFiles) -> Result<Rebuilt> {
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
    let mut build = IndexBuild::default();
    let mut highest = 0;
    let directory = records::scan(db, values, |revision, tombstone, kv| {
        if tombstone {
            build.tombstone(kv.key, revision);
            leases.detach(kv.key);
        } else {
            build.put(kv.key, revision, kv.create_revision, kv.version);
            leases.attach(kv.key, kv.lease);
        }
        highest = revision.main;
        Ok(())
    })?;
    let index = build.finish();
    let current_revision = read_i64(db, META_CURRENT_REVISION)?.unwrap_or(EMPTY_STORE_REVISION);
    assert!(
        current_revision >= highest,
        "stored revision {highest} above current {current_revision}"
    );
    let compact_revision = read_i64(db, META_COMPACT_REVISION)?.unwrap_or(NEVER_COMPACTED);
    Ok(Rebuilt {
        index,
        leases,
        directory,
        current_revision,
        compact_revision,
    })
}

/// What [`rebuild`] reads back from storage.
pub(super) struct Rebuilt {
    index: TreeIndex,
    leases: LeaseTable,
    directory: Directory,
    current_revision: i64,
    compact_revision: i64,
}

/// The compaction work a store opened or restored with `index`, rebuilt
/// from storage, still has: the revisions at or below `compact_revision`
/// that a compaction dropped from the index but a stop cut short before
/// storage lost them (see compaction.rs). Compacts `index` again to find
/// them.
pub(super) fn leftovers(index: &mut TreeIndex, compact_revision: i64) -> Backlog {
    let mut backlog = Backlog::default();
    backlog.push_removal(index.compact(compact_revision).removable);
    backlog
}

/// The in-memory state of the store `db` and `values` hold, at raft
/// index `consistent_index`: the index rebuilt from every stored
/// revision, and the compaction work a stop left (see [`leftovers`]).
/// What `db` holds must be durable: the value files it names none of
/// are deleted.
pub(super) fn load_state(db: &sled::Db, mut values: ValueFiles, consistent_index: u64) -> Result<State> {
    let Rebuilt {
        mut index,
        leases,
        directory,
        current_revision,
        compact_revision,
    } = rebuild(db, &mut values)?;
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
        directory,
        reclaim: None,
    })
}

impl Store {
    /// Opens (or creates) the store in `path` and rebuilds the index from
    /// every stored revision.
    pub fn open(path: &Path) -> Result<Store> {
        Store::open_with(path, validate::MAX_TXN_OPS_DEFAULT)
    }

    /// As [`Store::open`], with etcd's `--max-txn-ops`.
    pub fn open_with(path: &Path, max_txn_ops: usize) -> Result<Store> {
        Store::open_powered(path, max_txn_ops, crate::power::Power::default())
    }

    /// As [`Store::open_with`], its writes reaching the disk while
    /// `power` is on (power.rs).
    pub fn open_powered(path: &Path, max_txn_ops: usize, power: crate::power::Power) -> Result<Store> {
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
            power,
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
}
