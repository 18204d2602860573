//! The snapshot file a client saves from this member (`etcdctl snapshot
//! save`, through `Maintenance.Snapshot`): writing it from the store, and
//! reading it back.
//!
//! # Format
//! | offset | bytes | what |
//! |---|---|---|
//! | 0 | 8 | magic `kvsnap` `\0` `1`: this format, version 1 |
//! | 8 | 8 | the store's consistent index (the raft index it reflects), u64 big-endian |
//! | 16 | 8 | `L`, the length of the dump, u64 big-endian |
//! | 24 | `L` | the store's dump: `mvcc::Store::snapshot_to`'s length-prefixed items |
//! | 24 + `L` | 0–511 | zeros, up to a multiple of 512 bytes |
//! | end − 32 | 32 | SHA-256 of everything before it |
//!
//! etcd's client accepts a snapshot whose size is 32 past a multiple of
//! 512 (`hasChecksum`), and etcd's restore checks that the last 32 bytes
//! are the SHA-256 of the rest: etcd writes its database file (whole
//! pages) and then that digest. The padding gives this file the same
//! shape, so etcd's tools take it as they take etcd's own.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::error::Error;

/// The file's first bytes: the format's name and version.
pub const BACKUP_MAGIC: [u8; 8] = *b"kvsnap\x001";

/// What the digest follows: a whole number of these.
pub const BACKUP_ALIGN_BYTES: u64 = 512;

const HEADER_BYTES: u64 = 24;
const DIGEST_BYTES: u64 = 32;

/// Writes the store's snapshot file at `path`; returns its size and the
/// file, open at its start for reading it back. The store's read lock is
/// held only while its dump is written (applies wait meanwhile), so `path`
/// should be on the member's own disk. The file is not synced: it is a
/// copy to be sent, not a record to survive a crash.
pub fn write(store: &mvcc::Store, path: &Path) -> Result<(u64, File), Error> {
    let io = Error::io(path);
    let file = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map_err(Error::io(path))?;
    let mut out = BufWriter::new(file);
    out.write_all(&[0; HEADER_BYTES as usize]).map_err(Error::io(path))?;
    let mut counted = Counted {
        inner: &mut out,
        bytes: 0,
    };
    let index = store.snapshot_to(&mut counted)?;
    let dump = counted.bytes;
    let mut file = out.into_inner().map_err(|e| Error::Io {
        path: path.to_path_buf(),
        source: e.into_error(),
    })?;
    let mut header = [0u8; HEADER_BYTES as usize];
    header[..8].copy_from_slice(&BACKUP_MAGIC);
    header[8..16].copy_from_slice(&index.to_be_bytes());
    header[16..].copy_from_slice(&dump.to_be_bytes());
    let padded = (HEADER_BYTES + dump).next_multiple_of(BACKUP_ALIGN_BYTES);
    let written = (|| -> std::io::Result<u64> {
        file.seek(SeekFrom::Start(0))?;
        file.write_all(&header)?;
        file.set_len(padded)?;
        file.seek(SeekFrom::Start(0))?;
        let digest = digest_of(&mut file, padded)?;
        file.seek(SeekFrom::Start(padded))?;
        file.write_all(&digest)?;
        file.seek(SeekFrom::Start(0))?;
        Ok(padded + DIGEST_BYTES)
    })();
    Ok((written.map_err(io)?, file))
}

/// A snapshot file whose digest and header were checked.
pub struct Backup {
    /// The raft index the store reflected.
    pub consistent_index: u64,
    /// The store's dump, for `mvcc::Store::restore_from`.
    pub dump: std::io::Take<BufReader<File>>,
}

/// Opens a snapshot file written by [`write`], checking its size and
/// header, and its digest if `check_digest`.
pub fn open(path: &Path, check_digest: bool) -> Result<Backup, Error> {
    let corrupt = |what: &str| Error::Corrupt {
        path: path.to_path_buf(),
        what: what.to_string(),
    };
    let mut file = File::open(path).map_err(Error::io(path))?;
    let size = file.metadata().map_err(Error::io(path))?.len();
    if size % BACKUP_ALIGN_BYTES != DIGEST_BYTES || size < BACKUP_ALIGN_BYTES + DIGEST_BYTES {
        return Err(corrupt(
            "not a snapshot file: its size is not 32 past a multiple of 512",
        ));
    }
    let body = size - DIGEST_BYTES;
    if check_digest {
        let digest = digest_of(&mut file, body).map_err(Error::io(path))?;
        let mut stored = [0u8; DIGEST_BYTES as usize];
        file.read_exact(&mut stored).map_err(Error::io(path))?;
        if digest != stored {
            return Err(corrupt("the SHA-256 at its end does not match its contents"));
        }
    }
    file.seek(SeekFrom::Start(0)).map_err(Error::io(path))?;
    let mut header = [0u8; HEADER_BYTES as usize];
    file.read_exact(&mut header).map_err(Error::io(path))?;
    if header[..8] != BACKUP_MAGIC {
        return Err(corrupt("not a kv-server snapshot (its magic differs)"));
    }
    let consistent_index = u64::from_be_bytes(header[8..16].try_into().expect("8 bytes"));
    let dump = u64::from_be_bytes(header[16..].try_into().expect("8 bytes"));
    if HEADER_BYTES + dump > body {
        return Err(corrupt("its dump runs past its end"));
    }
    Ok(Backup {
        consistent_index,
        dump: BufReader::new(file).take(dump),
    })
}

/// The SHA-256 of the first `len` bytes of `file`, read from where it is.
fn digest_of(file: &mut File, len: u64) -> std::io::Result<[u8; 32]> {
    let mut hasher = Sha256::new();
    let mut reader = BufReader::new(file.take(len));
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher.finalize().into())
}

/// Counts what passes through.
struct Counted<'a, W: Write> {
    inner: &'a mut W,
    bytes: u64,
}

impl<W: Write> Write for Counted<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store_with(dir: &Path, keys: usize) -> mvcc::Store {
        let store = mvcc::Store::open(&dir.join("kv")).expect("open");
        let puts: Vec<mvcc::WriteRequest> = (0..keys)
            .map(|i| {
                mvcc::WriteRequest::Put(mvcc::PutRequest {
                    key: format!("key{i:04}").into_bytes(),
                    value: vec![b'v'; i % 300],
                    ..Default::default()
                })
            })
            .collect();
        store.apply(7, &puts).expect("apply");
        store
    }

    fn everything(store: &mvcc::Store) -> Vec<mvcc::KeyValue> {
        store
            .range(&mvcc::RangeRequest {
                key: vec![0],
                range_end: vec![0],
                ..Default::default()
            })
            .expect("range")
            .kvs
    }

    // Goal: a written file has etcd's shape (32 past a multiple of 512),
    // opens, and restores into another store every key with its value and
    // revisions, at the consistent index it was taken at; a file with any
    // byte changed, or cut short, is refused.
    #[test]
    fn files_round_trip_and_damage_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let source = store_with(dir.path(), 500);
        let path = dir.path().join("backup.db");
        let (size, _) = write(&source, &path).expect("write");
        assert_eq!(size % BACKUP_ALIGN_BYTES, DIGEST_BYTES);
        assert_eq!(std::fs::metadata(&path).expect("file").len(), size);

        let backup = open(&path, true).expect("open");
        assert_eq!(backup.consistent_index, source.consistent_index());
        let copy = mvcc::Store::open(&dir.path().join("copy")).expect("open copy");
        copy.restore_from(backup.consistent_index, backup.dump)
            .expect("restore");
        assert_eq!(everything(&copy), everything(&source));
        assert_eq!(everything(&copy).len(), 500);
        assert_eq!(copy.current_revision(), source.current_revision());

        let bytes = std::fs::read(&path).expect("read");
        for at in [0, 9, 20, bytes.len() / 2, bytes.len() - 1] {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x40;
            std::fs::write(&path, &damaged).expect("write damaged");
            assert!(open(&path, true).is_err(), "a change at byte {at} is caught");
        }
        std::fs::write(&path, &bytes[..bytes.len() - 512]).expect("write short");
        assert!(open(&path, true).is_err(), "a short file is refused");
        assert!(open(&path, false).is_err(), "unchecked, a short file is still refused");
    }
}
