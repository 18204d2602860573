//! The store's backend: the sled handle's use, the open batch and its
//! commit (with the consistent index and the stored-bytes count it
//! carries), and reads through the batch to sled and the value files.

use super::*;

/// Opens the sled database at `path`, waiting out a lock that a handle
/// being dropped still holds.
pub(super) fn open_db(path: &Path) -> Result<sled::Db> {
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
pub(super) fn is_lock_held(error: &std::io::Error) -> bool {
    error.to_string().contains("could not acquire lock")
}

pub(super) fn read_i64(db: &sled::Db, key: &[u8]) -> Result<Option<i64>> {
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

/// Bytes an item of sled holds: its key and value, and the block bytes a
/// pointer under a block key names.
pub(super) fn held_bytes(key: &[u8], value: &[u8]) -> usize {
    let pointed = match key.first() {
        Some(&crate::block::BLOCK_SPACE) => Pointer::decode(value).map_or(0, |p| p.length as usize),
        _ => 0,
    };
    key.len() + value.len() + pointed
}

/// The pointer an item of sled is, if it is one.
pub(super) fn pointer_of(key: &[u8], value: &[u8]) -> Option<Pointer> {
    (key.first() == Some(&crate::block::BLOCK_SPACE))
        .then(|| Pointer::decode(value))
        .flatten()
}

/// Bytes of every key and value in `db`, with the blocks its pointers
/// name, counted by reading every item: for a store that has not
/// recorded them (written by an older build, or just restored), once when
/// it is loaded.
pub(super) fn count_stored_bytes(db: &sled::Db) -> Result<u64> {
    let mut bytes = 0u64;
    for item in db.iter() {
        let (key, value) = item?;
        bytes += held_bytes(&key, &value) as u64;
    }
    Ok(bytes)
}

/// See [`Change`].
pub(super) fn stored_bytes_change(db: &sled::Db, writes: &Writes) -> Result<Change> {
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

/// The error of a defragmentation a restore abandoned.
pub(super) fn abandoned() -> Error {
    Error::Storage("the defragmentation was abandoned: a snapshot was restored meanwhile".into())
}

/// Hands the open batch to sled as one atomic batch, with the current and
/// compact revisions and the consistent index it reaches. A failure
/// poisons the store: its index is then ahead of storage.
pub(super) fn commit(
    db: &sled::Db,
    poisoned: &AtomicBool,
    state: &mut State,
    observer: Option<&Arc<dyn Observer>>,
) -> Result<()> {
    if state.batch.opened.is_none() {
        return Ok(());
    }
    let before = state.position("commit");
    let started = Instant::now();
    let batch = std::mem::take(&mut state.batch);
    let mut writes = batch.writes;
    // The blocks go to their file, synced, before sled may hold a pointer
    // to them (value_files.rs); a failure is fatal to the store.
    let written = records::write(
        &mut writes,
        &mut state.values,
        &mut state.directory,
        batch.overlay,
        &batch.records,
    )
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
    assert!(
        state.batch.opened.is_none() && state.position("commit") == before,
        "commit must hand sled the whole batch and move nothing: {before:?}, batch open: {}",
        state.batch.opened.is_some()
    );
    if let Some(observer) = observer {
        observer.committed(started.elapsed());
    }
    Ok(())
}

/// The stored key-value at `revision`: from the open batch if it wrote
/// it, else from sled.
pub(super) fn load_through(db: &sled::Db, values: &ValueFiles, batch: &Batch, revision: Revision) -> Result<KeyValue> {
    read_through(db, values, batch, revision, |stored| stored.to_key_value())
}

/// What `read` takes from the stored key-value at `revision`, read in
/// place where [`load_through`] finds it: a caller that needs a few
/// fields copies no key or value.
pub(super) fn read_through<T>(
    db: &sled::Db,
    values: &ValueFiles,
    batch: &Batch,
    revision: Revision,
    read: impl FnOnce(StoredKeyValue<'_>) -> T,
) -> Result<T> {
    match batch.pending.get(&revision) {
        Some(&position) => records::read_stored(&batch.records[position].value).map(read),
        None => records::load_with(db, values, revision, read),
    }
}

/// Hands `found` the stored key-value at each of `revisions` with its
/// position: those the open batch wrote from it, the rest from sled in
/// one sorted pass (so not in the order asked). Every revision is found,
/// or the load fails.
pub(super) fn load_many(
    db: &sled::Db,
    values: &ValueFiles,
    directory: &Directory,
    batch: &Batch,
    revisions: &[Revision],
    found: &mut dyn FnMut(usize, KeyValue),
) -> Result<()> {
    let mut stored = Vec::new();
    for (position, revision) in revisions.iter().enumerate() {
        match batch.pending.get(revision) {
            Some(&record) => found(position, records::decode(&batch.records[record].value)?),
            None => stored.push((*revision, position)),
        }
    }
    stored.sort_unstable();
    let sorted: Vec<Revision> = stored.iter().map(|(revision, _)| *revision).collect();
    records::load_sorted(db, values, directory, &sorted, |at, kv| found(stored[at].1, kv))
}

/// [`records::each`] over sled as the open batch changes it (its
/// compactions' rewrites), then over the open batch's own revisions (all
/// newer than sled's), until `each` returns `Break`.
pub(super) fn each_through(
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
pub(super) fn visit_through(
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

impl Store {
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
