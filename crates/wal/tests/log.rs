//! Goal: the log's ordinary life: save and replay, raft suffix rewrites,
//! snapshots and replay from them, purge, and the refusals (lock, existing
//! log, oversized record, missing snapshot).
//!
//! Method: real files in a temporary directory, reopened between steps.

mod common;

use common::{entry, hard_state};
use wal::{ConfState, Error, Options, SnapshotMeta, SnapshotPosition, Wal};

fn small() -> Options {
    Options {
        segment_size_bytes: 2048,
        ..Options::default()
    }
}

// Goal: only saves that raft needs durable are synced (etcd's MustSync):
// entries, or a new term or vote. A save that moves only the commit index
// is not synced.
#[test]
fn commit_only_saves_are_not_synced() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Wal::create(dir.path(), small(), b"ids").unwrap();
    let syncs = |log: &Wal| log.sync_latency_us().len();
    log.save(&[entry(1, 1, 10)], Some(&hard_state(1, 0))).unwrap();
    assert_eq!(syncs(&log), 1, "entries are synced");
    log.save(&[], Some(&hard_state(1, 1))).unwrap();
    assert_eq!(syncs(&log), 1, "a commit-only change is not");
    log.save(
        &[],
        Some(&wal::HardState {
            vote: 7,
            ..hard_state(1, 1)
        }),
    )
    .unwrap();
    assert_eq!(syncs(&log), 2, "a vote is synced");
    log.save(
        &[],
        Some(&wal::HardState {
            vote: 7,
            ..hard_state(2, 1)
        }),
    )
    .unwrap();
    assert_eq!(syncs(&log), 3, "a term is synced");
    drop(log);
    let (_, replay) = Wal::open(dir.path(), small(), SnapshotPosition::default()).unwrap();
    assert_eq!(
        replay.hard_state,
        wal::HardState {
            vote: 7,
            ..hard_state(2, 1)
        }
    );
}

// Goal: a commit-only hard state is held, not written, until the next
// save, which writes it after its own entries (so the commit index on
// disk lags at most one save), or until the log is closed.
// Method: copies of the directory taken while the log is open stand for
// the disk after a crash at that point.
#[test]
fn a_commit_only_hard_state_waits_for_the_next_save() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Wal::create(dir.path(), small(), b"ids").unwrap();
    log.save(&[entry(1, 1, 10)], Some(&hard_state(1, 0))).unwrap();
    log.save(&[], Some(&hard_state(1, 1))).unwrap();
    let crashed = common::copy_dir(dir.path());
    let (_, replay) = Wal::open(crashed.path(), small(), SnapshotPosition::default()).unwrap();
    assert_eq!(replay.hard_state, hard_state(1, 0), "held, so not on disk");
    log.save(&[entry(2, 1, 10)], None).unwrap();
    let crashed = common::copy_dir(dir.path());
    let (_, replay) = Wal::open(crashed.path(), small(), SnapshotPosition::default()).unwrap();
    assert_eq!(replay.hard_state, hard_state(1, 1), "written after the next entries");
    assert_eq!(replay.entries.len(), 2);
    log.save(&[], Some(&hard_state(1, 2))).unwrap();
    drop(log);
    let (_, replay) = Wal::open(dir.path(), small(), SnapshotPosition::default()).unwrap();
    assert_eq!(replay.hard_state, hard_state(1, 2), "written on close");
}

// Goal: entries and the latest hard state come back after a reopen, and a
// rewrite at index i drops the old i and everything after it.
#[test]
fn save_replay_and_suffix_rewrite() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Wal::create(dir.path(), small(), b"ids").unwrap();
    let first: Vec<_> = (1..=10).map(|i| entry(i, 1, 50)).collect();
    log.save(&first, Some(&hard_state(1, 4))).unwrap();
    // Raft on a new term rewrites from index 7.
    let rewrite: Vec<_> = (7..=8).map(|i| entry(i, 2, 60)).collect();
    log.save(&rewrite, Some(&hard_state(2, 6))).unwrap();
    log.save(&[], Some(&hard_state(2, 8))).unwrap();
    assert_eq!(log.last_index(), 8);
    drop(log);

    let (log, replay) = Wal::open(dir.path(), small(), SnapshotPosition::default()).unwrap();
    let mut expected = first[..6].to_vec();
    expected.extend(rewrite);
    assert_eq!(replay.entries, expected);
    assert_eq!(replay.hard_state, hard_state(2, 8));
    assert_eq!(replay.metadata, b"ids");
    assert_eq!(log.last_index(), 8);
    assert!(log.sync_latency_us().is_empty(), "a fresh handle has synced nothing");
}

// Goal: replay from a snapshot position returns only later entries and
// the snapshot record; purge drops the segments that replay no longer
// reads, and replay from the snapshot still works afterwards.
#[test]
fn snapshots_replay_and_purge() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Wal::create(dir.path(), small(), b"x").unwrap();
    for index in 1..=60 {
        log.save(&[entry(index, 1, 100)], Some(&hard_state(1, index - 1)))
            .unwrap();
    }
    let snapshot = SnapshotMeta {
        index: 40,
        term: 1,
        conf_state: ConfState {
            voters: vec![1, 2, 3],
            ..ConfState::default()
        },
    };
    log.save_snapshot(&snapshot).unwrap();
    let segments_before = log.segment_count();
    assert!(segments_before > 3, "{segments_before} segments");
    assert_eq!(log.sync_latency_us().len(), 61, "one sync per save");
    let released = log.release_to(40).unwrap();
    assert!(released > 0);
    assert_eq!(log.segment_count(), segments_before - released);
    assert_eq!(common::segments(dir.path()).len(), log.segment_count());
    for index in 61..=70 {
        log.save(&[entry(index, 1, 100)], Some(&hard_state(1, index - 1)))
            .unwrap();
    }
    drop(log);
    // The released segments' files went on a thread of their own, which
    // the close waited for: nothing of them is left, not even hidden.
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".wal.tmp"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");

    let at = SnapshotPosition { index: 40, term: 1 };
    let (_, replay) = Wal::open(dir.path(), small(), at).unwrap();
    assert_eq!(replay.snapshot, Some(snapshot));
    let indexes: Vec<u64> = replay.entries.iter().map(|e| e.index).collect();
    assert_eq!(indexes, (41..=70).collect::<Vec<_>>());
    assert_eq!(replay.hard_state, hard_state(1, 69));

    // The released history is gone for good, and a wrong term is refused.
    assert!(matches!(
        Wal::open(dir.path(), small(), SnapshotPosition::default()),
        Err(Error::HistoryReleased { index: 0, .. })
    ));
    assert!(matches!(
        Wal::open(dir.path(), small(), SnapshotPosition { index: 40, term: 9 }),
        Err(Error::SnapshotNotFound { index: 40, term: 9 })
    ));
}

// Goal: a follower that installs a snapshot past its log continues from
// the snapshot index, and replay from that snapshot sees only the new log.
#[test]
fn snapshot_past_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Wal::create(dir.path(), small(), b"x").unwrap();
    log.save(&[entry(1, 1, 10), entry(2, 1, 10)], None).unwrap();
    let snapshot = SnapshotMeta {
        index: 500,
        term: 3,
        conf_state: ConfState::default(),
    };
    log.save_snapshot(&snapshot).unwrap();
    assert_eq!(log.last_index(), 500);
    log.save(&[entry(501, 3, 10)], Some(&hard_state(3, 501))).unwrap();
    drop(log);
    let (log, replay) = Wal::open(dir.path(), small(), SnapshotPosition { index: 500, term: 3 }).unwrap();
    assert_eq!(replay.entries, vec![entry(501, 3, 10)]);
    assert_eq!(log.last_index(), 501);
}

// Goal: the refusals: a locked directory, creating over a log, opening an
// empty directory, and a record over the size limit (nothing written).
#[test]
fn refusals() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        Wal::open(dir.path(), small(), SnapshotPosition::default()),
        Err(Error::NoSegments(_))
    ));
    let mut log = Wal::create(dir.path(), small(), b"x").unwrap();
    assert!(matches!(
        Wal::open(dir.path(), small(), SnapshotPosition::default()),
        Err(Error::Locked(_))
    ));
    let huge = wal::Entry {
        index: 1,
        term: 1,
        data: vec![1; wal::frame::RECORD_BODY_BYTES_MAX],
    };
    assert!(matches!(log.save(&[huge], None), Err(Error::RecordTooLarge { .. })));
    assert!(!log.is_poisoned(), "a refused record is not a disk failure");
    log.save(&[entry(1, 1, 10)], None).unwrap();
    drop(log);
    assert!(matches!(
        Wal::create(dir.path(), small(), b"x"),
        Err(Error::AlreadyExists(_))
    ));
    let (_, replay) = Wal::open(dir.path(), small(), SnapshotPosition::default()).unwrap();
    assert_eq!(replay.entries, vec![entry(1, 1, 10)]);
}

// Goal: a save that breaks raft's contiguity is a caller bug and panics
// before anything reaches the disk.
#[test]
#[should_panic(expected = "would leave a gap")]
fn gap_panics() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Wal::create(dir.path(), small(), b"x").unwrap();
    let _ = log.save(&[entry(3, 1, 10)], None);
}

// Goal: the log writes its tail around the page cache wherever the file
// system takes O_DIRECT (ext4 on this project's machines), and replays
// what it wrote so. Method: probe the temporary directory with a file
// opened O_DIRECT, then save, reopen and compare.
#[test]
fn the_tail_is_written_directly_where_allowed() {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = tempfile::tempdir().unwrap();
    let probe = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .custom_flags(libc::O_DIRECT)
        .open(dir.path().join("probe"));
    let log_dir = dir.path().join("wal");
    let mut log = wal::Wal::create(&log_dir, wal::Options::default(), b"direct").unwrap();
    assert_eq!(log.writes_directly(), probe.is_ok());
    let entries: Vec<wal::Entry> = (1..=300)
        .map(|i| common::entry(i, 1, (i as usize * 37) % 1000))
        .collect();
    for chunk in entries.chunks(7) {
        log.save(chunk, Some(&common::hard_state(1, chunk[0].index))).unwrap();
    }
    drop(log);
    let (_, replay) = wal::Wal::open(&log_dir, wal::Options::default(), wal::SnapshotPosition::default()).unwrap();
    assert_eq!(replay.entries, entries);
}
