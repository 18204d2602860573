//! Goal: a member stopped while more than `--snapshot-count` entries are
//! written catches up by snapshot after it restarts, ends up with every
//! key, agrees with the others on HashKV, and restarts again cleanly from
//! the snapshot it installed.
//!
//! Method: a 3-member cluster of real processes with `--snapshot-count
//! 100`, so the members snapshot and compact their logs (keeping 100
//! entries for followers). A follower is killed, 600 small puts and 72
//! puts of 1 MiB values go through the leader, and the follower is
//! restarted. The snapshot it needs is then larger than the 64 MiB bound
//! on any one peer message, so this also shows snapshots stream in chunks.
//! Its log must show that it received and installed a snapshot that large
//! from the leader; a linearizable read on it must return every key.

mod common;

use std::time::Duration;

use kv_server::proto::etcdserverpb as pb;
use kv_server::proto::etcdserverpb::kv_client::KvClient;
use kv_server::proto::etcdserverpb::maintenance_client::MaintenanceClient;
use tonic::transport::Channel;
use tonic::Code;

const SNAPSHOT_COUNT: &str = "100";
const WRITES_WHILE_DOWN: usize = 600;
/// Puts of [`BIG_VALUE_BYTES`] while the member is down: 72 MiB of values,
/// past the 64 MiB peer message bound.
const BIG_WRITES_WHILE_DOWN: usize = 72;
const BIG_VALUE_BYTES: usize = 1 << 20;
/// Attempts per put: a write that meets an election is retried, as etcd's
/// clients retry on Unavailable.
const PUT_ATTEMPTS: usize = 20;

async fn channel(endpoint: &str) -> Channel {
    common::connect(endpoint, Duration::from_secs(10))
        .await
        .expect("connect")
}

async fn keys(endpoint: &str) -> Vec<Vec<u8>> {
    let request = pb::RangeRequest {
        key: b"key/".to_vec(),
        range_end: b"key0".to_vec(),
        keys_only: true,
        ..Default::default()
    };
    let mut client = KvClient::new(channel(endpoint).await);
    for _ in 0..50 {
        if let Ok(response) = client.range(request.clone()).await {
            return response.into_inner().kvs.into_iter().map(|kv| kv.key).collect();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{endpoint} did not answer a linearizable range");
}

async fn big_count(endpoint: &str) -> i64 {
    let request = pb::RangeRequest {
        key: b"big/".to_vec(),
        range_end: b"big0".to_vec(),
        count_only: true,
        serializable: true,
        ..Default::default()
    };
    let mut client = KvClient::new(channel(endpoint).await);
    client.range(request).await.expect("range").into_inner().count
}

async fn hash(endpoint: &str) -> (i64, u32) {
    let response = MaintenanceClient::new(channel(endpoint).await)
        .hash_kv(pb::HashKvRequest { revision: 0 })
        .await
        .expect("hash")
        .into_inner();
    (response.header.expect("header").revision, response.hash)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_member_catches_up_by_snapshot() {
    catch_up(7379, false).await;
}

/// The same, but the member first stops (a failpoint) right after the
/// raft loop recorded the received snapshot in the WAL and before the
/// store took it; the restart after that must finish the install from the
/// snapshot file it kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_install_cut_short_finishes_on_restart() {
    catch_up(7479, true).await;
}

async fn catch_up(base: u16, stop_before_install: bool) {
    let dir = tempfile::tempdir().expect("tempdir");
    // Only the install cut short needs the failpoints built in.
    let binary = if stop_before_install {
        common::kv_server_with_failpoints()
    } else {
        common::kv_server()
    };
    let mut cluster = common::Cluster::start(&binary, dir.path(), base, &["--snapshot-count", SNAPSHOT_COUNT]);
    let endpoints: Vec<String> = cluster.members.iter().map(|m| m.endpoint()).collect();
    // Stop a follower, and write through the leader.
    let (leader, _) = common::leader(&endpoints, Duration::from_secs(10)).await;
    let stopped = (leader + 1) % 3;
    let mut writer = KvClient::new(channel(&endpoints[leader]).await);
    let put = |i: usize| pb::PutRequest {
        key: format!("key/{i:05}").into_bytes(),
        value: vec![b'v'; 100],
        ..Default::default()
    };
    let big = |i: usize| pb::PutRequest {
        key: format!("big/{i:05}").into_bytes(),
        value: vec![b'b'; BIG_VALUE_BYTES],
        ..Default::default()
    };
    for i in 0..20 + WRITES_WHILE_DOWN + BIG_WRITES_WHILE_DOWN {
        if i == 20 {
            cluster.kill(stopped);
        }
        let request = if i < 20 + WRITES_WHILE_DOWN { put(i) } else { big(i) };
        let mut attempt = 0;
        loop {
            match writer.put(request.clone()).await {
                Ok(_) => break,
                Err(status) if status.code() == Code::Unavailable && attempt + 1 < PUT_ATTEMPTS => attempt += 1,
                Err(status) => panic!("put {i}: {status:?}"),
            }
        }
    }
    let cluster = tokio::task::spawn_blocking(move || {
        if stop_before_install {
            cluster.kill(stopped);
            cluster.members[stopped].env = vec![("FAILPOINTS".into(), "kv::restore=return".into())];
            cluster.spawn(stopped);
            let started = std::time::Instant::now();
            while cluster.exit_status(stopped).is_none() {
                assert!(
                    started.elapsed() < common::HEALTHY_WITHIN,
                    "the member did not stop at the failpoint"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
            cluster.members[stopped].env.clear();
        }
        cluster.restart(stopped);
        cluster
    })
    .await
    .expect("restart");
    let expected = 20 + WRITES_WHILE_DOWN;
    assert_eq!(
        keys(&endpoints[stopped]).await.len(),
        expected,
        "the restarted member has every key"
    );
    let log_path = dir.path().join(format!("infra{}.log", stopped + 1));
    let log = std::fs::read_to_string(log_path).expect("member log");
    let installed = if stop_before_install {
        log.contains("failpoint kv::restore") && log.contains("finished installing a received snapshot")
    } else {
        log.contains("installed a snapshot from the leader")
    };
    assert!(installed, "no snapshot installed as expected; log:\n{log}");
    let received: u64 = log
        .lines()
        .filter(|line| line.contains("received a snapshot"))
        .find_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .and_then(|line| line["bytes"].as_u64())
        .unwrap_or_else(|| panic!("no snapshot size logged; log:\n{log}"));
    assert!(
        received > kv_server::PEER_MESSAGE_BYTES_MAX as u64,
        "the snapshot ({received} bytes) should exceed one peer message"
    );
    assert_eq!(big_count(&endpoints[stopped]).await, BIG_WRITES_WHILE_DOWN as i64);

    // Restart once more: it comes back from its own snapshot marker.
    let _cluster = tokio::task::spawn_blocking(move || {
        let mut cluster = cluster;
        cluster.restart(stopped);
        cluster
    })
    .await
    .expect("second restart");

    let mut hashes = Vec::new();
    for endpoint in &endpoints {
        assert_eq!(keys(endpoint).await.len(), expected, "{endpoint}");
        hashes.push(hash(endpoint).await);
    }
    assert!(
        hashes.windows(2).all(|pair| pair[0] == pair[1]),
        "members differ: {hashes:?}"
    );
}
