//! Goal: killing the leader with SIGKILL during a write load loses no
//! acknowledged write. A new leader is elected and writes continue; after
//! the killed member restarts, every acknowledged write is readable on all
//! three members and HashKV is equal across them. Then the whole cluster is
//! killed at once and restarted, and every acknowledged write is still
//! there.
//!
//! Method: three real member processes on loopback. Writer tasks put
//! unique keys through gRPC, each sticking to one member and moving to the
//! next when a call fails, and record every key whose put was
//! acknowledged. The leader (found through Maintenance.Status) is killed
//! mid-load; the load goes on and must keep getting acknowledgements; the
//! member is restarted; then each member is read back. Every loop here is
//! bounded in count and in time.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kv_server::proto::etcdserverpb::kv_client::KvClient;
use kv_server::proto::etcdserverpb::maintenance_client::MaintenanceClient;
use kv_server::proto::etcdserverpb::{HashKvRequest, PutRequest, RangeRequest, StatusRequest};
use parking_lot::Mutex;

const WRITERS: usize = 16;
/// Load before the kill, and after it.
const LOAD_BEFORE_KILL: Duration = Duration::from_secs(2);
const LOAD_AFTER_KILL: Duration = Duration::from_secs(4);
/// Upper bound on puts per writer, whatever the timing.
const PUTS_PER_WRITER_MAX: usize = 20_000;
const CALL_TIMEOUT: Duration = Duration::from_secs(3);

async fn kv(endpoint: &str) -> Option<KvClient<tonic::transport::Channel>> {
    Some(KvClient::new(common::connect(endpoint, CALL_TIMEOUT).await.ok()?))
}

async fn status(endpoint: &str) -> Option<(u64, u64)> {
    let channel = common::connect(endpoint, CALL_TIMEOUT).await.ok()?;
    let response = MaintenanceClient::new(channel)
        .status(StatusRequest {})
        .await
        .ok()?
        .into_inner();
    Some((response.header?.member_id, response.leader))
}

/// Writes unique keys until `stop_at`; returns the acknowledged ones.
async fn writer(id: usize, endpoints: Vec<String>, stop_at: Arc<Mutex<Instant>>) -> Vec<String> {
    let mut acknowledged = Vec::new();
    let mut current = id % endpoints.len();
    let mut client = None;
    for sequence in 0..PUTS_PER_WRITER_MAX {
        if Instant::now() >= *stop_at.lock() {
            break;
        }
        if client.is_none() {
            client = kv(&endpoints[current]).await;
            if client.is_none() {
                current = (current + 1) % endpoints.len();
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        }
        let key = format!("load/{id:02}/{sequence:06}");
        let put = PutRequest {
            key: key.clone().into_bytes(),
            value: vec![b'v'; 64],
            ..PutRequest::default()
        };
        match client.as_mut().expect("connected").put(put).await {
            Ok(_) => acknowledged.push(key),
            Err(_) => {
                client = None;
                current = (current + 1) % endpoints.len();
            }
        }
    }
    acknowledged
}

/// Every key under `load/` on one member, by a linearizable range (so the
/// member has applied everything committed before it, and nothing is
/// written any more), retried while the member settles after a restart.
async fn read_keys(endpoint: &str) -> BTreeSet<String> {
    let request = RangeRequest {
        key: b"load/".to_vec(),
        range_end: b"load0".to_vec(),
        keys_only: true,
        ..RangeRequest::default()
    };
    for _ in 0..50 {
        if let Some(mut client) = kv(endpoint).await {
            if let Ok(response) = client.range(request.clone()).await {
                let kvs = response.into_inner().kvs;
                return kvs
                    .into_iter()
                    .map(|kv| String::from_utf8(kv.key).expect("utf-8"))
                    .collect();
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{endpoint} did not answer a range after its restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_leader_under_load() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = Arc::new(Mutex::new(common::Cluster::start(
        &common::kv_server(),
        dir.path(),
        4379,
        &[],
    )));
    let endpoints: Vec<String> = cluster.lock().members.iter().map(|m| m.endpoint()).collect();

    let stop_at = Arc::new(Mutex::new(Instant::now() + Duration::from_secs(600)));
    let writers: Vec<_> = (0..WRITERS)
        .map(|id| tokio::spawn(writer(id, endpoints.clone(), stop_at.clone())))
        .collect();
    tokio::time::sleep(LOAD_BEFORE_KILL).await;

    // Find and kill the leader.
    let (leader, leader_id) = common::leader(&endpoints, CALL_TIMEOUT).await;
    cluster.lock().kill(leader);
    let killed_at = Instant::now();

    // Writes continue under a new leader.
    let survivor = &endpoints[(leader + 1) % 3];
    let mut new_leader = 0;
    for _ in 0..100 {
        if let Some((_, leader_now)) = status(survivor).await {
            if leader_now != 0 && leader_now != leader_id {
                new_leader = leader_now;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_ne!(new_leader, 0, "no new leader within 10 s of the kill");
    let elected_after = killed_at.elapsed();
    tokio::time::sleep(LOAD_AFTER_KILL).await;
    *stop_at.lock() = Instant::now();
    let mut acknowledged = BTreeSet::new();
    for writer in writers {
        acknowledged.extend(writer.await.expect("writer"));
    }
    assert!(
        acknowledged.len() > 100,
        "only {} writes acknowledged",
        acknowledged.len()
    );

    // Restart the killed member; every acknowledged key is on every member.
    tokio::task::spawn_blocking({
        let cluster = cluster.clone();
        move || cluster.lock().restart(leader)
    })
    .await
    .expect("restart");
    let mut hashes = Vec::new();
    for endpoint in &endpoints {
        let stored = read_keys(endpoint).await;
        let missing: Vec<_> = acknowledged.difference(&stored).take(5).collect();
        assert!(
            missing.is_empty(),
            "{endpoint} lost acknowledged writes, e.g. {missing:?}"
        );
        let channel = common::connect(endpoint, CALL_TIMEOUT).await.expect("connect");
        let hash = MaintenanceClient::new(channel)
            .hash_kv(HashKvRequest { revision: 0 })
            .await
            .expect("hash kv")
            .into_inner();
        hashes.push((hash.header.expect("header").revision, hash.hash));
    }
    assert!(
        hashes.windows(2).all(|pair| pair[0] == pair[1]),
        "members differ: {hashes:?}"
    );

    // The whole cluster killed at once and restarted keeps every
    // acknowledged write too.
    tokio::task::spawn_blocking({
        let cluster = cluster.clone();
        move || {
            let mut cluster = cluster.lock();
            cluster.stop();
            for i in 0..3 {
                cluster.spawn(i);
            }
            cluster.wait_healthy(&[0, 1, 2]);
        }
    })
    .await
    .expect("restart the cluster");
    for endpoint in &endpoints {
        let stored = read_keys(endpoint).await;
        let missing: Vec<_> = acknowledged.difference(&stored).take(5).collect();
        assert!(
            missing.is_empty(),
            "{endpoint} lost acknowledged writes after a full restart, e.g. {missing:?}"
        );
    }
    eprintln!(
        "acknowledged {} writes; new leader after {elected_after:?}; hashes {hashes:?}",
        acknowledged.len()
    );
}
