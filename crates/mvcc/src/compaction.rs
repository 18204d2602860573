//! Compaction in steps, so that compacting a million revisions never
//! stops writes and reads for the seconds it takes.
//!
//! Applying a compaction at `R` only makes the compact revision `R`
//! (durable with the next commit, like any apply): from then on no read
//! below `R` is served. The rest is queued here, as etcd schedules its
//! physical compaction after the apply:
//!
//! 1. a [`Job::Index`]: compacting the index's histories at `R`, a few
//!    keys at a time (`TreeIndex::compact_some`); compacting a history at
//!    `R` changes no read at or after `R`. It gathers what the next job
//!    needs, and becomes it when it reaches the last key:
//! 2. a [`Job::Hash`]: one walk over the stored revisions at or below `R`
//!    in revision order, as etcd's compaction walks them: each step feeds
//!    the hash etcd takes at compaction (hash.rs) its revisions, then
//!    removes from storage those of them the index dropped. The hash sees
//!    every revision before it is removed, and space comes back from the
//!    first step, not after a whole pass of hashing: at ten million keys
//!    under writes, a compaction that hashed first met the quota before
//!    its first removal (`docs/benchmarks/history.md`).
//!
//! A [`Job::Remove`] removes revisions with no hash: those an index
//! rebuilt at open drops again (see below).
//!
//! `Store::compact_step` does one step of the oldest job, at most the
//! batch limit's keys or revisions ([`COMPACTION_BATCH_LIMIT_DEFAULT`],
//! etcd's `--experimental-compaction-batch-limit`), under the state lock; the server's apply stage calls it
//! between applies while work is queued. Jobs run in order, so a
//! compaction's hash never sees the removals of the one after it, nor
//! misses its own revisions. Reads never see what is queued for removal:
//! reads below `R` are refused, and the index no longer refers to it.
//!
//! Nothing here is durable. A member stopped with work queued finds the
//! unremoved revisions when it opens, as the index is rebuilt from
//! storage; compacting the rebuilt index at the stored compact revision
//! drops them again, and their removal is queued anew (the hash, kept
//! only in memory as in etcd, is not).

use std::collections::VecDeque;

use crate::hash::{Hasher, KeyValueHash};
use crate::index::Compacted;
use crate::revision::Revision;
use crate::revision_set::RevisionSet;

/// Stored revisions one step hashes (and removes those of them the
/// compaction dropped), and histories one step of an index compaction
/// compacts: etcd's default `--experimental-compaction-batch-limit`. A
/// step of 1000 revisions reads at most 1000 blocks of 4 KiB (block.rs)
/// and rewrites at most as many, a few milliseconds under load; a
/// history is compacted in well under a microsecond (the step histograms
/// and `mvcc_compact_index` in `docs/benchmarks/history.md`). So a step holds the state lock for a few
/// milliseconds at most: the longest an apply or a read waits for
/// compaction.
pub const COMPACTION_BATCH_LIMIT_DEFAULT: usize = 1000;

/// The largest batch limit taken: a step of 100,000 holds the state lock
/// for about 0.1 to 0.2 s, already longer than a put's p99 under load;
/// a larger limit given is lowered to this one.
pub const COMPACTION_BATCH_LIMIT_MAX: usize = 100_000;

/// The share of a core, in percent, compaction's steps may take while
/// the member applies writes: after a step the server pauses so long that
/// steps take at most this share of the time, and never less than etcd's
/// sleep interval between batches (`--experimental-compaction-sleep-
/// interval`); an idle member pauses only that interval. Every member
/// compacts at once, so on a loaded cluster the steps compete with the
/// applies and the clients, whose latency rises with the CPU the steps
/// take. At a million revisions under 1000 clients on 2 cores (three
/// members sharing them), a twentieth of a core raised put p99 less than
/// a tenth did, for a compaction about half again as long
/// (`docs/measurements.md`).
pub const COMPACTION_CPU_PERCENT: u32 = 5;

/// The share of a core compaction's steps take beside writes once the
/// store is near its quota ([`QUOTA_PRESSURE_FULL_PERCENT`]): then the
/// steps and the applies take turns. A store that reaches its quota
/// refuses every write that adds data until an operator compacts,
/// defragments and disarms the alarm, which is far worse for its clients
/// than the latency a faster compaction adds. At ten million keys a
/// compaction needs about a minute of a core; at 5 % it ran past nine
/// minutes, while 1000 writers filled the last gigabytes of an 8 GiB
/// quota (`docs/benchmarks.md`).
pub const COMPACTION_CPU_PERCENT_MAX: u32 = 50;

/// The share of its quota, in percent, a store fills before compaction's
/// share of a core rises above [`COMPACTION_CPU_PERCENT`]: below half,
/// a slow compaction has room to finish before the writes fill the rest.
pub const QUOTA_PRESSURE_FROM_PERCENT: u64 = 50;

/// The share of its quota, in percent, at which compaction's share
/// reaches [`COMPACTION_CPU_PERCENT_MAX`]: the last tenth is what etcd's
/// operators are warned about (its default alert fires at 80 to 90 %).
pub const QUOTA_PRESSURE_FULL_PERCENT: u64 = 90;

/// The share of a core, in percent, compaction's steps may take beside
/// writes, for a store of `size` bytes on disk under a quota of `quota`
/// bytes: [`COMPACTION_CPU_PERCENT`] up to [`QUOTA_PRESSURE_FROM_PERCENT`]
/// of the quota, rising in a straight line to
/// [`COMPACTION_CPU_PERCENT_MAX`] at [`QUOTA_PRESSURE_FULL_PERCENT`] and
/// above. A quota of 0 is taken as none.
pub fn compaction_cpu_percent(size: u64, quota: u64) -> u32 {
    if quota == 0 {
        return COMPACTION_CPU_PERCENT;
    }
    let used = (u128::from(size) * 100 / u128::from(quota)).min(100) as u64;
    let (from, full) = (QUOTA_PRESSURE_FROM_PERCENT, QUOTA_PRESSURE_FULL_PERCENT);
    let (low, high) = (u64::from(COMPACTION_CPU_PERCENT), u64::from(COMPACTION_CPU_PERCENT_MAX));
    let share = match used {
        used if used <= from => low,
        used if used >= full => high,
        used => low + (high - low) * (used - from) / (full - from),
    };
    share as u32
}

/// One queued part of a compaction.
pub enum Job {
    /// Compacting the index at `at`, from the key after `after`, and what
    /// it found so far (its keep set is for a hash with the compact
    /// revision before this compaction).
    Index {
        at: i64,
        after: Option<Box<[u8]>>,
        compacted: Compacted,
    },
    /// Hashing the stored revisions from `next` up to the hasher's
    /// revision, and removing those of them in `removable` once hashed.
    Hash {
        hasher: Hasher,
        next: Revision,
        removable: RevisionSet,
    },
    /// Removing `revisions` from storage; those removed leave the set.
    Remove { revisions: RevisionSet },
}

/// What one step does: which keys or revisions, of the oldest job.
pub enum Step {
    /// Compact the histories of the keys after `after` at `at`.
    Index { at: i64, after: Option<Box<[u8]>> },
    /// Hash the stored revisions in `from..=to_main`, then remove those
    /// the job's removable set holds ([`Backlog::hashed_through`]); from
    /// `next_step`, `to_main` is the job's last, which the store lowers to
    /// end the step after the batch limit's stored revisions.
    Hash { from: Revision, to_main: i64 },
    /// Remove these revisions.
    Remove(Vec<Revision>),
}

/// The queued jobs, oldest first.
#[derive(Default)]
pub struct Backlog {
    jobs: VecDeque<Job>,
}

impl Backlog {
    /// Queues a compaction at `at`, applied when the compact revision was
    /// `previous`.
    pub fn push_compaction(&mut self, previous: i64, at: i64) {
        self.jobs.push_back(Job::Index {
            at,
            after: None,
            compacted: Compacted::new(previous),
        });
    }

    /// Queues the removal of `removable` from storage.
    pub fn push_removal(&mut self, removable: RevisionSet) {
        if let Some(job) = removal(removable) {
            self.jobs.push_back(job);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// The next step of the oldest job, if any, of at most `limit`
    /// revisions.
    pub fn next_step(&self, limit: usize) -> Option<Step> {
        Some(match self.jobs.front()? {
            Job::Index { at, after, .. } => Step::Index {
                at: *at,
                after: after.clone(),
            },
            // The store ends the step after `limit` stored revisions
            // (`Store::compact_step`): after compactions they lie far
            // apart, and a step of `limit` revision numbers would find few.
            Job::Hash { hasher, next, .. } => Step::Hash {
                from: *next,
                to_main: hasher.revision(),
            },
            Job::Remove { revisions } => Step::Remove(revisions.first(limit)),
        })
    }

    /// The hasher of the oldest job, when it is a hash, to feed a step's
    /// revisions to.
    pub fn hasher(&mut self) -> Option<&mut Hasher> {
        match self.jobs.front_mut()? {
            Job::Hash { hasher, .. } => Some(hasher),
            _ => None,
        }
    }

    /// Once a hash step has fed the hasher every stored revision through
    /// main revision `main`: takes those of them the oldest job, a hash,
    /// removes, in ascending order, for the store to remove now. They are
    /// stored (the index held them), so a step's are at most its own.
    pub fn hashed_through(&mut self, main: i64) -> Vec<Revision> {
        match self.jobs.front_mut() {
            Some(Job::Hash { removable, .. }) => removable.take_through(main),
            _ => unreachable!("a hash step is of a hash job"),
        }
    }

    /// What the oldest job, when it compacts the index, found so far, to
    /// add a step's findings to.
    pub fn compacted(&mut self) -> Option<&mut Compacted> {
        match self.jobs.front_mut()? {
            Job::Index { compacted, .. } => Some(compacted),
            _ => None,
        }
    }

    /// Records that an index step compacted through `last` (`None`: the
    /// last key); at the end, the job becomes its hash and removal.
    pub fn index_done(&mut self, last: Option<Box<[u8]>>) {
        let Some(Job::Index { after, .. }) = self.jobs.front_mut() else {
            unreachable!("an index step is of an index job")
        };
        if last.is_some() {
            *after = last;
            return;
        }
        let Some(Job::Index { at, compacted, .. }) = self.jobs.pop_front() else {
            unreachable!("checked above")
        };
        self.jobs.push_front(Job::Hash {
            hasher: Hasher::new(at, compacted.kept),
            next: Revision::new(1, 0),
            removable: compacted.removable,
        });
    }

    /// Records that `step`, the oldest job's next, is done; returns the
    /// hash when it finished a hash job.
    pub fn done(&mut self, step: &Step) -> Option<KeyValueHash> {
        let finished = match (self.jobs.front_mut()?, step) {
            (Job::Hash { hasher, next, .. }, Step::Hash { to_main, .. }) => {
                *next = Revision::new(to_main + 1, 0);
                *to_main >= hasher.revision()
            }
            (Job::Remove { revisions }, Step::Remove(removed)) => {
                revisions.remove(removed);
                revisions.is_empty()
            }
            _ => unreachable!("a hash or removal step is of the oldest job"),
        };
        if !finished {
            return None;
        }
        match self.jobs.pop_front()? {
            Job::Hash { hasher, removable, .. } => {
                // Every removable revision is at or below the hash's
                // revision, so each step took its own; kept for a removal
                // should one be left.
                debug_assert!(removable.is_empty(), "{} left unremoved", removable.len());
                if let Some(job) = removal(removable) {
                    self.jobs.push_front(job);
                }
                Some(hasher.finish())
            }
            _ => None,
        }
    }
}

/// The job removing `revisions`, in ascending order; none for none.
fn removal(revisions: RevisionSet) -> Option<Job> {
    (!revisions.is_empty()).then_some(Job::Remove { revisions })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::TreeIndex;

    const LIMIT: usize = COMPACTION_BATCH_LIMIT_DEFAULT;

    // Goal: compaction keeps its small share until the store fills half
    // its quota, then takes more in a straight line, up to the most at
    // nine tenths and beyond; no quota leaves the small share.
    #[test]
    fn compaction_takes_more_of_a_core_near_the_quota() {
        const GIB: u64 = 1 << 30;
        let quota = 8 * GIB;
        let at = |size| compaction_cpu_percent(size, quota);
        assert_eq!(at(0), COMPACTION_CPU_PERCENT);
        assert_eq!(at(4 * GIB), COMPACTION_CPU_PERCENT, "half the quota");
        assert_eq!(
            compaction_cpu_percent(700, 1000),
            27,
            "halfway between 5 and 50 % at 70 %"
        );
        assert_eq!(
            compaction_cpu_percent(900, 1000),
            COMPACTION_CPU_PERCENT_MAX,
            "nine tenths"
        );
        assert_eq!(at(2 * quota), COMPACTION_CPU_PERCENT_MAX, "over the quota");
        assert!((0..=100u64)
            .map(|p| at(quota * p / 100))
            .collect::<Vec<_>>()
            .is_sorted());
        assert_eq!(compaction_cpu_percent(u64::MAX, 0), COMPACTION_CPU_PERCENT, "no quota");
    }

    fn index(keys: usize) -> TreeIndex {
        let mut index = TreeIndex::default();
        let mut main = 1;
        for round in 0..3 {
            for key in 0..keys {
                main += 1;
                let created = key as i64 + 2;
                let key = format!("k{key:05}").into_bytes();
                if round == 2 && main % 3 == 0 {
                    index.tombstone(&key, Revision::new(main, 0));
                } else {
                    index.put_rebuilt(&key, Revision::new(main, 0), created, round + 1);
                }
            }
        }
        index
    }

    // Goal: jobs run in order (the index in steps of the named size, then
    // the hash with its removals); a hash job covers every revision up to
    // its own exactly once; each step removes only revisions it or an
    // earlier step hashed, and in all exactly what compacting the index in
    // one piece drops, in ascending order.
    #[test]
    fn steps_cover_each_job_in_order() {
        let keys = 2 * LIMIT + 500;
        let (mut stepped, mut whole) = (index(keys), index(keys));
        let at = (2 * keys + keys / 2) as i64;
        let expected = whole.compact(at).removable.first(usize::MAX);
        let mut backlog = Backlog::default();
        backlog.push_compaction(1, at);
        let (mut kinds, mut hashed, mut removed, mut hashes) = (String::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..100 {
            let Some(mut step) = backlog.next_step(LIMIT) else {
                break;
            };
            match &mut step {
                Step::Index { at, after } => {
                    kinds.push('i');
                    let into = backlog.compacted().expect("an index job");
                    let last = stepped.compact_some(*at, after.as_deref(), LIMIT, into);
                    backlog.index_done(last);
                    continue;
                }
                Step::Hash { from, to_main } => {
                    // As the store ends a hash step: every main revision
                    // is stored.
                    *to_main = (*to_main).min(from.main + LIMIT as i64 - 1);
                    kinds.push('h');
                    hashed.push((from.main, *to_main));
                    let taken = backlog.hashed_through(*to_main);
                    assert!(taken.iter().all(|revision| revision.main <= *to_main));
                    assert!(taken.len() <= LIMIT);
                    removed.extend(taken);
                }
                Step::Remove(_) => panic!("a compaction's removals are its hash steps'"),
            }
            hashes.extend(backlog.done(&step));
        }
        assert!(backlog.is_empty());
        assert_eq!(kinds, "iiihhhhhhh", "steps in order");
        assert_eq!(hashed.first().map(|h| h.0), Some(1));
        assert!(hashed.windows(2).all(|pair| pair[1].0 == pair[0].1 + 1));
        assert_eq!(hashed.last().map(|h| h.1), Some(at));
        assert_eq!(hashes.len(), 1);
        assert_eq!(hashes[0].revision, at);
        assert!(expected.len() > LIMIT, "{} removable", expected.len());
        assert_eq!(removed, expected);
    }

    // Goal: revisions queued for removal alone (an index rebuilt at open
    // drops them again) go in ascending steps of the limit, each once.
    #[test]
    fn a_removal_alone_goes_in_steps() {
        let revisions: RevisionSet = (1..=2 * LIMIT as i64 + 5)
            .rev()
            .map(|main| Revision::new(main, main % 2))
            .collect();
        let mut backlog = Backlog::default();
        backlog.push_removal(revisions.clone());
        let mut removed = Vec::new();
        for _ in 0..10 {
            let Some(step) = backlog.next_step(LIMIT) else {
                break;
            };
            let Step::Remove(taken) = &step else {
                panic!("only a removal is queued")
            };
            assert!(taken.len() <= LIMIT);
            removed.extend(taken.iter().copied());
            assert_eq!(backlog.done(&step), None);
        }
        assert!(backlog.is_empty());
        assert_eq!(removed, revisions.first(usize::MAX));
        assert!(removed.is_sorted());
    }
}
