//! Goal: a failed fdatasync, of the WAL or of the store's value files,
//! stops the member, never ignored, and the rest of the cluster goes on
//! serving.
//!
//! Method: a 3-member cluster of real processes built with the
//! `failpoints` feature (the test command builds it so). One member is
//! restarted with a failpoint such as `wal::fdatasync=20*off->return`: its
//! first 20 syncs succeed, then every one fails. Writes go to the cluster;
//! that member must exit with a failure status and say why in its log,
//! and the other two must keep accepting writes.

mod common;

use std::time::{Duration, Instant};

use kv_server::proto::etcdserverpb as pb;
use kv_server::proto::etcdserverpb::kv_client::KvClient;

/// Upper bound on how long the member may take to stop once writes flow.
const STOP_WITHIN: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_fsync_stops_the_member() {
    stops_on(
        "wal::fdatasync=20*off->return",
        8379,
        "WAL write failed; stopping the member",
    )
    .await;
}

// The store's value files are synced before sled may point into them
// (mvcc's value_files.rs); the apply stage commits the store at least
// every 100 ms while writes flow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_value_file_sync_stops_the_member() {
    // Whichever commit meets it (an apply's, the idle one, a flush) says
    // why it stopped.
    stops_on("mvcc::value_sync=2*off->return", 8579, "injected failure").await;
}

/// Runs the test with `failpoint` on member 3 of a cluster at `port`,
/// which must stop with `log_line` in its log.
async fn stops_on(failpoint: &str, port: u16, log_line: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cluster = common::Cluster::start(&common::kv_server_with_failpoints(), dir.path(), port, &[]);
    cluster.members[2].env = vec![("FAILPOINTS".into(), failpoint.into())];
    cluster.restart(2);

    let endpoint = cluster.members[0].endpoint();
    let mut kv = KvClient::new(
        common::connect(&endpoint, Duration::from_secs(5))
            .await
            .expect("connect"),
    );
    let started = Instant::now();
    let mut written = 0;
    let status = loop {
        if let Some(status) = cluster.exit_status(2) {
            break status;
        }
        assert!(
            started.elapsed() < STOP_WITHIN,
            "the member kept running after its fsyncs failed"
        );
        let put = pb::PutRequest {
            key: format!("k{written}").into_bytes(),
            value: b"v".to_vec(),
            ..Default::default()
        };
        if kv.put(put).await.is_ok() {
            written += 1;
        }
    };
    assert!(!status.success(), "the member stopped with {status}");
    let log = std::fs::read_to_string(dir.path().join("infra3.log")).expect("log");
    assert!(
        log.contains(log_line) && log.contains("stopping the member"),
        "log:\n{log}"
    );

    // The other two still form a quorum and take writes.
    for i in 0..10 {
        let put = pb::PutRequest {
            key: format!("after/{i}").into_bytes(),
            value: b"v".to_vec(),
            ..Default::default()
        };
        kv.put(put).await.expect("the remaining members take writes");
    }
}
