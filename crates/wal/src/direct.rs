//! Writing the tail segment around the page cache (`O_DIRECT`).
//!
//! A buffered write copies the batch into the page cache and `fdatasync`
//! then writes those pages out; with `O_DIRECT` the batch goes straight
//! from our buffer to the disk and the sync only flushes the disk's own
//! cache. Measured, a small write and its sync took a little over half as
//! long as buffered, a large one about three fifths
//! (`docs/measurements.md`).
//!
//! `O_DIRECT` needs the buffer's address, the file offset and the length
//! aligned to the device's block. Frames are only 8-byte aligned, so every
//! write starts at the block boundary at or below the tail's offset and
//! carries, before the new frames, the bytes already in that block (kept
//! in memory), and after them zeros to the next boundary: the block holding
//! the tail is rewritten with the same prefix. A sector is written whole or
//! not at all (the medium's model in lib.rs), so a crash mid-write leaves
//! the old prefix or the new bytes, both valid, and past the data only
//! zeros, as the decoder expects of a preallocated segment.
//!
//! A file system that refuses `O_DIRECT` (tmpfs) gets buffered writes, as
//! before.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use crate::disk::Disk;

/// The alignment of every direct write: 4 KiB covers devices with 512-byte
/// and 4 KiB logical blocks alike.
pub const ALIGNMENT_BYTES: usize = 4096;

/// The tail segment opened for direct writes.
#[derive(Debug)]
pub struct DirectTail {
    file: File,
    /// The segment's bytes from the block boundary at or below the write
    /// offset up to it.
    partial: Vec<u8>,
    /// Backing store of an aligned copy, for a write whose buffer lost its
    /// alignment (see [`DirectTail::write`]); the aligned window starts at
    /// its first 4 KiB boundary.
    backing: Vec<u8>,
}

impl DirectTail {
    /// Opens `path` for direct writes at `offset`, reading the bytes of the
    /// block in front of it through `buffered`. `None` when the file system
    /// refuses `O_DIRECT`.
    pub fn open(path: &Path, buffered: &File, offset: u64) -> io::Result<Option<DirectTail>> {
        let Some(file) = open_direct(path)? else {
            return Ok(None);
        };
        let start = offset - offset % ALIGNMENT_BYTES as u64;
        let mut partial = vec![0u8; (offset - start) as usize];
        buffered.read_exact_at(&mut partial, start)?;
        Ok(Some(DirectTail {
            file,
            partial,
            backing: Vec::new(),
        }))
    }

    /// Starts a write: clears `buffer`, reserves room for `frames_bytes` of
    /// new frames, and puts the bytes already in the tail's block in front,
    /// placed at a 4 KiB-aligned address so that [`DirectTail::write`] can
    /// hand the buffer to the device without copying it. Returns the index
    /// where the new frames begin; frames are encoded onto the end.
    pub fn begin(&self, buffer: &mut Vec<u8>, frames_bytes: usize) -> usize {
        buffer.clear();
        buffer.reserve(2 * ALIGNMENT_BYTES + self.partial.len() + frames_bytes);
        let mut pad = buffer.as_ptr().align_offset(ALIGNMENT_BYTES);
        if !pad.is_multiple_of(8) {
            // Frames must start 8-aligned in the buffer; this write will
            // take the copying path.
            pad = 0;
        }
        buffer.resize(pad, 0);
        buffer.extend_from_slice(&self.partial);
        buffer.len()
    }

    /// Writes the frames in `buffer[frames_start..]` (a buffer prepared by
    /// [`DirectTail::begin`]) at `offset`, the tail's offset just past the
    /// last frame, rewriting the block in front of it. The write goes
    /// straight from `buffer` when it is still aligned, which it is unless
    /// the frames outgrew the room `begin` reserved; otherwise it is
    /// copied into an aligned buffer first. `buffer` is left padded.
    pub fn write(&mut self, disk: &dyn Disk, buffer: &mut Vec<u8>, frames_start: usize, offset: u64) -> io::Result<()> {
        let prefix_start = frames_start - self.partial.len();
        let start = offset - self.partial.len() as u64;
        debug_assert_eq!(start % ALIGNMENT_BYTES as u64, 0, "the partial block starts aligned");
        let data = buffer.len() - prefix_start;
        let length = data.div_ceil(ALIGNMENT_BYTES) * ALIGNMENT_BYTES;
        buffer.resize(prefix_start + length, 0);
        let window = &buffer[prefix_start..];
        if window.as_ptr().align_offset(ALIGNMENT_BYTES) == 0 {
            disk.write_all_at(&self.file, window, start)?;
        } else {
            let aligned = aligned_window(&mut self.backing, length);
            aligned.copy_from_slice(window);
            disk.write_all_at(&self.file, aligned, start)?;
        }
        let kept = data % ALIGNMENT_BYTES;
        let tail_start = prefix_start + data - kept;
        self.partial.clear();
        self.partial.extend_from_slice(&buffer[tail_start..tail_start + kept]);
        Ok(())
    }
}

/// `path` opened for writes around the page cache, or `None` when the
/// file system refuses `O_DIRECT` (tmpfs).
pub fn open_direct(path: &Path) -> io::Result<Option<File>> {
    match OpenOptions::new().write(true).custom_flags(libc::O_DIRECT).open(path) {
        Ok(file) => Ok(Some(file)),
        Err(error) if error.raw_os_error() == Some(libc::EINVAL) => Ok(None),
        Err(error) => Err(error),
    }
}

/// A 4 KiB-aligned window of `length` bytes inside `backing`, which grows
/// (zeroed) when it has no room for one.
pub fn aligned_window(backing: &mut Vec<u8>, length: usize) -> &mut [u8] {
    if backing.len() < length + ALIGNMENT_BYTES {
        *backing = vec![0u8; length + ALIGNMENT_BYTES];
    }
    let align = backing.as_ptr().align_offset(ALIGNMENT_BYTES);
    &mut backing[align..align + length]
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: direct writes of any size at any offset leave the file holding
    // exactly the bytes written, in order, then zeros.
    // Method: a preallocated file in a temporary directory (on this
    // project's machines, ext4, which takes O_DIRECT); writes of sizes
    // around the block size, each checked against a buffered read. The
    // buffers are reserved short so some writes take the copying path.
    #[test]
    fn direct_writes_keep_every_byte() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("segment");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        file.set_len(1 << 20).unwrap();
        let header = vec![7u8; 104];
        file.write_all_at(&header, 0).unwrap();
        let Some(mut tail) = DirectTail::open(&path, &file, header.len() as u64).unwrap() else {
            panic!("the temporary directory's file system refused O_DIRECT");
        };
        let mut expected = header.clone();
        for (round, size) in [8usize, 4088, 4096, 4104, 16, 12_000, 8].into_iter().enumerate() {
            let bytes = vec![round as u8 + 1; size];
            let mut buffer = Vec::new();
            let frames_start = tail.begin(&mut buffer, size / 2);
            buffer.extend_from_slice(&bytes);
            tail.write(&crate::disk::RealDisk, &mut buffer, frames_start, expected.len() as u64)
                .unwrap();
            expected.extend_from_slice(&bytes);
        }
        let mut read = vec![0u8; expected.len() + 4096];
        file.read_exact_at(&mut read, 0).unwrap();
        assert_eq!(&read[..expected.len()], &expected[..]);
        assert!(read[expected.len()..].iter().all(|&b| b == 0));
    }
}
