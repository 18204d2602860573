//! etcd 3.5's request checks, written out on their own for the model:
//! what etcd's gRPC layer refuses before a request reaches raft
//! (`checkPutRequest`, `checkRangeRequest`, `checkDeleteRequest`,
//! `checkTxnRequest` and `checkIntervals` in its `v3rpc/key.go`), plus the
//! lease grant refusals of its lessor. The store has its own code for the
//! same rules (`mvcc::validate`); the model test checks that both give
//! the same verdict on every generated request.
//!
//! This version follows etcd's text literally: maps of keys, and intervals
//! of strings in which an empty end means "no end" and a `[0]` end is a
//! string like any other, so `[key, "\0")` contains nothing.

use std::collections::BTreeSet;

use mvcc::*;

/// etcd's default `--max-txn-ops`.
pub const MAX_TXN_OPS: usize = 128;

/// The verdict etcd gives `request` before proposing it.
pub fn check(request: &WriteRequest) -> Result<()> {
    match request {
        WriteRequest::Put(put) => check_put(put),
        WriteRequest::DeleteRange(delete) => non_empty(&delete.key),
        WriteRequest::Txn(txn) => {
            check_txn(txn, MAX_TXN_OPS)?;
            check_intervals(&txn.success)?;
            check_intervals(&txn.failure)?;
            Ok(())
        }
        WriteRequest::LeaseGrant(grant) if grant.id == NO_LEASE => Err(Error::LeaseNotFound),
        WriteRequest::LeaseGrant(grant) if grant.ttl > MAX_LEASE_TTL => Err(Error::LeaseTtlTooLarge),
        WriteRequest::LeaseGrant(_)
        | WriteRequest::LeaseRevoke(_)
        | WriteRequest::LeaseCheckpoint(_)
        | WriteRequest::Compaction(_)
        | WriteRequest::Alarm(_)
        | WriteRequest::Membership(_)
        | WriteRequest::Auth(_) => Ok(()),
    }
}

fn non_empty(key: &[u8]) -> Result<()> {
    if key.is_empty() {
        return Err(Error::EmptyKey);
    }
    Ok(())
}

fn check_put(put: &PutRequest) -> Result<()> {
    non_empty(&put.key)?;
    if put.ignore_value && !put.value.is_empty() {
        return Err(Error::ValueProvided);
    }
    if put.ignore_lease && put.lease != 0 {
        return Err(Error::LeaseProvided);
    }
    Ok(())
}

fn check_txn(txn: &TxnRequest, max_ops: usize) -> Result<()> {
    let ops = txn.compare.len().max(txn.success.len()).max(txn.failure.len());
    if ops > max_ops {
        return Err(Error::TooManyOperations);
    }
    for compare in &txn.compare {
        non_empty(&compare.key)?;
    }
    for op in txn.success.iter().chain(&txn.failure) {
        match op {
            RequestOp::Range(range) => non_empty(&range.key)?,
            RequestOp::Put(put) => check_put(put)?,
            RequestOp::DeleteRange(delete) => non_empty(&delete.key)?,
            RequestOp::Txn(nested) => check_txn(nested, max_ops - ops)?,
        }
    }
    Ok(())
}

/// One of etcd's string intervals, `[begin, end)`, where an empty `end`
/// sorts above every string.
struct Interval {
    begin: Vec<u8>,
    end: Vec<u8>,
}

impl Interval {
    fn of(delete: &DeleteRangeRequest) -> Interval {
        if delete.range_end.is_empty() {
            return Interval::point(&delete.key);
        }
        Interval {
            begin: delete.key.clone(),
            end: delete.range_end.clone(),
        }
    }

    fn point(key: &[u8]) -> Interval {
        let mut end = key.to_vec();
        end.push(0);
        Interval {
            begin: key.to_vec(),
            end,
        }
    }

    /// `a < b`, with the empty string above all others.
    fn less(a: &[u8], b: &[u8]) -> bool {
        match (a.is_empty(), b.is_empty()) {
            (true, _) => false,
            (false, true) => true,
            (false, false) => a < b,
        }
    }

    fn intersects(&self, other: &Interval) -> bool {
        Interval::less(&self.begin, &other.end) && Interval::less(&other.begin, &self.end)
    }
}

fn hits(deletes: &[Interval], key: &[u8]) -> bool {
    let point = Interval::point(key);
    deletes.iter().any(|interval| interval.intersects(&point))
}

fn check_intervals(ops: &[RequestOp]) -> Result<(BTreeSet<Vec<u8>>, Vec<Interval>)> {
    let mut deletes: Vec<Interval> = Vec::new();
    for op in ops {
        if let RequestOp::DeleteRange(delete) = op {
            deletes.push(Interval::of(delete));
        }
    }
    let mut puts = BTreeSet::new();
    for op in ops {
        let RequestOp::Txn(txn) = op else { continue };
        let (puts_then, deletes_then) = check_intervals(&txn.success)?;
        let (puts_else, deletes_else) = check_intervals(&txn.failure)?;
        for key in &puts_then {
            if puts.contains(key) || hits(&deletes, key) {
                return Err(Error::DuplicateKey);
            }
            puts.insert(key.clone());
        }
        for key in &puts_else {
            if puts.contains(key) && !puts_then.contains(key) {
                return Err(Error::DuplicateKey);
            }
            if hits(&deletes, key) {
                return Err(Error::DuplicateKey);
            }
            puts.insert(key.clone());
        }
        deletes.extend(deletes_then);
        deletes.extend(deletes_else);
    }
    for op in ops {
        let RequestOp::Put(put) = op else { continue };
        if puts.contains(&put.key) || hits(&deletes, &put.key) {
            return Err(Error::DuplicateKey);
        }
        puts.insert(put.key.clone());
    }
    Ok((puts, deletes))
}
