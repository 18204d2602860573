//! Snapshots that etcd wrote (`etcdctl snapshot save` against etcd 3.5, or
//! a member's `member/snap/db` copied with `--skip-hash-check`), converted
//! into a dump of this project's store, so that `kv-server snapshot
//! restore` moves an etcd cluster's data onto kv-server in one command.
//!
//! The file is etcd's bbolt database (`bbolt.rs`), followed, when saved
//! by etcdctl, by the SHA-256 of it (the file's size is then 32 past a
//! multiple of 512). What is read from it:
//!
//! - bucket `key`: every stored revision, keyed by revision bytes (main
//!   u64 BE, `_`, sub u64 BE, and `t` for a tombstone), each value an
//!   `mvccpb.KeyValue`; the same revisions, in the same order, become the
//!   store's records, so revisions, versions and HashKV carry over;
//! - bucket `lease`: each lease's id and granted TTL (`leasepb.Lease`);
//! - bucket `meta`: `finishedCompactRev`, the compact revision.
//!
//! The current revision is the newest stored one, or the compact
//! revision when that is newer (as etcd restores it). A compaction that
//! was scheduled but not finished is not resumed. Alarms, auth and
//! membership are not carried: the new cluster has its own members.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use prost::Message as _;
use sha2::{Digest, Sha256};

use crate::error::Error;
use crate::proto::{convert, mvccpb};
use crate::storage::bbolt::BoltFile;

/// etcd's `leasepb.Lease`, the fields read here.
#[derive(Clone, PartialEq, prost::Message)]
struct LeaseRecord {
    #[prost(int64, tag = "1")]
    id: i64,
    #[prost(int64, tag = "2")]
    ttl: i64,
}

const DIGEST_BYTES: u64 = 32;

/// Whether the file at `path` is one of etcd's (a bbolt database).
pub fn is_etcd_snapshot(path: &Path) -> Result<bool, Error> {
    let mut head = [0u8; 32];
    let mut file = std::fs::File::open(path).map_err(Error::io(path))?;
    let read = file.read(&mut head).map_err(Error::io(path))?;
    Ok(crate::storage::bbolt::is_bolt(&head[..read]))
}

/// Checks the SHA-256 that etcdctl appends, as etcdutl does: a file
/// without one is refused unless `check` is off.
fn check_digest(path: &Path, check: bool) -> Result<(), Error> {
    let corrupt = |what: &str| Error::Corrupt {
        path: path.to_path_buf(),
        what: what.to_string(),
    };
    if !check {
        return Ok(());
    }
    let mut file = std::fs::File::open(path).map_err(Error::io(path))?;
    let size = file.metadata().map_err(Error::io(path))?.len();
    if size % 512 != DIGEST_BYTES {
        return Err(corrupt("snapshot missing hash but --skip-hash-check=false"));
    }
    let mut hasher = Sha256::new();
    std::io::copy(&mut (&mut file).take(size - DIGEST_BYTES), &mut hasher).map_err(Error::io(path))?;
    let mut stored = [0u8; DIGEST_BYTES as usize];
    file.seek(SeekFrom::Start(size - DIGEST_BYTES))
        .map_err(Error::io(path))?;
    file.read_exact(&mut stored).map_err(Error::io(path))?;
    if hasher.finalize()[..] != stored {
        return Err(corrupt("expected sha256 does not match the snapshot's"));
    }
    Ok(())
}

/// Converts etcd's snapshot at `path` into a store dump written to `out`.
pub fn convert(path: &Path, check: bool, out: impl Write) -> Result<(), Error> {
    check_digest(path, check)?;
    let bolt = BoltFile::open(path)?;
    let corrupt = |what: String| Error::Corrupt {
        path: path.to_path_buf(),
        what,
    };
    let mut writer = mvcc::import::DumpWriter::new(out);
    let mut newest = mvcc::EMPTY_STORE_REVISION;
    bolt.visit_bucket(b"key", &mut |key, value| {
        let (revision, tombstone) =
            mvcc::revision::Revision::from_bytes(key).ok_or_else(|| corrupt(format!("a key bucket key {key:?}")))?;
        let kv = mvccpb::KeyValue::decode(value).map_err(|e| corrupt(format!("a stored key-value: {e}")))?;
        let kv = convert::from_key_value(kv);
        newest = newest.max(revision.main);
        Ok(writer.record(revision, tombstone, &kv)?)
    })?;
    bolt.visit_bucket(b"lease", &mut |_, value| {
        let lease = LeaseRecord::decode(value).map_err(|e| corrupt(format!("a stored lease: {e}")))?;
        Ok(writer.lease(lease.id, lease.ttl)?)
    })?;
    let mut compact = mvcc::NEVER_COMPACTED;
    bolt.visit_bucket(b"meta", &mut |key, value| {
        if key == b"finishedCompactRev" {
            let (revision, _) = mvcc::revision::Revision::from_bytes(value)
                .ok_or_else(|| corrupt("the finished compact revision".into()))?;
            compact = revision.main;
        }
        Ok(())
    })?;
    writer.finish(newest.max(compact), compact)?;
    Ok(())
}
