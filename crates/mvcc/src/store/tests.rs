use super::*;

// Goal: lease checkpoints as etcd keeps them: applied, a lease's
// remaining TTL is in memory on every member; stored only where the
// member persists them, so only there does it survive a reopen; 0
// clears it, and a checkpoint of a revoked lease changes nothing.
// Method: the same checkpoints on a persisting and a non-persisting
// store, each reopened.
#[test]
fn lease_checkpoints_persist_only_when_asked() {
    let checkpoint = |id, remaining_ttl| {
        WriteRequest::LeaseCheckpoint(LeaseCheckpointRequest {
            checkpoints: vec![crate::LeaseCheckpoint { id, remaining_ttl }],
        })
    };
    let ttls = |store: &Store| -> Vec<(i64, i64, i64)> {
        store
            .lease_ttls()
            .iter()
            .map(|lease| (lease.id, lease.ttl, lease.remaining_ttl))
            .collect()
    };
    for persist in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kv");
        let store = Store::open(&path).unwrap();
        store.persist_lease_checkpoints(persist);
        let grant = |id| WriteRequest::LeaseGrant(LeaseGrantRequest { id, ttl: 600 });
        store.apply(1, &[grant(1), grant(2), grant(3)]).unwrap();
        let applied = store
            .apply(2, &[checkpoint(1, 300), checkpoint(2, 200), checkpoint(9, 100)])
            .unwrap();
        assert!(applied.iter().all(|applied| applied.response.is_ok()));
        store
            .apply(
                3,
                &[
                    checkpoint(2, 0),
                    WriteRequest::LeaseRevoke(LeaseRevokeRequest { id: 3 }),
                ],
            )
            .unwrap();
        assert_eq!(
            ttls(&store),
            [(1, 600, 300), (2, 600, 0)],
            "in memory, persist={persist}"
        );
        assert_eq!(store.current_revision(), 1, "checkpoints make no revision");
        store.commit().unwrap();
        drop(store);
        let reopened = Store::open(&path).unwrap();
        let kept = if persist { 300 } else { 0 };
        assert_eq!(
            ttls(&reopened),
            [(1, 600, kept), (2, 600, 0)],
            "reopened, persist={persist}"
        );
    }
}

// Goal: the lock check recognises the error this sled version really
// gives when a second handle opens a directory. Method: open twice.
#[test]
fn lock_error_is_recognised() {
    let dir = tempfile::tempdir().unwrap();
    let _first = sled::Config::new().path(dir.path()).open().unwrap();
    match sled::Config::new().path(dir.path()).open() {
        Err(sled::Error::Io(error)) => assert!(is_lock_held(&error), "{error}"),
        other => panic!("expected a lock error, got {other:?}"),
    }
}

// Goal: a defragmentation wins back the space of what was deleted and
// compacted, keeps everything live (keys, revisions, the consistent
// index, the membership), and leaves a store that takes writes and
// reopens.
// Method: 4,000 puts of 1 KiB, most deleted and compacted, flushed;
// sled's size before and after, and reads and writes after.
#[test]
fn defragment_shrinks_and_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv");
    let store = Store::open(&path).unwrap();
    let put = |i: usize| {
        WriteRequest::Put(PutRequest {
            key: format!("k{i:05}").into_bytes(),
            value: vec![b'v'; 1024],
            ..PutRequest::default()
        })
    };
    let mut index = 0;
    for chunk in (0..4000).collect::<Vec<_>>().chunks(100) {
        index += 1;
        store
            .apply(index, &chunk.iter().map(|&i| put(i)).collect::<Vec<_>>())
            .unwrap();
    }
    let delete = WriteRequest::DeleteRange(DeleteRangeRequest {
        key: b"k00100".to_vec(),
        range_end: b"l".to_vec(),
        prev_kv: false,
    });
    store.apply(index + 1, &[delete]).unwrap();
    let revision = store.current_revision();
    let compact = WriteRequest::Compaction(CompactionRequest { revision });
    store
        .apply(index + 2, &[compact, WriteRequest::Membership(b"m".to_vec())])
        .unwrap();
    store.flush().unwrap();
    let before = store.size_on_disk().unwrap();
    store.defragment().unwrap();
    let after = store.size_on_disk().unwrap();
    assert!(after * 2 <= before, "{before} bytes, then {after}");
    assert!(directory_matches_sled(&store), "after a defragmentation");
    let everything = RangeRequest {
        key: vec![0],
        range_end: vec![0],
        ..RangeRequest::default()
    };
    let kept = store.range(&everything).unwrap();
    assert_eq!(kept.kvs.len(), 100);
    assert_eq!(store.current_revision(), revision);
    assert_eq!(store.membership(), (index + 2, Some(b"m".to_vec())));
    store.apply(index + 3, &[put(7000)]).unwrap();
    store.flush().unwrap();
    assert!(directory_matches_sled(&store), "after a commit into the fresh database");
    drop(store);
    let reopened = Store::open(&path).unwrap();
    assert_eq!(reopened.range(&everything).unwrap().kvs.len(), 101);
    assert_eq!(reopened.current_revision(), revision + 1);
}

// Goal: writes applied while a defragmentation copies (overwrites of
// keys the copy has passed and has not, deletes, new keys) are all in
// the store after the switch and after reopening, and each
// defragmentation leaves only its own generation on disk.
#[test]
fn defragment_while_writing_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv");
    let store = Arc::new(Store::open(&path).unwrap());
    let put = |key: String, value: usize| {
        WriteRequest::Put(PutRequest {
            key: key.into_bytes(),
            value: format!("{value:01000}").into_bytes(),
            ..PutRequest::default()
        })
    };
    for batch in 0..100 {
        let puts: Vec<_> = (0..100).map(|i| put(format!("k{:05}", batch * 100 + i), 0)).collect();
        store.apply(batch as u64 + 1, &puts).unwrap();
    }
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let (store, done) = (store.clone(), done.clone());
        std::thread::spawn(move || {
            let mut index = 100u64;
            let mut during = 0;
            while !done.load(Ordering::Acquire) && index < 100_000 {
                index += 1;
                let n = index as usize;
                let delete = WriteRequest::DeleteRange(DeleteRangeRequest {
                    key: format!("k{:05}", n * 7919 % 10_000).into_bytes(),
                    range_end: Vec::new(),
                    prev_kv: false,
                });
                let writes = [
                    put(format!("k{:05}", n * 31 % 10_000), n),
                    put(format!("n{n:06}"), n),
                    delete,
                ];
                store.apply(index, &writes).unwrap();
                during += 1;
            }
            (index, during)
        })
    };
    store.defragment_as(SledCopy::Always).unwrap();
    store.defragment_as(SledCopy::Always).unwrap();
    done.store(true, Ordering::Release);
    let (index, during) = writer.join().unwrap();
    assert!(during > 10, "only {during} applies ran during the defragmentations");
    let everything = RangeRequest {
        key: vec![0],
        range_end: vec![0],
        ..RangeRequest::default()
    };
    let served = store.range(&everything).unwrap();
    assert_eq!(store.consistent_index(), index);
    drop(store);
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(
        names
            .iter()
            .filter(|name| name.starts_with("kv") && *name != "kv.current" && *name != "kv.values")
            .count(),
        1,
        "{names:?}"
    );
    assert!(names.contains(&"kv.2".to_string()), "{names:?}");
    let reopened = Store::open(&path).unwrap();
    assert_eq!(reopened.range(&everything).unwrap(), served);
    assert_eq!(reopened.consistent_index(), index);
}

// Goal: a compaction's removals, done in steps by the store that
// applied it or left queued by a stop and done after reopening,
// leave storage holding the same revisions; reads meanwhile see the
// compacted history; the hash taken at compaction is HashKV's at its
// revision before it.
#[test]
fn compaction_in_steps_and_after_a_stop_ends_the_same() {
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let stores: Vec<Store> = dirs
        .iter()
        .map(|dir| Store::open(&dir.path().join("kv")).unwrap())
        .collect();
    let mut index = 0;
    for round in 0..5 {
        for chunk in (0..1000).collect::<Vec<_>>().chunks(250) {
            index += 1;
            let puts: Vec<_> = chunk.iter().map(|&key| put_in_round(key, round)).collect();
            stores.iter().for_each(|store| drop(store.apply(index, &puts).unwrap()));
        }
    }
    let at = stores[0].current_revision() - 10;
    let (before, _) = stores[0].hash_kv(at).unwrap();
    let compact = WriteRequest::Compaction(CompactionRequest { revision: at });
    index += 1;
    stores
        .iter()
        .for_each(|store| drop(store.apply(index, std::slice::from_ref(&compact)).unwrap()));
    assert!(stores.iter().all(Store::compaction_pending));
    let everything = RangeRequest {
        key: vec![0],
        range_end: vec![0],
        ..RangeRequest::default()
    };
    let served = stores[0].range(&everything).unwrap();
    // etcd's batch limit sets the steps' size: 1000 keys and 4990
    // revisions (about 4000 of them removed as they are hashed) are 10
    // index steps of 100 and 50 of hashing and removal (and 6 of the
    // default 1000).
    stores[0].set_compaction_batch_limit(100);
    let mut steps = 0;
    while stores[0].compact_step().unwrap() {
        steps += 1;
        assert_eq!(stores[0].range(&everything).unwrap(), served);
        assert!(directory_matches_sled(&stores[0]), "after step {steps}");
    }
    assert!((55..=65).contains(&steps), "{steps} steps");
    assert_eq!(stores[0].hash_kv(at).unwrap().0, before);
    let mut stores = stores.into_iter();
    let (first, second) = (stores.next().unwrap(), stores.next().unwrap());
    drop(second);
    let reopened = Store::open(&dirs[1].path().join("kv")).unwrap();
    assert!(reopened.compaction_pending(), "the removals were lost with the stop");
    reopened.finish_compactions().unwrap();
    assert_eq!(reopened.range(&everything).unwrap(), served);
    assert_eq!(stored_revisions(&first), stored_revisions(&reopened));
    assert_eq!(first.compact_revision(), reopened.compact_revision());
    assert_eq!(first.current_revision(), reopened.current_revision());
}

/// Whether the store's block directory holds exactly sled's block
/// pointers (directory.rs), as every commit must leave it.
fn directory_matches_sled(store: &Store) -> bool {
    store.state.read().directory.equals(&store.db.read())
}

/// Every stored revision, with whether it is a tombstone and its
/// record, in revision order: what a store holds, whatever the layout
/// of its blocks (which depends on when its commits came).
fn stored_revisions(store: &Store) -> Vec<(Revision, bool, Vec<u8>)> {
    store.commit().unwrap();
    let state = store.state.read();
    let mut all = Vec::new();
    let each = |revision, tombstone, record: &[u8]| {
        all.push((revision, tombstone, record.to_vec()));
        Ok(ControlFlow::Continue(()))
    };
    let last = state.current_revision;
    each_through(
        &store.db.read(),
        &state.values,
        &state.batch,
        Revision::new(1, 0),
        last,
        each,
    )
    .unwrap();
    all
}

// Goal: the bytes in use the commits keep equal a count of every
// item, through puts, deletes, leases, a compaction's removals, a
// defragmentation, a reopen and a restore on another store.
// Method: compare Store::live_bytes with a walk after each step.
#[test]
fn kept_stored_bytes_equal_a_count_of_every_item() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv");
    let store = Store::open(&path).unwrap();
    let counted = |store: &Store| {
        store.flush().unwrap();
        (
            store.live_bytes().unwrap(),
            count_stored_bytes(&store.db.read()).unwrap(),
        )
    };
    let mut index = 0;
    let mut apply = |store: &Store, requests: &[WriteRequest]| {
        index += 1;
        drop(store.apply(index, requests).unwrap());
    };
    for round in 0..3 {
        let puts: Vec<_> = (0..300).map(|key| put_in_round(key, round)).collect();
        apply(&store, &puts);
        let (kept, walked) = counted(&store);
        assert_eq!(kept, walked, "after round {round}");
    }
    apply(
        &store,
        &[WriteRequest::LeaseGrant(LeaseGrantRequest { id: 5, ttl: 60 })],
    );
    apply(
        &store,
        &[WriteRequest::DeleteRange(DeleteRangeRequest {
            key: b"k0000".to_vec(),
            range_end: b"k0100".to_vec(),
            prev_kv: false,
        })],
    );
    let (kept, walked) = counted(&store);
    assert_eq!(kept, walked, "after a lease and deletes");
    let at = store.current_revision();
    apply(&store, &[WriteRequest::Compaction(CompactionRequest { revision: at })]);
    store.finish_compactions().unwrap();
    let (kept, walked) = counted(&store);
    assert_eq!(kept, walked, "after a compaction");
    store.defragment_as(SledCopy::Always).unwrap();
    assert_eq!(counted(&store).0, counted(&store).1, "after a defragmentation");
    let (_, snapshot) = store.snapshot().unwrap();
    let before_reopen = store.live_bytes().unwrap();
    drop(store);
    let store = Store::open(&path).unwrap();
    assert_eq!(store.live_bytes().unwrap(), before_reopen, "read back on open");
    let other = Store::open(&dir.path().join("other")).unwrap();
    other.restore(1, &snapshot).unwrap();
    let (kept, walked) = counted(&other);
    assert_eq!(kept, walked, "after a restore");
    apply(&other, &[put_in_round(1, 9)]);
    let (kept, walked) = counted(&other);
    assert_eq!(kept, walked, "after a commit following the restore");
}

/// The value files of the store at `path`, by number.
fn value_file_numbers(path: &Path) -> Vec<u64> {
    let mut numbers: Vec<u64> = std::fs::read_dir(value_files::dir_of(path))
        .unwrap()
        .filter_map(|entry| {
            let name = entry.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".values")?.parse().ok()
        })
        .collect();
    numbers.sort_unstable();
    numbers
}

fn everything(store: &Store) -> Vec<KeyValue> {
    let all = RangeRequest {
        key: vec![0],
        range_end: vec![0],
        ..RangeRequest::default()
    };
    store.range(&all).unwrap().kvs
}

/// A put of key `k<key>` with a 1 KiB value of round `round`'s letter
/// (four such values fill a block).
fn round_put(key: usize, round: usize) -> WriteRequest {
    WriteRequest::Put(PutRequest {
        key: format!("k{key:04}").into_bytes(),
        value: vec![b'a' + round as u8; 1000],
        ..PutRequest::default()
    })
}

// Goal: a value file a compaction left mostly dead is reclaimed: its
// live blocks move to the newest file and it is deleted, with every
// value still read, counted and kept across a reopen; a file left
// wholly dead goes too.
// Method: each open starts a new file, so reopening between rounds
// puts each round in its own file. 1 KiB values make 4 to a block:
// round 0 puts 300 keys, round 1 overwrites 200 of them. A compaction
// leaves round 0's file a third live (its last 25 blocks).
#[test]
fn value_files_a_compaction_emptied_are_reclaimed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv");
    let store = Store::open(&path).unwrap();
    drop(
        store
            .apply(1, &(0..300).map(|key| round_put(key, 0)).collect::<Vec<_>>())
            .unwrap(),
    );
    drop(store);
    let store = Store::open(&path).unwrap();
    drop(
        store
            .apply(2, &(0..200).map(|key| round_put(key, 1)).collect::<Vec<_>>())
            .unwrap(),
    );
    store.flush().unwrap();
    let before = value_file_numbers(&path);
    assert_eq!(before.len(), 2, "one file a round: {before:?}");
    let expected = everything(&store);
    let at = store.current_revision();
    drop(
        store
            .apply(3, &[WriteRequest::Compaction(CompactionRequest { revision: at })])
            .unwrap(),
    );
    store.finish_compactions().unwrap();
    let after = value_file_numbers(&path);
    assert!(!after.contains(&before[0]), "round 0's file is reclaimed: {after:?}");
    assert!(after.contains(&before[1]), "round 1's file is all live: {after:?}");
    assert_eq!(everything(&store), expected);
    assert!(directory_matches_sled(&store), "after reclaiming");
    store.flush().unwrap();
    assert_eq!(
        store.live_bytes().unwrap(),
        count_stored_bytes(&store.db.read()).unwrap()
    );
    let files_bytes = store.state.read().values.size_on_disk();
    assert!(
        files_bytes <= 300 * 1100,
        "the files hold about the live values: {files_bytes} bytes"
    );
    drop(store);
    let store = Store::open(&path).unwrap();
    assert_eq!(everything(&store), expected);

    // Everything overwritten and compacted: both files are dead.
    drop(
        store
            .apply(4, &(0..300).map(|key| round_put(key, 2)).collect::<Vec<_>>())
            .unwrap(),
    );
    let at = store.current_revision();
    drop(
        store
            .apply(5, &[WriteRequest::Compaction(CompactionRequest { revision: at })])
            .unwrap(),
    );
    store.finish_compactions().unwrap();
    let last = value_file_numbers(&path);
    assert!(last.iter().all(|n| !after.contains(n)), "{after:?} then {last:?}");
    assert!(directory_matches_sled(&store), "after reclaiming every file");
    assert_eq!(everything(&store).len(), 300);
}

// Goal: while a compaction still runs, the value files its removals
// have emptied are deleted once there are `DEAD_FILES_RECLAIM_MIN` of
// them, before its end; every value is still read, and the store opens
// again the same.
// Method: each open starts a new file, so eight rounds of 25 new keys,
// with a reopen after each, leave eight files; a ninth round overwrites
// all 200 keys. Compacted 25 revisions a step (one round's file), with a
// commit after each step as the idle apply stage does, the removals
// empty one file a step, oldest first.
#[test]
fn dead_value_files_go_while_the_compaction_runs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv");
    const ROUNDS: usize = 8;
    const KEYS: usize = 25;
    for round in 0..ROUNDS {
        let store = Store::open(&path).unwrap();
        let puts: Vec<_> = (round * KEYS..(round + 1) * KEYS)
            .map(|key| round_put(key, round))
            .collect();
        drop(store.apply(round as u64 + 1, &puts).unwrap());
    }
    let store = Store::open(&path).unwrap();
    let overwrites: Vec<_> = (0..ROUNDS * KEYS).map(|key| round_put(key, ROUNDS)).collect();
    drop(store.apply(ROUNDS as u64 + 1, &overwrites).unwrap());
    store.commit().unwrap();
    let rounds = value_file_numbers(&path);
    assert_eq!(rounds.len(), ROUNDS + 1, "one file a round: {rounds:?}");
    let expected = everything(&store);
    store.set_compaction_batch_limit(KEYS);
    let at = store.current_revision();
    let compaction = WriteRequest::Compaction(CompactionRequest { revision: at });
    drop(store.apply(ROUNDS as u64 + 2, &[compaction]).unwrap());
    // (files on disk, whether compaction work was still queued) per step.
    let mut seen = Vec::new();
    for _ in 0..1000 {
        let more = store.compact_step().unwrap();
        store.commit().unwrap();
        store.wait_for_unlinks();
        let queued = !store.state.read().compactions.is_empty();
        seen.push((value_file_numbers(&path).len(), queued));
        if !more {
            break;
        }
    }
    assert_eq!(seen.last(), Some(&(1, false)), "only the last round's file is left");
    let mid = seen
        .iter()
        .filter(|(files, queued)| *queued && *files == ROUNDS + 1 - DEAD_FILES_RECLAIM_MIN)
        .count();
    assert!(mid > 0, "dead files went before the compaction ended: {seen:?}");
    assert!(
        seen.iter()
            .all(|(files, queued)| !queued || *files > ROUNDS + 1 - 2 * DEAD_FILES_RECLAIM_MIN),
        "no more than one lot went while it ran (8 rounds): {seen:?}"
    );
    assert_eq!(everything(&store), expected);
    assert!(directory_matches_sled(&store), "after deleting the dead files");
    drop(store);
    let store = Store::open(&path).unwrap();
    assert_eq!(everything(&store), expected);
}

// Goal: a flipped bit in a value file is reported when the store
// opens, not served.
#[test]
fn a_flipped_bit_in_a_value_file_fails_the_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kv");
    let store = Store::open(&path).unwrap();
    drop(
        store
            .apply(1, &(0..50).map(|key| put_in_round(key, 0)).collect::<Vec<_>>())
            .unwrap(),
    );
    drop(store);
    let file = value_files::dir_of(&path).join(format!("{:020}.values", value_file_numbers(&path)[0]));
    let mut bytes = std::fs::read(&file).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(&file, bytes).unwrap();
    let error = Store::open(&path).err().expect("the open fails").to_string();
    assert!(error.contains("checksum"), "{error}");
}

/// Key `key`'s put in writing round `round`: the compaction tests'
/// keys, each rewritten once a round.
fn put_in_round(key: usize, round: usize) -> WriteRequest {
    WriteRequest::Put(PutRequest {
        key: format!("k{key:04}").into_bytes(),
        value: format!("value {round}").into_bytes(),
        ..PutRequest::default()
    })
}

// Goal: after a compaction, the next one's hash takes steps in
// proportion to the revisions still stored, not to the revision
// numbers they span, and its hash is still HashKV's at its revision.
// Method: 100 keys put 50 times each, compacted; 10 keys put again and
// a second compaction with a batch limit of 10. About 110 revisions
// are stored below it, among 5,000 numbers: about 11 hash steps, where
// steps of 10 revision numbers would be 500.
#[test]
fn a_compactions_hash_steps_over_what_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("kv")).unwrap();
    let mut index = 0;
    for round in 0..50 {
        index += 1;
        let puts: Vec<_> = (0..100).map(|key| put_in_round(key, round)).collect();
        drop(store.apply(index, &puts).unwrap());
    }
    let compact = |at| WriteRequest::Compaction(CompactionRequest { revision: at });
    index += 1;
    drop(store.apply(index, &[compact(store.current_revision())]).unwrap());
    store.finish_compactions().unwrap();
    index += 1;
    let puts: Vec<_> = (0..10).map(|key| put_in_round(key, 50)).collect();
    drop(store.apply(index, &puts).unwrap());
    let at = store.current_revision();
    let (before, _) = store.hash_kv(at).unwrap();
    store.set_compaction_batch_limit(10);
    index += 1;
    drop(store.apply(index, &[compact(at)]).unwrap());
    let mut steps = 0;
    while store.compact_step().unwrap() {
        steps += 1;
        assert!(steps < 100, "{steps} steps and more");
    }
    // 10 index steps, about 11 hash steps, 1 removal.
    assert!((15..=30).contains(&steps), "{steps} steps");
    assert_eq!(store.hash_kv(at).unwrap().0, before);
}

fn alarm(member_id: u64, kind: i32, activate: bool) -> WriteRequest {
    WriteRequest::Alarm(AlarmRequest {
        activate,
        alarm: Alarm { member_id, kind },
    })
}

fn answer(store: &Store, index: u64, request: WriteRequest) -> Option<Alarm> {
    match store.apply(index, &[request]).unwrap().remove(0).response {
        Ok(WriteResponse::Alarm(response)) => response.alarm,
        other => panic!("{other:?}"),
    }
}

// Goal: while a NOSPACE alarm is raised, the store refuses at apply
// what etcd's capped applier refuses (puts, txns with a put in either
// branch, lease grants) and applies the rest (reads in txns, deletes,
// compactions); once it is cleared, puts apply again.
// Method: one store, an alarm raised and cleared through apply.
#[test]
fn a_nospace_alarm_refuses_writes_that_add_data() {
    use crate::request::{RequestOp, TxnRequest};
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("a")).unwrap();
    let put = |key: &[u8]| PutRequest {
        key: key.to_vec(),
        value: b"v".to_vec(),
        ..PutRequest::default()
    };
    let range = RangeRequest {
        key: b"k".to_vec(),
        ..RangeRequest::default()
    };
    let txn = |success: Vec<RequestOp>| {
        WriteRequest::Txn(TxnRequest {
            compare: Vec::new(),
            success,
            failure: Vec::new(),
        })
    };
    let refused = |index: u64, request: WriteRequest| {
        let applied = store.apply(index, &[request]).unwrap().remove(0);
        applied.response.err()
    };
    assert_eq!(refused(1, WriteRequest::Put(put(b"k"))), None);
    answer(&store, 2, alarm(7, ALARM_NOSPACE, true));
    let revision = store.current_revision();
    assert_eq!(refused(3, WriteRequest::Put(put(b"k"))), Some(Error::NoSpace));
    let grant = WriteRequest::LeaseGrant(LeaseGrantRequest { id: 5, ttl: 60 });
    assert_eq!(refused(4, grant), Some(Error::NoSpace));
    let nested = txn(vec![RequestOp::Txn(TxnRequest {
        compare: Vec::new(),
        success: vec![RequestOp::Put(put(b"n"))],
        failure: Vec::new(),
    })]);
    assert_eq!(refused(5, nested), Some(Error::NoSpace));
    assert_eq!(store.current_revision(), revision, "nothing refused applied");
    assert_eq!(refused(6, txn(vec![RequestOp::Range(range.clone())])), None);
    let delete = WriteRequest::DeleteRange(DeleteRangeRequest {
        key: b"k".to_vec(),
        range_end: Vec::new(),
        prev_kv: false,
    });
    assert_eq!(refused(7, delete), None);
    assert_eq!(store.current_revision(), revision + 1, "the delete applied");
    answer(&store, 8, alarm(7, ALARM_NOSPACE, false));
    assert_eq!(refused(9, WriteRequest::Put(put(b"k"))), None);
    assert_eq!(store.range(&range).unwrap().kvs.len(), 1);
}

// Goal: alarms are raised and cleared as etcd's alarm store does them
// (a raise answers the alarm even when it was raised; a clear answers
// it only when it was), leave the revision alone, survive a reopen,
// travel in a snapshot, and are dropped by a restore for a new
// cluster, whose members are others.
#[test]
fn alarms_are_replicated_state() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("a")).unwrap();
    let revision = store.current_revision();
    assert!(!store.has_alarm(1));
    assert_eq!(
        answer(&store, 1, alarm(7, 1, true)),
        Some(Alarm { member_id: 7, kind: 1 })
    );
    assert_eq!(
        answer(&store, 2, alarm(7, 1, true)),
        Some(Alarm { member_id: 7, kind: 1 })
    );
    assert_eq!(
        answer(&store, 3, alarm(9, 2, true)),
        Some(Alarm { member_id: 9, kind: 2 })
    );
    assert_eq!(
        answer(&store, 4, alarm(9, 1, false)),
        None,
        "not raised, so not cleared"
    );
    assert!(store.has_alarm(1) && store.has_alarm(2) && !store.has_alarm(3));
    assert_eq!(store.current_revision(), revision);
    drop(store);

    let store = Store::open(&dir.path().join("a")).unwrap();
    assert_eq!(store.alarms().len(), 2, "kept across a reopen");
    let (index, data) = store.snapshot().unwrap();
    let copy = Store::open(&dir.path().join("b")).unwrap();
    copy.restore(index, &data).unwrap();
    assert_eq!(copy.alarms(), store.alarms());
    assert!(copy.has_alarm(2));
    assert_eq!(
        answer(&copy, index + 1, alarm(9, 2, false)),
        Some(Alarm { member_id: 9, kind: 2 })
    );
    assert!(!copy.has_alarm(2) && copy.has_alarm(1));

    let fresh = Store::open(&dir.path().join("c")).unwrap();
    fresh
        .restore_for_new_cluster(&data[..], 3, b"members".to_vec())
        .unwrap();
    assert!(fresh.alarms().is_empty() && !fresh.has_alarm(1));
    assert_eq!(fresh.membership(), (3, Some(b"members".to_vec())));
}

// Goal: a key rewritten more often than the index looks back for its
// generation's start (key_index.rs) still gets etcd's create revision and
// version, whether its latest revision is in the open batch or in sled,
// across a delete, and after a compaction cut its generation.
// Method: one key put in batches of 50, committing after some of them,
// to well past GENERATION_SCAN_SLOTS_MAX; then a delete and a second,
// equally long generation; then a compaction and more puts. Each step
// reads the key back.
#[test]
fn a_hot_key_keeps_its_generation() {
    use crate::key_index::GENERATION_SCAN_SLOTS_MAX;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let put = || {
        WriteRequest::Put(PutRequest {
            key: b"hot".to_vec(),
            value: b"v".to_vec(),
            ..PutRequest::default()
        })
    };
    let latest = |store: &Store| {
        let kv = store
            .range(&RangeRequest {
                key: b"hot".to_vec(),
                ..RangeRequest::default()
            })
            .unwrap()
            .kvs
            .pop()
            .expect("the key is live");
        (kv.create_revision, kv.version, kv.mod_revision)
    };
    let mut index = 0;
    let mut apply = |store: &Store, requests: Vec<WriteRequest>, commit: bool| {
        index += 1;
        let applied = store.apply(index, &requests).unwrap();
        assert!(applied.iter().all(|applied| applied.response.is_ok()));
        if commit {
            store.commit().unwrap();
        }
    };
    let rounds = 3 * GENERATION_SCAN_SLOTS_MAX / 50 + 1;
    for round in 0..rounds {
        apply(&store, (0..50).map(|_| put()).collect(), round % 2 == 0);
        let puts = 50 * (round as i64 + 1);
        // Revision 1 is the empty store's; the first put is 2.
        assert_eq!(latest(&store), (2, puts, puts + 1), "first generation, round {round}");
    }
    let first = 50 * rounds as i64;
    apply(
        &store,
        vec![WriteRequest::DeleteRange(DeleteRangeRequest {
            key: b"hot".to_vec(),
            ..DeleteRangeRequest::default()
        })],
        true,
    );
    // The first generation's last put is at first + 1, the delete at
    // first + 2.
    let created = first + 3;
    for round in 0..rounds {
        apply(&store, (0..50).map(|_| put()).collect(), round % 2 == 1);
        let puts = 50 * (round as i64 + 1);
        assert_eq!(
            latest(&store),
            (created, puts, created + puts - 1),
            "second generation, round {round}"
        );
    }
    let compact_at = created + 10;
    apply(
        &store,
        vec![WriteRequest::Compaction(CompactionRequest { revision: compact_at })],
        true,
    );
    store.finish_compactions().unwrap();
    let second = 50 * rounds as i64;
    apply(&store, (0..5).map(|_| put()).collect(), false);
    assert_eq!(
        latest(&store),
        (created, second + 5, created + second + 4),
        "after a compaction"
    );
}
