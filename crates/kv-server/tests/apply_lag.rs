//! Goal: the error-table row "apply index more than 5000 behind commit":
//! a member whose store has fallen more than 5000 entries behind what raft
//! has committed refuses new writes with etcd's ResourceExhausted
//! "etcdserver: too many requests", and takes writes again once it has
//! caught up. Nothing acknowledged is lost meanwhile.
//!
//! Method: a 3-member cluster of real processes built with the
//! `failpoints` feature. A follower is killed; 5,200 puts go to the two
//! left (a quorum), so the follower misses more than 5000 entries. It is
//! restarted with `FAILPOINTS=kv::apply=1*sleep(STALL)`: its first apply
//! batch stalls, so its applied index stays where it was while the leader's
//! appends raise its commit index past it by more than 5000. The lag is
//! then certain for the whole stall, whatever the batch sizes. Puts sent to
//! that follower must be refused with the row's code and message; after
//! the stall they must succeed, and the follower must hold every key.

mod common;

use std::time::{Duration, Instant};

use kv_server::proto::etcdserverpb as pb;
use kv_server::proto::etcdserverpb::kv_client::KvClient;
use tonic::transport::Channel;

/// Puts written while the follower is down: past the 5000-entry bound.
const MISSED_PUTS: usize = 5200;
/// Concurrent writers for those puts.
const WRITERS: usize = 50;
/// How long the follower's first apply batch sleeps, in milliseconds.
const STALL_MS: u64 = 12_000;
/// How long, from the restart, the refusal may take to show.
const REFUSED_WITHIN: Duration = Duration::from_secs(10);
/// How long, after the stall, the follower may take to take writes again.
const RECOVERED_WITHIN: Duration = Duration::from_secs(30);

async fn kv(endpoint: &str, timeout: Duration) -> Option<KvClient<Channel>> {
    common::connect(endpoint, timeout).await.ok().map(KvClient::new)
}

fn put(key: String) -> pb::PutRequest {
    pb::PutRequest {
        key: key.into_bytes(),
        value: b"v".to_vec(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_far_behind_refuses_writes_until_it_catches_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A snapshot count and catch-up window above the puts, so the leader
    // keeps the whole log and the follower catches up from entries, not
    // from a snapshot.
    let mut cluster = common::Cluster::start(
        &common::kv_server_with_failpoints(),
        dir.path(),
        9379,
        &[
            "--snapshot-count",
            "100000",
            "--experimental-snapshot-catchup-entries",
            "100000",
        ],
    );
    let endpoints: Vec<String> = cluster.members.iter().map(common::Member::endpoint).collect();
    let (leader, _) = common::leader(&endpoints, Duration::from_secs(5)).await;
    let follower = (leader + 1) % 3;
    cluster.kill(follower);

    let leader_endpoint = endpoints[leader].clone();
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let endpoint = leader_endpoint.clone();
        writers.push(tokio::spawn(async move {
            let mut client = kv(&endpoint, Duration::from_secs(10))
                .await
                .expect("connect to the leader");
            for i in (w..MISSED_PUTS).step_by(WRITERS) {
                client
                    .put(put(format!("missed/{i:05}")))
                    .await
                    .expect("the quorum takes writes");
            }
        }));
    }
    for writer in writers {
        writer.await.expect("writer");
    }

    cluster.members[follower].env = vec![("FAILPOINTS".into(), format!("kv::apply=1*sleep({STALL_MS})"))];
    cluster.spawn(follower);
    let restarted = Instant::now();

    // While its store stalls, the follower refuses writes. Until the
    // leader's appends reach it, a put may instead time out or find no
    // leader; those are retried.
    let mut refusal = None;
    let mut other_errors = Vec::new();
    while restarted.elapsed() < REFUSED_WITHIN {
        let Some(mut client) = kv(&endpoints[follower], Duration::from_secs(1)).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        match client.put(put("during-stall".into())).await {
            Err(status) if status.code() == tonic::Code::ResourceExhausted => {
                refusal = Some(status);
                break;
            }
            Err(status) => other_errors.push(status.message().to_string()),
            Ok(response) => panic!("a write was taken while the store lagged: {response:?}"),
        }
    }
    let refusal =
        refusal.unwrap_or_else(|| panic!("no refusal within {REFUSED_WITHIN:?}; other errors: {other_errors:?}"));
    assert_eq!(refusal.message(), "etcdserver: too many requests");
    assert!(
        restarted.elapsed() < Duration::from_millis(STALL_MS),
        "the refusal must come while the store is stalled"
    );

    // Once the stall ends, the follower applies the backlog and takes writes.
    let mut client = kv(&endpoints[follower], Duration::from_secs(5)).await.expect("connect");
    let recovering = Instant::now();
    loop {
        match client.put(put("after-stall".into())).await {
            Ok(_) => break,
            Err(status) => assert!(
                recovering.elapsed() < RECOVERED_WITHIN + Duration::from_millis(STALL_MS),
                "the follower never took writes again: {status:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Every put the quorum acknowledged is on the follower.
    let range = client
        .range(pb::RangeRequest {
            key: b"missed/".to_vec(),
            range_end: b"missed0".to_vec(),
            count_only: true,
            serializable: true,
            ..Default::default()
        })
        .await
        .expect("range")
        .into_inner();
    assert_eq!(range.count, MISSED_PUTS as i64);
}
