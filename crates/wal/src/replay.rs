//! Rebuilds raft's log and hard state from the segments, starting at a
//! snapshot position.
//!
//! # Which segments are read
//! Replay from snapshot index `S` starts at the last segment (by sequence)
//! whose `first_index <= S`. Nothing before it matters:
//! - an entry in an earlier segment has an index below that segment's
//!   successor's `first_index`, so below `S`, and replay skips it anyway;
//! - the snapshot record for `S` was written while `last_index >= S`, and
//!   raft never truncates below a snapshot, so every segment started after
//!   it has `first_index > S`: the record is in the start segment or later;
//! - every segment header repeats the hard state, so the latest one is seen.
//!
//! Purge ([`crate::Wal::release_to`]) removes exactly the segments before
//! that start segment.
//!
//! # How entries are rebuilt
//! Entries arrive in log order. An entry at index `i` replaces the entry at
//! `i` and drops every entry after it, because raft truncates a conflicting
//! suffix by rewriting from the first conflicting index. An index above the
//! last one plus one is a gap, which is corruption.

use std::fs;
use std::path::{Path, PathBuf};

use crate::decoder::{self, SegmentEnd};
use crate::error::{Corruption, Error, Result};
use crate::record::{Entry, HardState, Record, SnapshotMeta};
use crate::repair;
use crate::segment::{self, SegmentName};

/// The snapshot a replay starts from: `index` 0 replays the whole log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SnapshotPosition {
    pub index: u64,
    pub term: u64,
}

/// What opening the log recovered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replay {
    /// The metadata given when the log was created.
    pub metadata: Vec<u8>,
    /// The last hard state saved.
    pub hard_state: HardState,
    /// Every entry after the snapshot index, in order, indexes contiguous.
    pub entries: Vec<Entry>,
    /// The snapshot record replay started from (`None` when starting at 0).
    pub snapshot: Option<SnapshotMeta>,
    /// Set when a torn tail was truncated.
    pub repaired: Option<RepairReport>,
}

/// A torn tail that opening truncated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairReport {
    pub segment: PathBuf,
    pub offset: u64,
    pub damage: Corruption,
    pub broken_copy: PathBuf,
}

/// A replay plus where the log continues.
pub(crate) struct Recovered {
    pub replay: Replay,
    /// Every segment from the start segment on; the last one is the tail.
    pub segments: Vec<SegmentName>,
    /// Where the next frame goes in the tail segment.
    pub tail_offset: u64,
    /// The crc of the last valid record.
    pub crc: u32,
    /// The highest index raft's log reached (entries or snapshots).
    pub last_index: u64,
}

/// The segments replay from a snapshot at `at` reads: the last one that
/// starts at or before it and every one after, with no sequence gap.
fn segments_from(dir: &Path, at: SnapshotPosition) -> Result<Vec<SegmentName>> {
    let names = segment::list(dir)?;
    if names.is_empty() {
        return Err(Error::NoSegments(dir.to_path_buf()));
    }
    let start = names
        .iter()
        .rposition(|name| name.first_index <= at.index)
        .ok_or_else(|| Error::HistoryReleased {
            dir: dir.to_path_buf(),
            index: at.index,
        })?;
    let names = names[start..].to_vec();
    for pair in names.windows(2) {
        if pair[1].seq != pair[0].seq + 1 {
            return Err(Error::MissingSegment {
                after: pair[0].path(dir),
                expected_seq: pair[0].seq + 1,
            });
        }
    }
    Ok(names)
}

pub(crate) fn recover(dir: &Path, at: SnapshotPosition) -> Result<Recovered> {
    let names = segments_from(dir, at)?;
    let mut state = State {
        at,
        metadata: None,
        hard_state: HardState::default(),
        entries: Vec::new(),
        snapshot: None,
        last_index: at.index,
    };
    let mut previous_crc = None;
    let mut end = None;
    let mut repaired = None;
    for (position, name) in names.iter().enumerate() {
        let path = name.path(dir);
        let bytes = fs::read(&path).map_err(|e| Error::io("read segment", &path, e))?;
        let is_last = position + 1 == names.len();
        let segment_end: SegmentEnd =
            decoder::decode_segment(&bytes, &path, is_last, previous_crc, |offset, record| {
                state.apply(&path, offset, record)
            })?;
        previous_crc = Some(segment_end.crc);
        if let Some(damage) = &segment_end.torn {
            let broken_copy = repair::truncate_torn_tail(&path, segment_end.offset, damage)?;
            repaired = Some(RepairReport {
                segment: path,
                offset: segment_end.offset,
                damage: damage.clone(),
                broken_copy,
            });
        }
        end = Some(segment_end);
    }
    let end = end.expect("at least one segment");
    if at.index > 0 && state.snapshot.is_none() {
        return Err(Error::SnapshotNotFound {
            index: at.index,
            term: at.term,
        });
    }
    Ok(Recovered {
        replay: Replay {
            metadata: state.metadata.expect("every segment has metadata"),
            hard_state: state.hard_state,
            entries: state.entries,
            snapshot: state.snapshot,
            repaired,
        },
        segments: names,
        tail_offset: end.offset,
        crc: end.crc,
        last_index: state.last_index,
    })
}

struct State {
    at: SnapshotPosition,
    metadata: Option<Vec<u8>>,
    hard_state: HardState,
    entries: Vec<Entry>,
    snapshot: Option<SnapshotMeta>,
    last_index: u64,
}

impl State {
    fn apply(&mut self, path: &Path, offset: u64, record: Record) -> Result<()> {
        let corrupt = |corruption| Error::Corrupt {
            path: path.to_path_buf(),
            offset,
            corruption,
        };
        match record {
            Record::CrcSeed(_) => {}
            Record::Metadata(metadata) => match &self.metadata {
                None => self.metadata = Some(metadata),
                Some(first) if *first == metadata => {}
                Some(_) => return Err(corrupt(Corruption::MetadataMismatch)),
            },
            Record::HardState(hard_state) => self.hard_state = hard_state,
            Record::Snapshot(snapshot) => {
                self.last_index = self.last_index.max(snapshot.index);
                if snapshot.index == self.at.index && snapshot.term == self.at.term {
                    self.snapshot = Some(snapshot);
                }
            }
            Record::Entry(entry) => {
                self.last_index = entry.index;
                if entry.index <= self.at.index {
                    return Ok(());
                }
                let position = (entry.index - self.at.index - 1) as usize;
                if position > self.entries.len() {
                    return Err(corrupt(Corruption::IndexGap {
                        expected_at_most: self.at.index + 1 + self.entries.len() as u64,
                        found: entry.index,
                    }));
                }
                self.entries.truncate(position);
                self.entries.push(entry);
            }
        }
        Ok(())
    }
}
