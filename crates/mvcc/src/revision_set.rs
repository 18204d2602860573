//! A set of revisions as a compaction gathers them: millions, found in no
//! order, taken back in ascending order.
//!
//! A compaction walks the index in key order and finds the revisions it
//! drops in whatever order the keys were written: etcd's benchmark tool's
//! "sequential" keys are varints, whose bytes do not sort as the numbers,
//! and Kubernetes writes objects in the order they change. In a
//! `BTreeSet`, 9.5 million such revisions took over a quarter of a
//! gigabyte on every member at once, and every insertion was a descent
//! through cold nodes (`docs/benchmarks/history.md`, the ten-million-key
//! compactions).
//!
//! Most revisions are a request's only change (sub-revision 0): their main
//! revisions go in a compressed bitmap (roaring: 8 KiB per 65,536
//! consecutive main revisions when dense, 2 bytes each when sparse). The
//! changes after the first of a transaction (sub-revision above 0) go in
//! a `BTreeSet` beside it. Taking in ascending order merges the two.

use std::collections::BTreeSet;

use roaring::RoaringTreemap;

use crate::revision::Revision;

/// Revisions, each once.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct RevisionSet {
    /// Main revisions of those with sub-revision 0.
    firsts: RoaringTreemap,
    /// Those with a sub-revision above 0.
    others: BTreeSet<Revision>,
}

impl RevisionSet {
    pub fn new() -> RevisionSet {
        RevisionSet::default()
    }

    /// Adds `revision`. Revisions are at least `{1, 0}` (revision.rs).
    pub fn insert(&mut self, revision: Revision) {
        debug_assert!(revision.main >= 1 && revision.sub >= 0, "{revision:?}");
        match revision.sub {
            0 => {
                self.firsts.insert(revision.main as u64);
            }
            _ => {
                self.others.insert(revision);
            }
        }
    }

    pub fn contains(&self, revision: Revision) -> bool {
        match revision.sub {
            0 => self.firsts.contains(revision.main as u64),
            _ => self.others.contains(&revision),
        }
    }

    pub fn len(&self) -> u64 {
        self.firsts.len() + self.others.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.firsts.is_empty() && self.others.is_empty()
    }

    /// The first `limit` revisions, in ascending order, left in the set.
    pub fn first(&self, limit: usize) -> Vec<Revision> {
        self.ascending(i64::MAX, limit)
    }

    /// Removes `revisions` (those not in the set are ignored).
    pub fn remove(&mut self, revisions: &[Revision]) {
        for revision in revisions {
            match revision.sub {
                0 => {
                    self.firsts.remove(revision.main as u64);
                }
                _ => {
                    self.others.remove(revision);
                }
            }
        }
    }

    /// Removes and returns, in ascending order, every revision whose main
    /// revision is at most `main`.
    pub fn take_through(&mut self, main: i64) -> Vec<Revision> {
        let taken = self.ascending(main, usize::MAX);
        self.remove(&taken);
        taken
    }

    /// At most `limit` revisions with main revision at most `main`, in
    /// ascending order.
    fn ascending(&self, main: i64, limit: usize) -> Vec<Revision> {
        // No revision is below 1 (and a negative main would wrap below).
        if main < 1 {
            return Vec::new();
        }
        let mut firsts = self
            .firsts
            .iter()
            .take_while(|first| *first <= main as u64)
            .map(|first| Revision::new(first as i64, 0))
            .peekable();
        let mut others = self
            .others
            .range(..Revision::new(main.saturating_add(1), 0))
            .copied()
            .peekable();
        let mut out = Vec::new();
        while out.len() < limit {
            let next = match (firsts.peek(), others.peek()) {
                (Some(first), Some(other)) if first < other => firsts.next(),
                (Some(_), Some(_)) | (None, Some(_)) => others.next(),
                (Some(_), None) => firsts.next(),
                (None, None) => None,
            };
            match next {
                Some(revision) => out.push(revision),
                None => break,
            }
        }
        out
    }
}

impl Extend<Revision> for RevisionSet {
    fn extend<I: IntoIterator<Item = Revision>>(&mut self, revisions: I) {
        for revision in revisions {
            self.insert(revision);
        }
    }
}

impl FromIterator<Revision> for RevisionSet {
    fn from_iter<I: IntoIterator<Item = Revision>>(revisions: I) -> RevisionSet {
        let mut set = RevisionSet::new();
        set.extend(revisions);
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        // Goal: the set answers as a `BTreeSet` of the same revisions:
        // membership, size, and what it gives back in ascending order,
        // sub-revisions interleaved with their main revisions.
        #[test]
        fn answers_as_an_ordered_set(
            revisions in proptest::collection::vec((1i64..5_000, 0i64..3), 0..400),
            through in -5i64..5_100,
            limit in 0usize..50,
        ) {
            let revisions: Vec<Revision> = revisions.into_iter().map(|(main, sub)| Revision::new(main, sub)).collect();
            let mut set: RevisionSet = revisions.iter().copied().collect();
            let mut model: BTreeSet<Revision> = revisions.iter().copied().collect();
            prop_assert_eq!(set.len(), model.len() as u64);
            for revision in &revisions {
                prop_assert!(set.contains(*revision));
            }
            prop_assert!(!set.contains(Revision::new(5_001, 0)));
            let first: Vec<Revision> = model.iter().take(limit).copied().collect();
            prop_assert_eq!(set.first(limit), first.clone());
            set.remove(&first);
            for revision in &first {
                model.remove(revision);
            }
            let taken: Vec<Revision> = model.iter().filter(|r| r.main <= through).copied().collect();
            prop_assert_eq!(set.take_through(through), taken.clone());
            for revision in &taken {
                model.remove(revision);
            }
            prop_assert_eq!(set.first(usize::MAX), model.iter().copied().collect::<Vec<_>>());
            prop_assert_eq!(set.is_empty(), model.is_empty());
        }
    }

    // Goal: a million revisions found in no order cost far less than a
    // B-tree's 16 bytes each (the module docs): dense main revisions take
    // bitmap containers, 8 KiB per 65,536.
    #[test]
    fn a_million_scattered_revisions_take_about_a_bit_each() {
        const REVISIONS: u64 = 1_000_000;
        // A multiplicative scramble of 1..=REVISIONS (an odd multiplier
        // modulo a power of two above it is a permutation of its range).
        let set: RevisionSet = (0..1u64 << 20)
            .map(|i| (i.wrapping_mul(0x9E37_79B9) & ((1 << 20) - 1)) + 1)
            .filter(|main| *main <= REVISIONS)
            .map(|main| Revision::new(main as i64, 0))
            .collect();
        assert_eq!(set.len(), REVISIONS);
        let bytes = set.firsts.serialized_size();
        assert!(bytes < 200_000, "{bytes} bytes for a million revisions");
    }
}
