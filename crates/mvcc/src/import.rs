//! Writing a store's snapshot dump (the layout of
//! [`crate::store::Store::snapshot_to`]) from another store's history, so
//! [`crate::store::Store::restore_for_new_cluster`] can take it: how a
//! backup of etcd's own becomes a store here. The records come in
//! revision order and go out as blocks, as the store writes them.

use std::io::Write;

use crate::block::{self, Record};
use crate::error::{Error, Result};
use crate::key_value::KeyValue;
use crate::revision::Revision;
use crate::store::{lease_key, write_item, META_COMPACT_REVISION, META_CURRENT_REVISION};

/// Records gathered before they are packed into blocks and written: a
/// bound on memory (at most a few MiB) whatever the history's size.
pub const IMPORT_RECORDS_PER_WRITE: usize = 4096;

pub struct DumpWriter<W: Write> {
    out: W,
    pending: Vec<Record>,
    last: Option<Revision>,
}

fn io(error: std::io::Error) -> Error {
    Error::Storage(format!("writing a dump: {error}"))
}

impl<W: Write> DumpWriter<W> {
    pub fn new(out: W) -> DumpWriter<W> {
        DumpWriter {
            out,
            pending: Vec::new(),
            last: None,
        }
    }

    /// Adds one stored revision; revisions must come in increasing order.
    /// A tombstone's `kv` holds only its key (its mod revision is set
    /// here, as the store keeps it).
    pub fn record(&mut self, revision: Revision, tombstone: bool, kv: &KeyValue) -> Result<()> {
        if self.last.is_some_and(|last| last >= revision) {
            return Err(Error::Storage(format!(
                "revisions out of order: {revision:?} after {:?}",
                self.last
            )));
        }
        self.last = Some(revision);
        let record = if tombstone {
            let tombstone = KeyValue {
                key: kv.key.clone(),
                mod_revision: revision.main,
                ..KeyValue::default()
            };
            Record::new(revision, true, &tombstone)
        } else {
            Record::new(revision, false, kv)
        };
        self.pending.push(record);
        if self.pending.len() >= IMPORT_RECORDS_PER_WRITE {
            self.write_pending()?;
        }
        Ok(())
    }

    /// Adds a lease with its granted TTL.
    pub fn lease(&mut self, id: i64, ttl: i64) -> Result<()> {
        write_item(&mut self.out, &lease_key(id), &ttl.to_be_bytes()).map_err(io)
    }

    /// Writes what is left and the revisions; returns the output.
    pub fn finish(mut self, current_revision: i64, compact_revision: i64) -> Result<W> {
        self.write_pending()?;
        if self.last.is_some_and(|last| last.main > current_revision) {
            return Err(Error::Storage("a record is newer than the current revision".into()));
        }
        write_item(&mut self.out, META_CURRENT_REVISION, &current_revision.to_be_bytes()).map_err(io)?;
        write_item(&mut self.out, META_COMPACT_REVISION, &compact_revision.to_be_bytes()).map_err(io)?;
        Ok(self.out)
    }

    fn write_pending(&mut self) -> Result<()> {
        for packed in block::pack(&self.pending) {
            write_item(&mut self.out, &block::key(packed[0].revision), &block::encode(packed)).map_err(io)?;
        }
        self.pending.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{DeleteRangeRequest, LeaseGrantRequest, PutRequest, RangeRequest, WriteRequest};
    use crate::store::Store;

    fn kv(key: &str, create: i64, modified: i64, version: i64, lease: i64) -> KeyValue {
        KeyValue {
            key: key.into(),
            create_revision: create,
            mod_revision: modified,
            version,
            value: format!("{key}@{modified}").into_bytes(),
            lease,
        }
    }

    // Goal: a dump written from a history restores into the same store as
    // applying that history: the same keys, revisions, leases and HashKV.
    // Method: puts (one leased, one overwritten) and a delete, applied to
    // one store and written as records into another.
    #[test]
    fn an_imported_history_is_the_applied_one() {
        let dir = tempfile::tempdir().unwrap();
        let applied = Store::open(&dir.path().join("applied")).unwrap();
        let put = |key: &str, modified: i64, lease: i64| {
            WriteRequest::Put(PutRequest {
                key: key.into(),
                value: format!("{key}@{modified}").into_bytes(),
                lease,
                ..PutRequest::default()
            })
        };
        let requests = [
            WriteRequest::LeaseGrant(LeaseGrantRequest { id: 7, ttl: 3600 }),
            put("a", 2, 0),
            put("b", 3, 7),
            put("a", 4, 0),
            WriteRequest::DeleteRange(DeleteRangeRequest {
                key: b"c".to_vec(),
                ..DeleteRangeRequest::default()
            }),
            put("c", 5, 0),
            WriteRequest::DeleteRange(DeleteRangeRequest {
                key: b"c".to_vec(),
                ..DeleteRangeRequest::default()
            }),
        ];
        applied.apply(1, &requests).unwrap();

        let mut writer = DumpWriter::new(Vec::new());
        writer.record(Revision::new(2, 0), false, &kv("a", 2, 2, 1, 0)).unwrap();
        writer.record(Revision::new(3, 0), false, &kv("b", 3, 3, 1, 7)).unwrap();
        writer.record(Revision::new(4, 0), false, &kv("a", 2, 4, 2, 0)).unwrap();
        writer.record(Revision::new(5, 0), false, &kv("c", 5, 5, 1, 0)).unwrap();
        let gone = KeyValue {
            key: b"c".to_vec(),
            ..KeyValue::default()
        };
        writer.record(Revision::new(6, 0), true, &gone).unwrap();
        assert!(
            writer.record(Revision::new(6, 0), false, &gone).is_err(),
            "in order only"
        );
        writer.lease(7, 3600).unwrap();
        let dump = writer.finish(6, -1).unwrap();
        let imported = Store::open(&dir.path().join("imported")).unwrap();
        imported.restore_for_new_cluster(&dump[..], 1, b"m".to_vec()).unwrap();

        let everything = RangeRequest {
            key: vec![0],
            range_end: vec![0],
            ..RangeRequest::default()
        };
        assert_eq!(
            imported.range(&everything).unwrap(),
            applied.range(&everything).unwrap()
        );
        assert_eq!(imported.current_revision(), 6);
        assert_eq!(imported.leases(), applied.leases());
        assert_eq!(imported.hash_kv(0).unwrap(), applied.hash_kv(0).unwrap());
    }
}
