//! Everything a member keeps on disk apart from the store's own files:
//! where each file lives, raft's durable log, the snapshot marker,
//! received snapshots waiting to be installed, and members' published
//! client URLs.
//!
//! - [`layout`]: every path inside the data directory.
//! - [`durable_log`]: the WAL, replayed into raft's in-memory log.
//! - [`marker`]: which snapshot the store holds on disk.
//! - [`pending`]: snapshots received and not yet installed.
//! - [`attributes`]: members' client URLs, as published through raft.
//! - [`backup`]: the snapshot file clients save, and reading it back.

pub mod attributes;
pub mod backup;
pub mod durable_log;
pub mod layout;
pub mod marker;
pub mod pending;
