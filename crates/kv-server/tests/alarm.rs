//! Goal: the space quota and its NOSPACE alarm behave as etcd's: a write
//! past `--quota-backend-bytes` is refused with etcd's code and message and
//! raises the refusing member's NOSPACE alarm through raft (each member
//! over the quota raises its own when it refuses); while one is raised
//! every member refuses puts, txns with a put and lease grants, reads
//! (txns of reads too) and deletes still work, every acknowledged put is
//! still served, `alarm list`
//! and Status show them; `alarm disarm` clears them; and a store still
//! over its quota refuses the next put and raises the alarm again. Then
//! etcd's recovery: delete, compact, `defrag --cluster` and disarm; puts
//! succeed again, and a key written before the quota was reached is still
//! there.
//!
//! Method: one sequence of steps, run against a real etcd v3.5.17 cluster
//! and a kv-server cluster, each three member processes on loopback with a
//! 16 MiB quota. Puts of 8 KB values through one member until one is
//! refused; then real etcdctl 3.5.17 for every step, through that member
//! and another. Every expectation is asserted against both servers.
//!
//! Also: a member left without a leader says "etcdserver: no leader" in
//! Status's errors, as etcd's does.
//!
//! Needs etcd and etcdctl: `ETCD_BIN` and `ETCDCTL_BIN`, or the cache that
//! `tools/etcd-peers/build.sh` fills (CI runs it).

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use kv_server::proto::etcdserverpb as pb;
use kv_server::proto::etcdserverpb::kv_client::KvClient;

const QUOTA: &str = "--quota-backend-bytes=16777216";
const VALUE_BYTES: usize = 8000;
/// Puts tried before the quota must have refused one: 80 MB, five times it.
const PUTS_MAX: usize = 10_000;
const NO_SPACE: &str = "etcdserver: mvcc: database space exceeded";
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs etcdctl against `endpoint`: whether it succeeded, and its stdout
/// and stderr.
fn etcdctl(endpoint: &str, args: &[&str]) -> (bool, String, String) {
    let output = Command::new(common::etcd_tool("ETCDCTL_BIN", "etcdctl"))
        .args(["--endpoints", endpoint])
        .args(args)
        .output()
        .expect("run etcdctl");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The members whose NOSPACE alarm `text` lists, one line each in etcd's
/// form (`memberID:<decimal id> alarm:NOSPACE `); fails on any other line.
fn nospace_alarms(text: &str) -> Vec<u64> {
    let mut ids: Vec<u64> = text
        .lines()
        .map(|line| {
            let id = line
                .strip_prefix("memberID:")
                .and_then(|rest| rest.strip_suffix(" alarm:NOSPACE "));
            id.and_then(|id| id.parse().ok())
                .unwrap_or_else(|| panic!("not an alarm line: {line:?}"))
        })
        .collect();
    ids.sort_unstable();
    ids
}

async fn walk_through(binary: &Path, base: u16) {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = common::Cluster::start(binary, dir.path(), base, &[QUOTA]);
    let first = cluster.members[0].endpoint();
    let second = cluster.members[1].endpoint();
    let mut members = Vec::new();
    for member in &cluster.members {
        members.push(common::member_id(&member.endpoint(), CALL_TIMEOUT).await);
    }
    let of_members = |ids: &[u64]| !ids.is_empty() && ids.iter().all(|id| members.contains(id));

    let mut kv = KvClient::new(common::connect(&first, CALL_TIMEOUT).await.expect("connect"));
    let kept = pb::PutRequest {
        key: b"kept".to_vec(),
        value: b"before the quota".to_vec(),
        ..Default::default()
    };
    kv.put(kept).await.expect("put before the quota");
    let mut refused = None;
    let mut acknowledged = 0;
    for i in 0..PUTS_MAX {
        let put = pb::PutRequest {
            key: format!("fill/{:03}", i % 300).into_bytes(),
            value: vec![b'v'; VALUE_BYTES],
            ..Default::default()
        };
        if let Err(status) = kv.put(put).await {
            refused = Some(status);
            break;
        }
        acknowledged = i + 1;
    }
    let refused = refused.expect("the quota refuses a put");
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
    assert_eq!(refused.message(), NO_SPACE);

    // Raised through raft: listed by another member. (Which member's alarm
    // it is varies in etcd: each member over its quota raises its own when
    // it applies a put, the first to get there wins.)
    let (ok, listed, _) = etcdctl(&second, &["alarm", "list"]);
    assert!(ok && of_members(&nospace_alarms(&listed)), "{listed}");
    let (ok, _, error) = etcdctl(&second, &["put", "other", "member"]);
    assert!(!ok && error.contains(NO_SPACE), "every member refuses: {error}");
    let (ok, value, _) = etcdctl(&first, &["get", "fill/001", "--print-value-only"]);
    assert!(ok && value.trim().len() == VALUE_BYTES, "reads still work");
    refuses_what_adds_data(&second).await;
    let (ok, deleted, _) = etcdctl(&first, &["del", "fill/002"]);
    assert!(ok && deleted.trim() == "1", "deletes still work: {deleted}");
    // Every acknowledged put is there, on another member (fill/002 was
    // deleted just now).
    let expected = acknowledged.min(300) - usize::from(acknowledged > 2);
    assert_eq!(fill_keys(&second).await, expected, "{acknowledged} puts acknowledged");
    let (ok, listed, _) = etcdctl(&first, &["alarm", "list"]);
    assert!(ok);
    let raised = nospace_alarms(&listed);
    assert!(of_members(&raised), "{listed}");
    let (ok, statuses, _) = etcdctl(&first, &["endpoint", "status", "-w", "json"]);
    assert!(ok);
    let statuses: serde_json::Value = serde_json::from_str(&statuses).expect("json");
    let errors = statuses[0]["Status"]["errors"].as_array().expect("errors listed");
    let errors: Vec<&str> = errors.iter().map(|e| e.as_str().expect("text")).collect();
    assert_eq!(
        nospace_alarms(&errors.join("\n")),
        raised,
        "Status lists them: {statuses}"
    );

    let (ok, disarmed, _) = etcdctl(&first, &["alarm", "disarm"]);
    assert!(ok);
    assert_eq!(nospace_alarms(&disarmed), raised, "disarm clears each, and says so");
    let (ok, listed, _) = etcdctl(&second, &["alarm", "list"]);
    assert!(ok && listed.trim().is_empty(), "cleared: {listed}");

    // A put as large as the one refused: etcd checks the file's size
    // plus the request's cost against the quota, so a small put can fit
    // under it where the fill's last put did not.
    let large = "v".repeat(VALUE_BYTES);
    let (ok, _, error) = etcdctl(&first, &["put", "again", &large]);
    assert!(!ok && error.contains(NO_SPACE), "still over the quota: {error}");
    let (ok, listed, _) = etcdctl(&second, &["alarm", "list"]);
    assert!(ok && of_members(&nospace_alarms(&listed)), "raised again: {listed}");

    // etcd's runbook to recover: delete, compact, defragment every member,
    // disarm; then puts succeed, and what was kept is still there.
    let (ok, deleted, error) = etcdctl(&first, &["del", "fill/", "--prefix"]);
    assert!(
        ok && deleted.trim().parse::<u32>().is_ok_and(|n| n > 0),
        "{deleted} {error}"
    );
    let (ok, status, _) = etcdctl(&first, &["endpoint", "status", "-w", "json"]);
    assert!(ok);
    let status: serde_json::Value = serde_json::from_str(&status).expect("json");
    let revision = status[0]["Status"]["header"]["revision"].as_u64().expect("revision");
    let (ok, compacted, error) = etcdctl(&first, &["compact", &revision.to_string()]);
    assert!(ok, "{compacted} {error}");
    let (ok, defragmented, error) = etcdctl(&first, &["defrag", "--cluster"]);
    assert!(ok, "{defragmented} {error}");
    assert_eq!(
        defragmented.matches("Finished defragmenting etcd member").count(),
        3,
        "{defragmented}"
    );
    let (ok, _, error) = etcdctl(&first, &["alarm", "disarm"]);
    assert!(ok, "{error}");
    let (ok, put, error) = etcdctl(&second, &["put", "after", "recovery"]);
    assert!(ok && put.trim() == "OK", "puts succeed again: {put} {error}");
    let (ok, kept, _) = etcdctl(&first, &["get", "kept", "--print-value-only"]);
    assert!(ok && kept.trim() == "before the quota", "nothing kept is lost: {kept}");
    let (ok, after, _) = etcdctl(&first, &["get", "after", "--print-value-only"]);
    assert!(ok && after.trim() == "recovery", "{after}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_etcd_space_alarms() {
    walk_through(&common::etcd_tool("ETCD_BIN", "etcd"), 20379).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_server_space_alarms_behave_as_etcds() {
    walk_through(&common::kv_server(), 20479).await;
}

/// While NOSPACE is raised: a txn with a put and a lease grant are
/// refused as a put is, and a txn of reads is answered.
async fn refuses_what_adds_data(endpoint: &str) {
    use kv_server::proto::etcdserverpb::lease_client::LeaseClient;
    use kv_server::proto::etcdserverpb::request_op::Request as Op;
    let channel = common::connect(endpoint, CALL_TIMEOUT).await.expect("connect");
    let mut kv = KvClient::new(channel.clone());
    let op = |request: Op| pb::RequestOp { request: Some(request) };
    let put = op(Op::RequestPut(pb::PutRequest {
        key: b"in-a-txn".to_vec(),
        value: b"v".to_vec(),
        ..Default::default()
    }));
    let txn = pb::TxnRequest {
        success: vec![put],
        ..Default::default()
    };
    let refused = kv.txn(txn).await.expect_err("a txn with a put is refused");
    assert_eq!(
        (refused.code(), refused.message()),
        (tonic::Code::ResourceExhausted, NO_SPACE)
    );
    let read = op(Op::RequestRange(pb::RangeRequest {
        key: b"kept".to_vec(),
        ..Default::default()
    }));
    let reads = pb::TxnRequest {
        success: vec![read],
        ..Default::default()
    };
    kv.txn(reads).await.expect("a txn of reads is answered");
    let grant = pb::LeaseGrantRequest { ttl: 60, id: 0 };
    let refused = LeaseClient::new(channel)
        .lease_grant(grant)
        .await
        .expect_err("a lease grant is refused");
    assert_eq!(
        (refused.code(), refused.message()),
        (tonic::Code::ResourceExhausted, NO_SPACE)
    );
}

/// How many `fill/` keys the member at `endpoint` serves, each checked
/// to hold its value.
async fn fill_keys(endpoint: &str) -> usize {
    let kvs = common::range(endpoint, b"fill/", b"fill0", CALL_TIMEOUT).await;
    assert!(
        kvs.iter().all(|kv| kv.value == vec![b'v'; VALUE_BYTES]),
        "fill values intact"
    );
    kvs.len()
}

/// How long a member left alone may take to notice it has no leader:
/// etcd's election timeout is 1 s, and a lone member campaigns at once.
const LEADERLESS_WITHIN: Duration = Duration::from_secs(30);

/// Status of a member whose two peers were killed: once it knows of no
/// leader, its `errors` carry "etcdserver: no leader", as etcd's do.
async fn leaderless_status_errors(binary: &Path, base: u16) -> Vec<String> {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cluster = common::Cluster::start(binary, dir.path(), base, &[]);
    cluster.kill(1);
    cluster.kill(2);
    let endpoint = cluster.members[0].endpoint();
    let deadline = std::time::Instant::now() + LEADERLESS_WITHIN;
    loop {
        let status = common::status(&endpoint, Duration::from_secs(5)).await;
        if status.leader == 0 {
            return status.errors;
        }
        assert!(std::time::Instant::now() < deadline, "still a leader: {status:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

// Goal: Status's `errors` say "etcdserver: no leader" while a member
// knows of no leader, as etcd's Status does.
// Method: a 3-member cluster of each server loses two members to kill -9;
// the survivor's Status is read until it names no leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaderless_member_says_so_in_status() {
    let expected = vec!["etcdserver: no leader".to_string()];
    let etcd = leaderless_status_errors(&common::etcd_tool("ETCD_BIN", "etcd"), 30579).await;
    assert_eq!(etcd, expected, "etcd's errors");
    let ours = leaderless_status_errors(&common::kv_server(), 30679).await;
    assert_eq!(ours, expected, "kv-server's errors");
}
