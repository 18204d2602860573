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
        let mut log = Wal::create(dir.path(), Options { segment_size_bytes }, b"meta").unwrap();
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
