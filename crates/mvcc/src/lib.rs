//! A multi-version key-value store on sled with etcd's revision semantics.
//!
//! # Module map
//! - [`kv`]: the contract as traits: a read view and a write txn.
//! - [`request`]: requests and responses, shaped like etcd's messages.
//! - [`revision`]: `{main, sub}` revisions and their byte layout.
//! - [`revision_set`]: a compaction's millions of revisions to remove,
//!   found in no order, in a compressed bitmap.
//! - [`key_value`]: key-values, change events, and the stored value layout.
//! - [`key_index`]: one key's history of revisions (generations, tombstones).
//! - [`index`]: every key's history, ordered by key; range visits, compaction.
//! - `index_build`: the index built at once from the stored revisions
//!   when a store opens.
//! - [`range`]: limit, filters, sort, count and `more`, in etcd's order.
//! - [`compaction`]: a compaction's hash and removals, queued and done
//!   in steps after its apply.
//! - [`count_cache`]: counts of recent limited ranges, for paginated lists.
//! - [`live_count`]: counts of large ranges at the newest revision, kept
//!   exact by every write, for Kubernetes' repeated counts.
//! - [`lease`]: leases' TTLs and the keys attached to each.
//! - [`txn`]: compares and branch execution, against the traits only.
//! - [`validate`]: etcd's request checks, including the duplicate-key rule.
//! - [`wire`]: a range answer's size in etcd's encoding, and its bound.
//! - [`hash`]: HashKV's hash, byte for byte as etcd computes it.
//! - `block`: stored revisions, many to a sled value: the layout.
//! - `records`: finding, visiting, writing and dropping stored revisions.
//! - `value_files`: the blocks' bytes, in files beside sled, which
//!   holds pointers to them; their durability and reclaiming.
//! - `directory`: sled's block pointers copied into memory, so that a
//!   read of many revisions finds their blocks without walking sled.
//! - [`store`]: the sled implementation, split along etcd's lines: the
//!   backend (the open batch and its commit), the schema (records the
//!   server owns), recovery, apply and reads, compaction, snapshots and
//!   the defragmentation's switch.
//! - [`import`]: a snapshot dump written from another store's history
//!   (how etcd's own backups are restored).
//! - [`defrag`]: rewriting the store compactly while it serves, its
//!   generations on disk, and recovering from a crash in a rewrite.
//! - [`writes`]: one commit's writes, readable back for a rewrite.
//! - [`pacing`]: background work (defrag, compaction) held to a share of
//!   a core.
//! - [`error`]: errors with etcd's gRPC codes and messages.
//!
//! # Revisions
//! Revision 1 is the empty store. Every write request that changes
//! anything (a put, a delete that finds keys, a txn whose branch writes)
//! creates exactly one new main revision, whatever the number of keys; its
//! changes are numbered by sub-revision. A request that changes nothing
//! creates none. Compaction creates none either.
//!
//! # sled layout
//! One sled tree (the default one), split into spaces by a one-byte prefix,
//! so that one `sled::Batch` updates all of them atomically:
//!
//! ```text
//! 'b' + first revision (main u64 BE, sub u64 BE)
//!       -> a pointer to a block of stored revisions in a value file
//!          (value_files.rs), or, in a store written before those, the
//!          block itself (block.rs)
//! 'm' + "format"            -> the layout's version, u32 BE (records.rs)
//! 'm' + "consistent_index"  -> raft index of the last applied batch, i64 BE
//! 'm' + "current_revision"  -> the newest revision, i64 BE
//! 'm' + "compact_revision"  -> revisions below this are gone, i64 BE
//! 'm' + "stored_bytes"      -> bytes of every key and value held, the
//!                              blocks pointers name included, i64 BE
//! 'l' + lease id, i64 BE    -> granted TTL in seconds, i64 BE
//! ```
//!
//! Scanning `'b'` visits revisions in order, which is how the in-memory
//! index is rebuilt on open and how HashKV walks history. The revisions
//! stored are exactly those in the index's histories: compaction rewrites
//! the blocks it touches without what it drops from the index. Each apply
//! batch's revisions go into blocks of up to 4 KiB, because sled costs
//! about the same per key inserted whatever the value's size (see
//! block.rs). The blocks' bytes are in value files beside sled, so that
//! sled's cache holds pointers, not the store (value_files.rs).
//!
//! # Durability
//! The WAL, not this store, is the durable record. [`Store::apply`] applies
//! each raft batch into an open batch held in memory and read through by
//! every read; sled gets it as one atomic sled batch, which also records
//! the raft index it reaches, once it holds [`OPEN_BATCH_REVISIONS_MAX`]
//! revisions or [`OPEN_BATCH_BYTES_MAX`] bytes, or is
//! [`OPEN_BATCH_AGE_MAX`] old (etcd's backend batches its commits the
//! same way). The batch's blocks are appended to a value file and synced
//! first, so sled never holds a pointer to bytes not on disk; sled itself
//! is not flushed then. sled flushes in the background
//! (every 500 ms by default); after a crash it recovers a prefix of the
//! batches it was given, and the server replays the WAL after
//! [`Store::consistent_index`]. [`Store::flush`] makes everything durable,
//! the open batch included, and must run before the server releases WAL
//! segments.

pub(crate) mod block;
pub mod compaction;
pub mod count_cache;
pub mod defrag;
pub(crate) mod directory;
pub mod error;
pub mod hash;
pub mod import;
pub mod index;
pub(crate) mod index_build;
pub mod key_index;
pub mod key_value;
pub mod kv;
pub mod lease;
pub mod live_count;
pub mod observer;
pub mod pacing;
pub mod power;
pub mod range;
pub(crate) mod records;
pub mod request;
pub mod revision;
pub mod revision_set;
pub mod store;
pub mod txn;
pub mod validate;
pub(crate) mod value_files;
pub mod wire;
pub mod writes;

pub use error::{Code, Error, Result};
pub use hash::KeyValueHash;
pub use key_value::{Event, EventKind, KeyValue};
pub use kv::{ReadView, WriteTxn};
pub use lease::{Lease, LeaseTtl, MAX_LEASE_TTL, NO_LEASE};
pub use observer::Observer;
pub use power::Power;
pub use request::*;
pub use revision::Revision;
pub use store::{
    SledCopy, Store, ALARM_NOSPACE, EMPTY_STORE_REVISION, NEVER_COMPACTED, OPEN_BATCH_AGE_MAX, OPEN_BATCH_BYTES_MAX,
    OPEN_BATCH_REVISIONS_MAX,
};
pub use wire::AnswerBytesMax;
