//! One record on disk: the frame layout (see the crate docs), its encoder,
//! and the checks a frame must pass when read back.

use crate::error::Corruption;
use crate::record::Record;

/// Bytes in the length word that starts every frame.
pub const LENGTH_WORD_BYTES: usize = 8;
/// Bytes of crc plus type before the payload.
pub const BODY_HEADER_BYTES: usize = 5;
/// Frames start at multiples of this, so a length word never spans sectors.
pub const ALIGNMENT_BYTES: usize = 8;

/// The largest record body accepted, in bytes. A record is one raft entry;
/// etcd refuses requests over `--max-request-bytes` (1.5 MiB by default,
/// and its docs advise against going past 10 MiB), so 64 MiB leaves room
/// for any configuration while keeping a damaged length word from making
/// the decoder reach gigabytes ahead.
pub const RECORD_BODY_BYTES_MAX: usize = 64 << 20;

const BODY_LENGTH_MASK: u64 = (1 << 32) - 1;
const PADDING_SHIFT: u32 = 32;
const RESERVED_MASK: u64 = 0b11111 << 35;
const CHECK_SHIFT: u32 = 40;
const CHECK_MASK: u32 = (1 << 24) - 1;

/// Packs body and padding lengths into a length word with its check bits.
pub fn length_word(body_bytes: usize, padding_bytes: usize) -> u64 {
    debug_assert!(body_bytes <= RECORD_BODY_BYTES_MAX && padding_bytes < ALIGNMENT_BYTES);
    let low = body_bytes as u64 | (padding_bytes as u64) << PADDING_SHIFT;
    low | (u64::from(length_check(low)) << CHECK_SHIFT)
}

fn length_check(low_bits: u64) -> u32 {
    crc32c::crc32c(&low_bits.to_le_bytes()[..5]) & CHECK_MASK
}

/// The body and padding lengths in a length word, or why the word is bad.
/// The caller has already treated a zero word as the end of data.
pub fn parse_length_word(word: u64) -> Result<(usize, usize), Corruption> {
    let low = word & !(u64::from(CHECK_MASK) << CHECK_SHIFT);
    if word & RESERVED_MASK != 0 || (word >> CHECK_SHIFT) as u32 != length_check(low) {
        return Err(Corruption::BadLengthWord { word });
    }
    let body_bytes = word & BODY_LENGTH_MASK;
    let padding_bytes = ((word >> PADDING_SHIFT) & 0b111) as usize;
    if body_bytes < BODY_HEADER_BYTES as u64 || body_bytes > RECORD_BODY_BYTES_MAX as u64 {
        return Err(Corruption::BadLength { body_bytes });
    }
    let body_bytes = body_bytes as usize;
    if !(LENGTH_WORD_BYTES + body_bytes + padding_bytes).is_multiple_of(ALIGNMENT_BYTES) {
        return Err(Corruption::BadLength {
            body_bytes: body_bytes as u64,
        });
    }
    Ok((body_bytes, padding_bytes))
}

/// Appends framed records to a buffer, carrying the crc chain along.
pub struct Encoder {
    crc: u32,
}

impl Encoder {
    /// An encoder whose first record chains from `crc`.
    pub fn new(crc: u32) -> Encoder {
        Encoder { crc }
    }

    /// The crc of the last record encoded (or the seed, before any).
    pub fn crc(&self) -> u32 {
        self.crc
    }

    /// Frames one record onto `out`. Returns the frame's length in bytes.
    pub fn encode(&mut self, record: &Record, out: &mut Vec<u8>) -> usize {
        self.encode_with(record.record_type(), out, |payload| record.encode_payload(payload))
    }

    /// Frames a record whose payload `write_payload` appends; lets the hot
    /// path encode entries without building a [`Record`] first.
    pub fn encode_with(
        &mut self,
        record_type: u8,
        out: &mut Vec<u8>,
        write_payload: impl FnOnce(&mut Vec<u8>),
    ) -> usize {
        let start = out.len();
        debug_assert_eq!(start % ALIGNMENT_BYTES, 0, "frames start aligned");
        out.extend_from_slice(&[0; LENGTH_WORD_BYTES + 4]);
        out.push(record_type);
        write_payload(out);
        let body_bytes = out.len() - start - LENGTH_WORD_BYTES;
        assert!(
            body_bytes <= RECORD_BODY_BYTES_MAX,
            "record of {body_bytes} bytes; callers check RECORD_BODY_BYTES_MAX first"
        );
        let padding_bytes = (ALIGNMENT_BYTES - (LENGTH_WORD_BYTES + body_bytes) % ALIGNMENT_BYTES) % ALIGNMENT_BYTES;
        let crc_start = start + LENGTH_WORD_BYTES;
        self.crc = crc32c::crc32c_append(self.crc, &out[crc_start + 4..]);
        out[start..crc_start].copy_from_slice(&length_word(body_bytes, padding_bytes).to_le_bytes());
        out[crc_start..crc_start + 4].copy_from_slice(&self.crc.to_le_bytes());
        out.resize(out.len() + padding_bytes, 0);
        out.len() - start
    }
}

/// Checks a frame body (crc, type, payload) against the chain; returns the
/// record and the crc to chain the next record from.
///
/// A CRC seed record chains from its own payload rather than from `crc`,
/// so that a segment can be verified without its predecessor.
pub fn check_body(body: &[u8], crc: u32) -> Result<(Record, u32), Corruption> {
    let found = u32::from_le_bytes(body[..4].try_into().expect("body has a crc"));
    let record_type = body[4];
    let payload = &body[BODY_HEADER_BYTES..];
    let record = Record::decode(record_type, payload);
    let chain_from = match record {
        Some(Record::CrcSeed(seed)) => seed,
        _ => crc,
    };
    let expected = crc32c::crc32c_append(chain_from, &body[4..]);
    if expected != found {
        return Err(Corruption::CrcMismatch { expected, found });
    }
    match record {
        Some(record) => Ok((record, expected)),
        None if record_type == 0 || record_type > crate::record::TYPE_METADATA => {
            Err(Corruption::UnknownType { record_type })
        }
        None => Err(Corruption::BadPayload { record_type }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Entry, HardState};

    // Goal: frames are 8-aligned, length words parse back to what was
    // written, and any single flipped bit in a length word is caught by its
    // check bits rather than read as a different length.
    #[test]
    fn length_words_round_trip_and_catch_every_single_bit_flip() {
        for payload_bytes in 0..40 {
            let mut out = Vec::new();
            let mut encoder = Encoder::new(0);
            let frame_bytes = encoder.encode(
                &Record::Entry(Entry {
                    index: 1,
                    term: 1,
                    data: vec![7; payload_bytes],
                }),
                &mut out,
            );
            assert_eq!(frame_bytes % ALIGNMENT_BYTES, 0);
            assert_eq!(frame_bytes, out.len());
            let word = u64::from_le_bytes(out[..8].try_into().unwrap());
            let (body_bytes, padding_bytes) = parse_length_word(word).unwrap();
            assert_eq!(LENGTH_WORD_BYTES + body_bytes + padding_bytes, frame_bytes);
            for bit in 0..64 {
                assert!(parse_length_word(word ^ (1 << bit)).is_err(), "bit {bit} of {word:#x}");
            }
        }
    }

    // Goal: the crc chains (a record checks only against the crc before it)
    // and a seed record checks on its own.
    #[test]
    fn crc_chains_across_records() {
        let mut out = Vec::new();
        let mut encoder = Encoder::new(0x1234);
        let seed_bytes = encoder.encode(&Record::CrcSeed(0x1234), &mut out);
        let after_seed = encoder.crc();
        encoder.encode(&Record::HardState(HardState::default()), &mut out);
        let body = |frame: &[u8]| {
            let word = u64::from_le_bytes(frame[..8].try_into().unwrap());
            let (body_bytes, _) = parse_length_word(word).unwrap();
            frame[8..8 + body_bytes].to_vec()
        };
        let (_, crc) = check_body(&body(&out), 0).unwrap();
        assert_eq!(crc, after_seed);
        let second = body(&out[seed_bytes..]);
        assert!(check_body(&second, after_seed).is_ok());
        assert!(matches!(
            check_body(&second, after_seed ^ 1),
            Err(Corruption::CrcMismatch { .. })
        ));
    }
}
