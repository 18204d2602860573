//! WAL benchmarks.
//!
//! - `wal_append_sync_records` and `wal_append_sync_bytes`: one `save` of a
//!   batch of 1, 16, 128 or 1024 entries with 256-byte payloads (one write
//!   plus one fdatasync), reported as records/s and bytes/s. The two groups
//!   time the same work; criterion reports one throughput unit per group.
//!   Bytes are the framed bytes written (288 per record).
//! - `wal_replay`: opening a log whose only segment is a full 64 MiB of
//!   256-byte entries, replaying all of it.
//!
//! Setup (building entries, creating the log, releasing old segments) stays
//! outside the timed part.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use wal::{Entry, Options, SnapshotPosition, Wal, SEGMENT_SIZE_BYTES_DEFAULT};

const PAYLOAD_BYTES: usize = 256;
/// Length word + crc + type + index + term + payload, padded to 8.
const FRAME_BYTES: u64 = 288;
const BATCH_SIZES: [usize; 4] = [1, 16, 128, 1024];

fn batch(records: usize) -> Vec<Entry> {
    (1..=records as u64)
        .map(|index| Entry {
            index,
            term: 1,
            data: vec![0xab; PAYLOAD_BYTES],
        })
        .collect()
}

/// Times `iterations` saves of `entries`. Saving the same indexes again is
/// a legal raft rewrite, so one prebuilt batch serves every iteration.
/// Segments left behind are released between saves, outside the timing.
fn time_saves(log: &mut Wal, entries: &[Entry], iterations: u64) -> Duration {
    let mut elapsed = Duration::ZERO;
    for _ in 0..iterations {
        let started = Instant::now();
        log.save(entries, None).expect("save");
        elapsed += started.elapsed();
        if log.segment_count() > 2 {
            log.release_to(u64::MAX).expect("release");
        }
    }
    elapsed
}

fn append_sync(c: &mut Criterion) {
    for (group_name, per_record) in [
        ("wal_append_sync_records", None),
        ("wal_append_sync_bytes", Some(FRAME_BYTES)),
    ] {
        let mut group = c.benchmark_group(group_name);
        group.sample_size(20).measurement_time(Duration::from_secs(4));
        for records in BATCH_SIZES {
            group.throughput(match per_record {
                None => Throughput::Elements(records as u64),
                Some(bytes) => Throughput::Bytes(records as u64 * bytes),
            });
            let dir = tempfile::tempdir().expect("tempdir");
            let mut log = Wal::create(dir.path(), Options::default(), b"bench").expect("create");
            let entries = batch(records);
            group.bench_with_input(BenchmarkId::from_parameter(records), &entries, |b, entries| {
                b.iter_custom(|iterations| time_saves(&mut log, entries, iterations))
            });
            let latency = log.sync_latency_us();
            eprintln!(
                "{group_name}/{records}: fdatasync p50 {} us, p99 {} us over {} syncs",
                latency.value_at_quantile(0.5),
                latency.value_at_quantile(0.99),
                latency.len()
            );
        }
        group.finish();
    }
}

fn replay(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = Options {
        segment_size_bytes: SEGMENT_SIZE_BYTES_DEFAULT,
        ..Options::default()
    };
    let mut log = Wal::create(dir.path(), options.clone(), b"bench").expect("create");
    // Fill the first segment to just under its size, so no cut happens and
    // the one segment holds 64 MiB of entries.
    let mut next = 1;
    let records_per_batch = 1024;
    loop {
        let (_, offset) = log.tail();
        let room = (SEGMENT_SIZE_BYTES_DEFAULT - 1).saturating_sub(offset) / FRAME_BYTES;
        let records = room.min(records_per_batch);
        if records == 0 {
            break;
        }
        let entries: Vec<Entry> = (next..next + records)
            .map(|index| Entry {
                index,
                term: 1,
                data: vec![0xcd; PAYLOAD_BYTES],
            })
            .collect();
        log.save(&entries, None).expect("save");
        next += records;
    }
    assert_eq!(log.segment_count(), 1);
    let data_bytes = log.tail().1;
    drop(log);

    let mut group = c.benchmark_group("wal_replay");
    group.sample_size(10).throughput(Throughput::Bytes(data_bytes));
    group.bench_function("full_64MiB_segment", |b| {
        b.iter(|| {
            let (log, replay) = Wal::open(dir.path(), options.clone(), SnapshotPosition::default()).expect("open");
            assert_eq!(replay.entries.len() as u64, next - 1);
            drop(log);
            replay
        })
    });
    group.finish();
    eprintln!("wal_replay: {} entries, {data_bytes} bytes of data", next - 1);
}

criterion_group!(benches, append_sync, replay);
criterion_main!(benches);
