//! Goal: a failed write, fdatasync or directory sync poisons the log: the
//! failing call returns an error and every later call returns `Poisoned`,
//! even once the disk behaves again. Nothing from the failed save is
//! reported durable, and reopening recovers the saves that returned.
//!
//! Method: the named failpoints in `sync.rs`, switched on one at a time.
//! One test function runs the scenarios in sequence because failpoints are
//! process-wide.

mod common;

use wal::{Error, SnapshotPosition, Wal};

fn scenario(failpoint: &str, segment_size_bytes: u64) {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Wal::create(dir.path(), common::options(segment_size_bytes), b"p").unwrap();
    log.save(&[common::entry(1, 1, 100)], None).unwrap();

    fail::cfg(failpoint, "return").unwrap();
    let error = log
        .save(&[common::entry(2, 1, 100)], Some(&common::hard_state(1, 1)))
        .expect_err(failpoint);
    fail::remove(failpoint);
    assert!(matches!(error, Error::Io { .. }), "{failpoint}: {error}");
    assert!(error.to_string().contains("failpoint"), "{failpoint}: {error}");
    assert!(log.is_poisoned(), "{failpoint}");

    // The disk works again; the log still refuses.
    for attempt in [
        log.save(&[common::entry(3, 1, 100)], None),
        log.save_snapshot(&wal::SnapshotMeta::default()),
        log.release_to(0).map(|_| ()),
    ] {
        assert!(matches!(attempt, Err(Error::Poisoned)), "{failpoint}: {attempt:?}");
    }
    drop(log);

    // Reopening recovers at least the save that returned, never entry 3.
    let (_, replay) = Wal::open(
        dir.path(),
        common::options(segment_size_bytes),
        SnapshotPosition::default(),
    )
    .unwrap();
    assert!(!replay.entries.is_empty(), "{failpoint}");
    assert_eq!(replay.entries[0], common::entry(1, 1, 100), "{failpoint}");
    assert!(replay.entries.len() <= 2, "{failpoint}");
}

#[test]
fn failures_poison_the_log() {
    let scenario_guard = fail::FailScenario::setup();
    scenario("wal::fdatasync", 64 << 20);
    scenario("wal::write", 64 << 20);
    // A tiny segment makes the second save cut, and the cut's directory
    // sync is what fails.
    scenario("wal::fsync_dir", 64);
    scenario_guard.teardown();
}
