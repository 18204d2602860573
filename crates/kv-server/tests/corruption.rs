//! Goal: a member whose store was altered while it was stopped raises the
//! CORRUPT alarm at start with `--experimental-initial-corrupt-check`, and
//! the leader's periodic check (`--experimental-corrupt-check-time`)
//! raises it for such a member too; every member then refuses writes
//! with etcd's code and message ("etcdserver: corrupt cluster"), and
//! reads still work.
//!
//! Method: for each check, three kv-server members on loopback, all
//! started with it (the two intact ones pass the initial one; the third,
//! restarted while another leads, is a follower for the periodic one). 200 puts, one of them a known
//! value; once the store has written them (an idle second), the third
//! member is killed, its store opened here, the value's bytes changed in
//! place (same length, same revisions) and the store written back. When
//! the member restarts, real etcdctl 3.5.17's `alarm list` must show its
//! CORRUPT alarm within [`ALARM_WITHIN`].
//!
//! Needs etcdctl: `ETCDCTL_BIN`, or the cache that
//! `../shared/peers/build.sh` fills.

mod common;

use std::time::{Duration, Instant};

use kv_server::proto::etcdserverpb as pb;
use kv_server::proto::etcdserverpb::kv_client::KvClient;

const CALL_TIMEOUT: Duration = Duration::from_secs(30);
const INTACT: &[u8] = b"intact value!";
const ALTERED: &[u8] = b"ALTERED value";
/// How long the restarted member may take to catch up, compare and raise.
const ALARM_WITHIN: Duration = Duration::from_secs(30);

/// Runs etcdctl: whether it succeeded, and what it printed.
fn etcdctl(endpoint: &str, args: &[&str]) -> (bool, String) {
    let output = common::etcdctl(endpoint, args);
    (output.status.success(), common::text(&output))
}

/// Changes the known value in the stopped member's store in place.
fn alter(store_path: &std::path::Path) {
    let store = mvcc::Store::open(store_path).expect("open the stopped member's store");
    let (index, mut dump) = store.snapshot().expect("dump");
    let at = dump
        .windows(INTACT.len())
        .position(|window| window == INTACT)
        .expect("the store holds the value");
    dump[at..at + ALTERED.len()].copy_from_slice(ALTERED);
    store.restore(index, &dump).expect("write back");
    store.flush().expect("flush");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_altered_store_raises_corrupt_at_start() {
    altered_member_is_found(&["--experimental-initial-corrupt-check"], 23379).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leaders_periodic_check_finds_an_altered_member() {
    altered_member_is_found(&["--experimental-corrupt-check-time=1s"], 23479).await;
}

/// The walk-through in the module docs, every member started with
/// `check`.
async fn altered_member_is_found(check: &[&str], base: u16) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cluster = common::Cluster::start(&common::kv_server(), dir.path(), base, check);
    let first = cluster.members[0].endpoint();
    let mut kv = KvClient::new(common::connect(&first, CALL_TIMEOUT).await.expect("connect"));
    for i in 0..200 {
        let value = if i == 100 {
            INTACT.to_vec()
        } else {
            format!("value {i}").into_bytes()
        };
        let put = pb::PutRequest {
            key: format!("corruption/{i:03}").into_bytes(),
            value,
            ..Default::default()
        };
        kv.put(put).await.expect("put");
    }
    let third_id = common::member_id(&cluster.members[2].endpoint(), CALL_TIMEOUT).await;
    // Idle long enough for every member's store to commit what it applied.
    tokio::time::sleep(Duration::from_secs(1)).await;
    cluster.kill(2);
    alter(&dir.path().join("infra3/member/kv"));
    cluster.spawn(2);
    cluster.wait_healthy(&[2]);

    let expected = format!("memberID:{third_id} alarm:CORRUPT");
    let deadline = Instant::now() + ALARM_WITHIN;
    loop {
        let (ok, listed) = etcdctl(&first, &["alarm", "list"]);
        assert!(ok, "{listed}");
        if listed.contains(&expected) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no CORRUPT alarm for the altered member: {listed}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (ok, refused) = etcdctl(&first, &["put", "after", "corruption"]);
    assert!(!ok && refused.contains("etcdserver: corrupt cluster"), "{refused}");
    let refused = kv
        .put(pb::PutRequest {
            key: b"after".to_vec(),
            value: b"corruption".to_vec(),
            ..Default::default()
        })
        .await
        .expect_err("writes are refused");
    assert_eq!(
        (refused.code(), refused.message()),
        (tonic::Code::DataLoss, "etcdserver: corrupt cluster")
    );
    let (ok, value) = etcdctl(&first, &["get", "corruption/100", "--print-value-only"]);
    // (etcdctl's warnings, on stderr, may come with the value.)
    assert!(
        ok && value.lines().any(|line| line == "intact value!"),
        "reads still work: {value}"
    );
}
