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

use std::collections::{BTreeMap, BTreeSet};

use mvcc::*;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

mod etcd_rules;

// ---------------------------------------------------------------- model --

/// The reference: every change ever made, in order.
#[derive(Default)]
struct Model {
    /// (main revision, key, value after the change; None for a delete)
    history: Vec<(i64, Vec<u8>, Option<KeyValue>)>,
    current: i64,
    compact: i64,
    /// Lease id -> granted TTL.
    leases: BTreeMap<i64, i64>,
}

impl Model {
    fn new() -> Model {
        Model {
            current: 1,
            compact: -1,
            ..Model::default()
        }
    }

    fn keys(&self) -> BTreeSet<Vec<u8>> {
        self.history.iter().map(|(_, key, _)| key.clone()).collect()
    }

    fn at(&self, key: &[u8], revision: i64) -> Option<KeyValue> {
        self.history
            .iter()
            .rev()
            .find(|(main, k, _)| *main <= revision && k == key)
            .and_then(|(_, _, kv)| kv.clone())
    }

    /// The keys whose current value names lease `id`, in key order.
    fn lease_keys(&self, id: i64) -> Vec<Vec<u8>> {
        self.keys()
            .into_iter()
            .filter(|k| self.at(k, self.current).is_some_and(|kv| kv.lease == id))
            .collect()
    }

    fn in_range(key: &[u8], end: &[u8], candidate: &[u8]) -> bool {
        match end {
            [] => candidate == key,
            [0] => candidate >= key,
            end => candidate >= key && candidate < end,
        }
    }

    fn range(&self, request: &RangeRequest, view: i64) -> Result<RangeResponse> {
        if request.key.is_empty() {
            return Err(Error::EmptyKey);
        }
        let at = if request.revision <= 0 { view } else { request.revision };
        if request.revision > view {
            return Err(Error::FutureRevision);
        }
        if request.revision > 0 && request.revision < self.compact {
            return Err(Error::Compacted);
        }
        let mut kvs: Vec<KeyValue> = self
            .keys()
            .into_iter()
            .filter(|k| Model::in_range(&request.key, &request.range_end, k))
            .filter_map(|k| self.at(&k, at))
            .collect();
        let count = kvs.len() as i64;
        let filtered = request.min_mod_revision != 0
            || request.max_mod_revision != 0
            || request.min_create_revision != 0
            || request.max_create_revision != 0;
        // etcd fetches only limit + 1 keys (in key order) when the request
        // names no sort order and no filter, even with a sort target.
        if request.limit > 0 && request.sort_order == SortOrder::None && !filtered {
            kvs.truncate(request.limit as usize + 1);
        }
        kvs.retain(|kv| {
            (request.min_mod_revision == 0 || kv.mod_revision >= request.min_mod_revision)
                && (request.max_mod_revision == 0 || kv.mod_revision <= request.max_mod_revision)
                && (request.min_create_revision == 0 || kv.create_revision >= request.min_create_revision)
                && (request.max_create_revision == 0 || kv.create_revision <= request.max_create_revision)
        });
        let key_of = |kv: &KeyValue| -> (Vec<u8>, i64) {
            match request.sort_target {
                SortTarget::Key => (kv.key.clone(), 0),
                SortTarget::Version => (Vec::new(), kv.version),
                SortTarget::Create => (Vec::new(), kv.create_revision),
                SortTarget::Mod => (Vec::new(), kv.mod_revision),
                SortTarget::Value => (kv.value.clone(), 0),
            }
        };
        let order = match (request.sort_order, request.sort_target) {
            (SortOrder::None, SortTarget::Key) => SortOrder::None,
            (SortOrder::None, _) => SortOrder::Ascend,
            (order, _) => order,
        };
        match order {
            SortOrder::None => {}
            SortOrder::Ascend => kvs.sort_by_key(key_of),
            SortOrder::Descend => kvs.sort_by_key(|kv| std::cmp::Reverse(key_of(kv))),
        }
        let more = request.limit > 0 && kvs.len() as i64 > request.limit;
        if request.limit > 0 {
            kvs.truncate(request.limit as usize);
        }
        if request.keys_only {
            kvs.iter_mut().for_each(|kv| kv.value.clear());
        }
        if request.count_only {
            return Ok(RangeResponse {
                revision: view,
                kvs: Vec::new(),
                more: false,
                count,
            });
        }
        Ok(RangeResponse {
            revision: view,
            kvs,
            more,
            count,
        })
    }
}

/// A write transaction on the model: changes land in `history` at
/// `begin + 1` as they are made.
struct ModelTxn<'a> {
    model: &'a mut Model,
    begin: i64,
    changed: bool,
    events: Vec<Event>,
}

impl ModelTxn<'_> {
    fn view(&self) -> i64 {
        self.begin + i64::from(self.changed)
    }

    fn live(&self, key: &[u8]) -> Option<KeyValue> {
        self.model.at(key, self.view())
    }

    fn put(&mut self, request: &PutRequest) -> Result<PutResponse> {
        if request.lease != 0 && !self.model.leases.contains_key(&request.lease) {
            return Err(Error::LeaseNotFound);
        }
        let previous = self.live(&request.key);
        if (request.ignore_value || request.ignore_lease) && previous.is_none() {
            return Err(Error::KeyNotFound);
        }
        let main = self.begin + 1;
        let kv = KeyValue {
            key: request.key.clone(),
            create_revision: previous.as_ref().map_or(main, |p| p.create_revision),
            mod_revision: main,
            version: previous.as_ref().map_or(1, |p| p.version + 1),
            value: if request.ignore_value {
                previous.clone().unwrap().value
            } else {
                request.value.clone()
            },
            lease: if request.ignore_lease {
                previous.clone().unwrap().lease
            } else {
                request.lease
            },
        };
        self.model.history.push((main, request.key.clone(), Some(kv.clone())));
        self.changed = true;
        self.events.push(Event {
            kind: EventKind::Put,
            kv,
        });
        Ok(PutResponse {
            revision: main,
            prev_kv: previous.filter(|_| request.prev_kv),
        })
    }

    fn delete(&mut self, request: &DeleteRangeRequest) -> DeleteRangeResponse {
        let view = self.view();
        let doomed: Vec<KeyValue> = self
            .model
            .keys()
            .into_iter()
            .filter(|k| Model::in_range(&request.key, &request.range_end, k))
            .filter_map(|k| self.model.at(&k, view))
            .collect();
        let main = self.begin + 1;
        for kv in &doomed {
            self.model.history.push((main, kv.key.clone(), None));
            self.changed = true;
            self.events.push(Event {
                kind: EventKind::Delete,
                kv: KeyValue {
                    key: kv.key.clone(),
                    mod_revision: main,
                    ..KeyValue::default()
                },
            });
        }
        DeleteRangeResponse {
            revision: self.view(),
            deleted: doomed.len() as i64,
            prev_kvs: if request.prev_kv { doomed } else { Vec::new() },
        }
    }

    fn compares_hold(&self, compares: &[Compare]) -> bool {
        compares.iter().all(|compare| {
            let kvs: Vec<KeyValue> = self
                .model
                .keys()
                .into_iter()
                .filter(|k| Model::in_range(&compare.key, &compare.range_end, k))
                .filter_map(|k| self.model.at(&k, self.view()))
                .collect();
            let check = |kv: &KeyValue| {
                let ordering = match &compare.target {
                    CompareTarget::Version(v) => kv.version.cmp(v),
                    CompareTarget::Create(v) => kv.create_revision.cmp(v),
                    CompareTarget::Mod(v) => kv.mod_revision.cmp(v),
                    CompareTarget::Lease(v) => kv.lease.cmp(v),
                    CompareTarget::Value(v) => kv.value.cmp(v),
                };
                match compare.result {
                    CompareResult::Equal => ordering.is_eq(),
                    CompareResult::NotEqual => ordering.is_ne(),
                    CompareResult::Greater => ordering.is_gt(),
                    CompareResult::Less => ordering.is_lt(),
                }
            };
            if kvs.is_empty() {
                !matches!(compare.target, CompareTarget::Value(_)) && check(&KeyValue::default())
            } else {
                kvs.iter().all(check)
            }
        })
    }

    /// The branch of every level, from the starting view, depth first.
    fn path(&self, request: &TxnRequest, path: &mut Vec<bool>) {
        let succeeded = self.compares_hold(&request.compare);
        path.push(succeeded);
        for op in if succeeded { &request.success } else { &request.failure } {
            if let RequestOp::Txn(nested) = op {
                self.path(nested, path);
            }
        }
    }

    /// Every operation on the path, depth first, in path order.
    fn walk<'r>(request: &'r TxnRequest, path: &[bool], at: &mut usize, visit: &mut impl FnMut(&'r RequestOp)) {
        let succeeded = path[*at];
        *at += 1;
        for op in if succeeded { &request.success } else { &request.failure } {
            visit(op);
            if let RequestOp::Txn(nested) = op {
                ModelTxn::walk(nested, path, at, visit);
            }
        }
    }

    /// etcd's pre-check: puts on the path first (key, then lease), then
    /// ranges. Beyond etcd, a put that keeps the old value or lease of a
    /// key the txn deleted before it is refused as "key not found" (etcd
    /// 3.5 lets it through and panics while applying it).
    fn check(&self, request: &TxnRequest, path: &[bool]) -> Result<()> {
        let mut ops = Vec::new();
        ModelTxn::walk(request, path, &mut 0, &mut |op| ops.push(op));
        let mut deleted: Vec<&DeleteRangeRequest> = Vec::new();
        for op in &ops {
            if let RequestOp::DeleteRange(delete) = op {
                deleted.push(delete);
            }
            if let RequestOp::Put(put) = op {
                let removed = deleted
                    .iter()
                    .any(|delete| Model::in_range(&delete.key, &delete.range_end, &put.key));
                if (put.ignore_value || put.ignore_lease) && (self.live(&put.key).is_none() || removed) {
                    return Err(Error::KeyNotFound);
                }
                if put.lease != 0 && !self.model.leases.contains_key(&put.lease) {
                    return Err(Error::LeaseNotFound);
                }
            }
        }
        for op in &ops {
            if let RequestOp::Range(range) = op {
                if range.revision != 0 && range.revision > self.view() {
                    return Err(Error::FutureRevision);
                }
                if range.revision != 0 && range.revision < self.model.compact {
                    return Err(Error::Compacted);
                }
            }
        }
        Ok(())
    }

    fn txn(&mut self, request: &TxnRequest, path: &[bool], at: &mut usize) -> TxnResponse {
        let succeeded = path[*at];
        *at += 1;
        let branch = if succeeded { &request.success } else { &request.failure };
        let mut responses = Vec::new();
        for op in branch {
            responses.push(match op {
                RequestOp::Range(range) => ResponseOp::Range(self.model.range(range, self.view()).unwrap()),
                RequestOp::Put(put) => ResponseOp::Put(self.put(put).unwrap()),
                RequestOp::DeleteRange(delete) => ResponseOp::DeleteRange(self.delete(delete)),
                RequestOp::Txn(nested) => ResponseOp::Txn(self.txn(nested, path, at)),
            });
        }
        // Nested txn responses carry revision 0; the caller sets the outer one.
        TxnResponse {
            revision: 0,
            succeeded,
            responses,
        }
    }
}

impl Model {
    fn apply(&mut self, request: &WriteRequest) -> Applied {
        if let Err(error) = etcd_rules::check(request) {
            return Applied {
                response: Err(error),
                events: Vec::new(),
            };
        }
        if let WriteRequest::Compaction(compaction) = request {
            let response = if compaction.revision <= self.compact {
                Err(Error::Compacted)
            } else if compaction.revision > self.current {
                Err(Error::FutureRevision)
            } else {
                self.compact = compaction.revision;
                Ok(WriteResponse::Compaction(CompactionResponse { revision: self.current }))
            };
            return Applied {
                response,
                events: Vec::new(),
            };
        }
        if let WriteRequest::LeaseGrant(grant) = request {
            let response = match self.leases.entry(grant.id) {
                std::collections::btree_map::Entry::Occupied(_) => Err(Error::LeaseExists),
                std::collections::btree_map::Entry::Vacant(vacant) => {
                    vacant.insert(grant.ttl);
                    Ok(WriteResponse::LeaseGrant(LeaseGrantResponse {
                        revision: self.current,
                        id: grant.id,
                        ttl: grant.ttl,
                    }))
                }
            };
            return Applied {
                response,
                events: Vec::new(),
            };
        }
        let doomed = match request {
            WriteRequest::LeaseRevoke(revoke) => self.lease_keys(revoke.id),
            _ => Vec::new(),
        };
        let begin = self.current;
        let mut txn = ModelTxn {
            model: self,
            begin,
            changed: false,
            events: Vec::new(),
        };
        let response = match request {
            WriteRequest::Put(put) => txn.put(put).map(WriteResponse::Put),
            WriteRequest::DeleteRange(delete) => Ok(WriteResponse::DeleteRange(txn.delete(delete))),
            WriteRequest::Txn(request) => {
                let mut path = Vec::new();
                txn.path(request, &mut path);
                txn.check(request, &path).map(|()| {
                    let mut response = txn.txn(request, &path, &mut 0);
                    response.revision = txn.view();
                    WriteResponse::Txn(response)
                })
            }
            WriteRequest::LeaseRevoke(revoke) => match txn.model.leases.remove(&revoke.id) {
                None => Err(Error::LeaseNotFound),
                Some(_) => {
                    for key in doomed {
                        txn.delete(&DeleteRangeRequest {
                            key,
                            ..DeleteRangeRequest::default()
                        });
                    }
                    Ok(WriteResponse::LeaseRevoke(LeaseRevokeResponse { revision: txn.view() }))
                }
            },
            WriteRequest::Compaction(_) | WriteRequest::LeaseGrant(_) => unreachable!(),
        };
        let (view, events) = (txn.view(), std::mem::take(&mut txn.events));
        self.current = view;
        Applied { response, events }
    }
}

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
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => prop::collection::vec(write_request(), 1..4).prop_map(Step::Apply),
        4 => range_request().prop_map(Step::Range),
        1 => Just(Step::Restart),
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
