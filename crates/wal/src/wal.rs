//! The log handle: create, open, group commit, snapshots, cuts, purge.
//!
//! Invariants:
//! - After [`Wal::save`] or [`Wal::save_snapshot`] returns `Ok`, everything
//!   it was given is durable. Before it returns, nothing counts as durable.
//! - Every write is followed by exactly one `fdatasync` of the same file
//!   before the call returns; a batch never spans segments.
//! - Once any write or sync fails the log is poisoned: every later call
//!   returns [`Error::Poisoned`]. A failed fsync is never retried.
//! - Entries in a save are contiguous, and the first is at most one past
//!   the log's last index (raft appends or rewrites a suffix). A caller
//!   breaking that is a bug, and the log panics rather than store it.

use std::fs::{self, File, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::direct::DirectTail;
use crate::disk::{Disk, RealDisk};
use crate::error::{Error, Result};
use crate::frame::{
    Encoder, ALIGNMENT_BYTES as FRAME_ALIGNMENT_BYTES, BODY_HEADER_BYTES, LENGTH_WORD_BYTES, RECORD_BODY_BYTES_MAX,
};
use crate::record::{self, Entry, HardState, Record, SnapshotMeta};
use crate::removal;
use crate::replay::{self, Replay, SnapshotPosition};
use crate::segment::{self, Segment, SegmentName, TEMPORARY_SUFFIX};
use crate::spare::{self, Spare};

/// Default segment size: 64 MiB, etcd's. Large enough that cuts (a file
/// creation, two syncs and a directory sync) are rare next to the saves in
/// between, small enough that purging after a snapshot frees space soon.
pub const SEGMENT_SIZE_BYTES_DEFAULT: u64 = 64 << 20;

/// Highest sync latency the histogram tracks, in microseconds (one minute).
/// A slower sync is recorded as this value.
pub const SYNC_LATENCY_US_MAX: u64 = 60_000_000;

/// Removals of released segments running at once. A release comes once
/// per snapshot, seconds apart under load, and its removal takes about a
/// tenth of a second, so one normally runs; past this many the disk is
/// falling behind, and the raft loop removes the next release itself
/// rather than start more threads.
pub const RELEASE_THREADS_MAX: usize = 4;

const LOCK_FILE: &str = "LOCK";

/// Room reserved for a hard-state frame: three varints and the framing,
/// rounded up. Only a hint for the buffer; a larger frame still fits.
const HARD_STATE_FRAME_BYTES_MAX: usize = 64;

/// Room reserved for a snapshot frame; a hint as above.
const SNAPSHOT_FRAME_BYTES_MAX: usize = 64;

#[derive(Debug, Clone)]
pub struct Options {
    /// Size segments are preallocated to, and the size past which a save
    /// triggers a cut. Tests set it small to force many segments.
    pub segment_size_bytes: u64,
    /// Where writes and syncs go (see disk.rs): the real disk unless a
    /// test or a simulator gives its own.
    pub disk: Arc<dyn Disk>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            segment_size_bytes: SEGMENT_SIZE_BYTES_DEFAULT,
            disk: Arc::new(RealDisk),
        }
    }
}

/// An open write-ahead log. One process at a time holds a directory.
pub struct Wal {
    dir: PathBuf,
    /// Holds the directory's advisory lock for as long as the log is open.
    _lock: File,
    options: Options,
    metadata: Vec<u8>,
    /// Every live segment, oldest first; the last is the one written to.
    segments: Vec<SegmentName>,
    tail: Segment,
    /// The tail opened for writes around the page cache, where the file
    /// system allows it (see direct.rs).
    direct: Option<DirectTail>,
    /// The next segment's file, being zero-filled (see spare.rs); started
    /// once the tail is half full, taken at the cut.
    spare: Option<Spare>,
    /// Threads removing released segments ([`Wal::release_to`]), at most
    /// [`RELEASE_THREADS_MAX`].
    releasing: Vec<JoinHandle<()>>,
    encoder: Encoder,
    last_index: u64,
    hard_state: HardState,
    /// `hard_state` moved only the commit index since it was last written
    /// and waits for the next save (see [`Wal::save`]).
    hard_state_held: bool,
    /// Reused between saves so a save allocates nothing in steady state.
    /// With a direct tail it starts with the bytes already in the tail's
    /// block (see direct.rs); the new frames start at `frames_start`.
    buffer: Vec<u8>,
    frames_start: usize,
    poisoned: bool,
    sync_latency_us: Histogram<u64>,
    /// The last write-and-sync: its bytes and its fdatasync's time, until
    /// [`Wal::take_last_sync`] takes it (the server's metrics).
    last_sync: Option<(u64, Duration)>,
}

impl Drop for Wal {
    /// A log closed in an orderly way waits for its released segments'
    /// removal, and writes a held commit-only hard state (see
    /// [`Wal::save`]); a crash loses it, as raft allows.
    fn drop(&mut self) {
        // No removal outlives the log, so a log opened again on the same
        // directory in this process never races one.
        for thread in self.releasing.drain(..) {
            let _ = thread.join();
        }
        if !self.hard_state_held || self.poisoned {
            return;
        }
        let hard_state = self.hard_state;
        self.start_buffer(HARD_STATE_FRAME_BYTES_MAX);
        self.encode_hard_state(&hard_state);
        if let Err(error) = self.write_and_sync() {
            tracing::warn!(%error, "the last commit index could not be written on close");
        }
    }
}

impl Wal {
    /// Creates a new, empty log in `dir` (made if missing). `metadata` is
    /// stored in every segment and returned by every replay.
    pub fn create(dir: &Path, options: Options, metadata: &[u8]) -> Result<Wal> {
        fs::create_dir_all(dir).map_err(|e| Error::io("create directory", dir, e))?;
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            options
                .disk
                .fsync_dir(parent)
                .map_err(|e| Error::io("fsync directory", parent, e))?;
        }
        let lock = lock(dir)?;
        if !segment::list(dir)?.is_empty() {
            return Err(Error::AlreadyExists(dir.to_path_buf()));
        }
        let name = SegmentName { seq: 0, first_index: 0 };
        let hard_state = HardState::default();
        let prepared = spare::prepare(dir, options.segment_size_bytes, &AtomicBool::new(false))?;
        let (tail, crc) = segment::create(&*options.disk, dir, name, prepared, 0, metadata, &hard_state)?;
        let direct = open_direct(&tail)?;
        Ok(Wal {
            dir: dir.to_path_buf(),
            _lock: lock,
            options,
            metadata: metadata.to_vec(),
            segments: vec![name],
            tail,
            direct,
            spare: None,
            releasing: Vec::new(),
            encoder: Encoder::new(crc),
            last_index: 0,
            hard_state,
            hard_state_held: false,
            buffer: Vec::new(),
            frames_start: 0,
            poisoned: false,
            sync_latency_us: new_latency_histogram(),
            last_sync: None,
        })
    }

    /// Whether `dir` holds a log (at least one segment).
    pub fn exists(dir: &Path) -> bool {
        fs::read_dir(dir)
            .map(|entries| {
                entries
                    .flatten()
                    .any(|e| e.file_name().to_str().and_then(SegmentName::parse).is_some())
            })
            .unwrap_or(false)
    }

    /// Opens the log in `dir` and replays it from the snapshot `at`
    /// (index 0 for the whole log). A torn tail is truncated (see
    /// [`Replay::repaired`]); any other damage refuses to open.
    pub fn open(dir: &Path, options: Options, at: SnapshotPosition) -> Result<(Wal, Replay)> {
        let lock = lock(dir)?;
        let recovered = replay::recover(dir, at)?;
        let tail_name = *recovered.segments.last().expect("recover returns segments");
        let tail = segment::open_for_append(dir, tail_name, recovered.tail_offset)?;
        let direct = open_direct(&tail)?;
        let wal = Wal {
            dir: dir.to_path_buf(),
            _lock: lock,
            options,
            metadata: recovered.replay.metadata.clone(),
            segments: recovered.segments,
            tail,
            direct,
            spare: None,
            releasing: Vec::new(),
            encoder: Encoder::new(recovered.crc),
            last_index: recovered.last_index,
            hard_state: recovered.replay.hard_state,
            hard_state_held: false,
            buffer: Vec::new(),
            frames_start: 0,
            poisoned: false,
            sync_latency_us: new_latency_histogram(),
            last_sync: None,
        };
        Ok((wal, recovered.replay))
    }

    /// Whether the tail is written around the page cache (see direct.rs).
    pub fn writes_directly(&self) -> bool {
        self.direct.is_some()
    }

    /// Appends `entries` and then `hard_state` (when given) and makes them
    /// all durable with one write and one `fdatasync`: raft's group commit.
    /// Entries go first so a torn save never leaves a commit index that
    /// points past the entries on disk.
    ///
    /// A save with no entries whose hard state changes only the commit
    /// index is not synced (etcd's `MustSync`): a member that loses it
    /// relearns the commit index from the leader. It is not even written
    /// then, but held and written after the entries of the next save: a
    /// write around the page cache reaches the device, costing about what
    /// the sync it avoids would, and one per client write on every member
    /// kept the raft loop busy while the next proposal waited. So the
    /// commit index on disk lags at most one save; replay and raft take a
    /// stale one as they take a lost one.
    pub fn save(&mut self, entries: &[Entry], hard_state: Option<&HardState>) -> Result<()> {
        self.check_usable()?;
        let mut frames_bytes = HARD_STATE_FRAME_BYTES_MAX;
        if let Some(first) = entries.first() {
            assert!(
                first.index <= self.last_index + 1,
                "entry {} would leave a gap after last index {}",
                first.index,
                self.last_index
            );
            for (offset, entry) in entries.iter().enumerate() {
                assert_eq!(
                    entry.index,
                    first.index + offset as u64,
                    "entries in a save are contiguous"
                );
                let body_bytes = BODY_HEADER_BYTES + record::ENTRY_FIXED_BYTES + entry.data.len();
                if body_bytes > RECORD_BODY_BYTES_MAX {
                    return Err(Error::RecordTooLarge {
                        bytes: body_bytes,
                        max: RECORD_BODY_BYTES_MAX,
                    });
                }
                frames_bytes += LENGTH_WORD_BYTES + body_bytes + FRAME_ALIGNMENT_BYTES;
            }
        }
        let must_sync = !entries.is_empty()
            || hard_state.is_some_and(|hs| hs.term != self.hard_state.term || hs.vote != self.hard_state.vote);
        if !must_sync {
            if let Some(hard_state) = hard_state {
                self.hard_state = *hard_state;
                self.hard_state_held = true;
            }
            return Ok(());
        }
        // A held commit-only hard state goes after these entries.
        let hard_state = match hard_state {
            None if self.hard_state_held => Some(self.hard_state),
            given => given.copied(),
        };
        let hard_state = hard_state.as_ref();
        self.start_buffer(frames_bytes);
        for entry in entries {
            self.encoder.encode_with(record::TYPE_ENTRY, &mut self.buffer, |out| {
                record::encode_entry_payload(entry.index, entry.term, &entry.data, out)
            });
        }
        if let Some(hard_state) = hard_state {
            self.encode_hard_state(hard_state);
        }
        self.write_and_sync()?;
        if let Some(last) = entries.last() {
            self.last_index = last.index;
        }
        if let Some(hard_state) = hard_state {
            self.hard_state = *hard_state;
            self.hard_state_held = false;
        }
        self.cut_if_full()
    }

    /// Records that a snapshot at `snapshot.index` exists, durably. Call it
    /// once the snapshot itself is durable, and before [`Wal::release_to`].
    pub fn save_snapshot(&mut self, snapshot: &SnapshotMeta) -> Result<()> {
        self.check_usable()?;
        self.start_buffer(SNAPSHOT_FRAME_BYTES_MAX);
        self.encoder
            .encode(&Record::Snapshot(snapshot.clone()), &mut self.buffer);
        self.write_and_sync()?;
        self.last_index = self.last_index.max(snapshot.index);
        self.cut_if_full()
    }

    /// Removes the segments that replay from a snapshot at `index` no
    /// longer needs (every one before the last with `first_index <= index`).
    /// Returns how many were removed. Each is renamed to a `.tmp` name,
    /// oldest first, so a crash midway leaves a contiguous run of
    /// segments, and the directory synced; then a thread frees the files
    /// ([`Wal::remove_released`]), and the next open removes any `.tmp`
    /// file a crash left.
    pub fn release_to(&mut self, index: u64) -> Result<usize> {
        self.check_usable()?;
        let Some(keep_from) = self.segments.iter().rposition(|name| name.first_index <= index) else {
            return Ok(0);
        };
        if keep_from == 0 {
            return Ok(0);
        }
        let mut hidden = Vec::with_capacity(keep_from);
        for name in &self.segments[..keep_from] {
            let path = name.path(&self.dir);
            let temporary = PathBuf::from(format!("{}{TEMPORARY_SUFFIX}", path.display()));
            fs::rename(&path, &temporary).map_err(|e| Error::io("hide released segment", &path, e))?;
            hidden.push(temporary);
        }
        self.segments.drain(..keep_from);
        if let Err(error) = self.options.disk.fsync_dir(&self.dir) {
            self.poisoned = true;
            return Err(Error::io("fsync directory", &self.dir, error));
        }
        self.remove_released(hidden);
        Ok(keep_from)
    }

    /// Frees released segments' files, already hidden under `.tmp`
    /// names, through the disk ([`Disk::release`]: on a thread of its own
    /// in paced steps, removal.rs), as the raft loop that releases them
    /// must not wait while the file system frees 64 MiB. A failed removal
    /// is logged, not fatal: the file is no longer part of the log, and
    /// the next open removes what is left of it. With
    /// [`RELEASE_THREADS_MAX`] removals still running, this one runs here.
    fn remove_released(&mut self, hidden: Vec<PathBuf>) {
        self.releasing.retain(|thread| !thread.is_finished());
        if self.releasing.len() >= RELEASE_THREADS_MAX {
            return removal::remove_all(&hidden, "a released segment");
        }
        self.releasing.extend(self.options.disk.release(hidden));
    }

    /// The last raft index the log holds (entries, or a snapshot past them).
    pub fn last_index(&self) -> u64 {
        self.last_index
    }

    /// The last hard state saved.
    pub fn hard_state(&self) -> HardState {
        self.hard_state
    }

    /// The metadata given at creation.
    pub fn metadata(&self) -> &[u8] {
        &self.metadata
    }

    /// The directory holding the log.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// How many segment files the log holds.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// The segment being written to and the offset where the next frame
    /// goes. For diagnostics and crash tests.
    pub fn tail(&self) -> (&Path, u64) {
        (&self.tail.path, self.tail.offset)
    }

    /// The bytes and fdatasync time of the last write since the last call,
    /// if there was one.
    pub fn take_last_sync(&mut self) -> Option<(u64, Duration)> {
        self.last_sync.take()
    }

    /// Latency of every `fdatasync` a save made, in microseconds.
    pub fn sync_latency_us(&self) -> &Histogram<u64> {
        &self.sync_latency_us
    }

    /// Whether an earlier failure poisoned the log.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    fn check_usable(&self) -> Result<()> {
        if self.poisoned {
            return Err(Error::Poisoned);
        }
        Ok(())
    }

    /// Readies the buffer for new frames, about `frames_bytes` of them.
    fn start_buffer(&mut self, frames_bytes: usize) {
        self.frames_start = match &self.direct {
            Some(direct) => direct.begin(&mut self.buffer, frames_bytes),
            None => {
                self.buffer.clear();
                0
            }
        };
    }

    /// Writes the buffer's frames at the tail, directly when the tail
    /// allows it.
    fn write_buffer(&mut self) -> std::io::Result<()> {
        let disk = &*self.options.disk;
        match &mut self.direct {
            Some(direct) => direct.write(disk, &mut self.buffer, self.frames_start, self.tail.offset),
            None => disk.write_all_at(&self.tail.file, &self.buffer, self.tail.offset),
        }
    }

    /// Appends a hard-state record to the buffer.
    fn encode_hard_state(&mut self, hard_state: &HardState) {
        self.encoder
            .encode_with(record::TYPE_HARD_STATE, &mut self.buffer, |out| {
                record::encode_hard_state_payload(hard_state, out)
            });
    }

    /// Writes the buffer at the tail and syncs it; poisons on any failure.
    fn write_and_sync(&mut self) -> Result<()> {
        let frames_bytes = self.buffer.len() - self.frames_start;
        debug_assert_eq!(frames_bytes % FRAME_ALIGNMENT_BYTES, 0);
        debug_assert!(frames_bytes >= LENGTH_WORD_BYTES);
        if let Err(error) = self.write_buffer() {
            self.poisoned = true;
            return Err(Error::io("write", &self.tail.path, error));
        }
        let tail = &self.tail;
        let started = Instant::now();
        if let Err(error) = self.options.disk.fdatasync(&tail.file) {
            self.poisoned = true;
            tracing::error!(path = %tail.path.display(), %error, "fdatasync failed; the log is poisoned");
            return Err(Error::io("fdatasync", &tail.path, error));
        }
        let took = started.elapsed();
        let micros = (took.as_micros() as u64).clamp(1, SYNC_LATENCY_US_MAX);
        self.sync_latency_us.saturating_record(micros);
        self.last_sync = Some((frames_bytes as u64, took));
        self.tail.offset += frames_bytes as u64;
        Ok(())
    }

    fn cut_if_full(&mut self) -> Result<()> {
        let size_bytes = self.options.segment_size_bytes;
        if self.spare.is_none() && self.tail.offset >= size_bytes / 2 {
            self.spare = Some(Spare::start(&self.dir, size_bytes));
        }
        if self.tail.offset < size_bytes {
            return Ok(());
        }
        let name = SegmentName {
            seq: self.tail.name.seq + 1,
            first_index: self.last_index + 1,
        };
        let started = Instant::now();
        let prepared = match self.spare.take() {
            Some(spare) => spare.take(&self.dir, size_bytes),
            None => spare::prepare(&self.dir, size_bytes, &AtomicBool::new(false)),
        };
        let created = prepared.and_then(|prepared| {
            segment::create(
                &*self.options.disk,
                &self.dir,
                name,
                prepared,
                self.encoder.crc(),
                &self.metadata,
                &self.hard_state,
            )
        });
        match created {
            Ok((tail, crc)) => {
                self.direct = match open_direct(&tail) {
                    Ok(direct) => direct,
                    Err(error) => {
                        self.poisoned = true;
                        return Err(error);
                    }
                };
                self.tail = tail;
                self.encoder = Encoder::new(crc);
                self.segments.push(name);
                // etcd's line for a cut, with how long the writes behind
                // it waited (a spare not ready yet is filled here).
                tracing::info!(
                    path = %self.tail.path.display(),
                    took_ms = started.elapsed().as_secs_f64() * 1e3,
                    "created a new WAL segment"
                );
                Ok(())
            }
            Err(error) => {
                self.poisoned = true;
                Err(error)
            }
        }
    }
}

/// The tail opened for direct writes, or `None` where the file system
/// refuses them.
fn open_direct(tail: &Segment) -> Result<Option<DirectTail>> {
    DirectTail::open(&tail.path, &tail.file, tail.offset).map_err(|e| Error::io("open segment", &tail.path, e))
}

fn new_latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, SYNC_LATENCY_US_MAX, 3).expect("valid histogram bounds")
}

fn lock(dir: &Path) -> Result<File> {
    let path = dir.join(LOCK_FILE);
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| Error::io("open lock", &path, e))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(TryLockError::WouldBlock) => Err(Error::Locked(dir.to_path_buf())),
        Err(TryLockError::Error(e)) => Err(Error::io("lock", &path, e)),
    }
}
