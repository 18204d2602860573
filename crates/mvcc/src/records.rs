//! The stored revisions, kept in blocks (`block.rs`) that sled names and
//! value files hold (`value_files.rs`): finding one, visiting them in
//! order, writing an apply batch's, dropping the ones a compaction no
//! longer needs, and moving blocks out of files being reclaimed.
//!
//! Inside an apply batch, nothing reaches sled until the batch is applied
//! whole. Blocks a compaction rewrote in the batch wait in an [`Overlay`];
//! reads during the batch still find every live revision in sled's old
//! blocks (a rewrite only drops revisions), and a compaction's later hash
//! steps in the same batch (and a second compaction's) look through the
//! overlay.

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use crate::block::{self, Block, Record, BLOCK_SPACE};
use crate::directory::Directory;
use crate::error::{Error, Result};
use crate::key_value::{KeyValue, StoredKeyValue};
use crate::revision::Revision;
use crate::value_files::{Pointer, ValueFiles};
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

/// Reads a stored key-value in place (see [`decode`]).
pub fn read_stored(value: &[u8]) -> Result<StoredKeyValue<'_>> {
    StoredKeyValue::parse(value).ok_or_else(|| corrupt("stored value does not decode"))
}

/// The block that would hold `revision`: the last one starting at or
/// before it, looking through `overlay`. Its key and bytes.
fn containing(
    db: &sled::Db,
    values: &ValueFiles,
    overlay: &Overlay,
    revision: Revision,
) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
    let key = block::key(revision);
    let rewritten = overlay
        .range(..=key.clone())
        .rev()
        .find_map(|(key, bytes)| bytes.as_ref().map(|b| (key.clone(), b.clone())));
    let mut stored = None;
    for item in db.range(vec![BLOCK_SPACE]..=key).rev() {
        let (key, bytes) = item?;
        if !overlay.contains_key(key.as_ref()) {
            stored = Some((key.to_vec(), bytes));
            break;
        }
    }
    let stored_is_later = match (&rewritten, &stored) {
        (Some(a), Some(b)) => b.0 > a.0,
        (None, _) => true,
        (Some(_), None) => false,
    };
    match stored {
        Some((key, bytes)) if stored_is_later => Ok(Some((key, values.resolve(&bytes)?.into_owned()))),
        _ => Ok(rewritten),
    }
}

/// What `read` takes from the stored key-value at `revision`, read in
/// place (reads outside an apply batch, or of revisions alive through
/// it): a caller that needs a few fields copies no key or value.
pub fn load_with<T>(
    db: &sled::Db,
    values: &ValueFiles,
    revision: Revision,
    read: impl FnOnce(StoredKeyValue<'_>) -> T,
) -> Result<T> {
    let found = db
        .range(vec![BLOCK_SPACE]..=block::key(revision))
        .next_back()
        .transpose()?;
    let (_, stored) = found.ok_or_else(|| corrupt("indexed revision missing"))?;
    let bytes = values.resolve(&stored)?;
    let record = parse(&bytes)?
        .find(revision)
        .ok_or_else(|| corrupt("indexed revision missing"))?;
    Ok(read(read_stored(record.value)?))
}

/// The stored key-values at `revisions`, which are sorted and distinct,
/// each passed to `found` with its position. Each block holding some of
/// them is found in `directory` (sled's block pointers, in memory) and
/// read and decoded once, where [`load_with`] per revision finds and decodes
/// its block anew: a range of keys written together reads each block
/// once instead of once per key. Reads outside an apply batch, or
/// revisions alive through it, as [`load_with`].
pub fn load_sorted(
    db: &sled::Db,
    values: &ValueFiles,
    directory: &Directory,
    revisions: &[Revision],
    mut found: impl FnMut(usize, KeyValue),
) -> Result<()> {
    debug_assert!(revisions.windows(2).all(|pair| pair[0] < pair[1]));
    let mut at = 0;
    let mut buffer = Vec::new();
    while at < revisions.len() {
        let block = directory
            .containing(revisions[at])
            .ok_or_else(|| corrupt("indexed revision missing"))?;
        let inline;
        let bytes: &[u8] = match &block.pointer {
            Some(pointer) => {
                values.read_into(pointer, &mut buffer)?;
                &buffer
            }
            None => {
                inline = db
                    .get(block::key(block.first))?
                    .ok_or_else(|| corrupt("a block the directory names is missing"))?;
                &inline
            }
        };
        let parsed = parse(bytes)?;
        let sought = at;
        while at < revisions.len() && block.next_first.is_none_or(|next| revisions[at] < next) {
            let record = parsed
                .find(revisions[at])
                .ok_or_else(|| corrupt("indexed revision missing"))?;
            found(at, decode(record.value)?);
            at += 1;
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
fn blocks<'a>(
    db: &sled::Db,
    values: &ValueFiles,
    overlay: &'a Overlay,
    from: Revision,
    to_main: i64,
) -> Result<Blocks<'a>> {
    let start = match containing(db, values, overlay, from)? {
        Some((key, _)) => key,
        None => block::key(from),
    };
    let upper = block::key(Revision::new(to_main + 1, 0));
    Ok(Blocks {
        stored: db.range(start.clone()..upper.clone()).peekable(),
        rewritten: overlay.range(start..upper).peekable(),
    })
}

/// See [`blocks`]. Yields blocks as sled stores them: pointers, unless
/// the overlay rewrote them.
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
    values: &ValueFiles,
    overlay: &Overlay,
    from: Revision,
    to_main: i64,
    mut each: impl FnMut(Revision, bool, &[u8]) -> Result<ControlFlow<()>>,
) -> Result<ControlFlow<()>> {
    if to_main < from.main {
        return Ok(ControlFlow::Continue(()));
    }
    let mut buffer = Vec::new();
    for stored in blocks(db, values, overlay, from, to_main)? {
        let stored = stored?;
        let bytes = values.resolve_into(&stored, &mut buffer)?;
        for record in parse(bytes)?.records() {
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
/// stored, and `revisions` ascending.
pub fn drop_revisions(db: &sled::Db, values: &ValueFiles, overlay: &mut Overlay, revisions: &[Revision]) -> Result<()> {
    debug_assert!(revisions.is_sorted(), "revisions to drop out of order");
    let mut at = 0;
    while at < revisions.len() {
        let (key, bytes) =
            containing(db, values, overlay, revisions[at])?.ok_or_else(|| corrupt("compacted revision missing"))?;
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
/// (written in this batch, in revision order), each block appended to
/// `values` and stored in sled as its pointer, and makes the same
/// changes to `directory` (directory.rs). The caller syncs `values`
/// before sled gets `batch` (value_files.rs).
pub fn write(
    batch: &mut Writes,
    values: &mut ValueFiles,
    directory: &mut Directory,
    overlay: Overlay,
    records: &[Record],
) -> Result<()> {
    for (key, bytes) in overlay {
        match bytes {
            Some(bytes) => {
                let pointer = values.append(&bytes)?.encode();
                directory.insert(&key, &pointer)?;
                batch.insert(key, &pointer[..]);
            }
            None => {
                directory.remove(&key)?;
                batch.remove(key);
            }
        }
    }
    for packed in block::pack(records) {
        let pointer = values.append(&block::encode(packed))?.encode();
        let key = block::key(packed[0].revision);
        directory.insert(&key, &pointer)?;
        batch.insert(key, &pointer[..]);
    }
    Ok(())
}

/// Blocks (as sled keys, with their bytes) [`move_blocks`] takes into the
/// overlay per call: about a millisecond of reads, the longest a step of
/// reclaiming holds the store's state lock for them.
pub const MOVE_BYTES_MAX: usize = 1 << 20;

/// Pointers [`move_blocks`] looks at per call, moved or not: about a
/// millisecond of sled's iteration. Without it, a step over files with
/// little left alive walked every pointer in sled looking for a MiB to
/// move: 0.1 s at a million keys, while the applies waited.
pub const MOVE_VISITS_MAX: usize = 4096;

/// Puts into `overlay`, to be written anew, the blocks after sled key
/// `after` (from the first, when `None`) whose bytes are in one of the
/// files `from`, until about [`MOVE_BYTES_MAX`] bytes or
/// [`MOVE_VISITS_MAX`] blocks looked at; skips blocks the overlay already
/// rewrites. Returns the last key it looked at, or `None` once it looked
/// at every block.
pub fn move_blocks(
    db: &sled::Db,
    values: &ValueFiles,
    overlay: &mut Overlay,
    from: &std::collections::BTreeSet<u64>,
    after: Option<&[u8]>,
) -> Result<Option<Vec<u8>>> {
    let start = match after {
        Some(key) => std::ops::Bound::Excluded(key.to_vec()),
        None => std::ops::Bound::Included(vec![BLOCK_SPACE]),
    };
    let (mut moved, mut visited) = (0, 0);
    for item in db.range::<Vec<u8>, _>((start, std::ops::Bound::Excluded(vec![BLOCK_SPACE + 1]))) {
        let (key, stored) = item?;
        visited += 1;
        let pointer = Pointer::decode(&stored).filter(|p| from.contains(&p.file));
        if let Some(pointer) = pointer.filter(|_| !overlay.contains_key(key.as_ref())) {
            let bytes = values.read(&pointer)?;
            moved += bytes.len();
            overlay.insert(key.to_vec(), Some(bytes));
        }
        if moved >= MOVE_BYTES_MAX || visited >= MOVE_VISITS_MAX {
            return Ok(Some(key.to_vec()));
        }
    }
    Ok(None)
}

/// Every stored record, in order, read in place (no copy of its key or
/// value), for rebuilding the index; counts anew the live bytes of
/// every value file. Returns the block directory
/// (directory.rs) of what it read.
pub fn scan(
    db: &sled::Db,
    values: &mut ValueFiles,
    mut visit: impl FnMut(Revision, bool, StoredKeyValue<'_>) -> Result<()>,
) -> Result<Directory> {
    values.reset_live();
    let mut buffer = Vec::new();
    let mut directory = Directory::default();
    for item in db.scan_prefix([BLOCK_SPACE]) {
        let (key, stored) = item?;
        let first = block::first_of(&key).ok_or_else(|| corrupt("block key"))?;
        directory.insert(&key, &stored)?;
        if let Some(pointer) = Pointer::decode(&stored) {
            values.count_live(&pointer, pointer.length as i64);
        }
        let bytes = values.resolve_into(&stored, &mut buffer)?;
        let block = parse(bytes)?;
        if block.records().next().map(|r| r.revision) != Some(first) {
            return Err(corrupt("block key does not name its first revision"));
        }
        for record in block.records() {
            visit(record.revision, record.tombstone, read_stored(record.value)?)?;
        }
    }
    Ok(directory)
}

/// The stored layout's version, kept under `'m' + "format"`: 3 since
/// blocks may be in value files (value_files.rs), 2 since revisions are
/// stored in blocks. A store without it is version 1 (one `'k'` key per
/// revision: `'k'`, the revision's bytes, `'t'` for a tombstone, then the
/// stored key-value), if it holds anything. Version 2 reads as version 3
/// (its blocks are all in sled), so it is upgraded by recording 3, after
/// which a build of version 2 refuses it rather than read pointers as
/// blocks.
pub const FORMAT: u32 = 3;
/// The format a snapshot dump declares (store/snapshot.rs, `Store::snapshot_to`):
/// it holds every block itself, as a format-2 store does, so that a member
/// of a build before value files can restore it.
pub const FORMAT_BLOCKS_IN_SLED: u32 = 2;
pub const META_FORMAT: &[u8] = b"mformat";
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
            match found {
                FORMAT => return Ok(()),
                FORMAT_BLOCKS_IN_SLED => {}
                _ => {
                    return Err(Error::Storage(format!(
                        "the store is in format {found}; this build reads formats 1 to {FORMAT}"
                    )))
                }
            }
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
            // Blocks in sled, as version 2 stored them: still read.
            let mut batch = Writes::default();
            for packed in block::pack(&records) {
                batch.insert(block::key(packed[0].revision), block::encode(packed));
            }
            for key in moved {
                batch.remove(key);
            }
            db.apply_batch(batch.into_batch())?;
        },
    }
    db.insert(META_FORMAT, &FORMAT.to_be_bytes())?;
    Ok(())
}
