//! Goal: the revision semantics etcd's clients depend on, one table row per
//! rule: version resets after a delete, one revision per txn, `"\0"` range
//! ends, exact count and more under a limit, compacted and future
//! revision errors, and what survives a reopen.
//!
//! Method: a real store in a temporary directory, driven through `apply`
//! and `range` exactly as the server will drive it.

use mvcc::*;

fn put(key: &str, value: &str) -> WriteRequest {
    WriteRequest::Put(PutRequest {
        key: key.into(),
        value: value.into(),
        ..PutRequest::default()
    })
}

fn delete(key: &str, end: &[u8]) -> WriteRequest {
    WriteRequest::DeleteRange(DeleteRangeRequest {
        key: key.into(),
        range_end: end.to_vec(),
        prev_kv: true,
    })
}

fn get(key: &str) -> RangeRequest {
    RangeRequest {
        key: key.into(),
        ..RangeRequest::default()
    }
}

struct Harness {
    _dir: tempfile::TempDir,
    store: Store,
    raft_index: u64,
}

impl Harness {
    fn new() -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        Harness {
            _dir: dir,
            store,
            raft_index: 0,
        }
    }

    fn apply(&mut self, request: WriteRequest) -> Applied {
        self.raft_index += 1;
        self.store.apply(self.raft_index, &[request]).unwrap().remove(0)
    }

    fn ok(&mut self, request: WriteRequest) -> WriteResponse {
        self.apply(request).response.unwrap()
    }

    fn range(&self, request: RangeRequest) -> Result<RangeResponse> {
        self.store.range(&request)
    }
}

// Goal: revision 1 is the empty store; each put takes the next revision;
// version counts puts and restarts at 1 after a delete, with a new create
// revision.
#[test]
fn version_resets_after_delete() {
    let mut h = Harness::new();
    assert_eq!(h.store.current_revision(), 1);
    h.ok(put("foo", "a"));
    h.ok(put("foo", "b"));
    let kv = h.range(get("foo")).unwrap().kvs.remove(0);
    assert_eq!((kv.create_revision, kv.mod_revision, kv.version), (2, 3, 2));

    let deleted = h.apply(delete("foo", b""));
    match deleted.response.unwrap() {
        WriteResponse::DeleteRange(response) => {
            assert_eq!((response.revision, response.deleted), (4, 1));
            assert_eq!(response.prev_kvs[0].value, b"b");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(deleted.events.len(), 1);
    assert_eq!(deleted.events[0].kind, EventKind::Delete);
    assert_eq!(deleted.events[0].kv.mod_revision, 4);

    h.ok(put("foo", "c"));
    let kv = h.range(get("foo")).unwrap().kvs.remove(0);
    assert_eq!((kv.create_revision, kv.mod_revision, kv.version), (5, 5, 1));
    // The old generation is still readable at its revisions.
    let old = h
        .range(RangeRequest {
            revision: 3,
            ..get("foo")
        })
        .unwrap();
    assert_eq!(old.kvs[0].value, b"b");
    assert_eq!(old.revision, 5, "the header revision is the store's current one");
    assert!(h
        .range(RangeRequest {
            revision: 4,
            ..get("foo")
        })
        .unwrap()
        .kvs
        .is_empty());
}

// Goal: a txn that writes many keys takes one revision, with sub-revisions
// ordering its events; a txn with no writes, and a delete that finds
// nothing, take none.
#[test]
fn one_revision_per_txn() {
    let mut h = Harness::new();
    let txn = TxnRequest {
        compare: vec![Compare {
            result: CompareResult::Equal,
            target: CompareTarget::Version(0),
            key: b"a".to_vec(),
            range_end: Vec::new(),
        }],
        success: vec![
            RequestOp::Put(PutRequest {
                key: b"a".to_vec(),
                value: b"1".to_vec(),
                ..PutRequest::default()
            }),
            RequestOp::Put(PutRequest {
                key: b"b".to_vec(),
                value: b"2".to_vec(),
                ..PutRequest::default()
            }),
            RequestOp::Range(RangeRequest {
                key: b"a".to_vec(),
                range_end: b"c".to_vec(),
                ..RangeRequest::default()
            }),
        ],
        failure: vec![],
    };
    let applied = h.apply(WriteRequest::Txn(txn.clone()));
    let WriteResponse::Txn(response) = applied.response.unwrap() else {
        panic!()
    };
    assert!(response.succeeded);
    assert_eq!(response.revision, 2);
    let ResponseOp::Range(inner) = &response.responses[2] else {
        panic!()
    };
    assert_eq!(inner.kvs.len(), 2, "reads in a txn see its own writes");
    assert_eq!(applied.events.len(), 2);
    assert!(applied.events.iter().all(|e| e.kv.mod_revision == 2));
    assert_eq!(h.store.current_revision(), 2);

    // Same txn again: the compare fails, the empty failure branch writes
    // nothing, and the revision stays.
    let WriteResponse::Txn(response) = h.ok(WriteRequest::Txn(txn)) else {
        panic!()
    };
    assert!(!response.succeeded);
    assert_eq!(response.revision, 2);
    assert_eq!(h.store.current_revision(), 2);

    let nothing = h.apply(delete("zzz", b""));
    let WriteResponse::DeleteRange(response) = nothing.response.unwrap() else {
        panic!()
    };
    assert_eq!((response.revision, response.deleted), (2, 0));
    assert!(nothing.events.is_empty());
    assert_eq!(h.store.current_revision(), 2);
}

// Goal: range_end "\0" means every key >= key, with key "\0" that is the
// whole store; a prefix end stops at the prefix.
#[test]
fn range_end_zero_byte() {
    let mut h = Harness::new();
    for key in ["a", "b", "b/1", "b/2", "c"] {
        h.ok(put(key, "v"));
    }
    let keys = |response: RangeResponse| {
        response
            .kvs
            .into_iter()
            .map(|kv| String::from_utf8(kv.key).unwrap())
            .collect::<Vec<_>>()
    };
    let from_b = RangeRequest {
        range_end: vec![0],
        ..get("b")
    };
    assert_eq!(keys(h.range(from_b).unwrap()), ["b", "b/1", "b/2", "c"]);
    let all = RangeRequest {
        range_end: vec![0],
        ..get("\0")
    };
    assert_eq!(keys(h.range(all).unwrap()).len(), 5);
    let prefix = RangeRequest {
        range_end: b"b0".to_vec(),
        ..get("b/")
    };
    assert_eq!(keys(h.range(prefix).unwrap()), ["b/1", "b/2"]);
    // Deleting "\0".."\0" deletes everything, in one revision.
    let WriteResponse::DeleteRange(response) = h.ok(delete("\0", &[0])) else {
        panic!()
    };
    assert_eq!((response.deleted, response.revision), (5, 7));
}

// Goal: count is every key in the range whatever the limit, and more is
// exact: true only when keys were left out by the limit.
#[test]
fn count_and_more_under_a_limit() {
    let mut h = Harness::new();
    for i in 0..10 {
        h.ok(put(&format!("k{i}"), &format!("{}", 9 - i)));
    }
    let range = |limit, sort_order, filtered: bool| RangeRequest {
        key: b"k".to_vec(),
        range_end: b"l".to_vec(),
        limit,
        sort_order,
        sort_target: SortTarget::Value,
        min_mod_revision: if filtered { 5 } else { 0 },
        ..RangeRequest::default()
    };
    for (limit, order, filtered, kvs, more) in [
        (3, SortOrder::None, false, 3, true),
        (10, SortOrder::None, false, 10, false),
        (11, SortOrder::None, false, 10, false),
        (9, SortOrder::Descend, false, 9, true),
        (0, SortOrder::None, false, 10, false),
        // mod revisions 2..=11; >= 5 leaves 7 keys
        (7, SortOrder::Ascend, true, 7, false),
        (6, SortOrder::Ascend, true, 6, true),
    ] {
        let response = h.range(range(limit, order, filtered)).unwrap();
        assert_eq!(
            response.count, 10,
            "count ignores limit and filters ({limit}, {order:?}, {filtered})"
        );
        assert_eq!(response.kvs.len(), kvs, "({limit}, {order:?}, {filtered})");
        assert_eq!(response.more, more, "({limit}, {order:?}, {filtered})");
    }
    // Sort by value ascending with no order given: target != key sorts ascending.
    let sorted = h
        .range(RangeRequest {
            sort_target: SortTarget::Value,
            ..range(0, SortOrder::None, false)
        })
        .unwrap();
    assert_eq!(sorted.kvs[0].value, b"0");
    let count_only = h
        .range(RangeRequest {
            count_only: true,
            ..range(2, SortOrder::None, false)
        })
        .unwrap();
    assert_eq!(
        (count_only.count, count_only.kvs.len(), count_only.more),
        (10, 0, false)
    );
    let keys_only = h
        .range(RangeRequest {
            keys_only: true,
            ..get("k1")
        })
        .unwrap();
    assert!(keys_only.kvs[0].value.is_empty());
}

// Goal: an uncounted range (a RangeStream's window) answers the same
// key-values and `more` as a counted one, with count 0, at the newest
// revision and at an older one.
#[test]
fn an_uncounted_range_answers_all_but_the_count() {
    let mut h = Harness::new();
    for i in 0..10 {
        h.ok(put(&format!("k{i}"), "v"));
    }
    for (revision, limit) in [(0, 3), (0, 10), (0, 0), (6, 2), (6, 5), (6, 0)] {
        let counted = RangeRequest {
            key: b"k".to_vec(),
            range_end: b"l".to_vec(),
            limit,
            revision,
            ..RangeRequest::default()
        };
        let uncounted = h
            .range(RangeRequest {
                uncounted: true,
                ..counted.clone()
            })
            .unwrap();
        let counted = h.range(counted).unwrap();
        assert_ne!(counted.count, 0);
        assert_eq!(uncounted.count, 0, "revision {revision}, limit {limit}");
        assert_eq!(
            (uncounted.kvs, uncounted.more, uncounted.revision),
            (counted.kvs, counted.more, counted.revision),
            "revision {revision}, limit {limit}"
        );
    }
}

// Goal: the compacted and future revision errors, with etcd's codes and
// messages, for ranges and for compaction itself; compaction keeps every
// answer at or above the compact revision.
#[test]
fn compacted_and_future_revisions() {
    let mut h = Harness::new();
    for i in 0..5 {
        h.ok(put("k", &i.to_string()));
    }
    // Revisions 2..=6; compact at 4.
    let at_4 = h
        .range(RangeRequest {
            revision: 4,
            ..get("k")
        })
        .unwrap();
    let WriteResponse::Compaction(response) = h.ok(WriteRequest::Compaction(CompactionRequest { revision: 4 })) else {
        panic!()
    };
    assert_eq!(response.revision, 6);
    assert_eq!(h.store.compact_revision(), 4);
    assert_eq!(
        h.range(RangeRequest {
            revision: 4,
            ..get("k")
        })
        .unwrap()
        .kvs,
        at_4.kvs
    );

    let compacted = h
        .range(RangeRequest {
            revision: 3,
            ..get("k")
        })
        .unwrap_err();
    assert_eq!(compacted, Error::Compacted);
    assert_eq!(compacted.code(), Code::OutOfRange);
    assert_eq!(
        compacted.to_string(),
        "etcdserver: mvcc: required revision has been compacted"
    );
    let future = h
        .range(RangeRequest {
            revision: 7,
            ..get("k")
        })
        .unwrap_err();
    assert_eq!(future, Error::FutureRevision);
    assert_eq!(future.code(), Code::OutOfRange);
    assert_eq!(
        future.to_string(),
        "etcdserver: mvcc: required revision is a future revision"
    );

    assert_eq!(
        h.apply(WriteRequest::Compaction(CompactionRequest { revision: 4 }))
            .response,
        Err(Error::Compacted)
    );
    assert_eq!(
        h.apply(WriteRequest::Compaction(CompactionRequest { revision: 3 }))
            .response,
        Err(Error::Compacted)
    );
    assert_eq!(
        h.apply(WriteRequest::Compaction(CompactionRequest { revision: 7 }))
            .response,
        Err(Error::FutureRevision)
    );
    assert_eq!(h.store.hash_kv(3), Err(Error::Compacted));
}

// Goal: bad input gets etcd's errors and changes nothing.
#[test]
fn bad_input_changes_nothing() {
    let mut h = Harness::new();
    let cases = [
        (put("", "v"), Error::EmptyKey, "etcdserver: key is not provided"),
        (
            WriteRequest::Put(PutRequest {
                key: b"missing".to_vec(),
                ignore_value: true,
                ..PutRequest::default()
            }),
            Error::KeyNotFound,
            "etcdserver: key not found",
        ),
        (
            WriteRequest::Txn(TxnRequest {
                compare: vec![],
                success: vec![
                    RequestOp::Put(PutRequest {
                        key: b"x".to_vec(),
                        ..PutRequest::default()
                    }),
                    RequestOp::Put(PutRequest {
                        key: b"x".to_vec(),
                        ..PutRequest::default()
                    }),
                ],
                failure: vec![],
            }),
            Error::DuplicateKey,
            "etcdserver: duplicate key given in txn request",
        ),
        (
            WriteRequest::Txn(TxnRequest {
                compare: vec![],
                success: vec![
                    RequestOp::Put(PutRequest {
                        key: b"y".to_vec(),
                        ..PutRequest::default()
                    }),
                    RequestOp::Put(PutRequest {
                        key: b"missing".to_vec(),
                        ignore_lease: true,
                        ..PutRequest::default()
                    }),
                ],
                failure: vec![],
            }),
            Error::KeyNotFound,
            "etcdserver: key not found",
        ),
    ];
    for (request, error, message) in cases {
        let applied = h.apply(request);
        assert_eq!(applied.response.as_ref().unwrap_err(), &error);
        assert_eq!(error.to_string(), message);
        assert_eq!(error.code(), Code::InvalidArgument);
        assert!(applied.events.is_empty());
        assert_eq!(h.store.current_revision(), 1, "{message}: nothing was written");
    }
    assert_eq!(h.range(get("")).unwrap_err(), Error::EmptyKey);
}

// Goal: a txn that deletes "from a key on" (range end "\0") and then
// puts a key in that span is accepted, as etcd accepts it, and runs in
// order: the put starts a new generation. The same txn with a put that
// keeps the deleted key's value is refused as "key not found" and changes
// nothing (etcd 3.5 accepts it and panics while applying).
#[test]
fn delete_from_key_then_put_in_one_txn() {
    let mut h = Harness::new();
    h.ok(put("b", "old"));
    let txn = |put: PutRequest| {
        WriteRequest::Txn(TxnRequest {
            compare: vec![],
            success: vec![
                RequestOp::DeleteRange(DeleteRangeRequest {
                    key: b"a".to_vec(),
                    range_end: vec![0],
                    prev_kv: false,
                }),
                RequestOp::Put(put),
            ],
            failure: vec![],
        })
    };
    let keep_value = txn(PutRequest {
        key: b"b".to_vec(),
        ignore_value: true,
        ..PutRequest::default()
    });
    let refused = h.apply(keep_value);
    assert_eq!(refused.response, Err(Error::KeyNotFound));
    assert!(refused.events.is_empty());
    assert_eq!(h.store.current_revision(), 2, "nothing was written");

    let applied = h.apply(txn(PutRequest {
        key: b"b".to_vec(),
        value: b"new".to_vec(),
        ..PutRequest::default()
    }));
    assert!(applied.response.is_ok(), "{:?}", applied.response);
    let kinds: Vec<EventKind> = applied.events.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [EventKind::Delete, EventKind::Put]);
    let now = h.range(get("b")).unwrap();
    assert_eq!(now.revision, 3);
    assert_eq!(now.kvs[0].value, b"new");
    assert_eq!(
        (now.kvs[0].create_revision, now.kvs[0].version),
        (3, 1),
        "a new generation"
    );
}

// Goal: everything, including compaction and the consistent index,
// survives a reopen, and the hash is stable across it.
#[test]
fn reopen_keeps_state() {
    let dir = tempfile::tempdir().unwrap();
    let (hash, revision) = {
        let store = Store::open(dir.path()).unwrap();
        store
            .apply(7, &[put("a", "1"), put("b", "2"), delete("a", b""), put("a", "3")])
            .unwrap();
        store
            .apply(9, &[WriteRequest::Compaction(CompactionRequest { revision: 3 })])
            .unwrap();
        store.flush().unwrap();
        store.hash_kv(0).unwrap()
    };
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.consistent_index(), 9);
    assert_eq!(store.current_revision(), 5);
    assert_eq!(store.compact_revision(), 3);
    assert_eq!((hash.compact_revision, hash.revision), (3, 5));
    assert_eq!(store.hash_kv(0).unwrap(), (hash, revision));
    let a = store.range(&get("a")).unwrap().kvs.remove(0);
    assert_eq!((a.create_revision, a.version, a.value.as_slice()), (5, 1, &b"3"[..]));
}

// Goal: etcd's fetch rule: a sort target with no sort order and a limit
// sorts only the first limit + 1 keys in key order, not the whole range.
#[test]
fn sort_target_without_order_sorts_the_fetched_keys_only() {
    let mut h = Harness::new();
    for (key, value) in [("a", "9"), ("b", "8"), ("c", "1"), ("d", "0")] {
        h.ok(put(key, value));
    }
    let request = RangeRequest {
        key: b"a".to_vec(),
        range_end: b"z".to_vec(),
        limit: 1,
        sort_target: SortTarget::Value,
        ..RangeRequest::default()
    };
    // Fetches a and b, sorts them by value (b=8, a=9), keeps one.
    let response = h.range(request.clone()).unwrap();
    assert_eq!(response.kvs[0].key, b"b");
    assert!(response.more);
    // With an explicit order the whole range is sorted: d=0 comes first.
    let ordered = h
        .range(RangeRequest {
            sort_order: SortOrder::Ascend,
            ..request
        })
        .unwrap();
    assert_eq!(ordered.kvs[0].key, b"d");
}

// Goal: a tombstone at exactly the compact revision survives compaction
// and a reopen (etcd 3.5.15+), and goes with the next compaction past it.
#[test]
fn tombstone_at_the_compact_revision_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    store
        .apply(1, &[put("k", "v"), delete("k", b""), put("other", "x")])
        .unwrap();
    // Revisions: put k @2, delete k @3, put other @4.
    store
        .apply(2, &[WriteRequest::Compaction(CompactionRequest { revision: 3 })])
        .unwrap();
    // The server's apply stage does the work a compaction queues.
    store.finish_compactions().unwrap();
    assert_eq!(store.indexed_keys(), 2, "k's tombstone at 3 is kept");
    drop(store);
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.indexed_keys(), 2, "and rebuilt from storage");
    assert!(store.range(&get("k")).unwrap().kvs.is_empty());
    store
        .apply(3, &[WriteRequest::Compaction(CompactionRequest { revision: 4 })])
        .unwrap();
    store.finish_compactions().unwrap();
    assert_eq!(store.indexed_keys(), 1);
}

// Goal: HashKV is equal on members with the same history however their
// raft batches were cut, and differs once histories differ.
#[test]
fn hash_kv_equal_for_equal_histories() {
    let history: Vec<WriteRequest> = (0..50)
        .map(|i| match i % 7 {
            3 => delete(&format!("k{}", i % 5), b""),
            6 => WriteRequest::Compaction(CompactionRequest { revision: i / 2 }),
            _ => put(&format!("k{}", i % 5), &format!("v{i}")),
        })
        .collect();
    let one_by_one = Harness::new();
    for (index, request) in history.iter().enumerate() {
        one_by_one
            .store
            .apply(index as u64 + 1, std::slice::from_ref(request))
            .unwrap();
    }
    let batched = Harness::new();
    for (index, chunk) in history.chunks(8).enumerate() {
        batched.store.apply(index as u64 + 1, chunk).unwrap();
    }
    let revision = one_by_one.store.current_revision();
    assert_eq!(batched.store.current_revision(), revision);
    assert_eq!(one_by_one.store.hash_kv(0).unwrap(), batched.store.hash_kv(0).unwrap());
    assert_eq!(
        one_by_one.store.hash_kv(revision - 2).unwrap(),
        batched.store.hash_kv(revision - 2).unwrap()
    );

    let diverged = Harness::new();
    diverged.store.apply(1, &history).unwrap();
    diverged.store.apply(2, &[put("k0", "other")]).unwrap();
    assert_ne!(
        diverged.store.hash_kv(0).unwrap().0.hash,
        one_by_one.store.hash_kv(0).unwrap().0.hash
    );
}

// Goal: a snapshot restored into another store reproduces it exactly
// (keys, revisions, compaction, hash), replacing what was there, and the
// restored store survives a reopen.
#[test]
fn snapshot_restores_exactly() {
    let source = Harness::new();
    source
        .store
        .apply(
            10,
            &[
                put("a", "1"),
                put("b", "2"),
                delete("a", b""),
                put("c", "3"),
                put("b", "4"),
            ],
        )
        .unwrap();
    source
        .store
        .apply(11, &[WriteRequest::Compaction(CompactionRequest { revision: 4 })])
        .unwrap();
    let (index, data) = source.store.snapshot().unwrap();
    assert_eq!(index, 11);

    let dir = tempfile::tempdir().unwrap();
    {
        let target = Store::open(dir.path()).unwrap();
        target.apply(3, &[put("stale", "x"), put("z", "y")]).unwrap();
        target.restore(index, &data).unwrap();
        assert_eq!(target.consistent_index(), 11);
        assert_eq!(target.hash_kv(0).unwrap(), source.store.hash_kv(0).unwrap());
        assert!(
            target.range(&get("stale")).unwrap().kvs.is_empty(),
            "old contents are gone"
        );
    }
    let reopened = Store::open(dir.path()).unwrap();
    assert_eq!(reopened.current_revision(), source.store.current_revision());
    assert_eq!(reopened.compact_revision(), 4);
    let all = RangeRequest {
        range_end: vec![0],
        ..get("\0")
    };
    assert_eq!(reopened.range(&all).unwrap(), source.store.range(&all).unwrap());
    assert_eq!(reopened.hash_kv(0).unwrap(), source.store.hash_kv(0).unwrap());
}

// Goal: a restore cut short leaves a store that says so (and refuses to
// pass for whole), a full restore afterwards clears the mark, and a
// snapshot taken further along than the raft index it is restored for
// keeps its own, higher consistent index (the entries in between are in
// it already). Leases travel with the snapshot.
#[test]
fn interrupted_restore_is_marked_and_a_later_index_is_kept() {
    let source = Harness::new();
    source
        .store
        .apply(
            20,
            &[
                WriteRequest::LeaseGrant(LeaseGrantRequest { id: 7, ttl: 30 }),
                put("a", "1"),
                WriteRequest::Put(PutRequest {
                    key: b"b".to_vec(),
                    value: b"2".to_vec(),
                    lease: 7,
                    ..PutRequest::default()
                }),
            ],
        )
        .unwrap();
    let (index, data) = source.store.snapshot().unwrap();
    assert_eq!(index, 20);

    let dir = tempfile::tempdir().unwrap();
    {
        let target = Store::open(dir.path()).unwrap();
        let error = target.restore(15, &data[..data.len() - 3]).unwrap_err();
        assert!(error.to_string().contains("snapshot cut short"), "{error}");
    }
    let target = Store::open(dir.path()).unwrap();
    assert!(target.is_restoring().unwrap());
    target.restore(15, &data).unwrap();
    assert!(!target.is_restoring().unwrap());
    assert_eq!(target.consistent_index(), 20, "the snapshot's own index wins");
    assert_eq!(target.hash_kv(0).unwrap(), source.store.hash_kv(0).unwrap());
    let lease = target.lease(7).expect("the lease came with the snapshot");
    assert_eq!(lease.ttl, 30);
    assert_eq!(
        lease.keys.into_iter().map(Vec::from).collect::<Vec<_>>(),
        vec![b"b".to_vec()]
    );
}

// Goal: what a watcher that fell behind reads from history is what a
// watcher that kept up saw live: the same events, in the same order, with
// the key's previous value on request; ranges filter by key; a start below
// the compact revision is refused as compacted, at or above it is served.
#[test]
fn history_replays_the_live_events() {
    let mut h = Harness::new();
    let mut live = Vec::new();
    for request in [
        put("a", "1"),
        put("b", "1"),
        delete("a", b""),
        put("a", "2"),
        put("ab", "1"),
        delete("a", b"b"),
    ] {
        live.extend(h.apply(request).events);
    }
    assert_eq!(h.store.current_revision(), 7);
    let changes = h.store.changes(b"\0", b"\0", 2, 7, false).unwrap();
    let replayed: Vec<Event> = changes.iter().map(|(event, _)| event.clone()).collect();
    assert_eq!(replayed, live);
    assert!(changes.iter().all(|(_, previous)| previous.is_none()));

    // The key "a" alone, with previous values: put (none), delete (1),
    // put (none: it was deleted), delete (2).
    let a = h.store.changes(b"a", b"", 1, 100, true).unwrap();
    let summary: Vec<(EventKind, i64, Option<Vec<u8>>)> = a
        .iter()
        .map(|(event, previous)| {
            (
                event.kind,
                event.kv.mod_revision,
                previous.as_ref().map(|kv| kv.value.clone()),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (EventKind::Put, 2, None),
            (EventKind::Delete, 4, Some(b"1".to_vec())),
            (EventKind::Put, 5, None),
            (EventKind::Delete, 7, Some(b"2".to_vec())),
        ]
    );
    // A range: keys from "a" up to "b", so "a" and "ab", not "b".
    let keys: Vec<Vec<u8>> = h
        .store
        .changes(b"a", b"b", 1, 7, false)
        .unwrap()
        .into_iter()
        .map(|(event, _)| event.kv.key)
        .collect();
    assert_eq!(keys, [&b"a"[..], b"a", b"a", b"ab", b"a", b"ab"]);
    // Past the current revision there is nothing yet.
    assert!(h.store.changes(b"\0", b"\0", 8, 20, false).unwrap().is_empty());

    h.ok(WriteRequest::Compaction(CompactionRequest { revision: 5 }));
    assert_eq!(h.store.changes(b"a", b"", 4, 7, false), Err(Error::Compacted));
    let served = h.store.changes(b"a", b"", 5, 7, true).unwrap();
    let kinds: Vec<EventKind> = served.iter().map(|(event, _)| event.kind).collect();
    assert_eq!(kinds, [EventKind::Put, EventKind::Delete]);
    // The previous value of the delete at 7 is the put at 5, still there.
    assert_eq!(served[1].1.as_ref().map(|kv| kv.mod_revision), Some(5));
}

// Goal: a store written by an older build, one sled key per revision
// (format 1), opens with every revision, the same answers and HashKV as a
// store that took the same writes in the current format; a store marked
// with an unknown format is refused, not read as empty.
// Method: the same writes applied to a current store, then the same
// revisions written by hand in format 1's layout into a bare sled tree.
#[test]
fn an_older_format_is_upgraded_and_a_newer_one_refused() {
    let current = Harness::new();
    let writes = [put("a", "1"), put("b", "2"), delete("a", b""), put("a", "3")];
    current.store.apply(1, &writes).unwrap();

    let dir = tempfile::tempdir().unwrap();
    {
        let db = sled::open(dir.path()).unwrap();
        let write = |revision: Revision, tombstone: bool, kv: KeyValue| {
            let mut key = vec![b'k'];
            key.extend_from_slice(&revision.to_bytes(tombstone));
            db.insert(key, kv.encode()).unwrap();
        };
        let kv = |key: &str, value: &str, create: i64, modified: i64| KeyValue {
            key: key.into(),
            create_revision: create,
            mod_revision: modified,
            version: 1,
            value: value.into(),
            lease: 0,
        };
        write(Revision::new(2, 0), false, kv("a", "1", 2, 2));
        write(Revision::new(3, 0), false, kv("b", "2", 3, 3));
        let mut gone = kv("a", "", 0, 4);
        gone.version = 0;
        write(Revision::new(4, 0), true, gone);
        write(Revision::new(5, 0), false, kv("a", "3", 5, 5));
        db.insert(b"mcurrent_revision", &5i64.to_be_bytes()).unwrap();
        db.insert(b"mcompact_revision", &(-1i64).to_be_bytes()).unwrap();
        db.insert(b"mconsistent_index", &1i64.to_be_bytes()).unwrap();
        db.flush().unwrap();
    }
    let upgraded = Store::open(dir.path()).unwrap();
    assert_eq!(upgraded.current_revision(), 5);
    for key in ["a", "b"] {
        assert_eq!(upgraded.range(&get(key)), current.store.range(&get(key)), "{key}");
    }
    assert_eq!(upgraded.hash_kv(0).unwrap(), current.store.hash_kv(0).unwrap());
    drop(upgraded);
    let reopened = Store::open(dir.path()).unwrap();
    assert_eq!(reopened.range(&get("a")).unwrap().kvs[0].value, b"3");
    drop(reopened);

    let newer = tempfile::tempdir().unwrap();
    {
        let db = sled::open(newer.path()).unwrap();
        db.insert(b"mformat", &99u32.to_be_bytes()).unwrap();
        db.flush().unwrap();
    }
    assert!(matches!(Store::open(newer.path()), Err(Error::Storage(_))));
}

/// What the open-batch test compares: every kind of read.
type Reads = (
    RangeResponse,
    Vec<(Event, Option<KeyValue>)>,
    (KeyValueHash, i64),
    Option<KeyValue>,
    u64,
);

fn every_read(store: &Store, changes_from: i64) -> Reads {
    let all = RangeRequest {
        key: b"\0".to_vec(),
        range_end: b"\0".to_vec(),
        ..RangeRequest::default()
    };
    (
        store.range(&all).unwrap(),
        store.changes(b"\0", b"\0", changes_from, 100, true).unwrap(),
        store.hash_kv(0).unwrap(),
        store.value_before(b"b", store.current_revision()).unwrap(),
        store.consistent_index(),
    )
}

// Goal: reads answer the same whether what they read is still in the open
// batch or already in sled (ranges, changes with previous values, HashKV,
// previous values), across compactions inside the open batch that drop
// revisions from sled and from the batch itself; and a store closed in
// order keeps its open batch.
// Method: one history, with some revisions committed to sled and the rest
// left open (all within `OPEN_BATCH_AGE_MAX`, so nothing commits on its
// own); every read before and after `commit`, and after a reopen.
#[test]
fn reads_through_the_open_batch_match_reads_from_sled() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    store.apply(1, &[put("a", "1"), put("b", "1"), put("a", "2")]).unwrap();
    store.commit().unwrap();
    // Revisions 5, 6, 7, then a compaction at 5 that drops a@2 from sled.
    store
        .apply(2, &[put("c", "1"), delete("a", b""), put("a", "3")])
        .unwrap();
    store
        .apply(3, &[WriteRequest::Compaction(CompactionRequest { revision: 5 })])
        .unwrap();
    store.apply(4, &[put("b", "2"), put("d", "1")]).unwrap();
    let open = every_read(&store, 5);
    assert_eq!(open.0.kvs.len(), 4);
    assert_eq!(open.1.len(), 5, "revisions 5 to 9 are changes");
    store.commit().unwrap();
    assert_eq!(every_read(&store, 5), open);

    // A compaction at 8 in a new open batch drops a@4 (sled), a@6 (the
    // tombstone) and b@3; then more writes stay open.
    store
        .apply(5, &[WriteRequest::Compaction(CompactionRequest { revision: 8 })])
        .unwrap();
    store.apply(6, &[put("e", "1"), delete("d", b"")]).unwrap();
    let open = every_read(&store, 8);
    store.commit().unwrap();
    assert_eq!(every_read(&store, 8), open);

    store.apply(7, &[put("b", "3")]).unwrap();
    let open = every_read(&store, 8);
    drop(store);
    let store = Store::open(dir.path()).unwrap();
    let reopened = every_read(&store, 8);
    // Remembered compaction hashes are in memory only; the rest matches.
    assert_eq!(reopened, open);
    assert_eq!(store.consistent_index(), 7);
}

// Goal: a paginated list as kube-apiserver makes it (a limit, each page
// after the last key of the one before, all at the first page's
// revision) gets exact `count` and `more` on every page, while writes,
// deletes and a compaction below that revision go on between pages, and
// also when a page goes back to an earlier start (the count cache
// counted forward and back).
#[test]
fn paginated_counts_stay_exact_while_the_store_changes() {
    let mut h = Harness::new();
    for i in 0..3000 {
        h.ok(put(&format!("k{i:05}"), "v"));
    }
    h.ok(delete("k00100", b"k00200"));
    let at = h.store.current_revision();
    let total = |h: &Harness, from: &[u8]| {
        h.range(RangeRequest {
            key: from.to_vec(),
            range_end: b"l".to_vec(),
            revision: at,
            count_only: true,
            ..RangeRequest::default()
        })
        .unwrap()
        .count
    };
    let page = |h: &Harness, from: &[u8]| {
        h.range(RangeRequest {
            key: from.to_vec(),
            range_end: b"l".to_vec(),
            revision: at,
            limit: 250,
            ..RangeRequest::default()
        })
        .unwrap()
    };
    let mut from = b"k".to_vec();
    let mut pages = Vec::new();
    loop {
        let response = page(&h, &from);
        assert_eq!(response.count, total(&h, &from), "count from {from:?}");
        assert_eq!(response.more, response.count > 250);
        pages.push(from.clone());
        // Changes between pages, none visible at `at`.
        h.ok(put(&format!("k{:05}", pages.len() * 7), "later"));
        h.ok(delete(&format!("k{:05}", pages.len() * 11 + 1), b""));
        let Some(last) = response.kvs.last() else { break };
        if !response.more {
            break;
        }
        from = last.key.clone();
        from.push(0);
    }
    assert_eq!(pages.len(), 12, "2,900 keys in pages of 250");
    h.ok(WriteRequest::Compaction(CompactionRequest { revision: at }));
    for from in pages.iter().rev() {
        assert_eq!(page(&h, from).count, total(&h, from), "going back to {from:?}");
    }
}

// Goal: a keys-only range is answered as etcd 3.7 answers it from its
// index: key, create and mod revisions and version exact, no value, no
// lease; sorted by value it still reads the values (and keeps the lease).
#[test]
fn keys_only_comes_from_the_index() {
    let mut h = Harness::new();
    h.ok(WriteRequest::LeaseGrant(LeaseGrantRequest { id: 7, ttl: 60 }));
    h.ok(put("a", "1"));
    h.ok(put("a", "2"));
    h.ok(WriteRequest::Put(PutRequest {
        key: b"b".to_vec(),
        value: b"3".to_vec(),
        lease: 7,
        ..PutRequest::default()
    }));
    h.ok(delete("a", b""));
    h.ok(put("a", "4"));
    let full = h
        .range(RangeRequest {
            key: b"a".to_vec(),
            range_end: b"c".to_vec(),
            ..RangeRequest::default()
        })
        .unwrap();
    let keys_only = h
        .range(RangeRequest {
            key: b"a".to_vec(),
            range_end: b"c".to_vec(),
            keys_only: true,
            ..RangeRequest::default()
        })
        .unwrap();
    assert_eq!(keys_only.count, 2);
    for (kv, whole) in keys_only.kvs.iter().zip(&full.kvs) {
        assert_eq!(
            (&kv.key, kv.create_revision, kv.mod_revision, kv.version),
            (&whole.key, whole.create_revision, whole.mod_revision, whole.version)
        );
        assert!(kv.value.is_empty());
        assert_eq!(kv.lease, 0);
    }
    assert_eq!((full.kvs[0].version, full.kvs[1].lease), (1, 7));
    let by_value = h
        .range(RangeRequest {
            key: b"a".to_vec(),
            range_end: b"c".to_vec(),
            keys_only: true,
            sort_target: SortTarget::Value,
            sort_order: SortOrder::Descend,
            ..RangeRequest::default()
        })
        .unwrap();
    assert_eq!(by_value.kvs[0].key, b"a".to_vec(), "value 4 sorts above 3");
    assert_eq!(by_value.kvs[1].lease, 7);
    assert!(by_value.kvs.iter().all(|kv| kv.value.is_empty()));
}

// Goal: a count-only range at the newest revision stays exact when its
// count is kept by the writes (a range of at least LIVE_COUNT_MIN_KEYS):
// through updates, deletes of ranges, a lease's revoke, re-creates and a
// compaction; at an older revision the count is that revision's.
#[test]
fn kept_counts_at_the_newest_revision_stay_exact() {
    let mut h = Harness::new();
    let keys = mvcc::live_count::LIVE_COUNT_MIN_KEYS as usize + 100;
    for i in 0..keys {
        h.ok(put(&format!("k{i:06}"), "v"));
    }
    let count = |h: &Harness, revision: i64| {
        h.range(RangeRequest {
            key: b"k".to_vec(),
            range_end: b"l".to_vec(),
            revision,
            count_only: true,
            ..RangeRequest::default()
        })
        .unwrap()
        .count
    };
    let walked = |h: &Harness| {
        h.range(RangeRequest {
            key: b"k".to_vec(),
            range_end: b"l".to_vec(),
            keys_only: true,
            ..RangeRequest::default()
        })
        .unwrap()
        .kvs
        .len() as i64
    };
    assert_eq!(count(&h, 0), keys as i64, "walked, then kept");
    let before = h.store.current_revision();
    h.ok(WriteRequest::LeaseGrant(LeaseGrantRequest { id: 9, ttl: 60 }));
    for step in 0..300usize {
        match step % 5 {
            0 => h.ok(put(&format!("k{:06}", step * 31), "update")),
            1 => h.ok(put(&format!("k{:06}", keys + step), "new")),
            2 => h.ok(delete(&format!("k{:06}", step * 17), b"")),
            3 => h.ok(WriteRequest::Put(PutRequest {
                key: format!("k{:06}", keys + 1000 + step).into_bytes(),
                value: b"leased".to_vec(),
                lease: 9,
                ..PutRequest::default()
            })),
            _ => h.ok(delete(
                &format!("k{:06}", step * 3),
                format!("k{:06}", step * 3 + 4).as_bytes(),
            )),
        };
        if step == 150 {
            h.ok(WriteRequest::Compaction(CompactionRequest {
                revision: h.store.current_revision() - 10,
            }));
        }
        if step % 50 == 0 {
            assert_eq!(count(&h, 0), walked(&h), "after step {step}");
        }
    }
    h.ok(WriteRequest::LeaseRevoke(LeaseRevokeRequest { id: 9 }));
    let now = walked(&h);
    assert_ne!(now, keys as i64, "the writes changed the count");
    assert_eq!(count(&h, 0), now);
    assert_eq!(count(&h, h.store.current_revision()), now, "the newest, named");
    assert_eq!(count(&h, before + 200), {
        let old = h.range(RangeRequest {
            key: b"k".to_vec(),
            range_end: b"l".to_vec(),
            revision: before + 200,
            keys_only: true,
            ..RangeRequest::default()
        });
        old.unwrap().kvs.len() as i64
    });
}

// Goal: a put's create revision and version are etcd's whatever
// compaction has cut from the key's history and whether the store was
// reopened since (the index keeps a cut generation's origin, and rebuilds
// it from storage). Method: a seeded mix of puts, txns of two puts,
// deletes, compactions at the newest or an older revision, and reopens
// over six keys, every put's result checked against a model of each key's
// generation (in debug builds the store also checks each generation the
// index derives against storage).
#[test]
fn versions_hold_through_compaction_and_reopen() {
    use std::collections::BTreeMap;
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path()).unwrap();
    let mut raft_index = 0;
    let mut model: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move |below: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % below
    };
    let (mut compactions, mut reopens) = (0, 0);
    for step in 0..3000 {
        let key = format!("k{}", next(6));
        raft_index += 1;
        match next(100) {
            0..60 => {
                let revision = store.current_revision() + 1;
                store.apply(raft_index, &[put(&key, "v")]).unwrap();
                let entry = model.entry(key.clone()).or_insert((revision, 0));
                entry.1 += 1;
            }
            60..70 => {
                // Two different keys: etcd refuses a txn that writes one
                // key twice before it reaches the store.
                let other = format!("k{}", (key[1..].parse::<u64>().unwrap() + 1 + next(5)) % 6);
                let revision = store.current_revision() + 1;
                let txn = WriteRequest::Txn(TxnRequest {
                    success: [&key, &other]
                        .map(|k| {
                            RequestOp::Put(PutRequest {
                                key: k.clone().into(),
                                value: b"t".to_vec(),
                                ..PutRequest::default()
                            })
                        })
                        .to_vec(),
                    ..TxnRequest::default()
                });
                store.apply(raft_index, &[txn]).unwrap();
                for k in [key.clone(), other] {
                    model.entry(k).or_insert((revision, 0)).1 += 1;
                }
            }
            70..85 => {
                store.apply(raft_index, &[delete(&key, b"")]).unwrap();
                model.remove(&key);
            }
            85..95 => {
                let current = store.current_revision();
                let at = current - next(3) as i64;
                if at > store.compact_revision() && at > 1 {
                    let compaction = WriteRequest::Compaction(CompactionRequest { revision: at });
                    store.apply(raft_index, &[compaction]).unwrap();
                    store.finish_compactions().unwrap();
                    compactions += 1;
                }
            }
            _ => {
                store.flush().unwrap();
                drop(store);
                store = Store::open(dir.path()).unwrap();
                raft_index = store.consistent_index();
                reopens += 1;
            }
        }
        for (key, &(created, version)) in &model {
            let kv = store.range(&get(key)).unwrap().kvs.remove(0);
            assert_eq!(
                (kv.create_revision, kv.version),
                (created, version),
                "{key} after step {step}"
            );
        }
    }
    assert!(
        compactions > 100 && reopens > 50,
        "{compactions} compactions, {reopens} reopens"
    );
}
