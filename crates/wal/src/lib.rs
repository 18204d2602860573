//! A crash-safe, segmented write-ahead log for raft.
//!
//! Every raft entry and hard state goes through this log before a member
//! acts on it, so it is the first link in the durability chain. The format is
//! specified here, before any code; the code that owns each part says so.
//!
//! # Module map
//! - [`record`]: the record types (entry, hard state, snapshot, CRC seed,
//!   metadata) and their payload encodings.
//! - [`frame`]: how one record is framed on disk: length word, chained CRC,
//!   type, payload, padding. Encoding and the checks made when reading.
//! - [`decoder`]: walks one segment's bytes frame by frame and tells a clean
//!   end from a torn tail from corruption.
//! - [`segment`]: segment file names, creation (header, fsync, rename,
//!   fsync of the directory) and listing.
//! - [`spare`]: the next segment's file, zero-filled ahead of need on a
//!   background thread, so syncs never pay for ext4's unwritten extents.
//! - [`repair`]: truncates a torn tail, keeping a `.broken` copy.
//! - [`removal`]: removes a released file in synced steps, so that
//!   freeing its extents does not stall the disk's other writers.
//! - [`replay`]: chooses the segments to read for a snapshot position and
//!   rebuilds the entries and last hard state.
//! - [`wal`]: the [`Wal`] handle: create, open, group-committed `save`,
//!   snapshots, segment cuts, purge, poisoning, sync latency.
//! - [`direct`]: the tail written around the page cache (`O_DIRECT`), in
//!   aligned blocks.
//! - [`sync`]: `fdatasync`, directory fsync and preallocation, with failpoints.
//! - [`disk`]: those calls behind a seam ([`Disk`]), so a test or a
//!   simulator can fail or delay them for one log.
//! - [`error`]: the crate's error enum.
//!
//! # Assumptions about the medium
//! - `fdatasync` returning success means every byte written to the file
//!   before it is durable, and so is the file size.
//! - A write that was not followed by a successful `fdatasync` may be lost
//!   in part, at sector (512-byte) granularity: some sectors of it may hold
//!   the new bytes and others still hold what was there before, which in a
//!   preallocated segment is zeros. This is a "torn" write.
//! - Sectors made durable by an `fdatasync` are not changed afterwards except
//!   by our own writes. A bit flip or zeroed sector there is corruption and
//!   is reported, never silently repaired, except in the one case the
//!   decoder cannot tell from a torn write (see [`decoder`]).
//! - An aligned 8-byte word is never torn: it lies inside one sector.
//! - A failed `fsync` leaves the file in an unknown state, and retrying it
//!   can report success falsely. So a failed sync poisons the log for good.
//!
//! # On-disk format
//! A log is a directory of segment files plus a `LOCK` file.
//!
//! ## Segment names
//! `{seq:016x}-{first_index:016x}.wal`, both in lower-case hexadecimal.
//! `seq` starts at 0 and grows by one per segment, with no gaps, so sorting
//! names sorts segments. `first_index` is the raft index the log expected
//! next when the segment was started (last index + 1; 0 for the first
//! segment). Entries inside may have lower indexes when raft rewrites a
//! conflicting suffix, but an entry above a snapshot index `S` is never
//! in a segment before the last one whose `first_index <= S`; replay and
//! purge rely on that (see [`replay`]).
//!
//! A new segment starts as `spare.tmp`, preallocated and written full of
//! zeros (see [`spare`]), is given its header and synced, then renamed into
//! place, then the directory is fsynced. So a segment that exists under its
//! final name always has a durable header. A released segment leaves
//! the other way: renamed to `<name>.wal.tmp`, the directory fsynced,
//! then freed on a thread in steps (see [`removal`]). Leftover `.tmp`
//! files are removed at open.
//!
//! Segments are preallocated to the segment size (64 MiB by default,
//! settable for tests), rounded up to 4 KiB. Bytes past the last record
//! are zero. A segment is
//! cut after a save leaves it at or past that size, so a segment exceeds it
//! by at most one batch.
//!
//! ## Frames
//! Every record is one frame, and every frame starts 8-byte aligned:
//!
//! ```text
//! offset  size  field
//! 0       8     length word, u64 little-endian:
//!                 bits  0..32  body length in bytes (crc + type + payload)
//!                 bits 32..35  padding length, 0..=7
//!                 bits 35..40  zero
//!                 bits 40..64  check: low 24 bits of CRC32-C over bytes 0..5
//! 8       4     crc, u32 little-endian (see below)
//! 12      1     record type
//! 13      n     payload
//! 13+n    p     p zero bytes of padding, so the frame length is 8-aligned
//! ```
//!
//! The length word of zero means "no record here": the end of the data.
//! The check bits make a damaged length word detectable on its own, so a
//! bit flip there is reported as corruption instead of being mistaken for
//! a torn tail.
//!
//! The crc is CRC32-Castagnoli, chained: the crc of a record is
//! `crc32c_append(previous_crc, type || payload)`, where `previous_crc` is
//! the crc of the record before it in the log, across segment boundaries.
//!
//! ## Segment header
//! Every segment begins with, in order:
//! 1. a CRC seed record, whose payload is the crc of the last record of the
//!    previous segment (0 in the first segment); its own crc is chained from
//!    that seed, so a segment can be checked alone, and replay also checks
//!    that the seed equals the crc the previous segment ended with;
//! 2. a metadata record: opaque bytes given at creation (the server stores
//!    its cluster and member ids there), the same in every segment;
//! 3. a hard state record with the hard state current at the cut, so that
//!    replay from any segment knows the latest hard state.
//!
//! Payload layouts are in [`record`].

pub mod decoder;
pub mod direct;
pub mod disk;
pub mod error;
pub mod frame;
pub mod record;
pub mod removal;
pub mod repair;
pub mod replay;
pub mod segment;
pub mod spare;
pub mod sync;
pub mod wal;

pub use disk::{Disk, RealDisk};
pub use error::{Corruption, Error, Result};
pub use record::{ConfState, Entry, HardState, Record, SnapshotMeta};
pub use replay::{RepairReport, Replay, SnapshotPosition};
pub use wal::{Options, Wal, SEGMENT_SIZE_BYTES_DEFAULT};
