//! Goal: every kind of damage either recovers exactly the valid prefix or
//! refuses to open with an error that names the file and offset.
//!
//! Method: write a log one entry per save, recording where each save landed;
//! copy it once per case, damage the copy, open it, and compare against the
//! expectation in the table.

mod common;

use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;

use common::{copy_dir, open_all, Layout};
use wal::{Corruption, Error};

const PAYLOAD_BYTES: usize = 256;

enum Expect {
    /// Opens, recovering exactly the first `n` entries; `repaired` says
    /// whether a torn tail had to be truncated.
    Prefix { entries: usize, repaired: bool },
    /// Refuses, with an error matching the predicate.
    Refuse(Box<dyn Fn(&Error) -> bool>),
}

struct Case {
    name: String,
    damage: Box<dyn Fn(&Path)>,
    expect: Expect,
}

fn check(layout: &Layout, case: &Case) {
    let dir = copy_dir(layout.path());
    // Segment paths are the same names inside the copy.
    (case.damage)(dir.path());
    match (&case.expect, open_all(dir.path())) {
        (Expect::Prefix { entries, repaired }, Ok((mut log, replay))) => {
            assert_eq!(replay.entries, layout.entries[..*entries], "{}", case.name);
            assert_eq!(
                replay.repaired.is_some(),
                *repaired,
                "{}: {:?}",
                case.name,
                replay.repaired
            );
            if let Some(report) = &replay.repaired {
                assert!(report.broken_copy.exists(), "{}: keeps a .broken copy", case.name);
            }
            // The recovered log takes writes and replays them.
            let next = common::entry(*entries as u64 + 1, 2, PAYLOAD_BYTES);
            log.save(std::slice::from_ref(&next), None).unwrap();
            drop(log);
            let (_, again) = open_all(dir.path()).unwrap();
            assert_eq!(again.entries.len(), entries + 1, "{}", case.name);
            assert_eq!(again.entries.last(), Some(&next), "{}", case.name);
            assert!(again.repaired.is_none(), "{}: second open is clean", case.name);
        }
        (Expect::Refuse(matches), Err(error)) => {
            assert!(matches(&error), "{}: unexpected error {error}", case.name);
        }
        (Expect::Prefix { .. }, Err(error)) => panic!("{}: refused to open: {error}", case.name),
        (Expect::Refuse(_), Ok((_, replay))) => {
            panic!(
                "{}: opened with {} entries, expected a refusal",
                case.name,
                replay.entries.len()
            )
        }
    }
}

fn in_copy(dir: &Path, original: &Path) -> std::path::PathBuf {
    dir.join(original.file_name().unwrap())
}

fn truncate(path: &Path, length: u64) {
    OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(length)
        .unwrap();
}

fn zero(path: &Path, start: u64, end: u64) {
    let file = OpenOptions::new().write(true).open(path).unwrap();
    file.write_all_at(&vec![0; (end - start) as usize], start).unwrap();
}

fn flip_bit(path: &Path, offset: u64, bit: u8) {
    let file = OpenOptions::new().read(true).write(true).open(path).unwrap();
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, offset).unwrap();
    byte[0] ^= 1 << bit;
    file.write_all_at(&byte, offset).unwrap();
}

fn is_corrupt_at(error: &Error, offset: u64, what: fn(&Corruption) -> bool) -> bool {
    let message = error.to_string();
    matches!(error, Error::Corrupt { offset: found, corruption, path }
        if *found == offset && what(corruption) && message.contains(&path.display().to_string())
            && message.contains(&format!("at offset {offset}")))
}

// Goal: damage confined to one segment log, last record and middle records.
#[test]
fn single_segment_damage_table() {
    let count = 40;
    let layout = Layout::write(count, PAYLOAD_BYTES, 1 << 20);
    let last = layout.placements.last().unwrap().clone();
    let mut cases = Vec::new();

    // Truncation at every byte offset of the last record: the file ends
    // anywhere from the record's first byte to its last.
    for cut in last.start..last.end {
        let segment = last.segment.clone();
        cases.push(Case {
            name: format!("truncated at byte {} of the last record", cut - last.start),
            damage: Box::new(move |dir| truncate(&in_copy(dir, &segment), cut)),
            expect: Expect::Prefix {
                entries: count as usize - 1,
                // A cut exactly at the frame start is a clean end of file.
                repaired: cut != last.start,
            },
        });
    }

    // The sector holding the end of the last record, zeroed as a torn write
    // onto preallocated space leaves it. Every record reaching into that
    // sector is lost, and only those.
    let sector_start = (last.end - 1) / 512 * 512;
    let survivors = layout.placements.iter().take_while(|p| p.end <= sector_start).count();
    let straddles = layout.placements[survivors].start < sector_start;
    {
        let segment = last.segment.clone();
        cases.push(Case {
            name: "last sector zeroed".into(),
            damage: Box::new(move |dir| zero(&in_copy(dir, &segment), sector_start, sector_start + 512)),
            expect: Expect::Prefix {
                entries: survivors,
                repaired: straddles,
            },
        });
    }

    // A bit flipped in a middle record: its crc fails with no zero sector
    // in sight, so the log refuses rather than dropping synced entries.
    let middle = layout.placements[count as usize / 2].clone();
    for (what, offset) in [
        ("payload", middle.start + 40),
        ("crc", middle.start + 9),
        ("type", middle.start + 12),
    ] {
        let segment = middle.segment.clone();
        let record_start = middle.start;
        cases.push(Case {
            name: format!("bit flipped in a middle record's {what}"),
            damage: Box::new(move |dir| flip_bit(&in_copy(dir, &segment), offset, 3)),
            expect: Expect::Refuse(Box::new(move |e| {
                is_corrupt_at(e, record_start, |c| matches!(c, Corruption::CrcMismatch { .. }))
            })),
        });
    }
    // A flipped bit in a middle record's length word is caught by the
    // word's own check, never read as a shorter or longer frame.
    {
        let segment = middle.segment.clone();
        let start = middle.start;
        cases.push(Case {
            name: "bit flipped in a middle record's length word".into(),
            damage: Box::new(move |dir| flip_bit(&in_copy(dir, &segment), start + 1, 4)),
            expect: Expect::Refuse(Box::new(move |e| {
                matches!(
                    e,
                    Error::Corrupt {
                        corruption: Corruption::BadLengthWord { .. },
                        ..
                    }
                )
            })),
        });
    }
    // A bit flipped in the last record is not a torn write either: no
    // sector of it is zero, and the record was acknowledged.
    {
        let segment = last.segment.clone();
        let offset = last.start + 100;
        cases.push(Case {
            name: "bit flipped in the last record".into(),
            damage: Box::new(move |dir| flip_bit(&in_copy(dir, &segment), offset, 0)),
            expect: Expect::Refuse(Box::new(move |e| {
                matches!(
                    e,
                    Error::Corrupt {
                        corruption: Corruption::CrcMismatch { .. },
                        ..
                    }
                )
            })),
        });
    }

    for case in &cases {
        check(&layout, case);
    }
    assert!(cases.len() > 250, "one case per byte of the last record");
}

// Goal: damage in a log of many segments: a missing middle segment, a
// zeroed or flipped record outside the last segment, a truncated tail in
// the last one.
#[test]
fn multi_segment_damage_table() {
    let count = 60;
    let layout = Layout::write(count, PAYLOAD_BYTES, 4096);
    let segments = layout.segments();
    assert!(segments.len() >= 4, "need several segments, got {}", segments.len());
    let in_segment = |segment: &Path| layout.placements.iter().filter(|p| p.segment == segment).count();
    let last = layout.placements.last().unwrap().clone();
    let first_middle = layout
        .placements
        .iter()
        .find(|p| p.segment == segments[1])
        .unwrap()
        .clone();
    let mut cases = Vec::new();

    {
        let missing = segments[1].clone();
        cases.push(Case {
            name: "missing middle segment".into(),
            damage: Box::new(move |dir| fs::remove_file(in_copy(dir, &missing)).unwrap()),
            expect: Expect::Refuse(Box::new(move |e| {
                matches!(e, Error::MissingSegment { expected_seq: 1, .. })
                    && e.to_string().contains("0000000000000000-")
            })),
        });
    }
    {
        let missing = segments[segments.len() - 2].clone();
        cases.push(Case {
            name: "missing segment before the last".into(),
            damage: Box::new(move |dir| fs::remove_file(in_copy(dir, &missing)).unwrap()),
            expect: Expect::Refuse(Box::new(move |e| matches!(e, Error::MissingSegment { .. }))),
        });
    }
    {
        let segment = first_middle.segment.clone();
        let (start, end) = (first_middle.start, first_middle.end);
        cases.push(Case {
            name: "record zeroed inside a middle segment".into(),
            damage: Box::new(move |dir| zero(&in_copy(dir, &segment), start + 8, end)),
            expect: Expect::Refuse(Box::new(move |e| matches!(e, Error::Corrupt { .. }))),
        });
    }
    {
        let segment = first_middle.segment.clone();
        let start = first_middle.start;
        cases.push(Case {
            name: "length word zeroed inside a middle segment".into(),
            damage: Box::new(move |dir| zero(&in_copy(dir, &segment), start, start + 8)),
            expect: Expect::Refuse(Box::new(move |e| {
                is_corrupt_at(e, start, |c| matches!(c, Corruption::BytesAfterEnd { .. }))
            })),
        });
    }
    {
        // With the segment's last record gone whole, the segment looks
        // complete; only the crc chain into the next segment shows the loss.
        let last_of_middle = layout
            .placements
            .iter()
            .rfind(|p| p.segment == segments[1])
            .unwrap()
            .clone();
        let next_segment = segments[2].clone();
        cases.push(Case {
            name: "last record of a middle segment zeroed whole".into(),
            damage: Box::new(move |dir| {
                zero(
                    &in_copy(dir, &last_of_middle.segment),
                    last_of_middle.start,
                    last_of_middle.end,
                )
            }),
            expect: Expect::Refuse(Box::new(move |e| {
                matches!(e, Error::Corrupt { corruption: Corruption::ChainBroken { .. }, offset: 0, path }
                    if path.file_name() == next_segment.file_name())
            })),
        });
    }
    {
        let segment = first_middle.segment.clone();
        let offset = first_middle.start + 30;
        cases.push(Case {
            name: "bit flipped in a middle segment".into(),
            damage: Box::new(move |dir| flip_bit(&in_copy(dir, &segment), offset, 7)),
            expect: Expect::Refuse(Box::new(move |e| {
                matches!(
                    e,
                    Error::Corrupt {
                        corruption: Corruption::CrcMismatch { .. },
                        ..
                    }
                )
            })),
        });
    }
    {
        let segment = last.segment.clone();
        let cut = last.start + 17;
        cases.push(Case {
            name: "last record of the last segment truncated".into(),
            damage: Box::new(move |dir| truncate(&in_copy(dir, &segment), cut)),
            expect: Expect::Prefix {
                entries: count as usize - 1,
                repaired: true,
            },
        });
    }
    {
        let first = segments[0].clone();
        cases.push(Case {
            name: "first segment released by hand: history is gone".into(),
            damage: Box::new(move |dir| fs::remove_file(in_copy(dir, &first)).unwrap()),
            expect: Expect::Refuse(Box::new(move |e| matches!(e, Error::HistoryReleased { index: 0, .. }))),
        });
    }
    assert!(in_segment(&segments[1]) > 0);
    for case in &cases {
        check(&layout, case);
    }
}
