//! The index built at once from a store's stored revisions, when the
//! store opens.
//!
//! Putting each stored revision into the index's ordered map as it is
//! read costs a search from the map's root per revision: at ten million
//! keys, over half a member's restart went to those searches' key
//! comparisons. Instead the revisions are gathered, sorted by key and
//! revision, folded into one history per key, and the map is built from
//! the sorted histories in one pass, with no search at all.
//!
//! Memory: each gathered revision takes 64 bytes besides its key, which
//! the index keeps. The gathered revisions are dropped before
//! the map is built. How many there are is bounded by the store itself:
//! they are the revisions it holds, within its quota.

use std::cmp::Ordering;

use crate::index::TreeIndex;
use crate::key_index::KeyIndex;
use crate::revision::Revision;

/// One stored revision as read back: its key, and what the history needs.
struct Gathered {
    /// Eight bytes of the key, after the prefix every gathered key shares,
    /// big-endian and zero-padded: ordering by it first orders by key
    /// wherever two of them differ, without reading the keys themselves
    /// (at ten million keys, reading them was most of the sort's time).
    /// Set by [`IndexBuild::finish`].
    prefix: u64,
    key: Box<[u8]>,
    revision: Revision,
    /// The stored create revision and version (unused for a tombstone).
    created: i64,
    version: i64,
    tombstone: bool,
}

/// The stored revisions of a store being opened, in any order.
#[derive(Default)]
pub struct IndexBuild {
    gathered: Vec<Gathered>,
}

impl IndexBuild {
    /// A put read back from storage, with its stored create revision and
    /// version (see `KeyIndex::put_rebuilt`).
    pub fn put(&mut self, key: &[u8], revision: Revision, created: i64, version: i64) {
        self.gathered.push(Gathered {
            prefix: 0,
            key: key.into(),
            revision,
            created,
            version,
            tombstone: false,
        });
    }

    /// A tombstone read back from storage.
    pub fn tombstone(&mut self, key: &[u8], revision: Revision) {
        self.gathered.push(Gathered {
            prefix: 0,
            key: key.into(),
            revision,
            created: 0,
            version: 0,
            tombstone: true,
        });
    }

    /// The index of every gathered revision: each key's history holds its
    /// revisions in revision order, as putting them one by one in that
    /// order would have built it.
    pub fn finish(self) -> TreeIndex {
        let mut gathered = self.gathered;
        let shared = match gathered.first() {
            Some(first) => gathered.iter().fold(first.key.len(), |shared, one| {
                shared.min(first.key.iter().zip(one.key.iter()).take_while(|(a, b)| a == b).count())
            }),
            None => 0,
        };
        for one in &mut gathered {
            let mut bytes = [0; 8];
            let rest = &one.key[shared..];
            let len = rest.len().min(8);
            bytes[..len].copy_from_slice(&rest[..len]);
            one.prefix = u64::from_be_bytes(bytes);
        }
        // Revisions are unique, so the order is total and an unstable
        // sort (in place, no scratch memory) orders as a stable one would.
        gathered.sort_unstable_by(|a, b| by_key(a, b).then(a.revision.cmp(&b.revision)));
        // Whether the record at `at` is its key's first.
        let starts_key = |at: usize| at == 0 || by_key(&gathered[at - 1], &gathered[at]) != Ordering::Equal;
        let keys = (0..gathered.len()).filter(|&at| starts_key(at)).count();
        let mut histories: Vec<(Box<[u8]>, KeyIndex)> = Vec::with_capacity(keys);
        for (at, one) in gathered.iter().enumerate() {
            if let Some(ahead) = gathered.get(at + PREFETCH_AHEAD) {
                prefetch(&ahead.key);
            }
            if starts_key(at) {
                // A copy, made in key order: the index's keys then lie in
                // key order in memory, so that building the map and every
                // later walk of it read them in order, not scattered as
                // the revisions were read.
                histories.push((Box::from(&*one.key), KeyIndex::default()));
            }
            let history = &mut histories.last_mut().expect("a key's history").1;
            if one.tombstone {
                history.tombstone(one.revision);
            } else {
                history.put_rebuilt(one.revision, one.created, one.version);
            }
        }
        // Freed only now: freed in the loop, the gathered keys' memory
        // would be reused for the copies, out of key order.
        drop(gathered);
        for (_, history) in &mut histories {
            history.shrink_to_fit();
        }
        TreeIndex::from_sorted(histories)
    }
}

/// How far ahead of the fold its keys are fetched: they are read in key
/// order, scattered in memory as the revisions were read, so each would
/// wait for memory; a few dozen loads in flight hide that wait.
const PREFETCH_AHEAD: usize = 16;

/// Starts loading `bytes` into the cache, to be read soon.
#[inline]
fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it reads no memory the program sees
    // and faults on no address; `bytes` is a live slice besides.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(bytes.as_ptr().cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// Key order, from the prefixes where they differ.
fn by_key(a: &Gathered, b: &Gathered) -> Ordering {
    a.prefix.cmp(&b.prefix).then_with(|| a.key.cmp(&b.key))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rev(main: i64) -> Revision {
        Revision::new(main, 0)
    }

    // Goal: the built index equals the one put together revision by
    // revision, whatever order the stored revisions arrive in: histories,
    // generations (a tombstone, a cut generation, a kept tombstone first)
    // and the key order.
    #[test]
    fn builds_what_revision_by_revision_puts_build() {
        // (key, main, created, version, tombstone), in revision order.
        let stored: &[(&[u8], i64, i64, i64, bool)] = &[
            (b"b", 2, 2, 1, false),
            (b"a", 3, 3, 1, false),
            (b"b", 4, 2, 2, false),
            (b"c", 5, 0, 0, true),
            (b"a", 6, 0, 0, true),
            (b"d", 7, 1, 4, false),
            (b"a", 8, 8, 1, false),
            (b"d", 9, 1, 5, false),
        ];
        let mut one_by_one = TreeIndex::default();
        for &(key, main, created, version, tombstone) in stored {
            if tombstone {
                one_by_one.tombstone(key, rev(main));
            } else {
                one_by_one.put_rebuilt(key, rev(main), created, version);
            }
        }
        for order in [false, true] {
            let mut build = IndexBuild::default();
            let mut arriving: Vec<_> = stored.to_vec();
            if order {
                arriving.reverse();
            }
            for (key, main, created, version, tombstone) in arriving {
                if tombstone {
                    build.tombstone(key, rev(main));
                } else {
                    build.put(key, rev(main), created, version);
                }
            }
            let built = build.finish();
            assert!(built.histories().eq(one_by_one.histories()));
            assert_eq!(built.histories().count(), 4);
        }
    }

    // Goal: key order holds where the prefixes tie or mislead: keys that
    // share a long prefix, differ past their first eight bytes after it,
    // hold zero bytes, or are prefixes of each other; revisions arrive
    // shuffled.
    #[test]
    fn orders_keys_past_their_prefixes() {
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move |below: u64| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) % below
        };
        let mut one_by_one = TreeIndex::default();
        let mut stored = Vec::new();
        for main in 1..=3000 {
            let mut key = b"/registry/".to_vec();
            for _ in 0..next(14) {
                key.push([0, 1, b'a', b'b', 0xff][next(5) as usize]);
            }
            // A tombstone only follows a put, as the store writes them.
            let tombstone = one_by_one.latest(&key).is_some_and(|slot| !slot.is_tombstone()) && next(3) == 0;
            if tombstone {
                one_by_one.tombstone(&key, rev(main));
            } else {
                one_by_one.put_rebuilt(&key, rev(main), main, 1);
            }
            stored.push((key, main, tombstone));
        }
        for i in (1..stored.len()).rev() {
            stored.swap(i, next(i as u64 + 1) as usize);
        }
        let mut build = IndexBuild::default();
        for (key, main, tombstone) in &stored {
            if *tombstone {
                build.tombstone(key, rev(*main));
            } else {
                build.put(key, rev(*main), *main, 1);
            }
        }
        let built = build.finish();
        assert!(built.histories().eq(one_by_one.histories()));
        assert!(built.histories().count() > 1000);
    }

    // Goal: the module docs' figure for a gathered revision holds.
    #[test]
    fn a_gathered_revision_takes_64_bytes() {
        assert_eq!(std::mem::size_of::<Gathered>(), 64);
    }

    // Goal: a store with nothing stored builds an empty index.
    #[test]
    fn nothing_stored_builds_an_empty_index() {
        let built = IndexBuild::default().finish();
        assert!(built.is_empty());
    }
}
