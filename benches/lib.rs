//! Criterion microbenchmarks, run by `cargo bench` at the workspace root.
//!
//! - `benches/wal.rs`: WAL group commit (append + fdatasync) for batches of
//!   1, 16, 128 and 1024 records, and replay of a full 64 MiB segment.
//! - `benches/mvcc.rs`: applying batches of 1, 100 and 1000 puts, a point
//!   range, a prefix range over 1,000 keys, and compacting 100k revisions.
//! - `benches/index_memory.rs`: not a timing: the heap bytes the in-memory
//!   key index costs per key and per version at 1M keys, counted by a
//!   counting allocator.
