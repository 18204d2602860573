//! Compaction: the hash etcd takes while it compacts, the queued work done
//! in paced steps, and the reclaim of value files it empties; HashKV.

use super::*;

/// How many times HashKV finishes queued compaction work before it hashes
/// anyway: compactions come minutes apart, so a second try is already
/// rare; the bound keeps a stream of them from holding HashKV forever.
pub(super) const HASH_DRAIN_TRIES_MAX: usize = 10;

/// Starts reclaiming the value files holding less than `percent` of their
/// bytes live (value_files.rs), if there are any.
pub(super) fn start_reclaim(state: &mut State, percent: u64) {
    let files: BTreeSet<u64> = state.values.reclaimable(percent).into_iter().collect();
    if !files.is_empty() {
        state.reclaim = Some(Reclaim { files, after: None });
    }
}

/// Makes sled's state durable, then retires those of `files` no pointer
/// in it names (value_files.rs): once it is durable, no pointer sled may
/// recover names them. A file still holding live bytes is kept, and
/// logged.
fn retire_once_durable(db: &sled::Db, state: &mut State, files: impl IntoIterator<Item = u64>) -> Result<()> {
    db.flush()?;
    for file in files {
        match state.values.live(file) {
            0 => state.values.retire(file),
            live => tracing::warn!(file, live, "a reclaimed value file still holds live bytes; kept"),
        }
    }
    Ok(())
}

/// One hash step: feeds `hasher` the stored revisions from `from` on,
/// about `limit` of them, and returns the main revision it ended at: that
/// of the `limit`-th stored at or after `from` (every sub-revision of it
/// is taken too), or `to_main` when fewer are stored through it. Counts
/// what is stored ([`each_through`]), not revision numbers: after
/// compactions the kept revisions lie far apart. One walk, so each block
/// is read once here (the step's removals look up again the blocks that
/// hold what they remove).
pub(super) fn hash_step(
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
pub(super) fn feed(hasher: &mut Hasher, revision: Revision, tombstone: bool, value: &[u8]) -> Result<()> {
    if hasher.wants(revision, tombstone) {
        hasher.write(revision, tombstone, &records::read_stored(value)?);
    }
    Ok(())
}

impl Store {
    /// Compacts at the request's revision: from now on no read below it is
    /// served. The rest is queued and done in steps between applies
    /// (compaction.rs): the index drops what no read at or after the
    /// revision needs; then one walk hashes what is stored at or below the
    /// revision, as etcd does while it compacts, removing each dropped
    /// revision once hashed, and the hash is remembered for HashKV (see
    /// `hash.rs`).
    pub(super) fn compact(&self, state: &mut State, request: &CompactionRequest) -> Result<CompactionResponse> {
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

    /// HashKV's hash at `at` with `kept`'s compact revision and keep set
    /// (see `hash.rs`), in one pass: every revision stored at or below `at`
    /// (through the open batch's overlay of compaction removals), then
    /// what this batch wrote (all newer than anything stored).
    pub(super) fn compaction_hash(
        &self,
        values: &ValueFiles,
        batch: &Batch,
        at: i64,
        kept: Keep,
    ) -> Result<KeyValueHash> {
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
        let before = state.position("compact_step");
        let more = self.compact_step_locked(&mut state)?;
        // Compaction removes history below the compact revision; it
        // never moves a revision or the index.
        assert_eq!(
            state.position("compact_step"),
            before,
            "a compaction step moved the store's position"
        );
        Ok(more)
    }

    /// [`Store::compact_step`] under its lock.
    fn compact_step_locked(&self, state: &mut State) -> Result<bool> {
        let started = Instant::now();
        let limit = self.compaction_batch_limit.load(Ordering::Relaxed);
        if state.compactions.is_empty() {
            // What is left is reclaiming the space the compaction freed.
            let more = state.reclaim.is_some() && self.reclaim_step(state)?;
            self.compaction_queued.store(more, Ordering::Release);
            if let Some(observer) = self.observer.get() {
                observer.compaction_step(false, 0, started.elapsed());
            }
            return Ok(more);
        }
        let mut kind = (false, 0);
        if let Some(mut step) = state.compactions.next_step(limit) {
            let removed = self.run_step(state, &mut step, limit)?;
            kind = (matches!(step, Step::Index { .. }), removed);
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
            commit(&self.db.read(), &self.poisoned, state, self.observer.get())?;
            start_reclaim(state, RECLAIM_LIVE_PERCENT);
        } else if kind.1 > 0 {
            // Removals go in revision order, so the oldest files empty
            // first; counted once committed (when the batch is due).
            self.retire_dead_files(state)?;
        }
        let more = !state.compactions.is_empty() || state.reclaim.is_some();
        self.compaction_queued.store(more, Ordering::Release);
        if let Some(observer) = self.observer.get() {
            observer.compaction_step(kind.0, kind.1, started.elapsed());
        }
        Ok(more)
    }

    /// Deletes the value files a running compaction's removals left
    /// wholly dead, once there are at least [`DEAD_FILES_RECLAIM_MIN`]
    /// (value_files.rs). Their live bytes count what sled holds as
    /// committed, so none of its pointers names them; once sled's state
    /// is durable, none it may recover does. Nothing to move, so this is
    /// one flush of sled. Files only partly dead wait for the
    /// compaction's end: its later removals may empty them, and moving
    /// their blocks now could move what it is about to remove.
    fn retire_dead_files(&self, state: &mut State) -> Result<()> {
        let dead = state.values.dead();
        if dead.len() < DEAD_FILES_RECLAIM_MIN {
            return Ok(());
        }
        // A pending reclaim naming one finds it gone, and moves nothing.
        retire_once_durable(&self.db.read(), state, dead)
    }

    /// One step of the reclaim under way (value_files.rs): moves about
    /// [`records::MOVE_BYTES_MAX`] of its files' blocks into the newest
    /// file and commits; once none is left, makes sled durable and retires
    /// the files (unlinked off this thread). Whether more remains.
    pub(super) fn reclaim_step(&self, state: &mut State) -> Result<bool> {
        let Some(job) = state.reclaim.take() else {
            return Ok(false);
        };
        let db = self.db.read();
        // The open batch's own blocks go to the newest file, never to one
        // being reclaimed, and blocks its overlay rewrites are skipped:
        // what is moved is sled's, with no commit first.
        let State { values, batch, .. } = &mut *state;
        let rewrites = batch.overlay.len();
        // Files no committed pointer names have nothing to move; looking
        // would walk every block pointer in sled for nothing.
        let next = match job.files.iter().all(|file| values.live(*file) == 0) {
            true => None,
            false => records::move_blocks(&db, values, &mut batch.overlay, &job.files, job.after.as_deref())?,
        };
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
        retire_once_durable(&db, state, job.files)?;
        Ok(false)
    }

    /// Reclaims every value file under
    /// [`value_files::DEFRAG_RECLAIM_LIVE_PERCENT`] live, the newest
    /// included, a step at a time under the state lock, paced as the copy
    /// is: the first part of a defragmentation, which leaves the value
    /// files holding little but what is live.
    pub(super) fn reclaim_all(&self) -> Result<()> {
        {
            let mut state = self.state.write();
            commit(&self.db.read(), &self.poisoned, &mut state, self.observer.get())?;
            state.values.seal();
            // A reclaim under way (a compaction's, begun since the queue
            // was finished) names files among these: none was the newest
            // when it began, so their live bytes have only fallen since.
            // It starts again with all of them.
            state.reclaim = None;
            start_reclaim(&mut state, value_files::DEFRAG_RECLAIM_LIVE_PERCENT);
        }
        let mut pace = self.defrag_pace();
        loop {
            let started = Instant::now();
            let mut state = self.state.write();
            let more = self.reclaim_step(&mut state)?;
            RwLockWriteGuard::unlock_fair(state);
            if !more {
                self.wait_for_unlinks();
                return Ok(());
            }
            self.defrag_pause(&mut pace, started.elapsed());
        }
    }

    /// Does every step of the queued compaction work, and waits for the
    /// files it retired to be unlinked.
    pub fn finish_compactions(&self) -> Result<()> {
        self.finish_compactions_paced(|_| {})
    }

    /// [`Store::finish_compactions`], calling `pause` with each step's
    /// time after it, beside the apply stage's own paced steps.
    pub(super) fn finish_compactions_paced(&self, mut pause: impl FnMut(Duration)) -> Result<()> {
        loop {
            let started = Instant::now();
            if !self.compact_step()? {
                break;
            }
            pause(started.elapsed());
        }
        self.wait_for_unlinks();
        Ok(())
    }

    /// Waits, outside the state lock, for the value files retired so far
    /// to be unlinked ([`ValueFiles::retire`]).
    pub(super) fn wait_for_unlinks(&self) {
        let unlinking = self.state.write().values.settle();
        for thread in unlinking {
            // An unlink's failure is logged by its thread, never fatal.
            let _ = thread.join();
        }
    }

    /// Does `step`; a hash step's `to_main` becomes where it ended. How
    /// many revisions it removed from storage.
    pub(super) fn run_step(&self, state: &mut State, step: &mut Step, limit: usize) -> Result<usize> {
        let db = self.db.read();
        match step {
            Step::Index { at, after } => {
                let State { compactions, index, .. } = state;
                let into = compactions.compacted().expect("an index step is of an index job");
                let last = index.compact_some(*at, after.as_deref(), limit, into);
                compactions.index_done(last);
                Ok(0)
            }
            Step::Hash { from, to_main } => {
                let State {
                    compactions,
                    batch,
                    values,
                    ..
                } = state;
                let hasher = compactions.hasher().expect("a hash step is of a hash job");
                // On an error the hasher has taken part of the step's
                // revisions: a retry would feed them again, and the
                // compaction's hash would be wrong with no error. Refuse
                // everything instead.
                *to_main = hash_step(&db, values, batch, *from, *to_main, limit, hasher)
                    .inspect_err(|_| self.poisoned.store(true, Ordering::Release))?;
                // Hashed, so removable (compaction.rs).
                let removable = state.compactions.hashed_through(*to_main);
                self.remove_stored(&db, state, &removable)?;
                Ok(removable.len())
            }
            Step::Remove(revisions) => {
                self.remove_stored(&db, state, revisions)?;
                Ok(revisions.len())
            }
        }
    }

    /// Removes `revisions`, in ascending order, from storage: the index
    /// no longer refers to them.
    fn remove_stored(&self, db: &sled::Db, state: &mut State, revisions: &[Revision]) -> Result<()> {
        let Some(last) = revisions.last().copied() else {
            return Ok(());
        };
        // What it removes must be in sled, not in the open batch, whose
        // records are all newer than sled's: a commit (and its sync) only
        // when the batch holds one of them.
        if state.batch.records.first().is_some_and(|first| first.revision <= last) {
            commit(db, &self.poisoned, state, self.observer.get())?;
        }
        let State { values, batch, .. } = state;
        // On an error the index has moved on without storage: refuse
        // everything.
        records::drop_revisions(db, values, &mut batch.overlay, revisions)
            .inspect_err(|_| self.poisoned.store(true, Ordering::Release))?;
        state.batch.opened.get_or_insert_with(Instant::now);
        if state.batch.is_due() {
            commit(db, &self.poisoned, state, self.observer.get())?;
        }
        Ok(())
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
}
