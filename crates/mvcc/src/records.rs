//! The stored revisions, kept in blocks in sled (`block.rs`): finding one,
//! visiting them in order, writing an apply batch's, and dropping the ones
//! a compaction no longer needs.
//!
//! Inside an apply batch, nothing reaches sled until the batch is applied
//! whole. Blocks a compaction rewrote in the batch wait in an [`Overlay`];
//! reads during the batch still find every live revision in sled's old
//! blocks (a rewrite only drops revisions), and the visits a second
//! compaction in the same batch makes (its hash) look through the overlay.

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use crate::block::{self, Block, Record, BLOCK_SPACE};
use crate::error::{Error, Result};
use crate::key_value::KeyValue;
use crate::revision::Revision;
use crate::writes::Writes;

/// Blocks rewritten (`Some`) or deleted (`None`) in the open apply batch,
/// by sled key.
pub type Overlay = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

pub fn corrupt(what: &str) -> Error {
    Error::Storage(format!("corrupt store: {what}"))
}

fn parse(bytes: &[u8]) -> Result<Block<'_>> {
    Block::parse(bytes).ok_or_else(|| corrupt("block does not decode"))
}

/// Decodes a stored key-value (a record's bytes, in sled or the open batch).
pub fn decode(value: &[u8]) -> Result<KeyValue> {
    KeyValue::decode(value).ok_or_else(|| corrupt("stored value does not decode"))
}

/// The block that would hold `revision`: the last one starting at or
/// before it, looking through `overlay`. Its key and bytes.
fn containing(db: &sled::Db, overlay: &Overlay, revision: Revision) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
    let key = block::key(revision);
    let rewritten = overlay
        .range(..=key.clone())
        .rev()
        .find_map(|(key, bytes)| bytes.as_ref().map(|b| (key.clone(), b.clone())));
    let mut stored = None;
    for item in db.range(vec![BLOCK_SPACE]..=key).rev() {
        let (key, bytes) = item?;
        if !overlay.contains_key(key.as_ref()) {
            stored = Some((key.to_vec(), bytes.to_vec()));
            break;
        }
    }
    Ok(match (rewritten, stored) {
        (Some(a), Some(b)) => Some(if a.0 > b.0 { a } else { b }),
        (a, b) => a.or(b),
    })
}

/// The stored key-value at `revision` (reads outside an apply batch, or
/// of revisions alive through it).
pub fn load(db: &sled::Db, revision: Revision) -> Result<KeyValue> {
    let found = db
        .range(vec![BLOCK_SPACE]..=block::key(revision))
        .next_back()
        .transpose()?;
    let (_, bytes) = found.ok_or_else(|| corrupt("indexed revision missing"))?;
    let record = parse(&bytes)?
        .find(revision)
        .ok_or_else(|| corrupt("indexed revision missing"))?;
    decode(record.value)
}

/// Blocks a [`load_sorted`] pass steps over without finding a revision it
/// wants before it seeks instead: a seek costs about what a lookup by
/// [`load`] does, a step a fraction of it, so a few misses in a row mean
/// the wanted revisions are sparse there.
const MISSES_BEFORE_SEEK: usize = 4;

/// The stored key-values at `revisions`, which are sorted and distinct,
/// each passed to `found` with its position. One pass forward over the
/// blocks, decoding each block that holds some of them once, where
/// [`load`] per revision finds and decodes its block anew: a range of
/// keys written together reads each block once instead of once per key.
/// Reads outside an apply batch, or revisions alive through it, as
/// [`load`].
pub fn load_sorted(db: &sled::Db, revisions: &[Revision], mut found: impl FnMut(usize, KeyValue)) -> Result<()> {
    debug_assert!(revisions.windows(2).all(|pair| pair[0] < pair[1]));
    let Some(&last) = revisions.last() else {
        return Ok(());
    };
    let upper = block::key(last);
    let mut at = 0;
    while at < revisions.len() {
        let sought = at;
        // Seek: the block holding revisions[at], and from it on.
        let (start, _) = db
            .range(vec![BLOCK_SPACE]..=block::key(revisions[at]))
            .next_back()
            .transpose()?
            .ok_or_else(|| corrupt("indexed revision missing"))?;
        let mut blocks = db.range(start.to_vec()..=upper.clone());
        let mut current = blocks.next().transpose()?;
        let mut misses = 0;
        while let Some((_, bytes)) = current.take() {
            let next = blocks.next().transpose()?;
            let next_first = match &next {
                Some((key, _)) => Some(block::first_of(key).ok_or_else(|| corrupt("block key"))?),
                None => None,
            };
            let block = parse(&bytes)?;
            let before = at;
            while at < revisions.len() && next_first.is_none_or(|first| revisions[at] < first) {
                let record = block
                    .find(revisions[at])
                    .ok_or_else(|| corrupt("indexed revision missing"))?;
                found(at, decode(record.value)?);
                at += 1;
            }
            misses = if at == before { misses + 1 } else { 0 };
            if at == revisions.len() || misses > MISSES_BEFORE_SEEK {
                break;
            }
            current = next;
        }
        if at == sought {
            return Err(corrupt("indexed revision missing"));
        }
    }
    Ok(())
}

/// The stored blocks that may hold revisions from `from` through main
/// revision `to_main`, in order, as `overlay` changes sled's: a block it
/// rewrote replaces sled's, one it deleted is skipped, one it added is
/// met in its place. Lazy, one block at a time, so a walk over the whole
/// store holds one block, not the store.
fn blocks<'a>(db: &sled::Db, overlay: &'a Overlay, from: Revision, to_main: i64) -> Result<Blocks<'a>> {
    let start = match containing(db, overlay, from)? {
        Some((key, _)) => key,
        None => block::key(from),
    };
    let upper = block::key(Revision::new(to_main + 1, 0));
    Ok(Blocks {
        stored: db.range(start.clone()..upper.clone()).peekable(),
        rewritten: overlay.range(start..upper).peekable(),
    })
}

/// See [`blocks`].
struct Blocks<'a> {
    stored: std::iter::Peekable<sled::Iter>,
    rewritten: std::iter::Peekable<std::collections::btree_map::Range<'a, Vec<u8>, Option<Vec<u8>>>>,
}

impl Iterator for Blocks<'_> {
    type Item = Result<sled::IVec>;

    fn next(&mut self) -> Option<Result<sled::IVec>> {
        loop {
            let stored_key = match self.stored.peek() {
                Some(Ok((key, _))) => Some(key.clone()),
                Some(Err(_)) => {
                    return self
                        .stored
                        .next()
                        .map(|item| item.map(|(_, bytes)| bytes).map_err(Into::into))
                }
                None => None,
            };
            let rewritten_first = match (&stored_key, self.rewritten.peek()) {
                (None, None) => return None,
                (Some(stored), Some((rewritten, _))) => rewritten.as_slice() <= stored.as_ref(),
                (None, Some(_)) => true,
                (Some(_), None) => false,
            };
            if !rewritten_first {
                return self
                    .stored
                    .next()
                    .map(|item| item.map(|(_, bytes)| bytes).map_err(Into::into));
            }
            let (key, bytes) = self.rewritten.next().expect("peeked");
            if stored_key.as_deref() == Some(key.as_slice()) {
                self.stored.next();
            }
            if let Some(bytes) = bytes {
                return Some(Ok(sled::IVec::from(bytes.as_slice())));
            }
        }
    }
}

/// Calls `each(revision, tombstone, stored key-value bytes)` for every
/// stored revision from `from` on with main revision at most `to_main`,
/// in order, as `overlay` changes sled's, until it returns `Break`; says
/// whether it did. Reads one block at a time (see [`blocks`]), so a walk
/// costs what it visits however sparse the stored revisions are (after
/// compactions, the kept ones lie far apart).
pub fn each(
    db: &sled::Db,
    overlay: &Overlay,
    from: Revision,
    to_main: i64,
    mut each: impl FnMut(Revision, bool, &[u8]) -> Result<ControlFlow<()>>,
) -> Result<ControlFlow<()>> {
    if to_main < from.main {
        return Ok(ControlFlow::Continue(()));
    }
    for bytes in blocks(db, overlay, from, to_main)? {
        let bytes = bytes?;
        for record in parse(&bytes)?.records() {
            if record.revision >= from
                && record.revision.main <= to_main
                && each(record.revision, record.tombstone, record.value)?.is_break()
            {
                return Ok(ControlFlow::Break(()));
            }
        }
    }
    Ok(ControlFlow::Continue(()))
}

/// Rewrites, into `overlay`, every block holding one of `revisions`
/// without them (deleting a block left empty). Every revision must be
/// stored.
pub fn drop_revisions(db: &sled::Db, overlay: &mut Overlay, mut revisions: Vec<Revision>) -> Result<()> {
    revisions.sort_unstable();
    let mut at = 0;
    while at < revisions.len() {
        let (key, bytes) =
            containing(db, overlay, revisions[at])?.ok_or_else(|| corrupt("compacted revision missing"))?;
        let block = parse(&bytes)?;
        let last = block.records().last().map(|r| r.revision);
        let mut doomed = std::collections::HashSet::new();
        while at < revisions.len() && Some(revisions[at]) <= last {
            if block.find(revisions[at]).is_none() {
                return Err(corrupt("compacted revision missing"));
            }
            doomed.insert(revisions[at]);
            at += 1;
        }
        let kept: Vec<Record> = block
            .records()
            .filter(|r| !doomed.contains(&r.revision))
            .map(|r| Record {
                revision: r.revision,
                tombstone: r.tombstone,
                value: r.value.to_vec(),
            })
            .collect();
        overlay.insert(key.clone(), None);
        if let Some(first) = kept.first() {
            overlay.insert(block::key(first.revision), Some(block::encode(&kept)));
        }
    }
    Ok(())
}

/// Adds to `batch` the overlay's rewrites and the blocks of `records`
/// (written in this batch, in revision order).
pub fn write(batch: &mut Writes, overlay: Overlay, records: &[Record]) {
    for (key, bytes) in overlay {
        match bytes {
            Some(bytes) => batch.insert(key, bytes),
            None => batch.remove(key),
        }
    }
    for packed in block::pack(records) {
        batch.insert(block::key(packed[0].revision), block::encode(packed));
    }
}

/// Every stored record, in order, for rebuilding the index.
pub fn scan(db: &sled::Db, mut visit: impl FnMut(Revision, bool, KeyValue) -> Result<()>) -> Result<()> {
    for item in db.scan_prefix([BLOCK_SPACE]) {
        let (key, bytes) = item?;
        let first = block::first_of(&key).ok_or_else(|| corrupt("block key"))?;
        let block = parse(&bytes)?;
        if block.records().next().map(|r| r.revision) != Some(first) {
            return Err(corrupt("block key does not name its first revision"));
        }
        for record in block.records() {
            visit(record.revision, record.tombstone, decode(record.value)?)?;
        }
    }
    Ok(())
}

/// The stored layout's version, kept under `'m' + "format"`: 2 since
/// revisions are stored in blocks. A store without it is version 1 (one
/// `'k'` key per revision: `'k'`, the revision's bytes, `'t'` for a
/// tombstone, then the stored key-value), if it holds anything.
pub const FORMAT: u32 = 2;
const META_FORMAT: &[u8] = b"mformat";
const V1_SPACE: u8 = b'k';
/// Revisions moved per sled batch when upgrading from version 1: enough
/// that an upgrade is a few thousand batches for a large store, few enough
/// that one batch's memory stays small.
const UPGRADE_BATCH_RECORDS: usize = 4096;

/// Brings the store to [`FORMAT`]: a version-1 store has its revisions
/// moved into blocks, a batch at a time (each batch writes blocks and
/// removes the keys it moved, so an upgrade cut short resumes where it
/// stopped), then the format is recorded. A store of a newer format is
/// refused, never read as something else.
pub fn upgrade(db: &sled::Db) -> Result<()> {
    match db.get(META_FORMAT)? {
        Some(bytes) => {
            let found = bytes
                .as_ref()
                .try_into()
                .map(u32::from_be_bytes)
                .map_err(|_| corrupt("format is not a u32"))?;
            if found != FORMAT {
                return Err(Error::Storage(format!(
                    "the store is in format {found}; this build reads format {FORMAT}"
                )));
            }
            return Ok(());
        }
        None => loop {
            let mut records = Vec::new();
            let mut moved = Vec::new();
            for item in db.scan_prefix([V1_SPACE]).take(UPGRADE_BATCH_RECORDS) {
                let (key, value) = item?;
                let (revision, tombstone) =
                    Revision::from_bytes(&key[1..]).ok_or_else(|| corrupt("version-1 revision key"))?;
                records.push(Record {
                    revision,
                    tombstone,
                    value: value.to_vec(),
                });
                moved.push(key);
            }
            if records.is_empty() {
                break;
            }
            let mut batch = Writes::default();
            write(&mut batch, Overlay::new(), &records);
            for key in moved {
                batch.remove(key);
            }
            db.apply_batch(batch.into_batch())?;
        },
    }
    db.insert(META_FORMAT, &FORMAT.to_be_bytes())?;
    Ok(())
}
