//! Goal: `etcdctl snapshot save` works against kv-server as against etcd,
//! and what it saves is a consistent copy of the member's store.
//!
//! Method: real etcdctl v3.5.17 saves a snapshot from one member of a real
//! etcd v3.5.17 cluster and from one member of a kv-server cluster, each
//! three member processes on loopback holding the same 1,000 puts and 100
//! deletes. Both commands must succeed and say so as etcdctl does, and both
//! files must have the shape etcd's tools check (32 bytes past a multiple
//! of 512: the data, then its SHA-256). kv-server's file is then opened
//! (its digest and header checked) and restored into an empty store, which
//! must hold every key the cluster serves, with its value, revisions,
//! version and lease, at the same revision.
//!
//! Needs etcd and etcdctl: `ETCD_BIN` and `ETCDCTL_BIN`, or the cache that
//! `../shared/peers/build.sh` fills (CI runs it).

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use kv_server::proto::etcdserverpb as pb;
use kv_server::proto::etcdserverpb::kv_client::KvClient;
use tonic::transport::Channel;

const PUTS: usize = 1000;
/// The puts cycle through this many keys.
const KEYS: usize = 700;
/// Every third key from the first is deleted: 100 distinct keys.
const DELETES: usize = 100;
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// A key as compared: key, value, create and mod revisions, version, lease.
type Stored = (Vec<u8>, Vec<u8>, i64, i64, i64, i64);

async fn fill(channel: &Channel) {
    let mut kv = KvClient::new(channel.clone());
    for i in 0..PUTS {
        let request = pb::PutRequest {
            key: format!("save/{:04}", i % KEYS).into_bytes(),
            value: format!("value {i} {}", "x".repeat(i % 97)).into_bytes(),
            ..Default::default()
        };
        kv.put(request).await.expect("put");
    }
    for i in 0..DELETES {
        let request = pb::DeleteRangeRequest {
            key: format!("save/{:04}", i * 3).into_bytes(),
            ..Default::default()
        };
        kv.delete_range(request).await.expect("delete");
    }
}

/// Runs `etcdctl snapshot save` against `endpoint`; returns the file's
/// size after checking the command's success and etcd's shape.
fn save(endpoint: &str, path: &Path) -> u64 {
    let etcdctl = common::etcd_tool("ETCDCTL_BIN", "etcdctl");
    let output = Command::new(etcdctl)
        .args(["--endpoints", endpoint, "--command-timeout", "60s", "snapshot", "save"])
        .arg(path)
        .output()
        .expect("run etcdctl");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "etcdctl failed: {stdout} {stderr}");
    assert!(stdout.contains("Snapshot saved at"), "{stdout}");
    let size = std::fs::metadata(path).expect("saved file").len();
    assert_eq!(size % 512, 32, "the data, then its SHA-256");
    size
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_saves_a_consistent_snapshot_from_either_server() {
    let files = tempfile::tempdir().expect("tempdir");

    let etcd_dir = tempfile::tempdir().expect("tempdir");
    let mut etcd = common::Cluster::start(&common::etcd_tool("ETCD_BIN", "etcd"), etcd_dir.path(), 18379, &[]);
    let endpoint = etcd.members[1].endpoint();
    fill(&common::connect(&endpoint, CALL_TIMEOUT).await.expect("connect")).await;
    save(&endpoint, &files.path().join("etcd.db"));
    etcd.stop();

    let kv_dir = tempfile::tempdir().expect("tempdir");
    let cluster = common::Cluster::start(&common::kv_server(), kv_dir.path(), 18479, &[]);
    let endpoint = cluster.members[1].endpoint();
    let channel = common::connect(&endpoint, CALL_TIMEOUT).await.expect("connect");
    fill(&channel).await;
    let path = files.path().join("kv.db");
    save(&endpoint, &path);

    let served = KvClient::new(channel)
        .range(pb::RangeRequest {
            key: vec![0],
            range_end: vec![0],
            ..Default::default()
        })
        .await
        .expect("range")
        .into_inner();
    assert_eq!(served.kvs.len(), KEYS - DELETES);

    let backup = kv_server::backup::open(&path).expect("the saved file opens");
    let copy = mvcc::Store::open(&files.path().join("restored")).expect("empty store");
    copy.restore_from(backup.consistent_index, backup.dump)
        .expect("restore");
    let restored = copy
        .range(&mvcc::RangeRequest {
            key: vec![0],
            range_end: vec![0],
            ..Default::default()
        })
        .expect("range the copy");
    let as_served: Vec<Stored> = served
        .kvs
        .into_iter()
        .map(|kv| {
            (
                kv.key,
                kv.value,
                kv.create_revision,
                kv.mod_revision,
                kv.version,
                kv.lease,
            )
        })
        .collect();
    let as_restored: Vec<Stored> = restored
        .kvs
        .into_iter()
        .map(|kv| {
            (
                kv.key,
                kv.value,
                kv.create_revision,
                kv.mod_revision,
                kv.version,
                kv.lease,
            )
        })
        .collect();
    assert_eq!(as_restored, as_served, "the copy holds what the cluster serves");
    assert_eq!(copy.current_revision(), served.header.expect("header").revision);
}
