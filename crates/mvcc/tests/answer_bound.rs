//! Goal: a range's answer is bounded in encoded bytes as etcd's gRPC
//! server bounds what it sends: an answer within the bound is answered
//! whole, one past it is refused with etcd's code and message naming the
//! size the answer would have had, and a write txn's ranges, which every
//! member applies, are not refused.
//!
//! Method: a real store in a temporary directory, some keys put through
//! `apply` (some still in the open batch, most committed), and ranges
//! whose bound is set just below, at and above the answer's size as
//! mvcc's `wire` module counts it (the server's tests check those counts
//! against prost's encoding).

use mvcc::wire::{answer_entry_len, answer_tail_len, HEADER_BYTES_MAX};
use mvcc::*;

const KEYS: usize = 300;

struct Harness {
    _dir: tempfile::TempDir,
    store: Store,
    raft_index: u64,
}

impl Harness {
    /// `KEYS` keys `k000`.. with values of varied length, committed but
    /// for the last few.
    fn filled() -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut harness = Harness {
            _dir: dir,
            store,
            raft_index: 0,
        };
        for at in 0..KEYS {
            harness.apply(WriteRequest::Put(PutRequest {
                key: format!("k{at:03}").into_bytes(),
                value: vec![b'v'; 1 + at * 7 % 400],
                ..PutRequest::default()
            }));
            if at == KEYS - 5 {
                harness.store.commit().unwrap();
            }
        }
        harness
    }

    fn apply(&mut self, request: WriteRequest) -> WriteResponse {
        self.raft_index += 1;
        let mut applied = self.store.apply(self.raft_index, &[request]).unwrap();
        applied.remove(0).response.unwrap()
    }
}

fn every_key(max: u64) -> RangeRequest {
    RangeRequest {
        key: b"k".to_vec(),
        range_end: b"l".to_vec(),
        answer_bytes_max: AnswerBytesMax(max),
        ..RangeRequest::default()
    }
}

/// The encoded size of `response` with the largest header, as the store
/// counts it.
fn answer_bytes(response: &RangeResponse) -> u64 {
    HEADER_BYTES_MAX
        + response.kvs.iter().map(answer_entry_len).sum::<u64>()
        + answer_tail_len(response.more, response.count)
}

// Goal: the bound is inclusive, and a refusal names the whole answer's
// size (counted on after the store stopped holding key-values) and the
// bound.
#[test]
fn an_answer_at_the_bound_is_answered_and_one_byte_over_is_refused() {
    let h = Harness::filled();
    let whole = h.store.range(&every_key(u64::MAX)).unwrap();
    assert_eq!(whole.kvs.len(), KEYS);
    let size = answer_bytes(&whole);

    assert_eq!(h.store.range(&every_key(size)).unwrap(), whole);
    for max in [size - 1, size / 2, 1] {
        let refused = h.store.range(&every_key(max)).unwrap_err();
        assert_eq!(refused, Error::AnswerTooLarge { bytes: size, max });
        assert_eq!(refused.code(), Code::ResourceExhausted);
        assert_eq!(
            refused.to_string(),
            format!("grpc: trying to send message larger than max ({size} vs. {max})")
        );
    }
}

// Goal: what is counted is the answer: a limit's extra key (fetched only
// to tell `more`) is not, keys-only answers count no values, and a
// count-only range holds nothing.
#[test]
fn the_bound_counts_the_answer_not_what_was_fetched_for_it() {
    let h = Harness::filled();
    let limited = RangeRequest {
        limit: 100,
        ..every_key(u64::MAX)
    };
    let answer = h.store.range(&limited).unwrap();
    assert!(answer.more);
    assert_eq!(answer.kvs.len(), 100);
    let size = answer_bytes(&answer);
    let at_bound = RangeRequest {
        answer_bytes_max: AnswerBytesMax(size),
        ..limited.clone()
    };
    assert_eq!(h.store.range(&at_bound).unwrap(), answer);

    let keys_only = RangeRequest {
        keys_only: true,
        ..every_key(u64::MAX)
    };
    let keys = h.store.range(&keys_only).unwrap();
    let keys_size = answer_bytes(&keys);
    assert!(keys_size < answer_bytes(&h.store.range(&every_key(u64::MAX)).unwrap()) / 10);
    let keys_at_bound = RangeRequest {
        answer_bytes_max: AnswerBytesMax(keys_size),
        ..keys_only
    };
    assert_eq!(h.store.range(&keys_at_bound).unwrap(), keys);

    let count_only = RangeRequest {
        count_only: true,
        ..every_key(HEADER_BYTES_MAX + 3)
    };
    assert_eq!(h.store.range(&count_only).unwrap().count, KEYS as i64);
}

// Goal: a read-only txn fails with the refusal of its range; a write
// txn's range is applied and answered whatever its bound, as every
// member must apply the txn alike (the server checks the whole answer's
// size before sending it).
#[test]
fn a_read_txn_is_refused_and_a_write_txn_is_not() {
    let mut h = Harness::filled();
    let whole = h.store.range(&every_key(u64::MAX)).unwrap();
    let small = every_key(answer_bytes(&whole) - 1);

    let read = TxnRequest {
        success: vec![RequestOp::Range(small.clone())],
        ..TxnRequest::default()
    };
    let refused = h.store.read_txn(&read).unwrap_err();
    assert!(matches!(refused, Error::AnswerTooLarge { .. }), "{refused:?}");

    let write = TxnRequest {
        success: vec![
            RequestOp::Range(small),
            RequestOp::Put(PutRequest {
                key: b"other".to_vec(),
                value: b"x".to_vec(),
                ..PutRequest::default()
            }),
        ],
        ..TxnRequest::default()
    };
    let WriteResponse::Txn(applied) = h.apply(WriteRequest::Txn(write)) else {
        panic!("a txn answers a txn");
    };
    let ResponseOp::Range(ranged) = &applied.responses[0] else {
        panic!("the first op is a range");
    };
    assert_eq!(ranged.kvs, whole.kvs);
    assert_eq!(
        h.store.range(&every_key(u64::MAX)).unwrap().revision,
        whole.revision + 1
    );
}

// Goal: a sort target with no order sorts (ascending), so every key a
// limited range fetched may be in its answer: all of them are counted,
// and the answer is the sorted one.
#[test]
fn a_sorted_range_counts_every_key_it_fetched() {
    let h = Harness::filled();
    let sorted = RangeRequest {
        limit: 10,
        sort_target: SortTarget::Mod,
        ..every_key(u64::MAX)
    };
    let answer = h.store.range(&sorted).unwrap();
    assert_eq!(answer.kvs.len(), 10);
    assert!(answer
        .kvs
        .windows(2)
        .all(|pair| pair[0].mod_revision < pair[1].mod_revision));
    // What it held: the ten answered and the eleventh fetched.
    let eleven = h
        .store
        .range(&RangeRequest {
            limit: 11,
            ..sorted.clone()
        })
        .unwrap();
    let held =
        HEADER_BYTES_MAX + eleven.kvs.iter().map(answer_entry_len).sum::<u64>() + answer_tail_len(false, KEYS as i64);
    let at_bound = RangeRequest {
        answer_bytes_max: AnswerBytesMax(held),
        ..sorted.clone()
    };
    assert_eq!(h.store.range(&at_bound).unwrap(), answer);
    let under = RangeRequest {
        answer_bytes_max: AnswerBytesMax(held - 1),
        ..sorted
    };
    assert!(matches!(h.store.range(&under), Err(Error::AnswerTooLarge { .. })));
}
