//! Helpers shared by the WAL's integration tests.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use wal::{Entry, HardState, Options, SnapshotPosition, Wal};

/// Deterministic entry payload for `index`: `bytes` long, never all zeros
/// in any 512-byte piece, so damage to it is never mistaken for a torn
/// write unless the test zeroes it on purpose.
pub fn payload(index: u64, bytes: usize) -> Vec<u8> {
    (0..bytes).map(|i| (index as usize * 31 + i * 7) as u8 | 1).collect()
}

pub fn entry(index: u64, term: u64, bytes: usize) -> Entry {
    Entry {
        index,
        term,
        data: payload(index, bytes),
    }
}

/// Where one save's bytes landed.
#[derive(Debug, Clone)]
pub struct Placement {
    pub segment: PathBuf,
    pub start: u64,
    pub end: u64,
}

/// A log written one entry per save, with where each save landed.
pub struct Layout {
    pub dir: tempfile::TempDir,
    pub entries: Vec<Entry>,
    pub placements: Vec<Placement>,
}

impl Layout {
    /// Writes `count` entries of `payload_bytes` each, one save apiece, into
    /// a log with the given segment size, then closes it.
    pub fn write(count: u64, payload_bytes: usize, segment_size_bytes: u64) -> Layout {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Wal::create(dir.path(), options(segment_size_bytes), b"meta").unwrap();
        let mut entries = Vec::new();
        let mut placements = Vec::new();
        for index in 1..=count {
            let (segment, start) = tail(&log);
            let entry = entry(index, 1, payload_bytes);
            log.save(std::slice::from_ref(&entry), None).unwrap();
            let end = if tail(&log).0 == segment {
                tail(&log).1
            } else {
                file_data_end(&segment, start)
            };
            placements.push(Placement { segment, start, end });
            entries.push(entry);
        }
        Layout {
            dir,
            entries,
            placements,
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Segment files, sorted.
    pub fn segments(&self) -> Vec<PathBuf> {
        segments(self.path())
    }
}

/// The log's tail segment and offset, owned.
pub fn tail(log: &Wal) -> (PathBuf, u64) {
    let (path, offset) = log.tail();
    (path.to_path_buf(), offset)
}

/// Where the single frame written at `start` ends, read from its length word.
fn file_data_end(segment: &Path, start: u64) -> u64 {
    let bytes = std::fs::read(segment).unwrap();
    let word = u64::from_le_bytes(bytes[start as usize..start as usize + 8].try_into().unwrap());
    let (body, padding) = wal::frame::parse_length_word(word).unwrap();
    start + 8 + (body + padding) as u64
}

pub fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "wal"))
        .collect();
    paths.sort();
    paths
}

pub fn open_all(dir: &Path) -> wal::Result<(Wal, wal::Replay)> {
    Wal::open(dir, Options::default(), SnapshotPosition::default())
}

/// Copies a log directory (without its lock) so one layout serves many cases.
pub fn copy_dir(from: &Path) -> tempfile::TempDir {
    let to = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap() != "LOCK" {
            std::fs::copy(&path, to.path().join(path.file_name().unwrap())).unwrap();
        }
    }
    to
}

pub fn hard_state(term: u64, commit: u64) -> HardState {
    HardState { term, vote: 1, commit }
}

/// The default options, with segments of `segment_size_bytes`.
pub fn options(segment_size_bytes: u64) -> Options {
    Options {
        segment_size_bytes,
        ..Options::default()
    }
}

/// Opens the crash tests' log in `dir`, creating it first if needed.
pub fn open_or_create(dir: &Path, segment_size_bytes: u64, metadata: &[u8]) -> (Wal, wal::Replay) {
    let options = options(segment_size_bytes);
    if !Wal::exists(dir) {
        drop(Wal::create(dir, options.clone(), metadata).unwrap());
    }
    Wal::open(dir, options, SnapshotPosition::default()).unwrap()
}

/// The crash tests' child writer: saves batches of 1 to `span` entries
/// made by `entry_for` after what `replay` holds, printing `synced <last
/// index>` once each save returns, until it dies or has written
/// `batches_max` batches or run for `run_max`.
pub fn write_reporting_synced(
    log: &mut Wal,
    replay: &wal::Replay,
    entry_for: fn(u64) -> Entry,
    span: u64,
    batches_max: u64,
    run_max: std::time::Duration,
) {
    use std::io::Write;
    let mut last = replay.entries.last().map_or(0, |e| e.index);
    let started = std::time::Instant::now();
    let stdout = std::io::stdout();
    for batch in 0..batches_max {
        if started.elapsed() > run_max {
            break;
        }
        let entries: Vec<Entry> = (last + 1..=last + 1 + batch % span).map(entry_for).collect();
        log.save(&entries, Some(&hard_state(1, last))).unwrap();
        last = entries.last().unwrap().index;
        let mut out = stdout.lock();
        writeln!(out, "synced {last}").unwrap();
        out.flush().unwrap();
    }
}

/// The index a child's `synced <index>` line reports, if it is one.
pub fn synced_index(line: &str) -> Option<u64> {
    line.strip_prefix("synced ").map(|index| index.parse().unwrap())
}

/// Checks a recovered log after a crash: at least `acknowledged` entries,
/// each exactly as `entry_for` made it. Returns how many it holds.
pub fn check_recovered(
    replay: &wal::Replay,
    acknowledged: u64,
    entry_for: fn(u64) -> Entry,
    round: impl std::fmt::Display,
) -> u64 {
    let recovered = replay.entries.len() as u64;
    assert!(
        recovered >= acknowledged,
        "round {round}: recovered {recovered} entries, {acknowledged} acknowledged"
    );
    for (position, entry) in replay.entries.iter().enumerate() {
        assert_eq!(
            *entry,
            entry_for(position as u64 + 1),
            "round {round}: entry {}",
            position + 1
        );
    }
    recovered
}
