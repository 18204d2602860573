//! Truncates a torn tail at the last valid frame, keeping a `.broken` copy
//! of the segment as it was found.

use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};

use crate::error::{Corruption, Error, Result};
use crate::sync;

/// How many `.broken` copies of one segment may pile up before repair stops
/// numbering new ones and refuses; a member that tears the same segment
/// this often needs a person, not another copy.
pub const BROKEN_COPIES_MAX: usize = 100;

/// Copies `path` aside, then zeroes it from `offset` on (keeping its length,
/// so the preallocation stays) and syncs it. Returns the copy's path.
pub fn truncate_torn_tail(path: &Path, offset: u64, damage: &Corruption) -> Result<PathBuf> {
    let broken = free_broken_path(path)?;
    fs::copy(path, &broken).map_err(|e| Error::io("copy broken segment", &broken, e))?;
    let file = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| Error::io("open torn segment", path, e))?;
    let file_bytes = file.metadata().map_err(|e| Error::io("stat", path, e))?.len();
    file.set_len(offset).map_err(|e| Error::io("truncate", path, e))?;
    sync::preallocate(&file, file_bytes).map_err(|e| Error::io("preallocate", path, e))?;
    sync::fdatasync(&file).map_err(|e| Error::io("fdatasync", path, e))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    sync::fsync_dir(dir).map_err(|e| Error::io("fsync directory", dir, e))?;
    tracing::warn!(
        path = %path.display(),
        offset,
        %damage,
        broken = %broken.display(),
        "truncated a torn tail at the last valid record"
    );
    Ok(broken)
}

fn free_broken_path(path: &Path) -> Result<PathBuf> {
    let base = format!("{}.broken", path.display());
    for copy in 0..BROKEN_COPIES_MAX {
        let candidate = if copy == 0 {
            PathBuf::from(&base)
        } else {
            PathBuf::from(format!("{base}.{copy}"))
        };
        if !candidate.exists() {
            return Ok(candidate);
        }
    }
    Err(Error::io(
        "keep broken copy",
        base,
        std::io::Error::other(format!("{BROKEN_COPIES_MAX} broken copies already exist")),
    ))
}
