//! The errors of the WAL. Expected conditions (damage found on open, a
//! poisoned log, a locked directory) are variants; broken invariants of the
//! caller (non-contiguous entries) panic instead.

use std::io;
use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What exactly is wrong with a frame that failed its checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Corruption {
    /// The record's crc does not match its bytes and the chain before it.
    CrcMismatch { expected: u32, found: u32 },
    /// The length word fails its own check, or has reserved bits set.
    BadLengthWord { word: u64 },
    /// The body length is below the minimum or above the maximum record size.
    BadLength { body_bytes: u64 },
    /// The frame runs past the end of the file.
    Truncated { frame_end: u64, file_bytes: u64 },
    /// A type byte that this version does not know.
    UnknownType { record_type: u8 },
    /// The payload does not decode as its type says.
    BadPayload { record_type: u8 },
    /// A segment does not start with a CRC seed record.
    MissingSeed,
    /// A segment's seed is not the crc its predecessor ended with.
    ChainBroken { expected: u32, found: u32 },
    /// An entry index leaves a gap after the entries before it.
    IndexGap { expected_at_most: u64, found: u64 },
    /// The metadata record differs from the first segment's.
    MetadataMismatch,
    /// Non-zero bytes after the end of the data (a zero length word), where
    /// only the preallocated zeros belong.
    BytesAfterEnd { first_nonzero: u64 },
    /// A frame's padding (the zeros that align the next frame) is not all
    /// zeros. The crc covers the body only, so a flipped bit here is
    /// caught by this check alone; a torn write cannot leave it (its
    /// sectors hold the old zeros or the new frame).
    NonZeroPadding { at: u64 },
}

impl std::fmt::Display for Corruption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Corruption::CrcMismatch { expected, found } => {
                write!(f, "CRC mismatch (expected {expected:#010x}, found {found:#010x})")
            }
            Corruption::BadLengthWord { word } => write!(f, "bad length word {word:#018x}"),
            Corruption::BadLength { body_bytes } => write!(f, "bad record length {body_bytes}"),
            Corruption::Truncated { frame_end, file_bytes } => {
                write!(f, "record ends at {frame_end}, past the file's {file_bytes} bytes")
            }
            Corruption::UnknownType { record_type } => write!(f, "unknown record type {record_type}"),
            Corruption::BadPayload { record_type } => {
                write!(f, "payload of record type {record_type} does not decode")
            }
            Corruption::MissingSeed => write!(f, "segment does not start with a CRC seed"),
            Corruption::ChainBroken { expected, found } => write!(
                f,
                "CRC chain broken: segment seed {found:#010x}, previous segment ended with {expected:#010x}"
            ),
            Corruption::IndexGap {
                expected_at_most,
                found,
            } => write!(
                f,
                "entry index {found} leaves a gap (expected at most {expected_at_most})"
            ),
            Corruption::MetadataMismatch => write!(f, "metadata differs from the first segment's"),
            Corruption::NonZeroPadding { at } => write!(f, "non-zero padding byte at {at}"),
            Corruption::BytesAfterEnd { first_nonzero } => {
                write!(f, "non-zero byte at {first_nonzero} after the end of the data")
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("wal: {op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("wal: corrupt segment {path} at offset {offset}: {corruption}")]
    Corrupt {
        path: PathBuf,
        offset: u64,
        corruption: Corruption,
    },
    #[error("wal: segment with sequence {expected_seq:016x} is missing after {after}")]
    MissingSegment { after: PathBuf, expected_seq: u64 },
    #[error("wal: no segment in {dir} reaches back to index {index}; they were released")]
    HistoryReleased { dir: PathBuf, index: u64 },
    #[error("wal: no snapshot record with index {index} and term {term}")]
    SnapshotNotFound { index: u64, term: u64 },
    #[error("wal: no segments in {0}")]
    NoSegments(PathBuf),
    #[error("wal: {0} already holds a log")]
    AlreadyExists(PathBuf),
    #[error("wal: {0} is locked by another process")]
    Locked(PathBuf),
    #[error("wal: record of {bytes} bytes exceeds the maximum of {max} bytes")]
    RecordTooLarge { bytes: usize, max: usize },
    #[error("wal: poisoned by an earlier failed write or sync; the member must stop")]
    Poisoned,
}

impl Error {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Error {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }
}
