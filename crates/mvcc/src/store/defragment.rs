//! The store's side of a defragmentation: the copy into the next
//! generation while applies go on, and the switch to it (the on-disk
//! generations and their recovery are `defrag.rs`'s).

use super::*;

impl Store {
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
        // What a compaction queued is not kept, only to be removed after;
        // its steps paced as the defragmentation's own, since etcd's
        // runbook compacts and defragments at once ("compact, defrag").
        let mut pace = self.defrag_pace();
        self.finish_compactions_paced(|took| self.defrag_pause(&mut pace, took))?;
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
    pub(super) fn copy_into(&self, dir: &Path) -> Result<()> {
        let fresh = open_db(dir)?;
        {
            let mut state = self.state.write();
            commit(&self.db.read(), &self.poisoned, &mut state, self.observer.get())?;
            state.copying = Some(Copying::new(fresh.clone()));
        }
        let mut pace = self.defrag_pace();
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
            self.defrag_pause(&mut pace, started.elapsed());
        }
        // Most of the flush, outside the lock; the switch flushes the rest.
        fresh.flush()?;
        defrag::sync_tree(dir)
    }

    /// Where a defragmentation's pacing starts: the entries applied so
    /// far.
    pub(super) fn defrag_pace(&self) -> DefragPace {
        DefragPace {
            applied: self.consistent_index(),
        }
    }

    /// Sleeps after a defragmentation's step that took `took`, so that its
    /// steps take [`defrag::DEFRAG_CPU_PERCENT`] of a core if entries were
    /// applied since the step before, [`defrag::DEFRAG_IDLE_CPU_PERCENT`]
    /// if none were.
    pub(super) fn defrag_pause(&self, pace: &mut DefragPace, took: Duration) {
        let applied = self.consistent_index();
        let percent = match applied == pace.applied {
            true => defrag::DEFRAG_IDLE_CPU_PERCENT,
            false => defrag::DEFRAG_CPU_PERCENT,
        };
        pace.applied = applied;
        let pause = pacing::pause_after(took, percent);
        if !pause.is_zero() {
            std::thread::sleep(pause);
        }
    }

    /// Whether sled's files hold so much more than its items that a
    /// defragmentation should copy it ([`defrag::DEFRAG_SLED_BLOAT_RATIO`]).
    /// Its items' bytes are those the store holds less the blocks value
    /// files hold. Crash tests force the copy (`mvcc::defrag_copy_sled`).
    pub(super) fn sled_is_bloated(&self) -> Result<bool> {
        let forced = copy_forced();
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
    pub(super) fn switch_to(&self, next: u64) -> Result<sled::Db> {
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
}

/// Whether crash tests force the copy of sled (`mvcc::defrag_copy_sled`).
fn copy_forced() -> bool {
    fail::fail_point!("mvcc::defrag_copy_sled", |_| true);
    false
}

/// How far a defragmentation's pacing has seen the member apply
/// ([`Store::defrag_pause`]).
pub(super) struct DefragPace {
    applied: u64,
}
