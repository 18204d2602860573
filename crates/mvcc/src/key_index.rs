//! The revision history of one key, kept in memory.
//!
//! A key's life is a series of generations. A generation starts with a put
//! on a key that does not exist, goes on with more puts, and ends with a
//! delete, which writes a tombstone. The history is the flat list of every
//! revision that changed the key, oldest first, with tombstones marked.
//!
//! # Worked example
//! ```text
//! put(foo) @2   put(foo) @5   del(foo) @7   put(foo) @9
//! history: [2.0, 5.0, 7.0t, 9.0]
//! generations: {2.0, 5.0, 7.0t} {9.0}
//! ```
//! - `get(at: 6)` finds the last revision at or below 6: `5.0`, a put, so
//!   foo's value at 6 is the one written at 5.
//! - `get(at: 8)` finds `7.0t`, a tombstone: foo did not exist at 8.
//! - `get(at: 1)` finds nothing: foo did not exist yet.
//! - `compact(at: 6)` keeps the last revision at or below 6 (`5.0`) and
//!   drops everything before it: `[5.0, 7.0t, 9.0]`. Answers for any
//!   `at >= 6` are unchanged.
//! - `compact(at: 8)` finds `7.0t`, a tombstone below 8: the whole first
//!   generation goes: `[9.0]`.
//! - `compact(at: 7)` finds `7.0t` exactly at 7. As in etcd since 3.5.15,
//!   a tombstone at the compact revision is kept (`[7.0t, 9.0]`), so a
//!   watch from the compact revision still sees that delete. A later
//!   compaction above 7 drops it.
//! - `compact(at: 10)` keeps `9.0` only; compacting a history whose last
//!   revision is a tombstone empties it, and the index drops the key.
//!
//! Versions and create revisions are not stored here (they live in the
//! stored key-value of each revision), but a put needs them, and reading
//! the previous key-value from storage was a third of a put's cost. So
//! [`KeyIndex::generation`] derives them from the history: the create
//! revision is the first slot of the current generation and the version
//! is how many slots it has. When a compaction drops the start of a live
//! generation, it puts an "origin" slot before the head it keeps: not a
//! revision, but the generation's create revision and how many of its
//! versions were dropped. Compacting `[2.0, 5.0, 6.0]` at 5 leaves
//! `[origin(2, 1), 5.0, 6.0]`: created 2, version 1 + 2. Without it every
//! put on a key compaction had cut read storage, so a store's puts cost
//! more after its first compaction than before it (the bench
//! `mvcc_apply_puts_history`; figures in docs/benchmarks.md). Compaction
//! counts a cut generation's slots however many they are. Where its start
//! was already unknown when it was cut (its head marked, as below) or its
//! dropped versions do not fit the origin's 32 bits, the new head is
//! marked instead ("compacted head"), and for such a key the put reads
//! storage as before. The origin is never seen outside this file: every
//! query answers from the revisions after it. With `compact(at: 6)` above,
//! the history is `[origin(2, 1), 5.0, 7.0t, 9.0]`: the origin answers
//! for foo at 5 and 6, and foo's generation at 9 starts at 9.
//!
//! # Memory
//! Each revision is packed into 12 bytes (main with the flags in its top
//! bits, and a 32-bit sub), and the first two live inline in the index
//! entry, so a key with one or two revisions needs no allocation for its
//! history. An origin takes a slot of its own, so a key cut by compaction
//! and then put once holds three slots, on the heap.

use smallvec::SmallVec;

use crate::revision::Revision;

const TOMBSTONE_BIT: u64 = 1 << 63;
/// Set on a slot left at the head of a history when compaction (or a
/// rebuild after one) dropped the earlier slots of its generation and
/// could not record them in an origin: that generation's create revision
/// and version are not in the index. Also set, meaning nothing, on a kept
/// tombstone head (no put's generation begins before a tombstone).
const COMPACTED_HEAD_BIT: u64 = 1 << 62;
/// Set on the origin slot (module docs): its main is the create revision
/// of the generation a compaction cut, its sub the versions dropped.
const ORIGIN_BIT: u64 = 1 << 61;
const FLAG_BITS: u64 = TOMBSTONE_BIT | COMPACTED_HEAD_BIT | ORIGIN_BIT;

/// Slots [`KeyIndex::generation`] looks back through for a generation's
/// start. A key rewritten more often than this between compactions gets
/// its generation from storage, one read per put as before the index knew
/// generations: 64 slots are a few cache lines, while a scan of a hot
/// key's whole history (a benchmark's single key put 100,000 times) made
/// each put linear in it.
pub const GENERATION_SCAN_SLOTS_MAX: usize = 64;

/// What the index knows of a key's current generation (see the module
/// docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generation {
    /// The key has no live value.
    Absent,
    /// The key is live: created at `created`, modified `version` times.
    Live { created: i64, version: i64 },
    /// The key is live, but the index does not know where its generation
    /// began: further back than [`GENERATION_SCAN_SLOTS_MAX`] slots, or cut
    /// by a compaction that could not record its origin.
    Unknown,
}

/// One revision of a key's history, or its origin, packed to 12 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, packed(4))]
pub struct Slot {
    main_and_flag: u64,
    sub: u32,
}

impl Slot {
    pub fn new(revision: Revision, tombstone: bool) -> Slot {
        assert!(revision.main > 0, "revisions start at 1");
        assert!(
            (revision.main as u64) & FLAG_BITS == 0,
            "revision {} too large",
            revision.main
        );
        let sub = u32::try_from(revision.sub).expect("fewer than 2^32 changes in one revision");
        Slot {
            main_and_flag: revision.main as u64 | if tombstone { TOMBSTONE_BIT } else { 0 },
            sub,
        }
    }

    pub fn revision(self) -> Revision {
        Revision::new(self.main(), i64::from(self.sub))
    }

    pub fn main(self) -> i64 {
        (self.main_and_flag & !FLAG_BITS) as i64
    }

    pub fn is_tombstone(self) -> bool {
        self.main_and_flag & TOMBSTONE_BIT != 0
    }

    fn is_compacted_head(self) -> bool {
        self.main_and_flag & COMPACTED_HEAD_BIT != 0
    }

    /// The origin of a generation created at `created` from which
    /// `dropped` versions were compacted away, if `dropped` fits.
    fn origin(created: i64, dropped: i64) -> Option<Slot> {
        let sub = u32::try_from(dropped).ok()?;
        let slot = Slot::new(Revision::new(created, 0), false);
        Some(Slot {
            main_and_flag: slot.main_and_flag | ORIGIN_BIT,
            sub,
        })
    }

    fn is_origin(self) -> bool {
        self.main_and_flag & ORIGIN_BIT != 0
    }

    fn mark_compacted_head(&mut self) {
        self.main_and_flag |= COMPACTED_HEAD_BIT;
    }
}

/// A key's history. Never empty while it is in the index.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyIndex {
    history: SmallVec<[Slot; 2]>,
}

impl KeyIndex {
    /// The revisions, oldest first: the history after its origin, if it
    /// has one. Never empty while the key is in the index.
    fn revisions(&self) -> &[Slot] {
        match self.history.first() {
            Some(first) if first.is_origin() => &self.history[1..],
            _ => &self.history,
        }
    }

    /// The origin's create revision and dropped versions, if the history
    /// has one.
    fn origin(&self) -> Option<(i64, i64)> {
        let first = self.history.first().filter(|slot| slot.is_origin())?;
        Some((first.main(), i64::from(first.sub)))
    }

    /// Records a put at `revision`. Revisions must only grow.
    pub fn put(&mut self, revision: Revision) {
        self.push(Slot::new(revision, false));
    }

    /// Records a put read back from storage while rebuilding: `created`
    /// and `version` are its stored create revision and version. A put
    /// that starts a generation here but was created earlier is the head a
    /// compaction left (module docs): it gets its origin back.
    pub fn put_rebuilt(&mut self, revision: Revision, created: i64, version: i64) {
        let starts_generation = !self.is_live();
        if starts_generation && created != revision.main {
            // Compaction leaves a cut generation only at a history's start.
            match Slot::origin(created, version - 1).filter(|_| self.history.is_empty()) {
                Some(origin) => {
                    self.history.push(origin);
                    self.put(revision);
                }
                None => {
                    self.put(revision);
                    self.history.last_mut().expect("just pushed").mark_compacted_head();
                }
            }
        } else {
            self.put(revision);
        }
    }

    /// Records a delete at `revision`. The key must exist, except that a
    /// history rebuilt after compaction may begin with a kept tombstone.
    pub fn tombstone(&mut self, revision: Revision) {
        assert!(
            self.revisions().last().is_none_or(|slot| !slot.is_tombstone()),
            "tombstone after a tombstone"
        );
        self.push(Slot::new(revision, true));
    }

    fn push(&mut self, slot: Slot) {
        if let Some(last) = self.revisions().last() {
            assert!(last.revision() < slot.revision(), "key history revisions only grow");
        }
        self.history.push(slot);
    }

    /// Whether the key exists at the newest revision.
    pub fn is_live(&self) -> bool {
        self.revisions().last().is_some_and(|slot| !slot.is_tombstone())
    }

    /// The key's current generation (see the module docs). Looks back at
    /// most [`GENERATION_SCAN_SLOTS_MAX`] slots for the generation's start;
    /// a longer generation is `Unknown`, like one compaction cut.
    pub fn generation(&self) -> Generation {
        if !self.is_live() {
            return Generation::Absent;
        }
        match self.generation_through(self.revisions().len()) {
            Some((created, version)) => Generation::Live { created, version },
            None => Generation::Unknown,
        }
    }

    /// The create revision and version of the key's value at `at`, as
    /// [`KeyIndex::generation`] derives them now, if the index knows them
    /// (the key existed at `at`, its generation's start is at most
    /// [`GENERATION_SCAN_SLOTS_MAX`] slots back and not compacted away
    /// unrecorded).
    pub fn generation_at(&self, at: i64) -> Option<(i64, i64)> {
        let revisions = self.revisions();
        let end = revisions.partition_point(|slot| slot.main() <= at);
        if end == 0 || revisions[end - 1].is_tombstone() {
            return None;
        }
        self.generation_through(end)
    }

    /// The create revision and version of the generation whose last slot
    /// is `revisions()[end - 1]` (a put), looking back at most
    /// [`GENERATION_SCAN_SLOTS_MAX`] slots for its start; `None` when the
    /// start is further back or compaction dropped it unrecorded.
    fn generation_through(&self, end: usize) -> Option<(i64, i64)> {
        let revisions = self.revisions();
        let scanned = end.min(GENERATION_SCAN_SLOTS_MAX);
        let start = match revisions[end - scanned..end]
            .iter()
            .rposition(|slot| slot.is_tombstone())
        {
            Some(tombstone) => end - scanned + tombstone + 1,
            None if scanned == end => 0,
            None => return None,
        };
        Self::generation_from(revisions, start, end, self.origin())
    }

    /// The create revision and version of the generation that begins at
    /// `revisions[start]` and has its last slot at `revisions[end - 1]`,
    /// given the history's origin: `None` for a head marked compacted.
    fn generation_from(revisions: &[Slot], start: usize, end: usize, origin: Option<(i64, i64)>) -> Option<(i64, i64)> {
        let versions = (end - start) as i64;
        match origin {
            Some((created, dropped)) if start == 0 => Some((created, dropped + versions)),
            _ => {
                let head = revisions[start];
                (!head.is_compacted_head()).then(|| (head.main(), versions))
            }
        }
    }

    /// The newest revision, whether or not it is a tombstone.
    pub fn latest(&self) -> Option<Slot> {
        self.revisions().last().copied()
    }

    /// The revision holding the key's value at `at`, or `None` if the key
    /// did not exist then.
    pub fn get(&self, at: i64) -> Option<Revision> {
        let revisions = self.revisions();
        let position = revisions.partition_point(|slot| slot.main() <= at);
        let slot = revisions[..position].last()?;
        (!slot.is_tombstone()).then(|| slot.revision())
    }

    /// Drops the history no read at or after `at` can need (see the module
    /// docs). Returns the revision kept from at or below `at`, if any: the
    /// store keeps its value and removes every other one at or below `at`.
    pub fn compact(&mut self, at: i64) -> Option<Revision> {
        let revisions = self.revisions();
        let position = revisions.partition_point(|slot| slot.main() <= at);
        let kept = self.kept_at(at);
        let keep_from = if kept.is_some() { position - 1 } else { position };
        if keep_from == 0 {
            // Nothing dropped; an origin still belongs to the head.
            return kept.map(Slot::revision);
        }
        // The new head continues the generation of the last slot dropped
        // unless that slot was a tombstone (or the head is one, which ends
        // the generation and which no put's generation needs).
        let cut_put = !revisions[keep_from - 1].is_tombstone();
        let cuts_generation = cut_put && revisions.get(keep_from).is_some_and(|head| !head.is_tombstone());
        // The cut generation, while its dropped start is still here.
        let origin = cuts_generation
            .then(|| {
                let start = revisions[..keep_from]
                    .iter()
                    .rposition(|slot| slot.is_tombstone())
                    .map_or(0, |tombstone| tombstone + 1);
                Self::generation_from(revisions, start, keep_from, self.origin())
            })
            .flatten()
            .and_then(|(created, dropped)| Slot::origin(created, dropped));
        let skip = self.history.len() - revisions.len();
        self.history.drain(..skip + keep_from);
        match origin {
            Some(origin) => self.history.insert(0, origin),
            None if cut_put => {
                if let Some(head) = self.history.first_mut() {
                    head.mark_compacted_head();
                }
            }
            None => {}
        }
        kept.map(Slot::revision)
    }

    /// The revision [`KeyIndex::compact`] at `at` would keep from at or
    /// below `at`, without compacting: the last one, unless it is a
    /// tombstone below `at`.
    pub fn kept_at(&self, at: i64) -> Option<Slot> {
        let revisions = self.revisions();
        let position = revisions.partition_point(|slot| slot.main() <= at);
        let last = *revisions[..position].last()?;
        (!last.is_tombstone() || last.main() == at).then_some(last)
    }

    pub fn is_empty(&self) -> bool {
        self.history.is_empty()
    }

    /// Every revision in the history, oldest first.
    pub fn slots(&self) -> impl Iterator<Item = Slot> + '_ {
        self.revisions().iter().copied()
    }

    /// Releases spare capacity (after a rebuild or a compaction).
    pub fn shrink_to_fit(&mut self) {
        self.history.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rev(main: i64) -> Revision {
        Revision::new(main, 0)
    }

    // Goal: the worked example in the module docs, step by step.
    #[test]
    fn worked_example() {
        let mut index = KeyIndex::default();
        index.put(rev(2));
        index.put(rev(5));
        index.tombstone(rev(7));
        index.put(rev(9));
        assert_eq!(index.get(1), None);
        assert_eq!(index.get(2), Some(rev(2)));
        assert_eq!(index.get(6), Some(rev(5)));
        assert_eq!(index.get(8), None);
        assert_eq!(index.get(100), Some(rev(9)));

        let mut compacted = index.clone();
        assert_eq!(compacted.compact(6), Some(rev(5)));
        assert_eq!(compacted.slots().map(|s| s.main()).collect::<Vec<_>>(), [5, 7, 9]);
        for at in 6..12 {
            assert_eq!(compacted.get(at), index.get(at), "at {at}");
        }

        let mut compacted = index.clone();
        assert_eq!(
            compacted.compact(7),
            Some(Revision::new(7, 0)),
            "a tombstone at the compact revision stays"
        );
        assert_eq!(compacted.slots().map(|s| s.main()).collect::<Vec<_>>(), [7, 9]);
        assert_eq!(compacted.get(7), None);
        assert_eq!(compacted.get(9), Some(rev(9)));
        assert_eq!(compacted.compact(8), None, "and goes once compaction passes it");
        assert_eq!(compacted.slots().map(|s| s.main()).collect::<Vec<_>>(), [9]);

        let mut compacted = index.clone();
        assert_eq!(compacted.compact(8), None);
        assert_eq!(compacted.slots().map(|s| s.main()).collect::<Vec<_>>(), [9]);

        let mut compacted = index.clone();
        assert_eq!(compacted.compact(10), Some(rev(9)));
        assert_eq!(compacted.slots().count(), 1);

        let mut ended = KeyIndex::default();
        ended.put(rev(3));
        ended.tombstone(rev(4));
        assert_eq!(ended.compact(5), None);
        assert!(ended.is_empty());

        // A rebuilt history may begin with the kept tombstone.
        let mut rebuilt = KeyIndex::default();
        rebuilt.tombstone(rev(7));
        rebuilt.put(rev(9));
        assert_eq!(rebuilt.get(8), None);
        assert_eq!(rebuilt.get(9), Some(rev(9)));
    }

    // Goal: the packed slot keeps main, sub and the tombstone flag apart,
    // in 12 bytes.
    #[test]
    fn slots_pack_into_twelve_bytes() {
        assert_eq!(std::mem::size_of::<Slot>(), 12);
        let largest = (1 << 61) - 1;
        let mut slot = Slot::new(Revision::new(largest, 77), true);
        slot.mark_compacted_head();
        assert_eq!(slot.revision(), Revision::new(largest, 77));
        assert!(slot.is_tombstone());
        assert!(slot.is_compacted_head());
        assert!(!slot.is_origin());
        assert!(!Slot::new(Revision::new(5, 0), false).is_tombstone());
        let origin = Slot::origin(largest, i64::from(u32::MAX)).expect("fits");
        assert!(origin.is_origin() && !origin.is_tombstone() && !origin.is_compacted_head());
        assert_eq!((origin.main(), origin.sub), (largest, u32::MAX));
        assert_eq!(Slot::origin(5, 1 << 32), None, "dropped versions past 32 bits");
    }

    // Goal: a generation's create revision and version come from the
    // history, through compactions that cut into it (its origin), deletes
    // and rebuilds; only a generation not known when it was cut is
    // unknown after.
    #[test]
    fn generations_are_known_through_compaction() {
        let mut index = KeyIndex::default();
        assert_eq!(index.generation(), Generation::Absent);
        index.put(rev(2));
        index.put(rev(5));
        assert_eq!(index.generation(), Generation::Live { created: 2, version: 2 });
        index.tombstone(rev(7));
        assert_eq!(index.generation(), Generation::Absent);
        index.put(rev(9));
        assert_eq!(index.generation(), Generation::Live { created: 9, version: 1 });

        let mut compacted = index.clone();
        compacted.compact(6);
        assert_eq!(compacted.generation(), Generation::Live { created: 9, version: 1 });
        compacted.compact(9);
        assert_eq!(
            compacted.generation(),
            Generation::Live { created: 9, version: 1 },
            "9 starts its generation"
        );

        let mut cut = KeyIndex::default();
        cut.put(rev(2));
        cut.put(rev(5));
        cut.compact(6);
        assert_eq!(cut.slots().map(|s| s.main()).collect::<Vec<_>>(), [5]);
        assert_eq!(cut.generation(), Generation::Live { created: 2, version: 2 });
        cut.put(rev(8));
        assert_eq!(
            cut.generation(),
            Generation::Live { created: 2, version: 3 },
            "the generation still began at 2"
        );
        assert_eq!(cut.generation_at(6), Some((2, 2)));
        assert_eq!(cut.generation_at(4), None, "compacted away");
        cut.compact(8);
        assert_eq!(
            cut.generation(),
            Generation::Live { created: 2, version: 3 },
            "cut twice"
        );
        assert_eq!(cut.get(8), Some(rev(8)));
        cut.compact(8);
        assert_eq!(
            cut.generation(),
            Generation::Live { created: 2, version: 3 },
            "nothing dropped"
        );
        cut.tombstone(rev(10));
        cut.put(rev(11));
        assert_eq!(
            cut.generation(),
            Generation::Live {
                created: 11,
                version: 1
            }
        );

        let mut hot = KeyIndex::default();
        for main in 1..=GENERATION_SCAN_SLOTS_MAX as i64 {
            hot.put(rev(main));
        }
        assert_eq!(
            hot.generation(),
            Generation::Live {
                created: 1,
                version: GENERATION_SCAN_SLOTS_MAX as i64
            }
        );
        hot.put(rev(1000));
        assert_eq!(hot.generation(), Generation::Unknown, "longer than the scan");
        let mut cut_hot = hot.clone();
        cut_hot.compact(1000);
        assert_eq!(
            cut_hot.generation(),
            Generation::Live {
                created: 1,
                version: GENERATION_SCAN_SLOTS_MAX as i64 + 1
            },
            "compaction counts every dropped slot"
        );
        hot.tombstone(rev(1001));
        hot.put(rev(1002));
        assert_eq!(
            hot.generation(),
            Generation::Live {
                created: 1002,
                version: 1
            }
        );

        let mut rebuilt = KeyIndex::default();
        rebuilt.put_rebuilt(rev(5), 2, 4);
        rebuilt.put_rebuilt(rev(8), 2, 5);
        assert_eq!(rebuilt.generation(), Generation::Live { created: 2, version: 5 });
        assert_eq!(rebuilt.slots().map(|s| s.main()).collect::<Vec<_>>(), [5, 8]);
        let mut rebuilt = KeyIndex::default();
        rebuilt.put_rebuilt(rev(5), 2, 1 << 40);
        assert_eq!(
            rebuilt.generation(),
            Generation::Unknown,
            "too many versions for an origin"
        );
        let mut rebuilt = KeyIndex::default();
        rebuilt.tombstone(rev(7));
        rebuilt.put_rebuilt(rev(9), 9, 1);
        rebuilt.put_rebuilt(rev(12), 9, 2);
        assert_eq!(rebuilt.generation(), Generation::Live { created: 9, version: 2 });
    }

    // Goal: the origin is invisible to every query, and a compaction that
    // empties the history or starts a new generation drops it.
    #[test]
    fn an_origin_is_never_a_revision() {
        let mut index = KeyIndex::default();
        for main in [2, 3, 4] {
            index.put(rev(main));
        }
        assert_eq!(index.compact(3), Some(rev(3)));
        assert_eq!(index.history.len(), 3, "an origin before 3 and 4");
        assert_eq!(index.slots().map(|s| s.main()).collect::<Vec<_>>(), [3, 4]);
        assert_eq!(index.get(3), Some(rev(3)));
        assert_eq!(index.latest(), Some(Slot::new(rev(4), false)));
        assert_eq!(index.kept_at(3), Some(Slot::new(rev(3), false)));
        assert_eq!(index.kept_at(2), None);
        index.tombstone(rev(6));
        index.put(rev(8));
        assert_eq!(index.generation(), Generation::Live { created: 8, version: 1 });
        assert_eq!(index.compact(7), None, "the tombstone below 7 goes, with the origin");
        assert_eq!(index.history.len(), 1);
        assert_eq!(index.compact(9), Some(rev(8)));
        assert_eq!(index.history.len(), 1, "nothing cut, no origin");
        index.tombstone(rev(10));
        assert_eq!(index.compact(11), None);
        assert!(index.is_empty());

        // A tombstone kept at the compact revision needs no origin.
        let mut ended = KeyIndex::default();
        ended.put(rev(2));
        ended.tombstone(rev(3));
        assert_eq!(ended.compact(3), Some(rev(3)));
        assert_eq!(ended.history.len(), 1);
        assert!(!ended.is_live());
    }
}
