//! The reference model: every change ever made, kept as a flat list, and
//! every answer worked out by brute force from it, in etcd's semantics. It
//! shares no code with the store; its request checks are etcd's, written
//! out literally in [`crate::etcd_rules`].

use std::collections::{BTreeMap, BTreeSet};

use mvcc::*;

use crate::etcd_rules;

/// The reference: every change ever made, in order.
#[derive(Default)]
pub struct Model {
    /// (main revision, key, value after the change; None for a delete)
    history: Vec<(i64, Vec<u8>, Option<KeyValue>)>,
    pub current: i64,
    pub compact: i64,
    /// Lease id -> granted TTL.
    pub leases: BTreeMap<i64, i64>,
    /// The raised alarms.
    pub alarms: BTreeSet<Alarm>,
}

impl Model {
    /// The model of an empty store.
    pub fn new() -> Model {
        Model::starting_at(1, -1)
    }

    /// The model of keys no write has touched yet, in a store at revision
    /// `current` compacted at `compact`: for checking a store that holds
    /// other keys too (the fuzz target's).
    pub fn starting_at(current: i64, compact: i64) -> Model {
        Model {
            current,
            compact,
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
    pub fn lease_keys(&self, id: i64) -> Vec<Vec<u8>> {
        self.keys()
            .into_iter()
            .filter(|k| self.at(k, self.current).is_some_and(|kv| kv.lease == id))
            .collect()
    }

    pub fn in_range(key: &[u8], end: &[u8], candidate: &[u8]) -> bool {
        match end {
            [] => candidate == key,
            [0] => candidate >= key,
            end => candidate >= key && candidate < end,
        }
    }

    /// A range at `view` (the current revision for a plain read).
    pub fn range(&self, request: &RangeRequest, view: i64) -> Result<RangeResponse> {
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
        sort(&mut kvs, request);
        let more = request.limit > 0 && kvs.len() as i64 > request.limit;
        if request.limit > 0 {
            kvs.truncate(request.limit as usize);
        }
        if request.keys_only {
            kvs.iter_mut().for_each(|kv| kv.value.clear());
        }
        // etcd 3.7 answers a keys-only range not sorted by value from its
        // index, which holds no leases: the key-values carry none.
        if request.keys_only && request.sort_target != SortTarget::Value {
            kvs.iter_mut().for_each(|kv| kv.lease = 0);
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

/// Sorts as etcd does: a sort target with no order sorts ascending;
/// sorting by key with no order keeps the key order.
fn sort(kvs: &mut [KeyValue], request: &RangeRequest) {
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
    fn compact(&mut self, compaction: &CompactionRequest) -> Result<WriteResponse> {
        if compaction.revision <= self.compact {
            Err(Error::Compacted)
        } else if compaction.revision > self.current {
            Err(Error::FutureRevision)
        } else {
            self.compact = compaction.revision;
            Ok(WriteResponse::Compaction(CompactionResponse { revision: self.current }))
        }
    }

    fn grant(&mut self, grant: &LeaseGrantRequest) -> Result<WriteResponse> {
        match self.leases.entry(grant.id) {
            std::collections::btree_map::Entry::Occupied(_) => Err(Error::LeaseExists),
            std::collections::btree_map::Entry::Vacant(vacant) => {
                vacant.insert(grant.ttl);
                Ok(WriteResponse::LeaseGrant(LeaseGrantResponse {
                    revision: self.current,
                    id: grant.id,
                    ttl: grant.ttl,
                }))
            }
        }
    }

    /// etcd's alarm store: a raise answers the alarm, a clear answers it
    /// only if it was raised; the revision stays.
    fn change_alarm(&mut self, request: &AlarmRequest) -> AlarmResponse {
        let alarm = if request.activate {
            self.alarms.insert(request.alarm);
            Some(request.alarm)
        } else {
            self.alarms.remove(&request.alarm).then_some(request.alarm)
        };
        AlarmResponse { alarm }
    }

    /// Applies one write as the store would; its answer and events.
    pub fn apply(&mut self, request: &WriteRequest) -> Applied {
        if let Err(error) = etcd_rules::check(request) {
            return Applied {
                response: Err(error),
                events: Vec::new(),
            };
        }
        let response = match request {
            WriteRequest::Compaction(compaction) => Some(self.compact(compaction)),
            WriteRequest::LeaseGrant(grant) => Some(self.grant(grant)),
            WriteRequest::Alarm(request) => Some(Ok(WriteResponse::Alarm(self.change_alarm(request)))),
            // The membership is kept for the server, opaque: no revision.
            WriteRequest::Membership(_) => Some(Ok(WriteResponse::Membership)),
            WriteRequest::Auth(_) => Some(Ok(WriteResponse::Auth)),
            // Remaining TTLs are the server's (it times leases): no change.
            WriteRequest::LeaseCheckpoint(_) => Some(Ok(WriteResponse::LeaseCheckpoint { revision: self.current })),
            _ => None,
        };
        if let Some(response) = response {
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
            WriteRequest::Compaction(_)
            | WriteRequest::LeaseGrant(_)
            | WriteRequest::LeaseCheckpoint(_)
            | WriteRequest::Alarm(_)
            | WriteRequest::Membership(_)
            | WriteRequest::Auth(_) => unreachable!(),
        };
        let (view, events) = (txn.view(), std::mem::take(&mut txn.events));
        self.current = view;
        Applied { response, events }
    }
}
