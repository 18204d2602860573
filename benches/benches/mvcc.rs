//! MVCC store benchmarks.
//!
//! - `mvcc_apply_puts/{1,100,1000}`: one `Store::apply` of a batch of puts
//!   (8-byte keys over a 100k key space, 256-byte values), as the server's
//!   apply stage calls it once per raft batch. Reported in puts/s.
//! - `mvcc_apply_puts_history/{uncompacted,compacted}`: batches of 1,000
//!   puts over a store of 100k keys each put twice, the second store
//!   compacted at its newest revision first (every key's first revision
//!   dropped). A put needs its key's create revision and version; the
//!   index derives them from the key's history, and the pair shows what a
//!   put pays once compaction has cut the histories. Reported in puts/s.
//! - `mvcc_apply_puts_hot_key/100`: batches of 100 puts to one key, put
//!   1,000 times first: etcd's benchmark tool's `put` with its default
//!   key space of one key. The key's generation is longer than the index
//!   looks back (`key_index::GENERATION_SCAN_SLOTS_MAX`), so each put
//!   reads its create revision and version from the key's latest stored
//!   revision. Reported in puts/s.
//! - `mvcc_range/point`: a serializable single-key range in a store of
//!   100k keys.
//! - `mvcc_range/prefix_1000`: a prefix range returning 1,000 keys.
//! - `mvcc_compact/100k_revisions`: compacting a store holding 100k
//!   revisions (10k keys put 10 times each) at its current revision, all
//!   of its queued steps done (index, hash, removal).
//! - `mvcc_compact_index/1m_keys`: the index part alone, in steps of
//!   etcd's batch limit, over a million keys each put twice, the keys put
//!   in an order unrelated to their sort order: etcd's benchmark tool's
//!   "sequential" keys are varints, whose bytes do not sort as the
//!   numbers, so a compaction walking the keys in order finds their
//!   dropped revisions in no order. Reported in keys/s.
//! - `mvcc_compact_index/1m_keys_kept`: the same, with one key in ten
//!   put again since the compaction before (at the end of the first
//!   puts), so nine tenths of the keys' revisions are kept below it, as
//!   in a store compacted every few minutes.
//!
//! Setup (filling stores) stays outside the timed part.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use mvcc::compaction::{Backlog, Step, COMPACTION_BATCH_LIMIT_DEFAULT};
use mvcc::index::TreeIndex;
use mvcc::{CompactionRequest, PutRequest, RangeRequest, Revision, Store, WriteRequest};

/// kv-server's allocator: the store's cost per put is mostly allocation
/// (a profile under glibc's malloc had over a third of the time in it),
/// so it is measured with the allocator the server uses, built and tuned
/// as the server's (`kv_server::allocator::tune`, called first).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const VALUE_BYTES: usize = 256;
const KEY_SPACE: u64 = 100_000;

fn key(i: u64) -> Vec<u8> {
    format!("{:08}", i % KEY_SPACE).into_bytes()
}

fn put(key: Vec<u8>) -> WriteRequest {
    WriteRequest::Put(PutRequest {
        key,
        value: vec![0x5a; VALUE_BYTES],
        ..PutRequest::default()
    })
}

/// Applies `total` puts over keys `first..first + total`, in batches of 1000.
fn fill(store: &Store, raft_index: &mut u64, keys: impl Iterator<Item = Vec<u8>>) {
    let mut batch = Vec::with_capacity(1000);
    for key in keys {
        batch.push(put(key));
        if batch.len() == 1000 {
            *raft_index += 1;
            store.apply(*raft_index, &batch).expect("apply");
            batch.clear();
        }
    }
    if !batch.is_empty() {
        *raft_index += 1;
        store.apply(*raft_index, &batch).expect("apply");
    }
}

/// The time `store` takes to apply `iterations` batches of `batch_size`
/// puts, over the keys from `next` on; the batches are built untimed.
fn time_batches(store: &Store, raft_index: &mut u64, next: &mut u64, batch_size: u64, iterations: u64) -> Duration {
    time_applies(store, raft_index, iterations, || {
        let batch = (*next..*next + batch_size).map(|i| put(key(i))).collect();
        *next += batch_size;
        batch
    })
}

/// The time `store` takes to apply `iterations` batches that `batch`
/// builds, untimed.
fn time_applies(
    store: &Store,
    raft_index: &mut u64,
    iterations: u64,
    mut batch: impl FnMut() -> Vec<WriteRequest>,
) -> Duration {
    let mut elapsed = Duration::ZERO;
    for _ in 0..iterations {
        let batch = batch();
        *raft_index += 1;
        let started = Instant::now();
        store.apply(*raft_index, &batch).expect("apply");
        elapsed += started.elapsed();
    }
    elapsed
}

fn apply_puts(c: &mut Criterion) {
    kv_server::allocator::tune();
    let mut group = c.benchmark_group("mvcc_apply_puts");
    group.sample_size(20).measurement_time(Duration::from_secs(4));
    for batch_size in [1u64, 100, 1000] {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("open");
        let mut raft_index = 0;
        let mut next = 0u64;
        group.throughput(Throughput::Elements(batch_size));
        group.bench_function(BenchmarkId::from_parameter(batch_size), |b| {
            b.iter_custom(|iterations| time_batches(&store, &mut raft_index, &mut next, batch_size, iterations))
        });
    }
    group.finish();
}

fn apply_puts_history(c: &mut Criterion) {
    kv_server::allocator::tune();
    let mut group = c.benchmark_group("mvcc_apply_puts_history");
    group.sample_size(20).measurement_time(Duration::from_secs(4));
    group.throughput(Throughput::Elements(1000));
    for compacted in [false, true] {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("open");
        let mut raft_index = 0;
        fill(&store, &mut raft_index, (0..2 * KEY_SPACE).map(key));
        if compacted {
            let revision = store.current_revision();
            raft_index += 1;
            let compaction = [WriteRequest::Compaction(CompactionRequest { revision })];
            store.apply(raft_index, &compaction).expect("compact");
            store.finish_compactions().expect("compaction steps");
        }
        let mut next = 0u64;
        let name = if compacted { "compacted" } else { "uncompacted" };
        group.bench_function(name, |b| {
            b.iter_custom(|iterations| time_batches(&store, &mut raft_index, &mut next, 1000, iterations))
        });
    }
    group.finish();
}

fn apply_puts_hot_key(c: &mut Criterion) {
    kv_server::allocator::tune();
    let mut group = c.benchmark_group("mvcc_apply_puts_hot_key");
    group.sample_size(20).measurement_time(Duration::from_secs(4));
    let batch_size = 100u64;
    group.throughput(Throughput::Elements(batch_size));
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path()).expect("open");
    let mut raft_index = 0;
    fill(&store, &mut raft_index, (0..1000).map(|_| key(0)));
    group.bench_function(BenchmarkId::from_parameter(batch_size), |b| {
        b.iter_custom(|iterations| {
            time_applies(&store, &mut raft_index, iterations, || {
                (0..batch_size).map(|_| put(key(0))).collect()
            })
        })
    });
    group.finish();
}

fn ranges(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path()).expect("open");
    let mut raft_index = 0;
    fill(&store, &mut raft_index, (0..KEY_SPACE).map(key));
    fill(
        &store,
        &mut raft_index,
        (0..1000).map(|i| format!("prefix/{i:04}").into_bytes()),
    );

    let mut group = c.benchmark_group("mvcc_range");
    let point = RangeRequest {
        key: key(4242),
        ..RangeRequest::default()
    };
    group.throughput(Throughput::Elements(1));
    group.bench_function("point", |b| {
        b.iter(|| {
            let response = store.range(&point).expect("range");
            assert_eq!(response.kvs.len(), 1);
            response
        })
    });
    let prefix = RangeRequest {
        key: b"prefix/".to_vec(),
        range_end: b"prefix0".to_vec(),
        ..RangeRequest::default()
    };
    group.throughput(Throughput::Elements(1000));
    group.bench_function("prefix_1000", |b| {
        b.iter(|| {
            let response = store.range(&prefix).expect("range");
            assert_eq!(response.kvs.len(), 1000);
            response
        })
    });
    group.finish();
}

fn compact(c: &mut Criterion) {
    let mut group = c.benchmark_group("mvcc_compact");
    group.sample_size(10).throughput(Throughput::Elements(100_000));
    group.bench_function("100k_revisions", |b| {
        b.iter_custom(|iterations| {
            let mut elapsed = Duration::ZERO;
            for _ in 0..iterations {
                let dir = tempfile::tempdir().expect("tempdir");
                let store = Store::open(dir.path()).expect("open");
                let mut raft_index = 0;
                fill(
                    &store,
                    &mut raft_index,
                    (0..100_000u64).map(|i| format!("{:08}", i % 10_000).into_bytes()),
                );
                let revision = store.current_revision();
                let compaction = [WriteRequest::Compaction(CompactionRequest { revision })];
                let started = Instant::now();
                store.apply(raft_index + 1, &compaction).expect("compact");
                store.finish_compactions().expect("compaction steps");
                elapsed += started.elapsed();
                assert_eq!(store.compact_revision(), revision);
            }
            elapsed
        })
    });
    group.finish();
}

/// Keys in `mvcc_compact_index`.
const INDEX_KEYS: u64 = 1_000_000;

/// etcd's benchmark tool's key `i`: `i` as a zig-zag varint in 8 bytes.
fn varint_key(i: u64) -> Vec<u8> {
    let mut key = vec![0; 8];
    let (mut value, mut at) = (i << 1, 0);
    while value >= 0x80 {
        key[at] = (value as u8) | 0x80;
        value >>= 7;
        at += 1;
    }
    key[at] = value as u8;
    key
}

/// The time to compact, in steps of etcd's batch limit, an index of
/// [`INDEX_KEYS`] keys put once and then every `rewrite_every`-th key put
/// again, compacted at the newest revision; the compaction before it was
/// at `previous` (1: none).
fn index_compaction(rewrite_every: u64, previous: impl Fn(i64) -> i64) -> Duration {
    let mut index = TreeIndex::default();
    let mut main = 1;
    for i in 0..INDEX_KEYS {
        main += 1;
        index.put_rebuilt(&varint_key(i), Revision::new(main, 0), main, 1);
    }
    let first_round = main;
    for i in (0..INDEX_KEYS).step_by(rewrite_every as usize) {
        main += 1;
        index.put_rebuilt(&varint_key(i), Revision::new(main, 0), i as i64 + 2, 2);
    }
    let mut backlog = Backlog::default();
    backlog.push_compaction(previous(first_round), main);
    let started = Instant::now();
    while let Some(Step::Index { at, after }) = backlog.next_step(COMPACTION_BATCH_LIMIT_DEFAULT) {
        let into = backlog.compacted().expect("an index job");
        let last = index.compact_some(at, after.as_deref(), COMPACTION_BATCH_LIMIT_DEFAULT, into);
        backlog.index_done(last);
    }
    let took = started.elapsed();
    assert!(backlog.next_step(1).is_some(), "the hash and removal queued");
    took
}

fn compact_index(c: &mut Criterion) {
    let mut group = c.benchmark_group("mvcc_compact_index");
    group.sample_size(10).throughput(Throughput::Elements(INDEX_KEYS));
    // Every first revision dropped, nothing kept below the last compaction.
    group.bench_function("1m_keys", |b| {
        b.iter_custom(|iterations| (0..iterations).map(|_| index_compaction(1, |_| 1)).sum())
    });
    // As a store compacted every few minutes: one key in ten written since
    // the last compaction, the other nine tenths kept below it.
    group.bench_function("1m_keys_kept", |b| {
        b.iter_custom(|iterations| (0..iterations).map(|_| index_compaction(10, |first| first)).sum())
    });
    group.finish();
}

criterion_group!(
    benches,
    apply_puts,
    apply_puts_history,
    apply_puts_hot_key,
    ranges,
    compact,
    compact_index
);
criterion_main!(benches);
