//! Conversions between etcd's wire messages and the store's own types.
//! Headers are the member core's (`Member::header`); errors become gRPC
//! statuses in `api::errors`.

use crate::proto::etcdserverpb as pb;
use crate::proto::mvccpb;

pub fn key_value(kv: mvcc::KeyValue) -> mvccpb::KeyValue {
    mvccpb::KeyValue {
        key: kv.key,
        create_revision: kv.create_revision,
        mod_revision: kv.mod_revision,
        version: kv.version,
        value: kv.value,
        lease: kv.lease,
    }
}

/// A key-value from etcd's wire (or etcd's own store) as the store's.
pub fn from_key_value(kv: mvccpb::KeyValue) -> mvcc::KeyValue {
    mvcc::KeyValue {
        key: kv.key,
        create_revision: kv.create_revision,
        mod_revision: kv.mod_revision,
        version: kv.version,
        value: kv.value,
        lease: kv.lease,
    }
}

pub fn range_request(request: pb::RangeRequest) -> mvcc::RangeRequest {
    use pb::range_request::{SortOrder, SortTarget};
    mvcc::RangeRequest {
        key: request.key,
        range_end: request.range_end,
        limit: request.limit,
        revision: request.revision,
        sort_order: match SortOrder::try_from(request.sort_order) {
            Ok(SortOrder::Ascend) => mvcc::SortOrder::Ascend,
            Ok(SortOrder::Descend) => mvcc::SortOrder::Descend,
            _ => mvcc::SortOrder::None,
        },
        sort_target: match SortTarget::try_from(request.sort_target) {
            Ok(SortTarget::Version) => mvcc::SortTarget::Version,
            Ok(SortTarget::Create) => mvcc::SortTarget::Create,
            Ok(SortTarget::Mod) => mvcc::SortTarget::Mod,
            Ok(SortTarget::Value) => mvcc::SortTarget::Value,
            _ => mvcc::SortTarget::Key,
        },
        keys_only: request.keys_only,
        count_only: request.count_only,
        min_mod_revision: request.min_mod_revision,
        max_mod_revision: request.max_mod_revision,
        min_create_revision: request.min_create_revision,
        max_create_revision: request.max_create_revision,
        uncounted: false,
        // etcd's gRPC send limit (mvcc's wire.rs).
        answer_bytes_max: mvcc::AnswerBytesMax::default(),
    }
}

/// The bytes `header` adds to an answer.
fn header_bytes(header: Option<&pb::ResponseHeader>) -> u64 {
    use prost::Message as _;
    header.map_or(0, |header| mvcc::wire::framed_len(header.encoded_len() as u64))
}

/// The store keeps room in a range's bound for the largest header
/// (mvcc's wire.rs); this is the bound that keeps room for `header`
/// instead, so that an answer is refused exactly when etcd's send limit
/// would refuse it with that header.
pub fn answer_bound(header: Option<&pb::ResponseHeader>) -> mvcc::AnswerBytesMax {
    mvcc::AnswerBytesMax(mvcc::wire::ANSWER_BYTES_MAX + mvcc::wire::HEADER_BYTES_MAX - header_bytes(header))
}

/// A store's refusal of a range answer over its bound counts the largest
/// header, against the bound [`answer_bound`] gave; this puts `header`'s
/// own bytes in their place in both, so the refusal names the size and
/// the limit etcd would name.
pub fn sized_refusal(error: mvcc::Error, header: Option<&pb::ResponseHeader>) -> mvcc::Error {
    let unused = mvcc::wire::HEADER_BYTES_MAX - header_bytes(header);
    match error {
        mvcc::Error::AnswerTooLarge { bytes, max } => mvcc::Error::AnswerTooLarge {
            bytes: bytes - unused,
            max: max - unused,
        },
        other => other,
    }
}

pub fn put_request(request: pb::PutRequest) -> mvcc::PutRequest {
    mvcc::PutRequest {
        key: request.key,
        value: request.value,
        lease: request.lease,
        prev_kv: request.prev_kv,
        ignore_value: request.ignore_value,
        ignore_lease: request.ignore_lease,
    }
}

pub fn delete_range_request(request: pb::DeleteRangeRequest) -> mvcc::DeleteRangeRequest {
    mvcc::DeleteRangeRequest {
        key: request.key,
        range_end: request.range_end,
        prev_kv: request.prev_kv,
    }
}

/// A compare whose operand does not match its target compares against the
/// target's zero value, as in etcd.
fn compare(compare: pb::Compare) -> mvcc::Compare {
    use pb::compare::{CompareResult, CompareTarget, TargetUnion};
    let operand = compare.target_union;
    let int = |want: fn(&TargetUnion) -> Option<i64>| operand.as_ref().and_then(want).unwrap_or(0);
    let target = match CompareTarget::try_from(compare.target).unwrap_or(CompareTarget::Version) {
        CompareTarget::Version => mvcc::CompareTarget::Version(int(|u| match u {
            TargetUnion::Version(v) => Some(*v),
            _ => None,
        })),
        CompareTarget::Create => mvcc::CompareTarget::Create(int(|u| match u {
            TargetUnion::CreateRevision(v) => Some(*v),
            _ => None,
        })),
        CompareTarget::Mod => mvcc::CompareTarget::Mod(int(|u| match u {
            TargetUnion::ModRevision(v) => Some(*v),
            _ => None,
        })),
        CompareTarget::Lease => mvcc::CompareTarget::Lease(int(|u| match u {
            TargetUnion::Lease(v) => Some(*v),
            _ => None,
        })),
        CompareTarget::Value => mvcc::CompareTarget::Value(match operand {
            Some(TargetUnion::Value(v)) => v,
            _ => Vec::new(),
        }),
    };
    mvcc::Compare {
        result: match CompareResult::try_from(compare.result).unwrap_or(CompareResult::Equal) {
            CompareResult::Equal => mvcc::CompareResult::Equal,
            CompareResult::Greater => mvcc::CompareResult::Greater,
            CompareResult::Less => mvcc::CompareResult::Less,
            CompareResult::NotEqual => mvcc::CompareResult::NotEqual,
        },
        target,
        key: compare.key,
        range_end: compare.range_end,
    }
}

/// An op with no request inside is etcd's "key not found".
fn request_op(op: pb::RequestOp) -> Result<mvcc::RequestOp, mvcc::Error> {
    use pb::request_op::Request;
    Ok(match op.request.ok_or(mvcc::Error::KeyNotFound)? {
        Request::RequestRange(range) => mvcc::RequestOp::Range(range_request(range)),
        Request::RequestPut(put) => mvcc::RequestOp::Put(put_request(put)),
        Request::RequestDeleteRange(delete) => mvcc::RequestOp::DeleteRange(delete_range_request(delete)),
        Request::RequestTxn(txn) => mvcc::RequestOp::Txn(txn_request(txn)?),
    })
}

pub fn txn_request(request: pb::TxnRequest) -> Result<mvcc::TxnRequest, mvcc::Error> {
    Ok(mvcc::TxnRequest {
        compare: request.compare.into_iter().map(compare).collect(),
        success: request.success.into_iter().map(request_op).collect::<Result<_, _>>()?,
        failure: request.failure.into_iter().map(request_op).collect::<Result<_, _>>()?,
    })
}

pub fn range_response(response: mvcc::RangeResponse, header: Option<pb::ResponseHeader>) -> pb::RangeResponse {
    pb::RangeResponse {
        header,
        kvs: response.kvs.into_iter().map(key_value).collect(),
        more: response.more,
        count: response.count,
    }
}

pub fn put_response(response: mvcc::PutResponse, header: Option<pb::ResponseHeader>) -> pb::PutResponse {
    pb::PutResponse {
        header,
        prev_kv: response.prev_kv.map(key_value),
    }
}

pub fn delete_range_response(
    response: mvcc::DeleteRangeResponse,
    header: Option<pb::ResponseHeader>,
) -> pb::DeleteRangeResponse {
    pb::DeleteRangeResponse {
        header,
        deleted: response.deleted,
        prev_kvs: response.prev_kvs.into_iter().map(key_value).collect(),
    }
}

/// Nested responses carry only their revision in the header, as etcd's do
/// (and a nested txn's is empty: revision 0).
fn nested_header(revision: i64) -> Option<pb::ResponseHeader> {
    Some(pb::ResponseHeader {
        revision,
        ..pb::ResponseHeader::default()
    })
}

pub fn txn_response(response: mvcc::TxnResponse, header: Option<pb::ResponseHeader>) -> pb::TxnResponse {
    use pb::response_op::Response;
    let responses = response
        .responses
        .into_iter()
        .map(|op| pb::ResponseOp {
            response: Some(match op {
                mvcc::ResponseOp::Range(r) => {
                    Response::ResponseRange(range_response(r.clone(), nested_header(r.revision)))
                }
                mvcc::ResponseOp::Put(r) => Response::ResponsePut(put_response(r.clone(), nested_header(r.revision))),
                mvcc::ResponseOp::DeleteRange(r) => {
                    Response::ResponseDeleteRange(delete_range_response(r.clone(), nested_header(r.revision)))
                }
                mvcc::ResponseOp::Txn(r) => Response::ResponseTxn(txn_response(r, nested_header(0))),
            }),
        })
        .collect();
    pb::TxnResponse {
        header,
        succeeded: response.succeeded,
        responses,
    }
}

#[cfg(test)]
mod tests {
    use prost::Message as _;

    use super::*;

    /// Key-values with every field empty, small, and at its largest.
    fn key_values() -> Vec<mvcc::KeyValue> {
        let mut kvs = vec![mvcc::KeyValue::default()];
        for (at, size) in [0usize, 1, 127, 128, 300, 20_000].into_iter().enumerate() {
            let at = at as i64;
            kvs.push(mvcc::KeyValue {
                key: vec![b'k'; size.max(1)],
                create_revision: 1 + at * 1_000_003,
                mod_revision: i64::MAX - at,
                version: at,
                value: vec![b'v'; size],
                lease: if at % 2 == 0 { -at } else { 1 << (at * 9) },
            });
        }
        kvs
    }

    // Goal: the store bounds a range's answer by counting its encoding
    // (mvcc's wire.rs) without prost; the count must be prost's, header
    // included, so that the store refuses what etcd's send limit would.
    #[test]
    fn the_stores_count_of_an_answer_is_prosts_encoding() {
        for kv in key_values() {
            let encoded = key_value(kv.clone()).encoded_len() as u64;
            assert_eq!(mvcc::wire::key_value_len(&kv), encoded, "{kv:?}");
        }
        let largest = pb::ResponseHeader {
            cluster_id: u64::MAX,
            member_id: u64::MAX,
            revision: -1,
            raft_term: u64::MAX,
        };
        let header_bytes = mvcc::wire::framed_len(largest.encoded_len() as u64);
        assert_eq!(header_bytes, mvcc::wire::HEADER_BYTES_MAX);
        for (more, count) in [(false, 0), (true, 1), (true, i64::MAX)] {
            let kvs = key_values();
            let counted = mvcc::wire::HEADER_BYTES_MAX
                + kvs.iter().map(mvcc::wire::answer_entry_len).sum::<u64>()
                + mvcc::wire::answer_tail_len(more, count);
            let response = mvcc::RangeResponse {
                revision: 7,
                kvs,
                more,
                count,
            };
            let encoded = range_response(response, Some(largest)).encoded_len() as u64;
            assert_eq!(counted, encoded);
        }
    }

    // Goal: a refusal names the answer's size with this member's header,
    // not the largest one the store kept room for, and the bound given
    // the store refuses exactly what etcd's send limit would.
    #[test]
    fn a_refusal_names_the_size_with_the_members_header() {
        let header = pb::ResponseHeader {
            cluster_id: 17,
            member_id: 1 << 40,
            revision: 12,
            raft_term: 2,
        };
        let kvs = key_values();
        let counted = mvcc::wire::HEADER_BYTES_MAX + kvs.iter().map(mvcc::wire::answer_entry_len).sum::<u64>();
        let bound = answer_bound(Some(&header)).0;
        let refused = mvcc::Error::AnswerTooLarge {
            bytes: counted,
            max: bound,
        };
        let response = mvcc::RangeResponse {
            revision: 12,
            kvs,
            more: false,
            count: 0,
        };
        let encoded = range_response(response, Some(header)).encoded_len() as u64;
        let sized = sized_refusal(refused, Some(&header));
        let max = mvcc::wire::ANSWER_BYTES_MAX;
        assert_eq!(sized, mvcc::Error::AnswerTooLarge { bytes: encoded, max });
        // The store refuses when its count passes the bound, which is
        // when the encoding with this header passes etcd's limit.
        assert_eq!(bound - counted, max - encoded);
    }
}
