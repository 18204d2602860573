//! Walks the frames of one segment and decides how its data ends.
//!
//! A segment's data ends in one of three ways:
//! - **clean**: a zero length word followed only by zeros (the
//!   preallocated space), or the end of the file at a frame boundary;
//! - **torn**: only in the last segment, and only after its header. The
//!   frame runs past the end of the file, or it fails its checks and one of
//!   the 512-byte sectors it covers is all zeros, which is what a write
//!   interrupted before its `fdatasync` leaves in a preallocated file. Or
//!   the data ends at a zero length word but non-zero bytes follow: later
//!   sectors of an interrupted write that landed when an earlier one did
//!   not. Replay truncates there (see [`crate::repair`]);
//! - **corrupt**: anything else, such as a bad crc with no zeroed sector, a
//!   damaged length word, or any damage outside the last segment. Opening
//!   refuses, naming the file and offset.
//!
//! The one ambiguity: damage in the last record of the last segment, when
//! that record also holds a whole zero sector of its own (a payload with 512
//! aligned zero bytes), is taken for a torn write. etcd's WAL makes the same
//! call. The length word carries its own check, so a flipped length is never
//! mistaken this way.

use std::path::Path;

use crate::error::{Corruption, Error, Result};
use crate::frame::{self, LENGTH_WORD_BYTES};
use crate::record::Record;

/// Sector size assumed for torn-write detection, in bytes: the smallest
/// unit disks write atomically, and the granularity at which an
/// interrupted write leaves old (zero) bytes behind.
pub const SECTOR_BYTES: usize = 512;

/// Records that open every segment: CRC seed, metadata, hard state.
pub const HEADER_RECORDS: usize = 3;

/// How a segment's data ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentEnd {
    /// Offset just past the last valid frame.
    pub offset: u64,
    /// The crc of the last valid record.
    pub crc: u32,
    /// The segment's CRC seed (what its predecessor should have ended with).
    pub seed: u32,
    /// The damage found at `offset` when the tail was torn.
    pub torn: Option<Corruption>,
}

/// Decodes every valid frame of `bytes`, calling `visit(offset, record)` in
/// order, and reports how the data ends. `is_last` says whether this is the
/// last segment of the log, the only one whose tail may be torn.
/// `expected_seed` is the crc the previous segment ended with, when it was
/// read; the segment's seed must equal it, checked before anything else.
pub fn decode_segment(
    bytes: &[u8],
    path: &Path,
    is_last: bool,
    expected_seed: Option<u32>,
    mut visit: impl FnMut(u64, Record) -> Result<()>,
) -> Result<SegmentEnd> {
    let corrupt = |offset: usize, corruption: Corruption| Error::Corrupt {
        path: path.to_path_buf(),
        offset: offset as u64,
        corruption,
    };
    let file_bytes = bytes.len();
    let mut offset = 0;
    let mut crc = 0;
    let mut seed = None;
    let mut records = 0;
    let damage = loop {
        let (body, frame_bytes) = match next_frame(bytes, offset) {
            Frame::End => break bytes_after_end(bytes, offset),
            Frame::Damaged(damage) => break Some(damage),
            Frame::Body { body, frame_bytes } => (body, frame_bytes),
        };
        let (record, next_crc) = match frame::check_body(body, crc) {
            Ok(checked) => checked,
            Err(damage) => break Some(damage),
        };
        match (records, &record) {
            (0, Record::CrcSeed(value)) => {
                if let Some(expected) = expected_seed.filter(|expected| expected != value) {
                    let broken = Corruption::ChainBroken {
                        expected,
                        found: *value,
                    };
                    return Err(corrupt(offset, broken));
                }
                seed = Some(*value)
            }
            (0, _) => return Err(corrupt(offset, Corruption::MissingSeed)),
            _ => {}
        }
        visit(offset as u64, record)?;
        crc = next_crc;
        records += 1;
        offset += frame_bytes;
    };
    if let Some(damage) = &damage {
        let tail_may_tear = is_last && records >= HEADER_RECORDS;
        if !(tail_may_tear && is_torn(bytes, offset, damage)) {
            return Err(corrupt(offset, damage.clone()));
        }
    } else if records < HEADER_RECORDS {
        let corruption = if records == 0 {
            Corruption::MissingSeed
        } else {
            Corruption::Truncated {
                frame_end: offset as u64,
                file_bytes: file_bytes as u64,
            }
        };
        return Err(corrupt(offset, corruption));
    }
    Ok(SegmentEnd {
        offset: offset as u64,
        crc,
        seed: seed.expect("header was read"),
        torn: damage,
    })
}

/// Past the end of the data only zeros belong. A torn write can leave later
/// sectors of a batch written after an earlier one that was not, so stray
/// bytes here are damage (a torn tail in the last segment).
fn bytes_after_end(bytes: &[u8], offset: usize) -> Option<Corruption> {
    first_nonzero(&bytes[offset..]).map(|stray| Corruption::BytesAfterEnd {
        first_nonzero: (offset + stray) as u64,
    })
}

/// Bytes [`first_nonzero`] ORs together before it looks for the stray
/// one: a page, so the OR runs as wide vector instructions over a
/// preallocated segment's zero tail (tens of MB read at every start),
/// where a search byte by byte stops to branch at each.
const ZERO_SCAN_BLOCK_BYTES: usize = 4096;

/// The offset of the first byte of `bytes` that is not zero.
fn first_nonzero(bytes: &[u8]) -> Option<usize> {
    let mut start = 0;
    for block in bytes.chunks(ZERO_SCAN_BLOCK_BYTES) {
        if block.iter().fold(0u8, |any, &b| any | b) != 0 {
            return block.iter().position(|&b| b != 0).map(|at| start + at);
        }
        start += block.len();
    }
    None
}

enum Frame<'a> {
    End,
    Damaged(Corruption),
    Body { body: &'a [u8], frame_bytes: usize },
}

fn next_frame(bytes: &[u8], offset: usize) -> Frame<'_> {
    let file_bytes = bytes.len();
    if offset == file_bytes {
        return Frame::End;
    }
    let Some(word) = bytes[offset..].first_chunk::<LENGTH_WORD_BYTES>() else {
        // Fewer than 8 bytes left: zeros are the end of the data (a file
        // cut short and repaired can end off the 8-byte grid); anything
        // else is a length word cut short.
        if bytes[offset..].iter().all(|&b| b == 0) {
            return Frame::End;
        }
        return Frame::Damaged(Corruption::Truncated {
            frame_end: (offset + LENGTH_WORD_BYTES) as u64,
            file_bytes: file_bytes as u64,
        });
    };
    let word = u64::from_le_bytes(*word);
    if word == 0 {
        return Frame::End;
    }
    let (body_bytes, padding_bytes) = match frame::parse_length_word(word) {
        Ok(lengths) => lengths,
        Err(damage) => return Frame::Damaged(damage),
    };
    let body_start = offset + LENGTH_WORD_BYTES;
    let frame_end = body_start + body_bytes + padding_bytes;
    if frame_end > file_bytes {
        return Frame::Damaged(Corruption::Truncated {
            frame_end: frame_end as u64,
            file_bytes: file_bytes as u64,
        });
    }
    let padding = &bytes[body_start + body_bytes..frame_end];
    if let Some(stray) = padding.iter().position(|&b| b != 0) {
        let at = (body_start + body_bytes + stray) as u64;
        return Frame::Damaged(Corruption::NonZeroPadding { at });
    }
    Frame::Body {
        body: &bytes[body_start..body_start + body_bytes],
        frame_bytes: frame_end - offset,
    }
}

/// Whether damage at `offset` looks like a write interrupted before sync.
fn is_torn(bytes: &[u8], offset: usize, damage: &Corruption) -> bool {
    match damage {
        Corruption::Truncated { .. } | Corruption::BytesAfterEnd { .. } => true,
        Corruption::CrcMismatch { .. } | Corruption::UnknownType { .. } | Corruption::BadPayload { .. } => {
            let word = u64::from_le_bytes(bytes[offset..offset + LENGTH_WORD_BYTES].try_into().expect("8 bytes"));
            let (body_bytes, padding_bytes) = frame::parse_length_word(word).expect("length word was valid");
            let frame_end = offset + LENGTH_WORD_BYTES + body_bytes + padding_bytes;
            has_zero_sector(bytes, offset, frame_end)
        }
        _ => false,
    }
}

/// Whether a sector-aligned piece of the frame `bytes[start..end]` is
/// all zeros as a sector lost to a torn write leaves it. A lost sector
/// holds its old contents: zeros past the data, and before the frame the
/// frames already there; past the frame's end it holds zeros too, since
/// whatever the torn write put there was lost with it. So a zero piece at
/// the frame's end counts only if the rest of its sector is zero as well:
/// a later frame there means that sector landed, and the damage is not a
/// torn write (a flipped bit in a frame that merely ends in zeros).
fn has_zero_sector(bytes: &[u8], start: usize, end: usize) -> bool {
    let mut piece_start = start;
    while piece_start < end {
        let sector_end = (piece_start / SECTOR_BYTES + 1) * SECTOR_BYTES;
        let piece_end = sector_end.min(end);
        let rest = &bytes[piece_end..sector_end.min(bytes.len())];
        if bytes[piece_start..piece_end].iter().all(|&b| b == 0) && rest.iter().all(|&b| b == 0) {
            return true;
        }
        piece_start = piece_end;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: the block-wise zero scan finds the first stray byte wherever
    // it lies: in the first block, on either side of a block edge, in
    // the last short block, or nowhere.
    #[test]
    fn first_nonzero_finds_the_first_stray_byte() {
        let len = 3 * ZERO_SCAN_BLOCK_BYTES + 100;
        assert_eq!(first_nonzero(&vec![0u8; len]), None);
        assert_eq!(first_nonzero(&[]), None);
        for stray in [
            0,
            1,
            ZERO_SCAN_BLOCK_BYTES - 1,
            ZERO_SCAN_BLOCK_BYTES,
            2 * ZERO_SCAN_BLOCK_BYTES + 7,
            len - 1,
        ] {
            let mut bytes = vec![0u8; len];
            bytes[stray] = 0x80;
            if stray + 1 < len {
                bytes[len - 1] = 1;
            }
            assert_eq!(first_nonzero(&bytes), Some(stray), "stray byte at {stray}");
        }
    }

    // Goal: zero-sector detection looks at sector-aligned pieces of the
    // frame, and a zero piece at the frame's end counts only when the rest
    // of its sector is zero too. Method: a frame spanning sectors with one
    // zeroed piece, then a later frame in that sector.
    #[test]
    fn zero_sector_pieces_are_found_by_absolute_alignment() {
        let mut bytes = vec![1u8; 2048];
        assert!(!has_zero_sector(&bytes, 100, 2048));
        bytes[1024..1536].fill(0);
        bytes[1100] = 1;
        assert!(!has_zero_sector(&bytes, 600, 1101), "piece 1024..1101 has a 1");
        bytes[1100] = 0;
        assert!(has_zero_sector(&bytes, 600, 1100), "sector 1024..1536 is all zeros");
        bytes[1530] = 7;
        assert!(
            !has_zero_sector(&bytes, 600, 1100),
            "piece 1024..1100 is zeros, but a later frame's byte in its sector landed"
        );
        bytes[1600..2048].fill(0);
        assert!(has_zero_sector(&bytes, 1600, 2048));
    }
}
