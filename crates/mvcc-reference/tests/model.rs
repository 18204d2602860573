//! Goal: the store answers every request exactly as a small reference
//! model of etcd's semantics does, through random puts, deletes, ranges
//! with every option, txns (nested too), compactions, lease grants and
//! revocations (with keys attached), and restarts.
//!
//! Method: proptest generates a sequence of steps over a tiny key space (so
//! keys collide, generations end and restart, and ranges overlap). Writes
//! go through `Store::apply` in random batch sizes; the model keeps the
//! whole history as a flat list and answers by brute force. Every response
//! and every event list is compared, and so are the leases and the keys
//! each holds. A restart drops the store and reopens it from disk. The
//! model finds a lease's keys by brute force (live values naming it). It
//! shares no code with the store: its request checks are etcd's, written
//! out literally in `etcd_rules`, so every refusal the store gives (or
//! does not give) is compared with etcd's verdict.
//!
//! Txns nest up to three levels deep, and the branches of a nested txn
//! are often built from the same operations, so keys are put and deleted
//! in both branches of one txn, as etcd's leasing KV does.
//! `generated_txns_cover_the_rules` checks that the generator really
//! reaches those shapes, on both sides of the verdict.
//!
//! `PROPTEST_CASES` sets the number of cases (48 by default for CI; run
//! 1000 for a deeper search).

use std::collections::BTreeSet;

use mvcc::*;
use mvcc_reference::etcd_rules;
use mvcc_reference::model::Model;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

// ----------------------------------------------------------- generators --

const KEYS: &[&[u8]] = &[b"a", b"ab", b"b", b"b/1", b"b/2", b"c", b"\0"];

fn key() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![9 => prop::sample::select(KEYS).prop_map(|k| k.to_vec()), 1 => Just(Vec::new())]
}

fn range_end() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => Just(Vec::new()),
        1 => Just(vec![0]),
        2 => prop::sample::select(KEYS).prop_map(|k| k.to_vec()),
        1 => Just(b"b0".to_vec()),
    ]
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(Vec::new()),
        prop::sample::select(vec![b"x".to_vec(), b"y".to_vec(), b"zz".to_vec()])
    ]
}

fn revision() -> impl Strategy<Value = i64> {
    prop_oneof![3 => Just(0i64), 2 => 1i64..40, 1 => -2i64..0]
}

fn range_request() -> impl Strategy<Value = RangeRequest> {
    (
        (key(), range_end(), prop_oneof![Just(0i64), 1i64..4], revision()),
        (
            prop::sample::select(vec![SortOrder::None, SortOrder::Ascend, SortOrder::Descend]),
            prop::sample::select(vec![
                SortTarget::Key,
                SortTarget::Version,
                SortTarget::Create,
                SortTarget::Mod,
                SortTarget::Value,
            ]),
        ),
        (any::<bool>(), any::<bool>()),
        prop::array::uniform4(prop_oneof![3 => Just(0i64), 1 => 1i64..20]),
    )
        .prop_map(
            |((key, range_end, limit, revision), (sort_order, sort_target), (keys_only, count_only), filters)| {
                RangeRequest {
                    key,
                    range_end,
                    limit,
                    revision,
                    sort_order,
                    sort_target,
                    keys_only,
                    count_only,
                    min_mod_revision: filters[0],
                    max_mod_revision: filters[1],
                    min_create_revision: filters[2],
                    max_create_revision: filters[3],
                    uncounted: false,
                    answer_bytes_max: AnswerBytesMax::default(),
                }
            },
        )
}

fn put_request() -> impl Strategy<Value = PutRequest> {
    (
        key(),
        value(),
        prop_oneof![3 => Just(0i64), 1 => 1i64..3],
        any::<bool>(),
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.15),
    )
        .prop_map(|(key, value, lease, prev_kv, ignore_value, ignore_lease)| PutRequest {
            key,
            value: if ignore_value { Vec::new() } else { value },
            lease: if ignore_lease { 0 } else { lease },
            prev_kv,
            ignore_value,
            ignore_lease,
        })
}

fn delete_request() -> impl Strategy<Value = DeleteRangeRequest> {
    (key(), range_end(), any::<bool>()).prop_map(|(key, range_end, prev_kv)| DeleteRangeRequest {
        key,
        range_end,
        prev_kv,
    })
}

fn compare() -> impl Strategy<Value = Compare> {
    (
        key(),
        prop_oneof![4 => Just(Vec::new()), 1 => range_end()],
        prop::sample::select(vec![
            CompareResult::Equal,
            CompareResult::NotEqual,
            CompareResult::Greater,
            CompareResult::Less,
        ]),
        prop_oneof![
            (0i64..4).prop_map(CompareTarget::Version),
            (0i64..20).prop_map(CompareTarget::Create),
            (0i64..20).prop_map(CompareTarget::Mod),
            value().prop_map(CompareTarget::Value),
            (0i64..3).prop_map(CompareTarget::Lease),
        ],
    )
        .prop_map(|(key, range_end, result, target)| Compare {
            result,
            target,
            key,
            range_end,
        })
}

fn flat_op() -> impl Strategy<Value = RequestOp> {
    prop_oneof![
        range_request().prop_map(RequestOp::Range),
        put_request().prop_map(RequestOp::Put),
        delete_request().prop_map(RequestOp::DeleteRange),
    ]
}

/// A txn whose operations come from `op`. Its failure branch is often
/// built from its success branch (the same operations, or the same puts
/// among others), so one key is put in both branches.
fn txn_of(op: impl Strategy<Value = RequestOp> + Clone) -> impl Strategy<Value = TxnRequest> {
    (
        prop::collection::vec(compare(), 0..3),
        prop::collection::vec(op.clone(), 0..4),
        prop::collection::vec(op, 0..4),
        0..4u8,
    )
        .prop_map(|(compare, success, failure, shape)| {
            let failure = match shape {
                0 => success.clone(),
                1 => success
                    .iter()
                    .filter(|op| matches!(op, RequestOp::Put(_) | RequestOp::Txn(_)))
                    .cloned()
                    .chain(failure)
                    .collect(),
                _ => failure,
            };
            TxnRequest {
                compare,
                success,
                failure,
            }
        })
}

/// A txn nested up to three levels deep (the outer txn, and two levels
/// of txns inside it).
fn txn_request() -> impl Strategy<Value = TxnRequest> {
    let op = flat_op().prop_recursive(2, 24, 4, |inner| {
        prop_oneof![
            2 => inner.clone(),
            1 => txn_of(inner).prop_map(RequestOp::Txn),
        ]
    });
    txn_of(op)
}

fn write_request() -> impl Strategy<Value = WriteRequest> {
    prop_oneof![
        5 => put_request().prop_map(WriteRequest::Put),
        2 => delete_request().prop_map(WriteRequest::DeleteRange),
        3 => txn_request().prop_map(WriteRequest::Txn),
        1 => (-1i64..30).prop_map(|revision| WriteRequest::Compaction(CompactionRequest { revision })),
        1 => (0i64..3, prop_oneof![4 => 1i64..100, 1 => MAX_LEASE_TTL - 1..MAX_LEASE_TTL + 2])
            .prop_map(|(id, ttl)| WriteRequest::LeaseGrant(LeaseGrantRequest { id, ttl })),
        1 => (0i64..3).prop_map(|id| WriteRequest::LeaseRevoke(LeaseRevokeRequest { id })),
    ]
}

#[derive(Debug, Clone)]
enum Step {
    /// Writes applied together as one raft batch.
    Apply(Vec<WriteRequest>),
    Range(RangeRequest),
    Restart,
    /// Steps of queued compaction work, as the server's apply stage does
    /// them between applies: any interleaving must read the same.
    CompactSteps(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => prop::collection::vec(write_request(), 1..4).prop_map(Step::Apply),
        4 => range_request().prop_map(Step::Range),
        1 => Just(Step::Restart),
        2 => (1usize..4).prop_map(Step::CompactSteps),
    ]
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn store_matches_model(steps in prop::collection::vec(step(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        let mut model = Model::new();
        let mut raft_index = 0;
        for (number, step) in steps.iter().enumerate() {
            match step {
                Step::Apply(requests) => {
                    raft_index += 1;
                    let applied = store.apply(raft_index, requests).unwrap();
                    for (request, got) in requests.iter().zip(applied) {
                        let expected = model.apply(request);
                        prop_assert_eq!(&got, &expected, "step {}: {:?}", number, request);
                    }
                }
                Step::Range(request) => {
                    prop_assert_eq!(store.range(request), model.range(request, model.current), "step {}: {:?}", number, request);
                }
                Step::CompactSteps(steps) => {
                    for _ in 0..*steps {
                        store.compact_step().unwrap();
                    }
                }
                Step::Restart => {
                    drop(store);
                    store = Store::open(dir.path()).unwrap();
                    prop_assert_eq!(store.consistent_index(), raft_index);
                }
            }
            prop_assert_eq!(store.current_revision(), model.current);
            prop_assert_eq!(store.compact_revision(), model.compact);
            prop_assert_eq!(store.leases(), model.leases.iter().map(|(&id, &ttl)| (id, ttl)).collect::<Vec<_>>());
            for &id in model.leases.keys() {
                let keys: Vec<Vec<u8>> = store.lease(id).unwrap().keys.into_iter().map(Vec::from).collect();
                prop_assert_eq!(keys, model.lease_keys(id), "keys of lease {}", id);
            }
        }
    }
}

// ------------------------------------------------ validation coverage --

/// Levels of txn in `request`: 1 for a txn with no txn inside.
fn depth(request: &TxnRequest) -> usize {
    1 + request
        .success
        .iter()
        .chain(&request.failure)
        .filter_map(|op| match op {
            RequestOp::Txn(nested) => Some(depth(nested)),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

fn puts_of(ops: &[RequestOp]) -> BTreeSet<&[u8]> {
    ops.iter()
        .filter_map(|op| match op {
            RequestOp::Put(put) => Some(put.key.as_slice()),
            _ => None,
        })
        .collect()
}

/// Whether some txn nested in `ops` puts one key in both its branches.
fn nested_puts_in_both_branches(ops: &[RequestOp]) -> bool {
    ops.iter().any(|op| match op {
        RequestOp::Txn(nested) => {
            puts_of(&nested.success)
                .intersection(&puts_of(&nested.failure))
                .next()
                .is_some()
                || nested_puts_in_both_branches(&nested.success)
                || nested_puts_in_both_branches(&nested.failure)
        }
        _ => false,
    })
}

/// Whether one branch, at any level, both puts a key and deletes a range
/// that really holds it (a `[0]` end counting as "every key from here").
fn put_and_delete_in_one_branch(ops: &[RequestOp]) -> bool {
    let deletes: Vec<&DeleteRangeRequest> = ops
        .iter()
        .filter_map(|op| match op {
            RequestOp::DeleteRange(delete) => Some(delete),
            _ => None,
        })
        .collect();
    let here = puts_of(ops).iter().any(|key| {
        deletes
            .iter()
            .any(|delete| Model::in_range(&delete.key, &delete.range_end, key))
    });
    here || ops.iter().any(|op| match op {
        RequestOp::Txn(nested) => {
            put_and_delete_in_one_branch(&nested.success) || put_and_delete_in_one_branch(&nested.failure)
        }
        _ => false,
    })
}

// Goal: the store's request checks give etcd's verdict (accepted, or the
// same error) on every generated txn, and the generator reaches the
// shapes that matter: three levels deep, one key put in both branches of
// a nested txn, and a put and a delete of one key in one branch, each
// both accepted and refused.
// Method: draw 20,000 txns from the model test's generator with a fixed
// seed, compare `validate::check_write` with `etcd_rules::check` on each,
// and count how many of each shape landed on each side of the verdict.
#[test]
fn generated_txns_cover_the_rules() {
    let mut runner = TestRunner::new_with_rng(Config::default(), TestRng::from_seed(RngAlgorithm::ChaCha, &[13; 32]));
    let strategy = txn_request();
    // [accepted, refused as duplicate] per shape.
    let mut deep = [0usize; 2];
    let mut both_branches = [0usize; 2];
    let mut put_and_delete = [0usize; 2];
    for _ in 0..20_000 {
        let txn = strategy.new_tree(&mut runner).expect("a txn").current();
        let request = WriteRequest::Txn(txn.clone());
        let store = validate::check_write(&request, validate::MAX_TXN_OPS_DEFAULT);
        let etcd = etcd_rules::check(&request);
        assert_eq!(store, etcd, "{txn:?}");
        let side = match etcd {
            Ok(()) => 0,
            Err(Error::DuplicateKey) => 1,
            Err(_) => continue,
        };
        let ops: Vec<RequestOp> = txn.success.iter().chain(&txn.failure).cloned().collect();
        if depth(&txn) == 3 {
            deep[side] += 1;
        }
        if nested_puts_in_both_branches(&ops) {
            both_branches[side] += 1;
        }
        if put_and_delete_in_one_branch(&txn.success) || put_and_delete_in_one_branch(&txn.failure) {
            put_and_delete[side] += 1;
        }
    }
    eprintln!("accepted / refused as duplicates: three levels deep {deep:?}, a key put in both branches {both_branches:?}, a put and a delete of one key in one branch {put_and_delete:?}");
    for (shape, counts) in [
        ("three levels deep", deep),
        ("a key put in both branches of a nested txn", both_branches),
        ("a put and a delete of one key in one branch", put_and_delete),
    ] {
        assert!(
            counts[0] >= 50 && counts[1] >= 50,
            "{shape}: {} accepted, {} refused as duplicates",
            counts[0],
            counts[1]
        );
    }
}
