//! Everything a member keeps on disk apart from the store's own files:
//! where each file lives, raft's durable log, the snapshot marker,
//! and received snapshots waiting to be installed.
//!
//! - [`layout`]: every path inside the data directory.
//! - [`durable_log`]: the WAL, replayed into raft's in-memory log.
//! - [`marker`]: which snapshot the store holds on disk.
//! - [`pending`]: snapshots received and not yet installed.
//! - [`backup`]: the snapshot file clients save, and reading it back.
//! - [`bbolt`]: reading bbolt files, etcd's database format.
//! - [`etcd_backup`]: etcd's snapshot files, converted to a store dump.

pub mod backup;
pub mod bbolt;
pub mod durable_log;
pub mod etcd_backup;
pub mod layout;
pub mod marker;
pub mod pending;
