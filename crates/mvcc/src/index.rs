//! The in-memory index of every key's history, ordered by key (etcd's
//! treeIndex). It answers "which revision holds key K at revision R" for
//! single keys and ranges, and drives compaction. It is rebuilt from the
//! stored revisions when the store opens.

use std::collections::BTreeMap;
use std::ops::Bound;

use crate::hash::Keep;
use crate::key_index::{Generation, KeyIndex, Slot};
use crate::live_count::LiveCounts;
use crate::revision::Revision;
use crate::revision_set::RevisionSet;

/// How a request's `range_end` bounds its keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeEnd<'a> {
    /// Empty `range_end`: the key alone.
    Single,
    /// `range_end` of `[0]`: every key at or after the key.
    Unbounded,
    /// Any other `range_end`: keys in `[key, end)`.
    Before(&'a [u8]),
}

impl<'a> RangeEnd<'a> {
    pub fn parse(range_end: &'a [u8]) -> RangeEnd<'a> {
        match range_end {
            [] => RangeEnd::Single,
            [0] => RangeEnd::Unbounded,
            end => RangeEnd::Before(end),
        }
    }

    /// Whether `candidate` lies in the range that starts at `key`.
    pub fn contains(self, key: &[u8], candidate: &[u8]) -> bool {
        match self {
            RangeEnd::Single => candidate == key,
            RangeEnd::Unbounded => candidate >= key,
            RangeEnd::Before(end) => candidate >= key && candidate < end,
        }
    }
}

/// What [`TreeIndex::compact`] did.
///
/// Neither set ever grows all at once: a compaction gathers millions of
/// revisions a step at a time, and a vector or a hash set that doubled
/// (or a sort at the end) stalled one step for tens of milliseconds.
#[derive(Debug)]
pub struct Compacted {
    /// Stored revisions to remove (revision_set.rs).
    pub removable: RevisionSet,
    /// Revisions at or below the compact revision that stay, as the hash
    /// taken with the compaction reads them.
    pub kept: Keep,
}

impl Compacted {
    /// Nothing found yet, by a compaction applied when the compact
    /// revision was `previous` (the compact revision of its hash).
    pub fn new(previous: i64) -> Compacted {
        Compacted {
            removable: RevisionSet::new(),
            kept: Keep::new(previous),
        }
    }
}

/// Keys are boxed slices (16 bytes in the map entry plus one allocation).
/// Keeping keys of up to 16 bytes inline was measured
/// (`benches/index_memory.rs`, `docs/measurements.md`): it saves memory
/// on short keys but costs it on long ones, and Kubernetes keys are long.
#[derive(Debug, Default)]
pub struct TreeIndex {
    keys: BTreeMap<Box<[u8]>, KeyIndex>,
    /// Counts of large ranges at the newest revision (see live_count.rs),
    /// moved by every put that creates a key and every delete.
    live: LiveCounts,
}

impl TreeIndex {
    /// The index of `histories`, which are in ascending key order with
    /// no key twice (index_build.rs): built in one pass, with no search.
    pub(crate) fn from_sorted(histories: Vec<(Box<[u8]>, KeyIndex)>) -> TreeIndex {
        debug_assert!(histories.windows(2).all(|pair| pair[0].0 < pair[1].0));
        TreeIndex {
            keys: histories.into_iter().collect(),
            live: LiveCounts::default(),
        }
    }

    /// Every key's history, in key order.
    #[cfg(test)]
    pub(crate) fn histories(&self) -> impl Iterator<Item = (&[u8], &KeyIndex)> {
        self.keys.iter().map(|(key, history)| (&key[..], history))
    }

    pub fn put(&mut self, key: &[u8], revision: Revision) {
        let history = history_mut(&mut self.keys, key);
        let created = !history.is_live();
        history.put(revision);
        if created {
            self.live.changed(key, 1);
        }
    }

    /// Records a put read back from storage while rebuilding, with its
    /// stored create revision and version (see `KeyIndex::put_rebuilt`).
    pub fn put_rebuilt(&mut self, key: &[u8], revision: Revision, created: i64, version: i64) {
        let history = history_mut(&mut self.keys, key);
        let was_live = history.is_live();
        history.put_rebuilt(revision, created, version);
        if !was_live {
            self.live.changed(key, 1);
        }
    }

    /// The key's current generation: whether it is live, and if the index
    /// knows them, its create revision and version.
    pub fn generation(&self, key: &[u8]) -> Generation {
        self.keys.get(key).map_or(Generation::Absent, KeyIndex::generation)
    }

    /// Records a delete. Outside a rebuild the key is live; a rebuild may
    /// meet a tombstone that compaction kept as a key's first revision.
    pub fn tombstone(&mut self, key: &[u8], revision: Revision) {
        let history = history_mut(&mut self.keys, key);
        let was_live = history.is_live();
        history.tombstone(revision);
        if was_live {
            self.live.changed(key, -1);
        }
    }

    /// The count of the range of `key` and `end` at the newest revision,
    /// if it is kept (see live_count.rs).
    pub fn live_count(&self, key: &[u8], end: RangeEnd<'_>) -> Option<i64> {
        match end {
            RangeEnd::Single => None,
            RangeEnd::Unbounded => self.live.lookup(key, None),
            RangeEnd::Before(end) => self.live.lookup(key, Some(end)),
        }
    }

    /// Keeps `count`, just walked at the newest revision, as the range's
    /// count if the range is large enough (see live_count.rs).
    pub fn record_live_count(&self, key: &[u8], end: RangeEnd<'_>, count: i64) {
        match end {
            RangeEnd::Single => {}
            RangeEnd::Unbounded => self.live.record(key, None, count),
            RangeEnd::Before(end) => self.live.record(key, Some(end), count),
        }
    }

    /// The newest revision of `key`, if the index has the key.
    pub fn latest(&self, key: &[u8]) -> Option<Slot> {
        self.keys.get(key).and_then(KeyIndex::latest)
    }

    /// The revision holding `key` at `at`, if it existed then.
    pub fn get(&self, key: &[u8], at: i64) -> Option<Revision> {
        self.keys.get(key).and_then(|history| history.get(at))
    }

    /// Calls `visit(key, revision)` for every key in the range that existed
    /// at `at`, in key order, until `visit` returns false.
    pub fn visit(&self, key: &[u8], end: RangeEnd<'_>, at: i64, mut visit: impl FnMut(&[u8], Revision) -> bool) {
        self.visit_histories(key, end, at, |candidate, _, revision| visit(candidate, revision));
    }

    /// [`TreeIndex::visit`], passing each key's history as well.
    pub fn visit_histories(
        &self,
        key: &[u8],
        end: RangeEnd<'_>,
        at: i64,
        mut visit: impl FnMut(&[u8], &KeyIndex, Revision) -> bool,
    ) {
        let upper = match end {
            RangeEnd::Single => {
                if let Some(history) = self.keys.get(key) {
                    if let Some(revision) = history.get(at) {
                        visit(key, history, revision);
                    }
                }
                return;
            }
            RangeEnd::Unbounded => Bound::Unbounded,
            RangeEnd::Before(end) if end <= key => return,
            RangeEnd::Before(end) => Bound::Excluded(end),
        };
        for (candidate, history) in self.keys.range::<[u8], _>((Bound::Included(key), upper)) {
            if let Some(revision) = history.get(at) {
                if !visit(candidate, history, revision) {
                    return;
                }
            }
        }
    }

    /// How many keys in `from..to` exist at `at`, if that takes at most
    /// `steps_max` index entries to find out.
    pub fn count_between(&self, from: &[u8], to: &[u8], at: i64, steps_max: usize) -> Option<i64> {
        if to <= from {
            return Some(0);
        }
        let mut count = 0;
        for (steps, (_, history)) in self
            .keys
            .range::<[u8], _>((Bound::Included(from), Bound::Excluded(to)))
            .enumerate()
        {
            if steps >= steps_max {
                return None;
            }
            count += i64::from(history.get(at).is_some());
        }
        Some(count)
    }

    /// Compacts every history at `at`. Returns the stored revisions that no
    /// read at or after `at` needs any more, for the store to remove, and
    /// the revisions at or below `at` it kept (etcd's "available" set,
    /// which HashKV's compaction hash uses; see `hash.rs`), for a hash
    /// with compact revision `at`.
    pub fn compact(&mut self, at: i64) -> Compacted {
        let mut compacted = Compacted::new(at);
        let mut after = None;
        while let Some(last) = self.compact_some(at, after.as_deref(), usize::MAX, &mut compacted) {
            after = Some(last);
        }
        compacted
    }

    /// [`TreeIndex::compact`] of at most `limit` histories, those of the
    /// keys after `after` (from the first key when `None`), adding to
    /// `into`. Returns the last key it compacted, or `None` when it
    /// reached the last key, so that a compaction can go in steps.
    /// Compacting one history at `at` changes no read at or after `at`,
    /// so the index may stay part compacted between steps.
    pub fn compact_some(
        &mut self,
        at: i64,
        after: Option<&[u8]>,
        limit: usize,
        into: &mut Compacted,
    ) -> Option<Box<[u8]>> {
        let lower = after.map_or(Bound::Unbounded, Bound::Excluded);
        let (mut visited, mut last, mut emptied) = (0, None, Vec::new());
        for (key, history) in self.keys.range_mut::<[u8], _>((lower, Bound::Unbounded)).take(limit) {
            visited += 1;
            let kept = history.kept_at(at).map(Slot::revision);
            into.removable.extend(
                history
                    .slots()
                    .take_while(|slot| slot.main() <= at)
                    .map(Slot::revision)
                    .filter(|revision| Some(*revision) != kept),
            );
            into.kept.extend(history.compact(at));
            if history.is_empty() {
                emptied.push(key.clone());
            } else {
                history.shrink_to_fit();
            }
            last = Some(key);
        }
        let last = (visited == limit).then(|| last.cloned()).flatten();
        for key in emptied {
            self.keys.remove(&key);
        }
        last
    }

    /// The revisions a compaction at `at` would keep from at or below
    /// `at`, leaving out tombstones: etcd's `Keep`, which HashKV uses to
    /// skip what compaction has (or would have) removed. Unlike
    /// [`TreeIndex::compact`], a tombstone at exactly `at` is not in it.
    /// For a hash with compact revision `compact_revision`.
    pub fn keep(&self, at: i64, compact_revision: i64) -> Keep {
        let kept = self
            .keys
            .values()
            .filter_map(|history| history.kept_at(at))
            .filter(|slot| !slot.is_tombstone())
            .map(Slot::revision);
        Keep::of(compact_revision, kept)
    }

    /// Keys in the index, live or not.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Releases spare capacity in every history (after a rebuild).
    pub fn shrink_to_fit(&mut self) {
        for history in self.keys.values_mut() {
            history.shrink_to_fit();
        }
    }
}

/// The key's history, started empty if the key is new. Looks the key up
/// before inserting so that a present key costs no allocation.
fn history_mut<'a>(keys: &'a mut BTreeMap<Box<[u8]>, KeyIndex>, key: &[u8]) -> &'a mut KeyIndex {
    if keys.contains_key(key) {
        return keys.get_mut(key).expect("present");
    }
    keys.entry(key.into()).or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rev(main: i64) -> Revision {
        Revision::new(main, 0)
    }

    // Goal: range visits respect the three kinds of range end, the read
    // revision, and an end at or before the key.
    #[test]
    fn visits_follow_range_ends_and_revisions() {
        let mut index = TreeIndex::default();
        index.put(b"a", rev(2));
        index.put(b"b", rev(3));
        index.put(b"c", rev(4));
        index.tombstone(b"b", rev(5));
        let keys = |key: &[u8], end: &[u8], at| {
            let mut seen = Vec::new();
            index.visit(key, RangeEnd::parse(end), at, |k, _| {
                seen.push(k.to_vec());
                true
            });
            seen
        };
        assert_eq!(keys(b"b", b"", 4), [b"b".to_vec()]);
        assert_eq!(keys(b"b", b"", 5), Vec::<Vec<u8>>::new());
        assert_eq!(keys(b"a", b"\0", 5), [b"a".to_vec(), b"c".to_vec()]);
        assert_eq!(keys(b"\0", b"\0", 3), [b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(keys(b"a", b"c", 4), [b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(keys(b"c", b"a", 9), Vec::<Vec<u8>>::new());
        assert_eq!(keys(b"c", b"c", 9), Vec::<Vec<u8>>::new());
    }

    // Goal: a kept count at the newest revision stays what a walk counts
    // through creates, updates, deletes, re-creates and compactions.
    #[test]
    fn kept_counts_stay_what_a_walk_counts() {
        use crate::live_count::LIVE_COUNT_MIN_KEYS;
        let mut index = TreeIndex::default();
        let key = |i: u64| format!("/k/{i:06}").into_bytes();
        let keys = LIVE_COUNT_MIN_KEYS as u64 + 500;
        let mut main = 1;
        for i in 0..keys {
            main += 1;
            index.put(&key(i), rev(main));
        }
        let walk = |index: &TreeIndex, from: &[u8], end: RangeEnd<'_>, at| {
            let mut count = 0;
            index.visit(from, end, at, |_, _| {
                count += 1;
                true
            });
            count
        };
        let ranges: [(&[u8], RangeEnd<'_>); 2] =
            [(b"/k/", RangeEnd::Before(b"/k0")), (b"/k/000100", RangeEnd::Unbounded)];
        for (from, end) in ranges {
            index.record_live_count(from, end, walk(&index, from, end, main));
        }
        let mut seed: u64 = 7;
        for step in 0..5_000 {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let k = key((seed >> 33) % (keys + 50));
            main += 1;
            match (seed >> 20) % 3 {
                0 if index.latest(&k).is_some_and(|slot| !slot.is_tombstone()) => index.tombstone(&k, rev(main)),
                _ => index.put(&k, rev(main)),
            }
            if step % 1000 == 999 {
                index.compact(main - 100);
            }
        }
        for (from, end) in ranges {
            let kept = index.live_count(from, end).expect("still kept");
            assert_eq!(kept, walk(&index, from, end, main), "{from:?}");
        }
    }

    // Goal: compaction reports exactly the revisions nobody can read any
    // more, and drops keys whose history ends in a compacted tombstone.
    #[test]
    fn compaction_reports_removable_revisions() {
        let mut index = TreeIndex::default();
        index.put(b"a", rev(2));
        index.put(b"a", rev(3));
        index.put(b"b", rev(4));
        index.tombstone(b"b", rev(5));
        index.put(b"a", rev(6));
        assert_eq!(
            index.keep(5, 5),
            Keep::of(5, [rev(3)]),
            "keep leaves the tombstone at 5 out"
        );
        let compacted = index.compact(5);
        assert_eq!(
            compacted.removable,
            RevisionSet::from_iter([rev(2), rev(4)]),
            "the tombstone at 5 stays"
        );
        assert_eq!(compacted.kept, Keep::of(5, [rev(3), rev(5)]));
        assert_eq!(index.len(), 2);
        assert_eq!(index.get(b"a", 5), Some(rev(3)));
        assert_eq!(index.get(b"a", 6), Some(rev(6)));
        assert_eq!(
            index.compact(6).removable,
            RevisionSet::from_iter([rev(3), rev(5)]),
            "the tombstone goes"
        );
        assert_eq!(index.len(), 1);
    }
}
