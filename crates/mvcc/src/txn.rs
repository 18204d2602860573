//! Txn: compares, then the chosen branch's operations in order, written
//! against the [`WriteTxn`] trait only.
//!
//! Like etcd, a txn is checked before anything is written: the branch each
//! level will take is chosen from the view at the txn's start (the path),
//! and every operation on that path must be able to succeed: first every
//! put with `ignore_value` or `ignore_lease` needs its key and every put
//! its lease, then every range at a set revision needs it readable.
//! Together with the duplicate-key rule this means the execution that
//! follows cannot fail halfway; if it does, an invariant is broken and the
//! store panics rather than keep half a txn.

use crate::error::{Error, Result};
use crate::index::RangeEnd;
use crate::kv::{ReadView, WriteTxn};
use crate::request::{
    Compare, CompareResult, CompareTarget, DeleteRangeRequest, RangeRequest, RequestOp, ResponseOp, TxnRequest,
    TxnResponse,
};
use crate::wire::AnswerBytesMax;

/// Whether every compare holds in `view`. A compare over a range holds when
/// it holds for every key in the range; a missing key compares as zero
/// version, revisions and lease, and fails any value compare.
pub fn compares_hold(view: &impl ReadView, compares: &[Compare]) -> Result<bool> {
    for compare in compares {
        if !compare_holds(view, compare)? {
            return Ok(false);
        }
    }
    Ok(true)
}

fn compare_holds(view: &impl ReadView, compare: &Compare) -> Result<bool> {
    let found = view.range(&RangeRequest {
        key: compare.key.clone(),
        range_end: compare.range_end.clone(),
        // A compare's range is never sent, so it has no answer to bound.
        answer_bytes_max: AnswerBytesMax(u64::MAX),
        ..RangeRequest::default()
    })?;
    if found.kvs.is_empty() {
        if matches!(compare.target, CompareTarget::Value(_)) {
            return Ok(false);
        }
        return Ok(holds(compare, &Default::default()));
    }
    Ok(found.kvs.iter().all(|kv| holds(compare, kv)))
}

fn holds(compare: &Compare, kv: &crate::key_value::KeyValue) -> bool {
    let ordering = match &compare.target {
        CompareTarget::Version(operand) => kv.version.cmp(operand),
        CompareTarget::Create(operand) => kv.create_revision.cmp(operand),
        CompareTarget::Mod(operand) => kv.mod_revision.cmp(operand),
        CompareTarget::Lease(operand) => kv.lease.cmp(operand),
        CompareTarget::Value(operand) => kv.value.as_slice().cmp(operand.as_slice()),
    };
    match compare.result {
        CompareResult::Equal => ordering.is_eq(),
        CompareResult::NotEqual => ordering.is_ne(),
        CompareResult::Greater => ordering.is_gt(),
        CompareResult::Less => ordering.is_lt(),
    }
}

/// The branch every level of a txn takes, decided up front from the view
/// at the txn's start, in depth-first order: this txn's outcome, then the
/// paths of the txns nested in its chosen branch. Execution follows it
/// even when the txn's own writes would change a nested compare.
pub fn plan(view: &impl ReadView, request: &TxnRequest) -> Result<Vec<bool>> {
    let mut path = Vec::new();
    compare_to_path(view, request, &mut path)?;
    check_puts(view, request, &path, &mut 0, &mut Vec::new())?;
    check_ranges(view, request, &path, &mut 0)?;
    Ok(path)
}

fn compare_to_path(view: &impl ReadView, request: &TxnRequest, path: &mut Vec<bool>) -> Result<()> {
    let succeeded = compares_hold(view, &request.compare)?;
    path.push(succeeded);
    for op in branch(request, succeeded) {
        if let RequestOp::Txn(nested) = op {
            compare_to_path(view, nested, path)?;
        }
    }
    Ok(())
}

fn branch(request: &TxnRequest, succeeded: bool) -> &[RequestOp] {
    if succeeded {
        &request.success
    } else {
        &request.failure
    }
}

/// A put's lease must exist.
fn check_lease(view: &impl ReadView, lease: i64) -> Result<()> {
    if lease != crate::lease::NO_LEASE && !view.lease_exists(lease) {
        return Err(Error::LeaseNotFound);
    }
    Ok(())
}

/// A put with `ignore_value` or `ignore_lease` needs its key in the view,
/// then every put needs its lease to exist (etcd checks in that order).
///
/// One case etcd does not check: such a put of a key that a delete earlier
/// in the same txn removed. The duplicate-key rule lets it through only
/// when the delete's range end is `[0]` (see `validate`), and etcd 3.5
/// then panics while applying. Here the walk follows execution order and
/// remembers what was deleted, and the txn is refused with "key not
/// found" (the put's key does not exist when it runs), before anything is
/// written.
fn check_puts<'r>(
    view: &impl ReadView,
    request: &'r TxnRequest,
    path: &[bool],
    at: &mut usize,
    deleted: &mut Vec<&'r DeleteRangeRequest>,
) -> Result<()> {
    let succeeded = path[*at];
    *at += 1;
    for op in branch(request, succeeded) {
        match op {
            RequestOp::Put(put) if put.ignore_value || put.ignore_lease => {
                let existing = view.range(&RangeRequest {
                    key: put.key.clone(),
                    count_only: true,
                    ..RangeRequest::default()
                })?;
                let removed = deleted
                    .iter()
                    .any(|delete| RangeEnd::parse(&delete.range_end).contains(&delete.key, &put.key));
                if existing.count == 0 || removed {
                    return Err(Error::KeyNotFound);
                }
                check_lease(view, put.lease)?;
            }
            RequestOp::Put(put) => check_lease(view, put.lease)?,
            RequestOp::DeleteRange(delete) => deleted.push(delete),
            RequestOp::Txn(nested) => check_puts(view, nested, path, at, deleted)?,
            _ => {}
        }
    }
    Ok(())
}

/// A range at a set revision needs it readable. Unlike a plain range, a
/// negative revision here counts as compacted once anything was compacted,
/// as in etcd.
fn check_ranges(view: &impl ReadView, request: &TxnRequest, path: &[bool], at: &mut usize) -> Result<()> {
    let succeeded = path[*at];
    *at += 1;
    for op in branch(request, succeeded) {
        match op {
            RequestOp::Range(range) if range.revision != 0 => {
                if range.revision > view.revision() {
                    return Err(Error::FutureRevision);
                }
                if range.revision < view.compact_revision() {
                    return Err(Error::Compacted);
                }
            }
            RequestOp::Txn(nested) => check_ranges(view, nested, path, at)?,
            _ => {}
        }
    }
    Ok(())
}

/// Runs a txn along the path [`plan`] returned. The outer response carries
/// the txn's revision; nested txn responses carry 0, as etcd leaves their
/// headers empty.
pub fn execute(txn: &mut impl WriteTxn, request: &TxnRequest, path: &[bool]) -> TxnResponse {
    let mut at = 0;
    let mut response = execute_level(txn, request, path, &mut at);
    assert_eq!(at, path.len(), "execution followed the whole plan");
    response.revision = txn.revision();
    response
}

fn execute_level(txn: &mut impl WriteTxn, request: &TxnRequest, path: &[bool], at: &mut usize) -> TxnResponse {
    let succeeded = path[*at];
    *at += 1;
    let ops = branch(request, succeeded);
    let mut responses = Vec::with_capacity(ops.len());
    for op in ops {
        let response = match op {
            RequestOp::Range(range) => ResponseOp::Range(txn.range(range).expect("txn range was checked")),
            RequestOp::Put(put) => ResponseOp::Put(txn.put(put).expect("txn put was checked")),
            RequestOp::DeleteRange(delete) => {
                ResponseOp::DeleteRange(txn.delete_range(delete).expect("txn delete cannot fail"))
            }
            RequestOp::Txn(nested) => ResponseOp::Txn(execute_level(txn, nested, path, at)),
        };
        responses.push(response);
    }
    TxnResponse {
        revision: 0,
        succeeded,
        responses,
    }
}

/// Runs a read-only txn (see [`TxnRequest::is_read_only`]) along the path
/// [`plan`] returned, in `view`: the ranges of the chosen branch. A range
/// whose answer passes its bound fails the txn (wire.rs).
pub fn execute_read_only(view: &impl ReadView, request: &TxnRequest, path: &[bool]) -> Result<TxnResponse> {
    assert!(request.is_read_only(), "only a txn of ranges is executed read-only");
    let succeeded = path[0];
    let responses = branch(request, succeeded)
        .iter()
        .map(|op| match op {
            RequestOp::Range(range) => view.range(range).map(ResponseOp::Range),
            _ => unreachable!("a read-only txn holds ranges only"),
        })
        .collect::<Result<_>>()?;
    Ok(TxnResponse {
        revision: view.revision(),
        succeeded,
        responses,
    })
}
