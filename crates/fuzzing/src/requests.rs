//! Fuzz target: every etcd KV request's conversion to the store's types
//! and its validation.
//!
//! The input builds one request of each kind (Range, Put, DeleteRange,
//! Txn nested up to three levels, Compaction, LeaseGrant, LeaseRevoke)
//! with arbitrary field values: keys and range ends from a small alphabet
//! (so keys collide and ranges overlap) or arbitrary bytes, any integers,
//! enum values out of range, ops with no request inside. For each:
//! - the protobuf encoding round-trips;
//! - conversion to the store's types keeps every field (and a txn op with
//!   no request is etcd's "key not found");
//! - the store's validation (`mvcc::validate`) gives etcd's verdict, as
//!   `mvcc_reference::etcd_rules` writes etcd's checks out.

use arbitrary::{Result, Unstructured};
use etcd_proto::etcdserverpb as pb;
use kv_server::proto::convert;
use pb::compare::TargetUnion;
use pb::request_op::Request;

/// Deepest txn nesting generated: etcd's leasing KV nests three levels.
const TXN_DEPTH_MAX: u32 = 3;
/// Ops per txn list, at most; above `MAX_TXN_OPS` sometimes, to reach
/// the limit's checks.
const TXN_OPS_MAX: usize = 140;
const ALPHABET: &[&[u8]] = &[b"a", b"ab", b"b", b"b/1", b"c", b"\0", b"\xff"];

fn bytes(input: &mut Unstructured) -> Result<Vec<u8>> {
    Ok(match input.int_in_range(0..=9)? {
        0 => Vec::new(),
        1 => vec![0],
        2 | 3 => input.arbitrary::<Vec<u8>>()?,
        _ => input.choose(ALPHABET)?.to_vec(),
    })
}

fn range(input: &mut Unstructured) -> Result<pb::RangeRequest> {
    Ok(pb::RangeRequest {
        key: bytes(input)?,
        range_end: bytes(input)?,
        limit: input.arbitrary()?,
        revision: input.arbitrary()?,
        sort_order: input.arbitrary()?,
        sort_target: input.arbitrary()?,
        serializable: input.arbitrary()?,
        keys_only: input.arbitrary()?,
        count_only: input.arbitrary()?,
        min_mod_revision: input.arbitrary()?,
        max_mod_revision: input.arbitrary()?,
        min_create_revision: input.arbitrary()?,
        max_create_revision: input.arbitrary()?,
    })
}

fn put(input: &mut Unstructured) -> Result<pb::PutRequest> {
    Ok(pb::PutRequest {
        key: bytes(input)?,
        value: bytes(input)?,
        lease: input.int_in_range(-1..=3)?,
        prev_kv: input.arbitrary()?,
        ignore_value: input.ratio(1, 5)?,
        ignore_lease: input.ratio(1, 5)?,
    })
}

fn delete(input: &mut Unstructured) -> Result<pb::DeleteRangeRequest> {
    Ok(pb::DeleteRangeRequest {
        key: bytes(input)?,
        range_end: bytes(input)?,
        prev_kv: input.arbitrary()?,
    })
}

fn compare(input: &mut Unstructured) -> Result<pb::Compare> {
    let target_union = match input.int_in_range(0..=5)? {
        0 => None,
        1 => Some(TargetUnion::Version(input.arbitrary()?)),
        2 => Some(TargetUnion::CreateRevision(input.arbitrary()?)),
        3 => Some(TargetUnion::ModRevision(input.arbitrary()?)),
        4 => Some(TargetUnion::Value(bytes(input)?)),
        _ => Some(TargetUnion::Lease(input.arbitrary()?)),
    };
    Ok(pb::Compare {
        result: input.int_in_range(-1..=4)?,
        target: input.int_in_range(-1..=5)?,
        key: bytes(input)?,
        range_end: bytes(input)?,
        target_union,
    })
}

fn op(input: &mut Unstructured, depth: u32) -> Result<pb::RequestOp> {
    let request = match input.int_in_range(0..=20)? {
        0 => None,
        1..=5 => Some(Request::RequestRange(range(input)?)),
        6..=12 => Some(Request::RequestPut(put(input)?)),
        13..=16 => Some(Request::RequestDeleteRange(delete(input)?)),
        _ if depth < TXN_DEPTH_MAX => Some(Request::RequestTxn(txn(input, depth + 1)?)),
        _ => Some(Request::RequestPut(put(input)?)),
    };
    Ok(pb::RequestOp { request })
}

fn list<T>(input: &mut Unstructured, mut one: impl FnMut(&mut Unstructured) -> Result<T>) -> Result<Vec<T>> {
    let count = if input.ratio(1, 50)? {
        input.int_in_range(0..=TXN_OPS_MAX)?
    } else {
        input.int_in_range(0..=4)?
    };
    (0..count).map(|_| one(input)).collect()
}

fn txn(input: &mut Unstructured, depth: u32) -> Result<pb::TxnRequest> {
    let compare = list(input, compare)?;
    let success = list(input, |input| op(input, depth))?;
    // Often the same ops in both branches, as etcd's leasing KV builds them.
    let failure = if input.ratio(1, 3)? {
        success.clone()
    } else {
        list(input, |input| op(input, depth))?
    };
    Ok(pb::TxnRequest {
        compare,
        success,
        failure,
    })
}

fn round_trips<M: prost::Message + Default + PartialEq + std::fmt::Debug>(message: &M) {
    let decoded = M::decode(&message.encode_to_vec()[..]).expect("an encoded message decodes");
    assert_eq!(&decoded, message, "the protobuf encoding round-trips");
}

/// Whether any op, at any depth, holds no request.
fn has_empty_op(txn: &pb::TxnRequest) -> bool {
    txn.success.iter().chain(&txn.failure).any(|op| match &op.request {
        None => true,
        Some(Request::RequestTxn(nested)) => has_empty_op(nested),
        Some(_) => false,
    })
}

/// The store's verdict on a write, beside etcd's.
fn same_verdict(request: mvcc::WriteRequest) {
    let store = mvcc::validate::check_write(&request, mvcc::validate::MAX_TXN_OPS_DEFAULT);
    let etcd = mvcc_reference::etcd_rules::check(&request);
    assert_eq!(store, etcd, "{request:?}");
}

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    let mut input = Unstructured::new(data);
    let _ = check_all(&mut input);
}

fn check_all(input: &mut Unstructured) -> Result<()> {
    let range = range(input)?;
    round_trips(&range);
    let converted = convert::range_request(range.clone());
    assert_eq!((&converted.key, &converted.range_end), (&range.key, &range.range_end));
    assert_eq!((converted.limit, converted.revision), (range.limit, range.revision));
    let _ = mvcc::validate::check_range(&converted);

    let put = put(input)?;
    round_trips(&put);
    let converted = convert::put_request(put.clone());
    assert_eq!(
        (&converted.key, &converted.value, converted.lease),
        (&put.key, &put.value, put.lease)
    );
    same_verdict(mvcc::WriteRequest::Put(converted));

    let delete = delete(input)?;
    round_trips(&delete);
    let converted = convert::delete_range_request(delete.clone());
    assert_eq!((&converted.key, &converted.range_end), (&delete.key, &delete.range_end));
    same_verdict(mvcc::WriteRequest::DeleteRange(converted));

    let txn = txn(input, 1)?;
    round_trips(&txn);
    match convert::txn_request(txn.clone()) {
        Ok(converted) => {
            assert!(!has_empty_op(&txn));
            assert_eq!(converted.success.len(), txn.success.len());
            same_verdict(mvcc::WriteRequest::Txn(converted));
        }
        Err(error) => {
            assert_eq!(error, mvcc::Error::KeyNotFound);
            assert!(has_empty_op(&txn), "only an empty op is refused in conversion");
        }
    }

    let revision: i64 = input.arbitrary()?;
    same_verdict(mvcc::WriteRequest::Compaction(mvcc::CompactionRequest { revision }));
    let (id, ttl): (i64, i64) = input.arbitrary()?;
    same_verdict(mvcc::WriteRequest::LeaseGrant(mvcc::LeaseGrantRequest { id, ttl }));
    same_verdict(mvcc::WriteRequest::LeaseRevoke(mvcc::LeaseRevokeRequest { id }));
    Ok(())
}
