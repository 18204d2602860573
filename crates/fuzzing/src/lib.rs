//! Fuzz targets, structure-aware, on stable Rust: each takes arbitrary
//! bytes, builds structured input from them with `arbitrary`, and asserts
//! what must hold. `tests/bounded.rs` runs each on seeded random inputs
//! (and every saved regression input) in the test command; `fuzz/` (a
//! cargo-fuzz project outside the workspace) runs them coverage-guided
//! for the long runs in `docs/robustness.md`.
//!
//! # Module map
//! - [`wal_frames`]: the WAL's segment decoder on raw bytes, and on valid
//!   segments then damaged.
//! - [`requests`]: every etcd KV request's conversion and validation,
//!   against etcd's checks written out on their own.
//! - [`mvcc_ops`]: the MVCC store against its reference model.

pub mod mvcc_ops;
pub mod requests;
pub mod wal_frames;

/// A target: runs on one input, panicking if what must hold does not.
pub type Target = fn(&[u8]);

/// The targets by name, as the driver and the fuzz project know them.
pub const TARGETS: &[(&str, Target)] = &[
    ("wal_frames", wal_frames::run),
    ("requests", requests::run),
    ("mvcc_ops", mvcc_ops::run),
];
