//! Goal: a txn whose every operation is a range is served as etcd serves
//! it (`isTxnReadonly`): without a raft entry, so without a WAL write,
//! linearizable unless every range is serializable.
//!
//! Method: a 3-member kv-server cluster and a 3-member etcd 3.5.17
//! cluster, each its own processes on loopback, take the same calls.
//! 1. Linearizable: 200 rounds each put a new value through one member,
//!    then on every member (followers included) run a read-only txn that
//!    compares the key with that value and reads it back. A read after an
//!    acknowledged write must see it, wherever it runs.
//! 2. No WAL write: `etcd_disk_wal_write_bytes_total` on every member and
//!    the store's revision are read, 1,000 read-only txns (linearizable
//!    and serializable, both branches taken) run across the members, and
//!    both are read again: the bytes written and the revision must not
//!    have moved. The same txn with a put in it must move both, so the
//!    check can fail.
//!
//! The answers are compared with etcd's as well: same branch, same kvs,
//! same header revision.

mod common;

use std::time::Duration;

use common::Cluster;
use kv_server::proto::etcdserverpb as pb;
use kv_server::proto::etcdserverpb::kv_client::KvClient;
use pb::request_op::Request;
use tonic::transport::Channel;

const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Rounds of write-then-read in the linearizability check.
const ROUNDS: usize = 200;
/// Read-only txns between the two WAL readings (the count).
const READ_ONLY_TXNS: usize = 1000;
const KEY: &[u8] = b"read-only-txn/key";

fn range(serializable: bool) -> pb::RequestOp {
    pb::RequestOp {
        request: Some(Request::RequestRange(pb::RangeRequest {
            key: KEY.to_vec(),
            serializable,
            ..pb::RangeRequest::default()
        })),
    }
}

/// A txn of ranges only: if KEY holds `value`, read it; else read it too
/// (both branches are ranges, so the txn is read-only either way).
fn read_only(value: &[u8], serializable: bool) -> pb::TxnRequest {
    pb::TxnRequest {
        compare: vec![pb::Compare {
            key: KEY.to_vec(),
            result: pb::compare::CompareResult::Equal as i32,
            target: pb::compare::CompareTarget::Value as i32,
            target_union: Some(pb::compare::TargetUnion::Value(value.to_vec())),
            ..pb::Compare::default()
        }],
        success: vec![range(serializable)],
        failure: vec![range(serializable)],
    }
}

fn put(value: &[u8]) -> pb::PutRequest {
    pb::PutRequest {
        key: KEY.to_vec(),
        value: value.to_vec(),
        ..pb::PutRequest::default()
    }
}

/// Every member's client, in member order.
async fn clients(cluster: &Cluster) -> Vec<KvClient<Channel>> {
    let mut clients = Vec::new();
    for member in &cluster.members {
        let channel = common::connect(&member.endpoint(), CALL_TIMEOUT)
            .await
            .expect("connect");
        clients.push(KvClient::new(channel));
    }
    clients
}

/// `etcd_disk_wal_write_bytes_total` of every member, in member order.
fn wal_bytes(cluster: &Cluster) -> Vec<u64> {
    cluster
        .members
        .iter()
        .map(|member| {
            let metrics = common::http_get(member.client_port, "/metrics");
            metrics
                .lines()
                .find_map(|line| line.strip_prefix("etcd_disk_wal_write_bytes_total "))
                .map(|value| value.trim().parse::<f64>().expect("a number") as u64)
                .expect("the member reports its WAL bytes")
        })
        .collect()
}

/// The branch taken and the value read by each txn answer.
fn outcome(response: &pb::TxnResponse) -> (bool, Vec<u8>) {
    let value = match response.responses.first().and_then(|r| r.response.as_ref()) {
        Some(pb::response_op::Response::ResponseRange(range)) => {
            range.kvs.first().map(|kv| kv.value.clone()).unwrap_or_default()
        }
        other => panic!("a range answer expected, got {other:?}"),
    };
    (response.succeeded, value)
}

/// Part 1: every member's read-only txn sees the write acknowledged just
/// before it. Returns what each round read, for comparing servers.
async fn linearizable(clients: &mut [KvClient<Channel>]) -> Vec<(bool, Vec<u8>)> {
    let mut seen = Vec::new();
    for round in 0..ROUNDS {
        let value = format!("v{round}").into_bytes();
        let writer = round % clients.len();
        clients[writer].put(put(&value)).await.expect("put");
        for (i, client) in clients.iter_mut().enumerate() {
            let answer = client.txn(read_only(&value, false)).await.expect("txn").into_inner();
            let read = outcome(&answer);
            assert_eq!(
                read,
                (true, value.clone()),
                "round {round}: member {i} missed the write acknowledged by member {writer}"
            );
            seen.push(read);
        }
    }
    seen
}

/// Part 2: the WAL bytes and revision before and after READ_ONLY_TXNS
/// read-only txns, then after one txn that writes.
async fn no_wal_write(cluster: &Cluster, clients: &mut [KvClient<Channel>]) -> (i64, i64) {
    let revision = |answer: &pb::TxnResponse| answer.header.as_ref().expect("header").revision;
    let last = format!("v{}", ROUNDS - 1).into_bytes();
    let before = wal_bytes(cluster);
    let mut first_revision = None;
    for i in 0..READ_ONLY_TXNS {
        // Alternate matching and not, linearizable and serializable.
        let value = if i % 2 == 0 { last.clone() } else { b"other".to_vec() };
        let serializable = i % 4 >= 2;
        let client = &mut clients[i % 3];
        let answer = client
            .txn(read_only(&value, serializable))
            .await
            .expect("txn")
            .into_inner();
        assert_eq!(outcome(&answer), (i % 2 == 0, last.clone()), "txn {i}");
        let at = revision(&answer);
        assert_eq!(*first_revision.get_or_insert(at), at, "txn {i} moved the revision");
    }
    let after = wal_bytes(cluster);
    assert_eq!(before, after, "read-only txns wrote to a WAL");
    // The same shape with a put in it is a write: it must move both.
    let mut writing = read_only(&last, false);
    writing.success.push(pb::RequestOp {
        request: Some(Request::RequestPut(put(b"written"))),
    });
    let answer = clients[0].txn(writing).await.expect("txn").into_inner();
    assert!(
        revision(&answer) > first_revision.unwrap(),
        "a txn with a put creates a revision"
    );
    let deadline = std::time::Instant::now() + CALL_TIMEOUT;
    while wal_bytes(cluster).iter().zip(&after).any(|(now, then)| now <= then) {
        assert!(std::time::Instant::now() < deadline, "a write did not reach every WAL");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (first_revision.unwrap(), revision(&answer))
}

async fn exercise(cluster: &Cluster) -> (Vec<(bool, Vec<u8>)>, (i64, i64)) {
    let mut clients = clients(cluster).await;
    let seen = linearizable(&mut clients).await;
    let revisions = no_wal_write(cluster, &mut clients).await;
    (seen, revisions)
}

#[test]
fn read_only_txns_skip_the_wal_and_stay_linearizable() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let etcd_dir = tempfile::tempdir().unwrap();
    let mut etcd = Cluster::start(&common::etcd_tool("ETCD_BIN", "etcd"), etcd_dir.path(), 24379, &[]);
    let from_etcd = runtime.block_on(exercise(&etcd));
    etcd.stop();
    let kv_dir = tempfile::tempdir().unwrap();
    let mut kv = Cluster::start(&common::kv_server(), kv_dir.path(), 24479, &[]);
    let from_kv = runtime.block_on(exercise(&kv));
    kv.stop();
    assert_eq!(from_kv, from_etcd, "kv-server's answers differ from etcd's");
}
