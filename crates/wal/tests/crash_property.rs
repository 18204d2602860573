//! Goal: whatever a crash does to the save that was in flight, every save
//! that returned is recovered in full and in order, and the in-flight one
//! is either absent or present as a prefix of its records.
//!
//! Method: proptest generates batches (some rewriting a suffix, as raft
//! does after a conflict) and a crash. All batches but the last are saved
//! normally. The last is saved too, and then its bytes are damaged the way
//! an interrupted write could leave them: the file cut anywhere inside
//! them, or any subset of their sectors left zero. If that save cut a new
//! segment, the new segment is removed (the crash came before the cut).
//! The log is reopened and compared with a model, then written and
//! reopened once more to show the recovered log is usable.
//!
//! `PROPTEST_CASES` sets the number of cases (64 by default, to keep CI
//! short; run with 2000 for a deeper search).

mod common;

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;

use proptest::prelude::*;
use wal::{Entry, HardState, SnapshotPosition, Wal};

#[derive(Debug, Clone)]
struct Batch {
    /// How many entries before the log's end the batch starts (0 appends,
    /// more rewrites a suffix).
    rewind: u64,
    payload_bytes: Vec<usize>,
    commit: bool,
}

#[derive(Debug, Clone)]
enum Crash {
    /// The file ends at this fraction (0..=1000 per mille) of the batch.
    Cut(u32),
    /// Each bit set leaves that sector of the batch unwritten (zero).
    ZeroSectors(u64),
}

fn batch() -> impl Strategy<Value = Batch> {
    (0u64..3, prop::collection::vec(0usize..700, 1..8), any::<bool>()).prop_map(|(rewind, payload_bytes, commit)| {
        Batch {
            rewind,
            payload_bytes,
            commit,
        }
    })
}

fn crash() -> impl Strategy<Value = Crash> {
    prop_oneof![
        (0u32..=1000).prop_map(Crash::Cut),
        any::<u64>().prop_map(Crash::ZeroSectors)
    ]
}

/// The log as raft sees it after applying `entries`: a rewrite at index i
/// drops i and everything after.
fn apply(log: &mut Vec<Entry>, entries: &[Entry]) {
    for entry in entries {
        log.truncate(entry.index as usize - 1);
        log.push(entry.clone());
    }
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn synced_batches_survive_any_crash_of_the_next(
        batches in prop::collection::vec(batch(), 1..16),
        crash in crash(),
        segment_size_bytes in prop_oneof![Just(1024u64), Just(4096), Just(1 << 20)],
    ) {
        let dir = tempfile::tempdir().unwrap();
        let options = common::options(segment_size_bytes);
        let mut log = Wal::create(dir.path(), options.clone(), b"m").unwrap();
        let mut model: Vec<Entry> = Vec::new();
        let mut model_hard_state = HardState::default();
        let mut term = 1;
        let mut in_flight = None;
        for (number, batch) in batches.iter().enumerate() {
            term += u64::from(batch.rewind > 0);
            let first = model.len() as u64 + 1 - batch.rewind.min(model.len() as u64);
            let entries: Vec<Entry> = batch.payload_bytes.iter().enumerate()
                .map(|(i, &bytes)| common::entry(first + i as u64, term, bytes))
                .collect();
            let hard_state = batch.commit.then(|| common::hard_state(term, first - 1));
            let before = common::tail(&log);
            let segments_before = common::segments(dir.path()).len();
            log.save(&entries, hard_state.as_ref()).unwrap();
            if number + 1 == batches.len() {
                in_flight = Some((entries, hard_state, before, segments_before));
            } else {
                apply(&mut model, &entries);
                if let Some(hard_state) = hard_state {
                    model_hard_state = hard_state;
                }
            }
        }
        drop(log);

        // The crash, applied to the last save's bytes.
        let (entries, hard_state, (segment, start), segments_before) = in_flight.unwrap();
        let all_segments = common::segments(dir.path());
        if all_segments.len() > segments_before {
            std::fs::remove_file(all_segments.last().unwrap()).unwrap();
        }
        let file = OpenOptions::new().read(true).write(true).open(&segment).unwrap();
        let mut word = [0u8; 8];
        let mut end = start;
        loop {
            file.read_exact_at(&mut word, end).unwrap();
            let word = u64::from_le_bytes(word);
            if word == 0 { break; }
            let (body, padding) = wal::frame::parse_length_word(word).unwrap();
            end += 8 + (body + padding) as u64;
            if end >= file.metadata().unwrap().len() { break; }
        }
        match crash {
            Crash::Cut(per_mille) => file.set_len(start + (end - start) * u64::from(per_mille) / 1000).unwrap(),
            Crash::ZeroSectors(mask) => {
                let mut sector = start / 512;
                while sector * 512 < end {
                    if mask & (1 << (sector % 64)) != 0 {
                        let from = (sector * 512).max(start);
                        let to = ((sector + 1) * 512).min(end);
                        file.write_all_at(&vec![0; (to - from) as usize], from).unwrap();
                    }
                    sector += 1;
                }
            }
        }
        drop(file);

        let (mut log, replay) = Wal::open(dir.path(), options.clone(), SnapshotPosition::default()).unwrap();
        let survived = (0..=entries.len()).find(|&kept| {
            let mut expected = model.clone();
            apply(&mut expected, &entries[..kept]);
            expected == replay.entries
        });
        prop_assert!(survived.is_some(), "recovered {} entries: not the synced ones plus a prefix of the last batch", replay.entries.len());
        let expected_hard_state = match (survived, hard_state) {
            (Some(kept), Some(hard_state)) if kept == entries.len() && replay.hard_state == hard_state => hard_state,
            _ => model_hard_state,
        };
        prop_assert_eq!(replay.hard_state, expected_hard_state);

        // The recovered log takes a write and replays it.
        let next = common::entry(replay.entries.len() as u64 + 1, term + 1, 33);
        log.save(std::slice::from_ref(&next), None).unwrap();
        drop(log);
        let (_, again) = Wal::open(dir.path(), options, SnapshotPosition::default()).unwrap();
        prop_assert_eq!(again.entries.len(), replay.entries.len() + 1);
        prop_assert_eq!(again.entries.last(), Some(&next));
    }
}
