//! Defragmenting while the store keeps serving. First the value files
//! holding dead blocks are reclaimed (value_files.rs), a step at a time;
//! they hold nearly all the store's bytes. Then, only if sled's files
//! hold several times its items (its pointers and metadata,
//! [`DEFRAG_SLED_BLOAT_RATIO`]), sled is copied into a fresh database,
//! which holds only what is live, and the store switches to it. sled
//! never gives back the space of what was deleted or compacted away;
//! this is how it is won back, as etcd's Defragment rewrites its bbolt
//! file, but without stopping the world as etcd does.
//!
//! # The copy
//! The copy walks the key space in order, one chunk of at most
//! [`DEFRAG_CHUNK_BYTES`] at a time, each under the store's state lock, so
//! no commit runs within a chunk. Between chunks commits go on; each one
//! is repeated into the fresh database for the keys at or before the
//! copy's cursor ([`Copying::tee`]). The invariant, true whenever the lock
//! is free: for every key at or before the cursor, the fresh database
//! holds exactly what the store does; after it, nothing. Once the cursor
//! has passed the last key ([`Cursor::All`]) the two are equal, and stay
//! so, every commit going to both, until the switch.
//!
//! Writes and reads therefore wait at most one chunk's copy, and the
//! switch, which commits the open batch, flushes what the fresh database
//! got since its last flush and replaces one file.
//!
//! # Generations on disk
//! The store's directory `<store>` is generation 0. Generation `n > 0`
//! lives in `<store>.<n>`, and the file `<store>.current` names the
//! current generation (absent: 0). A rewrite is made in the next
//! generation's directory, opened there under its own name, and never
//! renamed: sled opens some of its files by path while it runs. Once the
//! rewrite is complete, flushed and its directories synced,
//! `<store>.current` is replaced atomically (a synced temporary file
//! renamed over it, then the parent synced): that is the switch's commit
//! point. The old generation is removed after. A crash at any point
//! leaves generations beside the current one, which [`recover`] (run on
//! every open) removes.
//!
//! Directories from the earlier, blocking defragmentation
//! (`<store>.defrag` and `<store>.old`) are finished or discarded as
//! that one did.

use std::fs;
use std::ops::Bound;
use std::path::{Path, PathBuf};

use sled::IVec;

use crate::error::{Error, Result};
use crate::writes::Writes;

/// Bytes of items copied per chunk, under the state lock. About 1–3 ms
/// of sled reads and one batch on this project's test machines: the
/// longest a write or read waits for the copy. Smaller chunks cost a tree
/// descent each and give the waiting appliers no more.
pub const DEFRAG_CHUNK_BYTES: usize = 256 << 10;

/// How many times its items' bytes sled's files may hold before a
/// defragmentation copies it. sled holds the blocks' pointers, not the
/// store (value_files.rs): a fresh copy's files were about twice its
/// items' bytes, and grew to about 3 times under writes; above 4 they
/// hold mostly what deletes and compactions left dead. A copy costs a
/// sled insert per item, so it is made only when it gives space back
/// (figures: `docs/measurements.md`).
pub const DEFRAG_SLED_BLOAT_RATIO: u64 = 4;

/// Bytes sled's files may hold beyond [`DEFRAG_SLED_BLOAT_RATIO`] times
/// its items' before a defragmentation copies it: a small store's sled is
/// a few MB whatever it holds, and copying it would give back nothing an
/// operator would notice.
pub const DEFRAG_SLED_SLACK_BYTES: u64 = 16 << 20;

/// The share of a core, in percent, a defragmentation's steps (the
/// reclaim's, the copy's, and the queued compaction work it finishes
/// first) may take while the member applies writes: after each it pauses
/// so long that they take at most this share of the time. A copy at full
/// speed took CPU from the member's applies and clients on a loaded
/// 2-core machine, and at half a core still raised put p99 well above
/// the quiet one. A quarter of a core, with about 270 MB of value files
/// to rewrite at a million keys, raised the leader's put p99 1.83 times
/// under 1000 writers; a twentieth is compaction's share
/// (`compaction::COMPACTION_CPU_PERCENT`), whose p99 stayed within about
/// 1.2 times (figures: `docs/measurements.md`). A defragmentation under
/// load is then slower, and nobody waits for it but its caller.
pub const DEFRAG_CPU_PERCENT: u32 = 5;

/// The share of a core, in percent, a defragmentation's steps take while
/// no entry is applied between them: an idle member defragments as fast
/// as half a core allows, the other half left to raft's heartbeats and
/// to the first writes that come, which bring the share back to
/// [`DEFRAG_CPU_PERCENT`] after the step under way.
pub const DEFRAG_IDLE_CPU_PERCENT: u32 = 50;

/// How far the copy has come.
pub enum Cursor {
    /// Every key up to and including this one is copied; `None`: none is.
    Through(Option<IVec>),
    /// Every key is copied; every write goes to both databases.
    All,
}

/// A defragmentation under way: the fresh database and its cursor. Lives
/// in the store's state, so that commits, which hold the state lock, see
/// it.
pub struct Copying {
    pub fresh: sled::Db,
    pub cursor: Cursor,
}

impl Copying {
    pub fn new(fresh: sled::Db) -> Copying {
        Copying {
            fresh,
            cursor: Cursor::Through(None),
        }
    }

    /// Whether the copy has passed `key`, so that a write to it must be
    /// repeated into the fresh database.
    fn passed(&self, key: &[u8]) -> bool {
        match &self.cursor {
            Cursor::All => true,
            Cursor::Through(None) => false,
            Cursor::Through(Some(through)) => key <= through.as_ref(),
        }
    }

    /// Repeats into the fresh database the writes to keys the copy has
    /// passed (see the module docs).
    pub fn tee(&self, writes: &Writes) -> Result<()> {
        let batch = writes.batch_of(|key| self.passed(key));
        Ok(self.fresh.apply_batch(batch)?)
    }

    /// Copies the next chunk of `from`; whether the copy is now complete.
    pub fn copy_chunk(&mut self, from: &sled::Db) -> Result<bool> {
        let start = match &self.cursor {
            Cursor::All => return Ok(true),
            Cursor::Through(None) => Bound::Unbounded,
            Cursor::Through(Some(key)) => Bound::Excluded(key.clone()),
        };
        let mut batch = sled::Batch::default();
        let mut bytes = 0;
        let mut last = None;
        let mut items = from.range::<IVec, _>((start, Bound::Unbounded));
        for item in items.by_ref() {
            let (key, value) = item?;
            bytes += key.len() + value.len();
            batch.insert(key.clone(), value);
            last = Some(key);
            if bytes >= DEFRAG_CHUNK_BYTES {
                break;
            }
        }
        self.fresh.apply_batch(batch)?;
        let complete = bytes < DEFRAG_CHUNK_BYTES;
        self.cursor = match last {
            _ if complete => Cursor::All,
            last => Cursor::Through(last),
        };
        Ok(complete)
    }
}

/// The directory of generation `generation` of the store at `base`.
pub fn generation_dir(base: &Path, generation: u64) -> PathBuf {
    match generation {
        0 => base.to_path_buf(),
        n => sibling(base, &n.to_string()),
    }
}

/// The file naming the current generation.
fn pointer_path(base: &Path) -> PathBuf {
    sibling(base, "current")
}

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".");
    name.push(suffix);
    path.with_file_name(name)
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |error| Error::Storage(format!("{what} {}: {error}", path.display()))
}

/// The current generation of the store at `base`, after removing every
/// other generation a defragmentation left (see the module docs). A
/// current generation other than 0 whose directory is missing is an
/// error: opening it would create an empty store.
pub fn recover(base: &Path) -> Result<u64> {
    recover_blocking_rewrite(base)?;
    let pointer = pointer_path(base);
    let temporary = sibling(&pointer, "tmp");
    if temporary.exists() {
        fs::remove_file(&temporary).map_err(io("removing", &temporary))?;
    }
    let current = match fs::read_to_string(&pointer) {
        Ok(text) => text
            .trim()
            .parse::<u64>()
            .map_err(|_| Error::Storage(format!("{} does not name a generation", pointer.display())))?,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => 0,
        Err(error) => return Err(io("reading", &pointer)(error)),
    };
    let dir = generation_dir(base, current);
    if current != 0 && !dir.exists() {
        return Err(Error::Storage(format!(
            "the store's generation {} is missing",
            dir.display()
        )));
    }
    for stale in other_generations(base, current)? {
        fs::remove_dir_all(&stale).map_err(io("removing", &stale))?;
    }
    Ok(current)
}

/// The directories of every generation of `base` but `current`.
fn other_generations(base: &Path, current: u64) -> Result<Vec<PathBuf>> {
    let parent = parent_of(base);
    let name = base.file_name().unwrap_or_default().to_string_lossy().into_owned();
    let mut stale = Vec::new();
    if current != 0 && base.exists() {
        stale.push(base.to_path_buf());
    }
    for entry in fs::read_dir(parent).map_err(io("listing", parent))? {
        let entry = entry.map_err(io("listing", parent))?;
        let file_name = entry.file_name().to_string_lossy().into_owned();
        let generation = file_name
            .strip_prefix(name.as_str())
            .and_then(|rest| rest.strip_prefix('.'))
            .and_then(|digits| digits.parse::<u64>().ok());
        if generation.is_some_and(|generation| generation != current) {
            stale.push(entry.path());
        }
    }
    Ok(stale)
}

/// Finishes or discards what the earlier, blocking defragmentation left:
/// `<store>.defrag` beside the store was cut short and goes; without the
/// store it was complete and moves into place; `<store>.old` goes.
fn recover_blocking_rewrite(base: &Path) -> Result<()> {
    let rewrite = sibling(base, "defrag");
    if rewrite.exists() {
        if base.exists() {
            fs::remove_dir_all(&rewrite).map_err(io("removing", &rewrite))?;
        } else {
            fs::rename(&rewrite, base).map_err(io("moving into place", &rewrite))?;
            sync_dir(parent_of(base))?;
        }
    }
    let old = sibling(base, "old");
    if old.exists() {
        fs::remove_dir_all(&old).map_err(io("removing", &old))?;
    }
    Ok(())
}

/// Removes what a failed or abandoned rewrite left in `dir`.
pub fn discard(dir: &Path) -> Result<()> {
    match fs::remove_dir_all(dir) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(io("removing", dir)(error)),
        _ => Ok(()),
    }
}

/// Syncs a rewrite's directories (sled syncs its files' contents, not
/// their entries), so that once it is current every file is there after a
/// power loss too.
pub fn sync_tree(dir: &Path) -> Result<()> {
    for entry in fs::read_dir(dir).map_err(io("listing", dir))? {
        let entry = entry.map_err(io("listing", dir))?;
        if entry.file_type().map_err(io("listing", dir))?.is_dir() {
            sync_dir(&entry.path())?;
        }
    }
    sync_dir(dir)
}

/// Makes `generation` the current one of the store at `base`, durably:
/// the switch's commit point.
pub fn switch_to(base: &Path, generation: u64) -> Result<()> {
    let pointer = pointer_path(base);
    let temporary = sibling(&pointer, "tmp");
    let mut file = fs::File::create(&temporary).map_err(io("creating", &temporary))?;
    std::io::Write::write_all(&mut file, format!("{generation}\n").as_bytes()).map_err(io("writing", &temporary))?;
    file.sync_all().map_err(io("syncing", &temporary))?;
    fs::rename(&temporary, &pointer).map_err(io("renaming", &temporary))?;
    sync_dir(parent_of(base))
}

fn sync_dir(dir: &Path) -> Result<()> {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("syncing", dir))
}

fn parent_of(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(dir: &Path, content: &str) {
        fs::create_dir_all(dir).unwrap();
        fs::write(dir.join("mark"), content).unwrap();
    }

    fn read(dir: &Path) -> String {
        fs::read_to_string(dir.join("mark")).unwrap()
    }

    // Goal: each state a crash can leave is finished or discarded, and
    // the generation the pointer names is the one kept.
    #[test]
    fn recovery_keeps_the_current_generation() {
        let root = tempfile::tempdir().unwrap();
        let store = root.path().join("kv");
        mark(&store, "zero");
        mark(&generation_dir(&store, 1), "partial");
        assert_eq!(recover(&store).unwrap(), 0);
        assert_eq!(read(&store), "zero");
        assert!(!generation_dir(&store, 1).exists());

        // Switched, the old generation not yet removed.
        mark(&generation_dir(&store, 1), "one");
        switch_to(&store, 1).unwrap();
        assert_eq!(recover(&store).unwrap(), 1);
        assert_eq!(read(&generation_dir(&store, 1)), "one");
        assert!(!store.exists());

        // A switch cut short before its rename: the old pointer holds.
        mark(&generation_dir(&store, 2), "two");
        fs::write(sibling(&pointer_path(&store), "tmp"), "2\n").unwrap();
        assert_eq!(recover(&store).unwrap(), 1);
        assert!(!generation_dir(&store, 2).exists());

        // A pointer to a missing generation is refused, not opened empty.
        switch_to(&store, 3).unwrap();
        assert!(recover(&store).is_err());
    }

    // Goal: what the blocking defragmentation left is still finished.
    #[test]
    fn recovery_finishes_a_blocking_rewrite() {
        let root = tempfile::tempdir().unwrap();
        let store = root.path().join("kv");
        mark(&store, "store");
        mark(&sibling(&store, "defrag"), "partial");
        recover(&store).unwrap();
        assert_eq!(read(&store), "store");
        assert!(!sibling(&store, "defrag").exists());

        fs::rename(&store, sibling(&store, "old")).unwrap();
        mark(&sibling(&store, "defrag"), "rewritten");
        recover(&store).unwrap();
        assert_eq!(read(&store), "rewritten");
        assert!(!sibling(&store, "old").exists() && !sibling(&store, "defrag").exists());
    }

    // Goal: copying in chunks while writes go on, teeing those the cursor
    // passed, leaves the fresh database equal to the original.
    #[test]
    fn a_copy_with_writes_between_chunks_ends_equal() {
        let from = sled::Config::new().temporary(true).open().unwrap();
        let value = vec![7u8; 4096];
        for i in 0..400u32 {
            from.insert(format!("k{i:04}"), value.clone()).unwrap();
        }
        let mut copying = Copying::new(sled::Config::new().temporary(true).open().unwrap());
        let mut round = 0u32;
        while !copying.copy_chunk(&from).unwrap() {
            let mut writes = Writes::default();
            writes.insert(
                format!("k{:04}", round * 37 % 400).as_bytes(),
                format!("changed {round}").into_bytes(),
            );
            writes.remove(format!("k{:04}", (round * 53 + 11) % 400).as_bytes());
            writes.insert(format!("z{round}").as_bytes(), b"new".to_vec());
            copying.tee(&writes).unwrap();
            from.apply_batch(writes.into_batch()).unwrap();
            round += 1;
        }
        assert!(round >= 5, "the copy took {round} chunks");
        let mut after = Writes::default();
        after.insert("zz", b"last".to_vec());
        copying.tee(&after).unwrap();
        from.apply_batch(after.into_batch()).unwrap();
        let items = |db: &sled::Db| db.iter().map(|item| item.unwrap()).collect::<Vec<_>>();
        assert_eq!(items(&from), items(&copying.fresh));
    }
}
