//! Goal: a live move from etcd to kv-server with `etcdctl make-mirror`
//! works: what the source holds when the mirror starts, and every put and
//! delete made while it runs, arrive in kv-server.
//!
//! Method: a real etcd v3.5.17 member is the source and a 3-member
//! kv-server cluster the destination, all processes on loopback. 1,000
//! keys are put in the source; real etcdctl's `make-mirror` then runs from
//! it into kv-server, while 200 more puts (new keys and overwrites) and
//! 100 deletes are made in the source. The destination must come to hold
//! exactly the source's keys and values, within a bounded wait; then the
//! mirror is stopped.
//!
//! Needs etcd and etcdctl: `ETCD_BIN` and `ETCDCTL_BIN`, or the cache that
//! `tools/etcd-peers/build.sh` fills (CI runs it).

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kv_server::proto::etcdserverpb as pb;
use kv_server::proto::etcdserverpb::kv_client::KvClient;
use tonic::transport::Channel;

const SOURCE_PORT: u16 = 19379;
const DESTINATION_PORT: u16 = 19479;
const BEFORE: usize = 1000;
const WHILE_RUNNING: usize = 200;
const DELETES: usize = 100;
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the destination may take to match the source.
const MIRRORED_WITHIN: Duration = Duration::from_secs(60);
/// Pause between comparisons while waiting.
const POLL: Duration = Duration::from_millis(200);

/// Stops the mirror however the test ends.
struct Mirror(Child);

impl Drop for Mirror {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn put(kv: &mut KvClient<Channel>, key: String, value: String) {
    let request = pb::PutRequest {
        key: key.into_bytes(),
        value: value.into_bytes(),
        ..Default::default()
    };
    kv.put(request).await.expect("put");
}

/// Every key and value `kv` serves.
async fn contents(kv: &mut KvClient<Channel>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let everything = pb::RangeRequest {
        key: vec![0],
        range_end: vec![0],
        ..Default::default()
    };
    let response = kv.range(everything).await.expect("range").into_inner();
    response.kvs.into_iter().map(|kv| (kv.key, kv.value)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn make_mirror_moves_a_live_etcd_into_kv_server() {
    let source_dir = tempfile::tempdir().expect("tempdir");
    let etcd = common::etcd_tool("ETCD_BIN", "etcd");
    let source_cluster = common::Cluster::start_members(&etcd, source_dir.path(), SOURCE_PORT, 1, &[]);
    let destination_dir = tempfile::tempdir().expect("tempdir");
    let destination_cluster =
        common::Cluster::start(&common::kv_server(), destination_dir.path(), DESTINATION_PORT, &[]);
    let source_endpoint = source_cluster.members[0].endpoint();
    let destination_endpoint = destination_cluster.members[1].endpoint();
    let mut source = KvClient::new(common::connect(&source_endpoint, CALL_TIMEOUT).await.expect("connect"));
    let mut destination = KvClient::new(
        common::connect(&destination_endpoint, CALL_TIMEOUT)
            .await
            .expect("connect"),
    );

    for i in 0..BEFORE {
        put(&mut source, format!("move/{i:05}"), format!("before {i}")).await;
    }
    let etcdctl = common::etcd_tool("ETCDCTL_BIN", "etcdctl");
    let _mirror = Mirror(
        Command::new(etcdctl)
            .args(["--endpoints", &source_endpoint, "make-mirror", &destination_endpoint])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start make-mirror"),
    );
    for i in 0..WHILE_RUNNING {
        // Half new keys, half overwrites of keys from before.
        let key = if i % 2 == 0 { BEFORE + i } else { i };
        put(&mut source, format!("move/{key:05}"), format!("while {i}")).await;
    }
    for i in 0..DELETES {
        let request = pb::DeleteRangeRequest {
            key: format!("move/{:05}", i * 7).into_bytes(),
            ..Default::default()
        };
        source.delete_range(request).await.expect("delete");
    }
    let expected = contents(&mut source).await;
    assert_eq!(expected.len(), BEFORE + WHILE_RUNNING / 2 - DELETES);

    let started = Instant::now();
    loop {
        let mirrored = contents(&mut destination).await;
        if mirrored == expected {
            break;
        }
        assert!(
            started.elapsed() < MIRRORED_WITHIN,
            "kv-server holds {} keys, the source {}, after {MIRRORED_WITHIN:?}",
            mirrored.len(),
            expected.len()
        );
        tokio::time::sleep(POLL).await;
    }
}
