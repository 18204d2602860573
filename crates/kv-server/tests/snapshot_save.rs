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
//! version and lease, at the same revision. Last, `kv-server snapshot
//! restore` (etcdutl's flags) builds a new single member's data directory
//! from the file; started, that member serves every key as the old
//! cluster did, takes new writes at the revisions after, and a second
//! restore into the same directory is refused.
//!
//! Needs etcd and etcdctl: `ETCD_BIN` and `ETCDCTL_BIN`, or the cache that
//! `tools/etcd-peers/build.sh` fills (CI runs it).

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use kv_server::proto::convert;
use kv_server::proto::etcdserverpb as pb;
use kv_server::proto::etcdserverpb::kv_client::KvClient;
use kv_server::proto::mvccpb;
use tonic::transport::Channel;

const PUTS: usize = 1000;
/// The puts cycle through this many keys.
const KEYS: usize = 700;
/// Every third key from the first is deleted: 100 distinct keys.
const DELETES: usize = 100;
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Client port of the member restored from the file (peer port one above).
const RESTORED_PORT: u16 = 18579;

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
async fn etcdctl_saves_a_snapshot_that_restores_into_a_new_member() {
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

    let backup = kv_server::backup::open(&path, true).expect("the saved file opens");
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
    let as_restored: Vec<mvccpb::KeyValue> = restored.kvs.into_iter().map(convert::key_value).collect();
    assert_eq!(as_restored, served.kvs, "the copy holds what the cluster serves");
    let revision = served.header.expect("header").revision;
    assert_eq!(copy.current_revision(), revision);
    drop(cluster);

    // A new single member from the file, with the flags the test cluster
    // starts its first member with.
    let new_dir = tempfile::tempdir().expect("tempdir");
    let peer = format!("http://127.0.0.1:{}", RESTORED_PORT + 1);
    let restore = |data_dir: &Path| {
        common::restore_command(&[common::kv_server()], &path, data_dir, &peer)
            .output()
            .expect("run kv-server snapshot restore")
    };
    let restored_dir = new_dir.path().join("infra1");
    let output = restore(&restored_dir);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let again = restore(&restored_dir);
    assert!(
        !again.status.success(),
        "a second restore into the same directory is refused"
    );
    assert!(String::from_utf8_lossy(&again.stderr).contains("exists"));

    let single = common::Cluster::start_members(&common::kv_server(), new_dir.path(), RESTORED_PORT, 1, &[]);
    let channel = common::connect(&single.members[0].endpoint(), CALL_TIMEOUT)
        .await
        .expect("connect");
    let mut kv = KvClient::new(channel);
    let everything = pb::RangeRequest {
        key: vec![0],
        range_end: vec![0],
        ..Default::default()
    };
    let after = kv
        .range(everything.clone())
        .await
        .expect("range the restored member")
        .into_inner();
    assert_eq!(
        after.kvs, as_restored,
        "the restored member serves every key as the cluster did"
    );
    assert_eq!(after.header.expect("header").revision, revision);
    let put = pb::PutRequest {
        key: b"save/new".to_vec(),
        value: b"after the restore".to_vec(),
        ..Default::default()
    };
    let written = kv.put(put).await.expect("put after the restore").into_inner();
    assert_eq!(written.header.expect("header").revision, revision + 1);
}
