//! Criterion microbenchmarks, run by `cargo bench` at the workspace root.
//!
//! - `benches/wal.rs`: WAL group commit (append + fdatasync) for batches of
//!   1, 16, 128 and 1024 records, and replay of a full 64 MiB segment.
