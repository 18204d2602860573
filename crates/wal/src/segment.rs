//! Segment files: their names, their creation, and listing a log directory.
//!
//! Names are `{seq:016x}-{first_index:016x}.wal` (see the crate docs for
//! what each number means).

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};

use crate::disk::Disk;
use crate::error::{Error, Result};
use crate::frame::Encoder;
use crate::record::{HardState, Record};
use crate::spare::Prepared;

pub const SEGMENT_SUFFIX: &str = ".wal";
pub const TEMPORARY_SUFFIX: &str = ".tmp";

/// A segment's identity, parsed from or formatted into its file name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct SegmentName {
    pub seq: u64,
    pub first_index: u64,
}

impl SegmentName {
    pub fn file_name(&self) -> String {
        format!("{:016x}-{:016x}{SEGMENT_SUFFIX}", self.seq, self.first_index)
    }

    pub fn path(&self, dir: &Path) -> PathBuf {
        dir.join(self.file_name())
    }

    /// Parses a segment file name; `None` for any other file.
    pub fn parse(file_name: &str) -> Option<SegmentName> {
        let stem = file_name.strip_suffix(SEGMENT_SUFFIX)?;
        let (seq, first_index) = stem.split_once('-')?;
        let hex = |s: &str| {
            (s.len() == 16 && s.bytes().all(|b| b.is_ascii_hexdigit()))
                .then(|| u64::from_str_radix(s, 16).ok())
                .flatten()
        };
        Some(SegmentName {
            seq: hex(seq)?,
            first_index: hex(first_index)?,
        })
    }
}

/// The segments in `dir`, sorted by sequence. Removes leftover `.tmp` files
/// from segment creations a crash interrupted.
pub fn list(dir: &Path) -> Result<Vec<SegmentName>> {
    let mut names = Vec::new();
    let entries = fs::read_dir(dir).map_err(|e| Error::io("read directory", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("read directory", dir, e))?;
        let file_name = entry.file_name();
        let Some(file_name) = file_name.to_str() else {
            continue;
        };
        if file_name.ends_with(TEMPORARY_SUFFIX) {
            let path = entry.path();
            // A released segment's removal may still be under way on a
            // thread of a log closed without waiting: gone is what it asks.
            match fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(Error::io("remove leftover", &path, e));
                }
                _ => tracing::info!(path = %path.display(), "removed an unfinished segment"),
            }
        } else if let Some(name) = SegmentName::parse(file_name) {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// An open segment, positioned where the next frame goes.
#[derive(Debug)]
pub struct Segment {
    pub name: SegmentName,
    pub path: PathBuf,
    pub file: File,
    /// Where the next frame is written.
    pub offset: u64,
}

/// Creates a segment from a prepared spare (see spare.rs): writes its
/// header, syncs it, renames it into place and syncs the directory.
/// Returns the segment and the encoder's crc after the header.
pub fn create(
    disk: &dyn Disk,
    dir: &Path,
    name: SegmentName,
    spare: Prepared,
    seed: u32,
    metadata: &[u8],
    hard_state: &HardState,
) -> Result<(Segment, u32)> {
    let path = name.path(dir);
    let Prepared { file, path: temporary } = spare;
    let mut header = Vec::new();
    let mut encoder = Encoder::new(seed);
    encoder.encode(&Record::CrcSeed(seed), &mut header);
    encoder.encode(&Record::Metadata(metadata.to_vec()), &mut header);
    encoder.encode(&Record::HardState(*hard_state), &mut header);
    disk.write_all_at(&file, &header, 0)
        .map_err(|e| Error::io("write header", &temporary, e))?;
    disk.fdatasync(&file)
        .map_err(|e| Error::io("fdatasync", &temporary, e))?;
    fs::rename(&temporary, &path).map_err(|e| Error::io("rename segment", &path, e))?;
    disk.fsync_dir(dir).map_err(|e| Error::io("fsync directory", dir, e))?;
    let segment = Segment {
        name,
        path,
        file,
        offset: header.len() as u64,
    };
    Ok((segment, encoder.crc()))
}

/// Opens an existing segment for appending at `offset`.
pub fn open_for_append(dir: &Path, name: SegmentName, offset: u64) -> Result<Segment> {
    let path = name.path(dir);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| Error::io("open segment", &path, e))?;
    Ok(Segment {
        name,
        path,
        file,
        offset,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: names format and parse back, sort by sequence, and other files
    // (broken copies, temporaries, the lock) are not taken for segments.
    #[test]
    fn names_round_trip_and_reject_other_files() {
        let name = SegmentName {
            seq: 0x1f,
            first_index: 0xabc,
        };
        assert_eq!(name.file_name(), "000000000000001f-0000000000000abc.wal");
        assert_eq!(SegmentName::parse(&name.file_name()), Some(name));
        for other in [
            "000000000000001f-0000000000000abc.wal.broken",
            "000000000000001f-0000000000000abc.wal.tmp",
            "LOCK",
            "1f-abc.wal",
            "000000000000001f_0000000000000abc.wal",
            "00000000000000xf-0000000000000abc.wal",
        ] {
            assert_eq!(SegmentName::parse(other), None, "{other}");
        }
    }
}
