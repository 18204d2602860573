//! Txn: compares, then the chosen branch's operations in order, written
//! against the [`WriteTxn`] trait only.
//!
//! Like etcd, a txn is checked before anything is written: the branch each
//! level will take is chosen from the view at the txn's start, and every
//! operation on that path must be able to succeed (a put with
//! `ignore_value` or `ignore_lease` needs its key; a range needs a
//! readable revision). Together with the duplicate-key rule this means the
//! execution that follows cannot fail halfway; if it does, an invariant is
//! broken and the store panics rather than keep half a txn.

use crate::error::{Error, Result};
use crate::kv::{ReadView, WriteTxn};
use crate::range;
use crate::request::{
    Compare, CompareResult, CompareTarget, RangeRequest, RequestOp, ResponseOp, TxnRequest,
    TxnResponse,
};

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

fn holds(compare: &Compare, kv: &crate::KeyValue) -> bool {
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

/// Checks that the path `request` will take in `view` can run to the end.
pub fn check_path(view: &impl ReadView, request: &TxnRequest) -> Result<()> {
    let branch = if compares_hold(view, &request.compare)? {
        &request.success
    } else {
        &request.failure
    };
    for op in branch {
        match op {
            RequestOp::Range(range) => {
                range::read_revision(range.revision, view.revision(), view.compact_revision())?;
            }
            RequestOp::Put(put) if put.ignore_value || put.ignore_lease => {
                let existing = view.range(&RangeRequest {
                    key: put.key.clone(),
                    count_only: true,
                    ..RangeRequest::default()
                })?;
                if existing.count == 0 {
                    return Err(Error::KeyNotFound);
                }
            }
            RequestOp::Put(_) | RequestOp::DeleteRange(_) => {}
            RequestOp::Txn(nested) => check_path(view, nested)?,
        }
    }
    Ok(())
}

/// Runs a txn that [`check_path`] accepted. Nested responses carry the
/// revision of the outer txn's view when they ran.
pub fn execute(txn: &mut impl WriteTxn, request: &TxnRequest) -> TxnResponse {
    let succeeded = compares_hold(txn, &request.compare).expect("compares were checked");
    let branch = if succeeded {
        &request.success
    } else {
        &request.failure
    };
    let mut responses = Vec::with_capacity(branch.len());
    for op in branch {
        let response = match op {
            RequestOp::Range(range) => {
                ResponseOp::Range(txn.range(range).expect("txn range was checked"))
            }
            RequestOp::Put(put) => ResponseOp::Put(txn.put(put).expect("txn put was checked")),
            RequestOp::DeleteRange(delete) => {
                ResponseOp::DeleteRange(txn.delete_range(delete).expect("txn delete cannot fail"))
            }
            RequestOp::Txn(nested) => ResponseOp::Txn(execute(txn, nested)),
        };
        responses.push(response);
    }
    TxnResponse {
        revision: txn.revision(),
        succeeded,
        responses,
    }
}
