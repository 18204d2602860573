//! Blocks: the stored revisions, many to a sled key (whose value points
//! to the block's bytes in a value file: value_files.rs).
//!
//! sled costs about the same per key inserted whatever the value's size
//! (each insert copies the leaf it lands in), so storing one key per
//! revision made every put cost ~10 µs of sled work on every member. An
//! apply batch's revisions are written instead as blocks of up to
//! [`BLOCK_BYTES_MAX`], one sled key each, so a batch of a thousand puts
//! is a few dozen inserts.
//!
//! # Layout
//! A block's sled key is `'b'`, then its first revision's main and sub as
//! u64 big-endian, so blocks sort in revision order and the block holding
//! revision `r` is the last one whose key is at or below `r`'s. Blocks
//! never overlap: a block holds revisions above every revision of the
//! blocks before it. The value:
//!
//! ```text
//! count   u32 BE
//! count × { main u64 BE, sub u32 BE, flags u8 (1: tombstone),
//!           offset u32 BE (into the values), length u32 BE }
//! the records' stored key-values (key_value.rs), in the same order
//! ```
//!
//! Records are in revision order, so one is found by binary search.
//!
//! # Invariant
//! The records stored are exactly the revisions in the index's histories,
//! as with one key per revision: compaction rewrites each block it
//! touches without the revisions it drops (and deletes a block left
//! empty), in the same sled batch as the compaction.

use crate::key_value::KeyValue;
use crate::revision::Revision;

/// Prefix of the space holding blocks.
pub const BLOCK_SPACE: u8 = b'b';

/// Largest block, in bytes of stored key-values. sled moves a serialized
/// node over a quarter of its 512 KiB segment to a file of its own, and a
/// leaf holds several values: 8 and 16 KiB blocks made such files, 4 KiB
/// ones none, and cost a tenth of the sled work per put of one key per
/// put (`docs/measurements.md`). A single record larger than this gets a
/// block of its own.
pub const BLOCK_BYTES_MAX: usize = 4 << 10;

const HEADER_BYTES: usize = 4;
const ENTRY_BYTES: usize = 8 + 4 + 1 + 4 + 4;
const TOMBSTONE_FLAG: u8 = 1;

/// One stored revision: its revision, whether it is a tombstone, and its
/// stored key-value bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub revision: Revision,
    pub tombstone: bool,
    pub value: Vec<u8>,
}

impl Record {
    pub fn new(revision: Revision, tombstone: bool, kv: &KeyValue) -> Record {
        Record {
            revision,
            tombstone,
            value: kv.encode(),
        }
    }
}

/// The sled key of the block that starts at `first`.
pub fn key(first: Revision) -> Vec<u8> {
    let mut key = Vec::with_capacity(17);
    key.push(BLOCK_SPACE);
    key.extend_from_slice(&(first.main as u64).to_be_bytes());
    key.extend_from_slice(&(first.sub as u64).to_be_bytes());
    key
}

/// The first revision of the block stored under `key`.
pub fn first_of(key: &[u8]) -> Option<Revision> {
    if key.len() != 17 || key[0] != BLOCK_SPACE {
        return None;
    }
    let main = u64::from_be_bytes(key[1..9].try_into().ok()?) as i64;
    let sub = u64::from_be_bytes(key[9..17].try_into().ok()?) as i64;
    Some(Revision::new(main, sub))
}

/// Encodes `records` (in revision order) as one block.
pub fn encode(records: &[Record]) -> Vec<u8> {
    let data: usize = records.iter().map(|r| r.value.len()).sum();
    let mut out = Vec::with_capacity(HEADER_BYTES + records.len() * ENTRY_BYTES + data);
    out.extend_from_slice(&(records.len() as u32).to_be_bytes());
    let mut offset = 0usize;
    for record in records {
        out.extend_from_slice(&(record.revision.main as u64).to_be_bytes());
        let sub = u32::try_from(record.revision.sub).expect("fewer than 2^32 changes in one revision");
        out.extend_from_slice(&sub.to_be_bytes());
        out.push(if record.tombstone { TOMBSTONE_FLAG } else { 0 });
        let at = u32::try_from(offset).expect("blocks are far below 4 GiB");
        out.extend_from_slice(&at.to_be_bytes());
        let length = u32::try_from(record.value.len()).expect("stored values are far below 4 GiB");
        out.extend_from_slice(&length.to_be_bytes());
        offset += record.value.len();
    }
    for record in records {
        out.extend_from_slice(&record.value);
    }
    out
}

/// Splits `records` (in revision order) into blocks of at most
/// [`BLOCK_BYTES_MAX`] bytes of values each (a larger record alone).
pub fn pack(records: &[Record]) -> Vec<&[Record]> {
    let mut blocks = Vec::new();
    let mut start = 0;
    let mut bytes = 0;
    for (index, record) in records.iter().enumerate() {
        if index > start && bytes + record.value.len() > BLOCK_BYTES_MAX {
            blocks.push(&records[start..index]);
            start = index;
            bytes = 0;
        }
        bytes += record.value.len();
    }
    if start < records.len() {
        blocks.push(&records[start..]);
    }
    blocks
}

/// A block's bytes, read in place.
#[derive(Clone, Copy)]
pub struct Block<'a> {
    bytes: &'a [u8],
    count: usize,
    /// Where the values start.
    data: usize,
}

/// One record of a block, read in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRef<'a> {
    pub revision: Revision,
    pub tombstone: bool,
    pub value: &'a [u8],
}

impl<'a> Block<'a> {
    /// The block in `bytes`, if they hold one.
    pub fn parse(bytes: &'a [u8]) -> Option<Block<'a>> {
        let count = u32::from_be_bytes(bytes.get(..HEADER_BYTES)?.try_into().ok()?) as usize;
        let data = HEADER_BYTES.checked_add(count.checked_mul(ENTRY_BYTES)?)?;
        let values = bytes.len().checked_sub(data)?;
        let block = Block { bytes, count, data };
        let fits = (0..count).all(|i| {
            let (_, _, offset, length) = block.entry(i);
            offset.checked_add(length).is_some_and(|end| end <= values)
        });
        fits.then_some(block)
    }

    /// Records in the block (the tests' check of what was packed).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.count
    }

    /// Entry `i` of the table: (revision, tombstone, offset into the
    /// values, length).
    fn entry(&self, i: usize) -> (Revision, bool, usize, usize) {
        let at = HEADER_BYTES + i * ENTRY_BYTES;
        let field = &self.bytes[at..at + ENTRY_BYTES];
        let main = u64::from_be_bytes(field[0..8].try_into().expect("8 bytes")) as i64;
        let sub = i64::from(u32::from_be_bytes(field[8..12].try_into().expect("4 bytes")));
        let tombstone = field[12] & TOMBSTONE_FLAG != 0;
        let offset = u32::from_be_bytes(field[13..17].try_into().expect("4 bytes")) as usize;
        let length = u32::from_be_bytes(field[17..21].try_into().expect("4 bytes")) as usize;
        (Revision::new(main, sub), tombstone, offset, length)
    }

    fn record(&self, i: usize) -> RecordRef<'a> {
        let (revision, tombstone, offset, length) = self.entry(i);
        let start = self.data + offset;
        RecordRef {
            revision,
            tombstone,
            value: &self.bytes[start..start + length],
        }
    }

    /// Every record, in revision order.
    pub fn records(&self) -> impl Iterator<Item = RecordRef<'a>> + '_ {
        (0..self.count).map(|i| self.record(i))
    }

    /// The record at `revision`, if the block holds it.
    pub fn find(&self, revision: Revision) -> Option<RecordRef<'a>> {
        let (mut low, mut high) = (0, self.count);
        while low < high {
            let middle = (low + high) / 2;
            match self.entry(middle).0.cmp(&revision) {
                std::cmp::Ordering::Less => low = middle + 1,
                std::cmp::Ordering::Greater => high = middle,
                std::cmp::Ordering::Equal => return Some(self.record(middle)),
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(main: i64, sub: i64, bytes: usize) -> Record {
        Record {
            revision: Revision::new(main, sub),
            tombstone: sub % 2 == 1,
            value: vec![main as u8; bytes],
        }
    }

    // Goal: a block's records read back in order, each found by its
    // revision, and damaged bytes are refused.
    #[test]
    fn blocks_round_trip() {
        let records: Vec<Record> = (2..40).map(|main| record(main, main % 3, 10 + main as usize)).collect();
        let bytes = encode(&records);
        let block = Block::parse(&bytes).expect("a block");
        assert_eq!(block.len(), records.len());
        for (read, written) in block.records().zip(&records) {
            assert_eq!(
                (read.revision, read.tombstone, read.value),
                (written.revision, written.tombstone, &written.value[..])
            );
        }
        let found = block.find(Revision::new(17, 2)).expect("present");
        assert_eq!(found.value, &records[15].value[..]);
        assert!(block.find(Revision::new(17, 0)).is_none());
        assert!(Block::parse(&bytes[..bytes.len() - 1]).is_none());
        assert_eq!(first_of(&key(Revision::new(7, 3))), Some(Revision::new(7, 3)));
    }

    // Goal: packing keeps every record once, in order, within the size
    // bound, with an oversized record alone.
    #[test]
    fn packing_respects_the_bound() {
        let mut records: Vec<Record> = (2..200).map(|main| record(main, 0, 700)).collect();
        records.insert(50, record(51, 1, BLOCK_BYTES_MAX * 2));
        let blocks = pack(&records);
        let flattened: Vec<&Record> = blocks.iter().flat_map(|b| b.iter()).collect();
        assert_eq!(flattened, records.iter().collect::<Vec<_>>());
        for block in &blocks {
            let bytes: usize = block.iter().map(|r| r.value.len()).sum();
            assert!(bytes <= BLOCK_BYTES_MAX || block.len() == 1);
        }
    }
}
