//! The checks etcd makes on a request before it enters raft: empty keys,
//! the txn operation limit, flags that contradict their values, and the
//! duplicate-key rule. The server runs them before proposing; the store
//! runs them again when applying, so a request that slips past the server
//! is refused without side effects rather than half applied.

use std::collections::BTreeSet;

use crate::error::{Error, Result};
use crate::request::{
    Compare, DeleteRangeRequest, LeaseGrantRequest, PutRequest, RangeRequest, RequestOp, TxnRequest, WriteRequest,
};

/// etcd's default `--max-txn-ops`: the most operations a txn may list in
/// its compare, success or failure list (each counted on its own).
pub const MAX_TXN_OPS_DEFAULT: usize = 128;

pub fn check_write(request: &WriteRequest, max_txn_ops: usize) -> Result<()> {
    match request {
        WriteRequest::Put(put) => check_put(put),
        WriteRequest::DeleteRange(delete) => check_delete_range(delete),
        WriteRequest::Txn(txn) => check_txn(txn, max_txn_ops),
        WriteRequest::Compaction(_)
        | WriteRequest::LeaseRevoke(_)
        | WriteRequest::LeaseCheckpoint(_)
        | WriteRequest::Alarm(_)
        | WriteRequest::Membership(_)
        | WriteRequest::Auth(_) => Ok(()),
        WriteRequest::LeaseGrant(grant) => check_lease_grant(grant),
    }
}

/// etcd's lessor refuses lease id 0 (it means "no lease") as not found,
/// and a TTL over [`crate::lease::MAX_LEASE_TTL`].
pub fn check_lease_grant(request: &LeaseGrantRequest) -> Result<()> {
    if request.id == crate::lease::NO_LEASE {
        return Err(Error::LeaseNotFound);
    }
    if request.ttl > crate::lease::MAX_LEASE_TTL {
        return Err(Error::LeaseTtlTooLarge);
    }
    Ok(())
}

pub fn check_range(request: &RangeRequest) -> Result<()> {
    if request.key.is_empty() {
        return Err(Error::EmptyKey);
    }
    Ok(())
}

pub fn check_put(request: &PutRequest) -> Result<()> {
    check_put_fields(&PutFields {
        key: &request.key,
        value: &request.value,
        lease: request.lease,
        ignore_value: request.ignore_value,
        ignore_lease: request.ignore_lease,
    })
}

/// The fields of a put its checks read, borrowed from whichever form
/// the put arrived in (a server checks its wire form without a copy).
pub struct PutFields<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub lease: i64,
    pub ignore_value: bool,
    pub ignore_lease: bool,
}

/// [`check_put`] on borrowed fields.
pub fn check_put_fields(put: &PutFields<'_>) -> Result<()> {
    if put.key.is_empty() {
        return Err(Error::EmptyKey);
    }
    if put.ignore_value && !put.value.is_empty() {
        return Err(Error::ValueProvided);
    }
    if put.ignore_lease && put.lease != 0 {
        return Err(Error::LeaseProvided);
    }
    Ok(())
}

pub fn check_delete_range(request: &DeleteRangeRequest) -> Result<()> {
    if request.key.is_empty() {
        return Err(Error::EmptyKey);
    }
    Ok(())
}

/// The operation limit, every operation's own checks, then the
/// duplicate-key rule on each branch.
pub fn check_txn(request: &TxnRequest, max_txn_ops: usize) -> Result<()> {
    check_txn_operations(request, max_txn_ops)?;
    puts_and_deletes(&request.success)?;
    puts_and_deletes(&request.failure)?;
    Ok(())
}

/// etcd's budget: the longest of the three lists must fit `max_txn_ops`,
/// and each nested txn must fit what its parent left
/// (`max_txn_ops - longest`).
fn check_txn_operations(request: &TxnRequest, max_txn_ops: usize) -> Result<()> {
    let longest = request
        .compare
        .len()
        .max(request.success.len())
        .max(request.failure.len());
    if longest > max_txn_ops {
        return Err(Error::TooManyOperations);
    }
    for compare in &request.compare {
        check_compare(compare)?;
    }
    for op in request.success.iter().chain(&request.failure) {
        match op {
            RequestOp::Range(range) => check_range(range)?,
            RequestOp::Put(put) => check_put(put)?,
            RequestOp::DeleteRange(delete) => check_delete_range(delete)?,
            RequestOp::Txn(txn) => check_txn_operations(txn, max_txn_ops - longest)?,
        }
    }
    Ok(())
}

fn check_compare(compare: &Compare) -> Result<()> {
    if compare.key.is_empty() {
        return Err(Error::EmptyKey);
    }
    Ok(())
}

/// A deleted span as etcd's duplicate-key check sees it: the key alone
/// when `end` is empty, otherwise `[key, end)` compared byte by byte.
///
/// etcd builds these as plain string intervals, so an `end` of `[0]`
/// ("every key from `key` on", what clients send for `WithFromKey`)
/// spans nothing here: `"\0"` sorts below every non-empty key. A txn
/// that deletes from a key on and puts a key in that span passes the
/// check, as in etcd, and runs in order (the put starts a new
/// generation). The one such txn that cannot run, a put with
/// `ignore_value` or `ignore_lease` of a key the same txn deleted, makes
/// etcd 3.5 panic while applying; here `txn::plan` refuses it with "key
/// not found" before anything is written.
struct Span<'a> {
    key: &'a [u8],
    end: &'a [u8],
}

impl Span<'_> {
    fn contains(&self, candidate: &[u8]) -> bool {
        if self.end.is_empty() {
            candidate == self.key
        } else {
            self.key <= candidate && candidate < self.end
        }
    }
}

/// The duplicate-key rule for one list of operations, as etcd's
/// `checkIntervals`: no key is put twice, and no key is both put and
/// inside a deleted span, counting nested txns. The keys a level puts are
/// a set: a nested txn's success and failure branches exclude each other,
/// so one key put in both is put once as far as the levels above care.
///
/// The order of the checks is etcd's, and it matters: this level's
/// deletes are gathered first; each nested txn's puts are checked against
/// them and against the deletes of the nested txns before it (not after
/// it); this level's own puts are checked last, against everything.
/// Returns the keys put and spans deleted, for the level above.
fn puts_and_deletes(ops: &[RequestOp]) -> Result<(BTreeSet<&[u8]>, Vec<Span<'_>>)> {
    let mut deletes: Vec<Span<'_>> = ops
        .iter()
        .filter_map(|op| match op {
            RequestOp::DeleteRange(delete) => Some(Span {
                key: &delete.key,
                end: &delete.range_end,
            }),
            _ => None,
        })
        .collect();
    let mut puts: BTreeSet<&[u8]> = BTreeSet::new();
    let deleted = |deletes: &[Span<'_>], key: &[u8]| deletes.iter().any(|span| span.contains(key));

    for op in ops {
        let RequestOp::Txn(txn) = op else { continue };
        let (puts_success, deletes_success) = puts_and_deletes(&txn.success)?;
        let (puts_failure, deletes_failure) = puts_and_deletes(&txn.failure)?;
        for &key in &puts_success {
            if puts.contains(key) || deleted(&deletes, key) {
                return Err(Error::DuplicateKey);
            }
            puts.insert(key);
        }
        for &key in &puts_failure {
            if (puts.contains(key) && !puts_success.contains(key)) || deleted(&deletes, key) {
                return Err(Error::DuplicateKey);
            }
            puts.insert(key);
        }
        deletes.extend(deletes_success);
        deletes.extend(deletes_failure);
    }

    for op in ops {
        let RequestOp::Put(put) = op else { continue };
        if !puts.insert(&put.key) || deleted(&deletes, &put.key) {
            return Err(Error::DuplicateKey);
        }
    }
    Ok((puts, deletes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(key: &str) -> RequestOp {
        RequestOp::Put(PutRequest {
            key: key.into(),
            value: b"v".to_vec(),
            ..PutRequest::default()
        })
    }

    fn delete(key: &str, end: &str) -> RequestOp {
        RequestOp::DeleteRange(DeleteRangeRequest {
            key: key.into(),
            range_end: end.into(),
            prev_kv: false,
        })
    }

    fn nested(request: TxnRequest) -> RequestOp {
        RequestOp::Txn(request)
    }

    fn txn(success: Vec<RequestOp>, failure: Vec<RequestOp>) -> TxnRequest {
        TxnRequest {
            compare: Vec::new(),
            success,
            failure,
        }
    }

    // Goal: the duplicate-key rule as etcd applies it, case by case.
    #[test]
    fn duplicate_key_rule() {
        let cases: Vec<(&str, TxnRequest, bool)> = vec![
            ("two puts of one key", txn(vec![put("a"), put("a")], vec![]), false),
            ("puts of two keys", txn(vec![put("a"), put("b")], vec![]), true),
            (
                "same key in success and failure",
                txn(vec![put("a")], vec![put("a")]),
                true,
            ),
            (
                "put inside a deleted range",
                txn(vec![delete("a", "c"), put("b")], vec![]),
                false,
            ),
            (
                "put at a range's end",
                txn(vec![delete("a", "c"), put("c")], vec![]),
                true,
            ),
            (
                "put of a deleted key",
                txn(vec![delete("a", ""), put("a")], vec![]),
                false,
            ),
            (
                "two deletes overlapping",
                txn(vec![delete("a", "c"), delete("b", "d")], vec![]),
                true,
            ),
            (
                "nested put of a key put outside",
                txn(vec![put("a"), RequestOp::Txn(txn(vec![put("a")], vec![]))], vec![]),
                false,
            ),
            (
                "nested put in both branches",
                txn(vec![RequestOp::Txn(txn(vec![put("a")], vec![put("a")]))], vec![]),
                true,
            ),
            (
                "nested delete covering an outer put",
                txn(
                    vec![put("b"), RequestOp::Txn(txn(vec![delete("a", "c")], vec![]))],
                    vec![],
                ),
                false,
            ),
            (
                "outer delete covering a nested put",
                txn(
                    vec![delete("a", "c"), RequestOp::Txn(txn(vec![put("b")], vec![]))],
                    vec![],
                ),
                false,
            ),
            (
                "a key put in both branches, two levels down (etcd's leasing KV)",
                txn(
                    vec![nested(txn(vec![nested(txn(vec![put("k")], vec![put("k")]))], vec![]))],
                    vec![],
                ),
                true,
            ),
            (
                "a key put in both branches, and again beside that txn",
                txn(vec![nested(txn(vec![put("k")], vec![put("k")])), put("k")], vec![]),
                false,
            ),
            (
                "two sibling txns each putting a key in both branches",
                txn(
                    vec![
                        nested(txn(vec![put("k")], vec![put("k")])),
                        nested(txn(vec![put("k")], vec![put("k")])),
                    ],
                    vec![],
                ),
                false,
            ),
            (
                "a delete from a key on ([0]) spans nothing for the rule",
                txn(vec![delete("a", "\0"), put("b")], vec![]),
                true,
            ),
            (
                "a nested put checked against an earlier sibling's delete",
                txn(
                    vec![
                        nested(txn(vec![delete("a", "c")], vec![])),
                        nested(txn(vec![put("b")], vec![])),
                    ],
                    vec![],
                ),
                false,
            ),
            (
                "a nested put is not checked against a later sibling's delete",
                txn(
                    vec![
                        nested(txn(vec![put("b")], vec![])),
                        nested(txn(vec![delete("a", "c")], vec![])),
                    ],
                    vec![],
                ),
                true,
            ),
            (
                "an inverted range deletes nothing",
                txn(vec![delete("c", "a"), put("b")], vec![]),
                true,
            ),
        ];
        for (name, request, ok) in cases {
            let result = check_txn(&request, MAX_TXN_OPS_DEFAULT);
            assert_eq!(result.is_ok(), ok, "{name}: {result:?}");
            if !ok {
                assert_eq!(result, Err(Error::DuplicateKey), "{name}");
            }
        }
    }

    // Goal: the operation limit counts each list on its own, and the other
    // per-operation checks give etcd's errors.
    #[test]
    fn limits_and_flags() {
        let many: Vec<RequestOp> = (0..=MAX_TXN_OPS_DEFAULT).map(|i| put(&format!("k{i}"))).collect();
        assert_eq!(
            check_txn(&txn(many.clone(), vec![]), MAX_TXN_OPS_DEFAULT),
            Err(Error::TooManyOperations)
        );
        assert_eq!(
            check_txn(&txn(many[1..].to_vec(), many[1..].to_vec()), MAX_TXN_OPS_DEFAULT),
            Ok(())
        );
        assert_eq!(check_txn(&txn(vec![put("")], vec![]), 8), Err(Error::EmptyKey));
        let bad = PutRequest {
            key: b"k".to_vec(),
            value: b"v".to_vec(),
            ignore_value: true,
            ..PutRequest::default()
        };
        assert_eq!(check_put(&bad), Err(Error::ValueProvided));
        let bad = PutRequest {
            key: b"k".to_vec(),
            lease: 5,
            ignore_lease: true,
            ..PutRequest::default()
        };
        assert_eq!(check_put(&bad), Err(Error::LeaseProvided));
    }
}
