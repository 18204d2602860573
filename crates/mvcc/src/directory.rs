//! The block directory: sled's block keys (`'b'` + first revision) and
//! the value-file pointers they hold, copied into memory, so that a read
//! of many revisions finds each one's block with a lookup in memory
//! instead of a step of sled's iterator.
//!
//! Why: a large range's revisions are scattered over every block of the
//! store, since keys' order is not their revisions' (etcd's benchmark
//! writes varint keys; Kubernetes' names come in any order). A pass of
//! `records::load_sorted` over sled then stepped through nearly every
//! block pointer of the store for each window of a stream, and sled's
//! iterator step (a descent and a cloned leaf) was a fifth of a
//! RangeStream's CPU at a million keys.
//!
//! Invariant: the directory holds exactly sled's `'b'` space. It is
//! built from sled when the store's state is loaded (on open and after a
//! restore) and changed by the one writer of blocks after that,
//! `records::write` at each commit, with the same inserts and removals
//! it hands sled. A defragmentation copies sled's items as they are, so
//! the same directory serves the fresh database.
//!
//! Memory: one entry per block, about 55 bytes with the map's own; the
//! blocks of etcd's benchmark (256-byte values) hold about 13 revisions,
//! so about 4 bytes per revision stored: 4 MiB at a million keys.

use std::collections::BTreeMap;
use std::ops::Bound;

use crate::block;
use crate::error::{Error, Result};
use crate::revision::Revision;
use crate::value_files::Pointer;

/// Every stored block by its first revision: where its bytes are, or
/// `None` for a block sled holds itself (a store written before value
/// files), which is then read from sled.
#[derive(Default)]
pub struct Directory {
    blocks: BTreeMap<Revision, Option<Pointer>>,
}

/// The block that may hold a revision, as [`Directory::containing`]
/// finds it.
pub struct Found {
    /// The block's first revision.
    pub first: Revision,
    /// Where its bytes are; `None` when sled holds them.
    pub pointer: Option<Pointer>,
    /// The next block's first revision: every revision before it and
    /// from `first` on is in this block, if stored at all.
    pub next_first: Option<Revision>,
}

impl Directory {
    /// Records that sled now holds `stored` under block key `key`.
    pub fn insert(&mut self, key: &[u8], stored: &[u8]) -> Result<()> {
        let first = first_of(key)?;
        self.blocks.insert(first, Pointer::decode(stored));
        Ok(())
    }

    /// Records that sled no longer holds block key `key`.
    pub fn remove(&mut self, key: &[u8]) -> Result<()> {
        let first = first_of(key)?;
        self.blocks.remove(&first);
        Ok(())
    }

    /// Whether this holds exactly sled's block keys and pointers: the
    /// invariant, checked by the store's tests.
    #[cfg(test)]
    pub fn equals(&self, db: &sled::Db) -> bool {
        let mut stored = BTreeMap::new();
        for item in db.scan_prefix([block::BLOCK_SPACE]) {
            let (key, value) = item.expect("sled reads");
            stored.insert(block::first_of(&key).expect("block key"), Pointer::decode(&value));
        }
        stored == self.blocks
    }

    /// The block holding `revision` if any does: the last one starting at
    /// or before it.
    pub fn containing(&self, revision: Revision) -> Option<Found> {
        let (&first, pointer) = self.blocks.range(..=revision).next_back()?;
        let next_first = self
            .blocks
            .range((Bound::Excluded(first), Bound::Unbounded))
            .next()
            .map(|(&next, _)| next);
        Some(Found {
            first,
            pointer: *pointer,
            next_first,
        })
    }
}

/// The first revision block key `key` names.
fn first_of(key: &[u8]) -> Result<Revision> {
    block::first_of(key).ok_or_else(|| Error::Storage("corrupt store: block key".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pointer(offset: u64) -> Pointer {
        Pointer {
            file: 1,
            offset,
            length: 10,
            crc: 0,
        }
    }

    // Goal: a revision is found in the last block starting at or before
    // it, with the next block's start; removals and inline blocks are
    // followed.
    #[test]
    fn a_revision_is_found_in_the_block_before_it() {
        let mut directory = Directory::default();
        for (main, offset) in [(2, 0), (10, 10), (20, 20)] {
            let key = block::key(Revision::new(main, 0));
            directory.insert(&key, &pointer(offset).encode()).unwrap();
        }
        assert!(directory.containing(Revision::new(1, 0)).is_none());
        let found = directory.containing(Revision::new(12, 3)).unwrap();
        assert_eq!(
            (found.first, found.pointer.map(|p| p.offset), found.next_first),
            (Revision::new(10, 0), Some(10), Some(Revision::new(20, 0)))
        );
        let last = directory.containing(Revision::new(99, 0)).unwrap();
        assert_eq!((last.first, last.next_first), (Revision::new(20, 0), None));
        directory.remove(&block::key(Revision::new(10, 0))).unwrap();
        let found = directory.containing(Revision::new(12, 3)).unwrap();
        assert_eq!(found.first, Revision::new(2, 0));
        directory
            .insert(&block::key(Revision::new(10, 0)), b"inline block")
            .unwrap();
        let inline = directory.containing(Revision::new(10, 0)).unwrap();
        assert!(inline.pointer.is_none());
        assert_eq!(directory.blocks.len(), 3);
    }
}
