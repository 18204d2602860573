//! Fuzz target: the WAL's segment decoder.
//!
//! Two shapes of input, chosen by the first byte:
//! - raw: the bytes are a segment file as found on disk, whatever they
//!   hold. Decoding must not panic, whatever it answers.
//! - structured: the rest builds a valid segment (the CRC seed, metadata
//!   and hard state header, then entries, hard states and snapshots)
//!   followed by zeros, as a preallocated segment is, then damages it
//!   (bit flips, zeroed runs, a cut). An undamaged segment must decode to
//!   exactly its records; a damaged one must decode to a prefix of them
//!   or be refused.

use std::path::Path;

use arbitrary::{Arbitrary, Unstructured};
use wal::decoder::decode_segment;
use wal::frame::Encoder;
use wal::{ConfState, Entry, HardState, Record, SnapshotMeta};

/// Largest entry data generated: frames of a few hundred bytes cover
/// every branch of the decoder; large ones only slow the search.
const ENTRY_DATA_BYTES_MAX: usize = 512;
/// Records per generated segment, at most.
const RECORDS_MAX: usize = 64;
/// Damages per input, at most.
const DAMAGES_MAX: usize = 4;

#[derive(Debug, Arbitrary)]
enum Body {
    Entry {
        index: u64,
        term: u64,
        data_bytes: u16,
        fill: u8,
    },
    HardState {
        term: u64,
        vote: u64,
        commit: u64,
    },
    Snapshot {
        index: u64,
        term: u64,
        voters: Vec<u64>,
        auto_leave: bool,
    },
}

#[derive(Debug, Arbitrary)]
enum Damage {
    FlipBit { at: u32, bit: u8 },
    Zero { at: u32, bytes: u16 },
    Cut { at: u32 },
}

fn record(body: Body) -> Record {
    match body {
        Body::Entry {
            index,
            term,
            data_bytes,
            fill,
        } => Record::Entry(Entry {
            index,
            term,
            data: vec![fill; data_bytes as usize % (ENTRY_DATA_BYTES_MAX + 1)],
        }),
        Body::HardState { term, vote, commit } => Record::HardState(HardState { term, vote, commit }),
        Body::Snapshot {
            index,
            term,
            voters,
            auto_leave,
        } => Record::Snapshot(SnapshotMeta {
            index,
            term,
            conf_state: ConfState {
                voters: voters.into_iter().take(8).collect(),
                auto_leave,
                ..ConfState::default()
            },
        }),
    }
}

fn damage(bytes: &mut Vec<u8>, damage: Damage) {
    if bytes.is_empty() {
        return;
    }
    match damage {
        Damage::FlipBit { at, bit } => {
            let at = at as usize % bytes.len();
            bytes[at] ^= 1 << (bit % 8);
        }
        Damage::Zero { at, bytes: count } => {
            let at = at as usize % bytes.len();
            let end = (at + count as usize).min(bytes.len());
            bytes[at..end].fill(0);
        }
        Damage::Cut { at } => {
            let at = at as usize % bytes.len();
            bytes.truncate(at);
        }
    }
}

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    let mut input = Unstructured::new(data);
    let Ok(structured) = input.arbitrary::<bool>() else {
        return;
    };
    let path = Path::new("fuzz.wal");
    if !structured {
        let bytes = input.take_rest();
        let _ = decode_segment(bytes, path, true, None, |_, _| Ok(()));
        let _ = decode_segment(bytes, path, false, None, |_, _| Ok(()));
        return;
    }
    let Ok(seed) = input.arbitrary::<u32>() else { return };
    let Ok(metadata) = input.arbitrary::<Vec<u8>>() else {
        return;
    };
    let mut records = vec![
        Record::CrcSeed(seed),
        Record::Metadata(metadata),
        Record::HardState(HardState::default()),
    ];
    let Ok(bodies) = input.arbitrary_iter::<Body>() else {
        return;
    };
    records.extend(bodies.take(RECORDS_MAX).map_while(Result::ok).map(record));
    let mut encoder = Encoder::new(seed);
    let mut bytes = Vec::new();
    for record in &records {
        encoder.encode(record, &mut bytes);
    }
    let end = bytes.len();
    let zeros: u16 = input.arbitrary().unwrap_or(0);
    bytes.resize(end + zeros as usize % 4096, 0);
    let is_last: bool = input.arbitrary().unwrap_or(true);
    let damages: Vec<Damage> = input
        .arbitrary_iter::<Damage>()
        .map(|iter| iter.take(DAMAGES_MAX).map_while(Result::ok).collect())
        .unwrap_or_default();
    let damaged = !damages.is_empty();
    for one in damages {
        damage(&mut bytes, one);
    }
    let mut decoded = Vec::new();
    let result = decode_segment(&bytes, path, is_last, None, |_, record| {
        decoded.push(record);
        Ok(())
    });
    assert!(decoded.len() <= records.len(), "more records than were written");
    assert_eq!(
        decoded[..],
        records[..decoded.len()],
        "decoded records are a prefix of those written"
    );
    if !damaged {
        let segment_end = result.expect("an undamaged segment decodes");
        assert_eq!(decoded.len(), records.len(), "every record of an undamaged segment");
        assert_eq!(segment_end.offset as usize, end);
        assert!(segment_end.torn.is_none());
    }
}
