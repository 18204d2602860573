//! The store's contract, as traits: a read view at one revision, and a
//! write transaction that creates at most one new revision. The sled
//! implementation (`store/`) sits behind them, and the txn logic
//! (`txn.rs`) is written against them only.

use crate::error::Result;
use crate::request::{DeleteRangeRequest, DeleteRangeResponse, PutRequest, PutResponse, RangeRequest, RangeResponse};

/// A consistent view of the store at one revision.
pub trait ReadView {
    /// The revision reads see: the current revision when the view began,
    /// plus one once a write transaction has changed anything.
    fn revision(&self) -> i64;

    /// Revisions below this are compacted away.
    fn compact_revision(&self) -> i64;

    /// Reads a range with every option etcd's Range has. A request
    /// revision above [`ReadView::revision`] is a future revision; one
    /// below the compact revision is compacted.
    fn range(&self, request: &RangeRequest) -> Result<RangeResponse>;

    /// Whether lease `id` exists, so that a put may attach a key to it.
    fn lease_exists(&self, id: i64) -> bool;
}

/// A write transaction. Every change it makes shares one new main
/// revision (`begin + 1`), with sub-revisions numbering the changes; a
/// transaction that changes nothing creates no revision.
pub trait WriteTxn: ReadView {
    /// Puts one key. Reads in the same transaction see it.
    fn put(&mut self, request: &PutRequest) -> Result<PutResponse>;

    /// Deletes every existing key in the range, one tombstone each.
    fn delete_range(&mut self, request: &DeleteRangeRequest) -> Result<DeleteRangeResponse>;
}
