//! Goal: leases behave as etcd's do: grants (with etcd's minimum TTL),
//! keys attached by puts, time-to-live with keys, keep-alives, listing,
//! revocation deleting the lease's keys under one revision, expiry when
//! keep-alives stop, and the lease rows of etcd's error table.
//!
//! Method: one sequence of real gRPC calls, all made through a follower
//! (so grants, keep-alives and time-to-live take the forwarding paths),
//! run against a real etcd v3.5.17 cluster and against this project's, each
//! three member processes on loopback. Every expectation is asserted
//! against both, so the test also shows the expectations are etcd's.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use kv_server::proto::etcdserverpb as pb;
use kv_server::proto::etcdserverpb::kv_client::KvClient;
use kv_server::proto::etcdserverpb::lease_client::LeaseClient;
use tokio_stream::StreamExt;
use tonic::transport::Channel;
use tonic::Code;

/// How long an unrenewed 2-second lease may take to be revoked: its TTL,
/// the leader's 500 ms check, and a commit, with room for a slow machine.
const EXPIRED_WITHIN: Duration = Duration::from_secs(10);
/// How long keep-alives hold a 2-second lease before they stop.
const KEPT_ALIVE_FOR: Duration = Duration::from_secs(4);
const KEEP_ALIVE_EVERY: Duration = Duration::from_millis(500);

async fn count(kv: &mut KvClient<Channel>, prefix: &str) -> (i64, i64) {
    let mut end = prefix.as_bytes().to_vec();
    *end.last_mut().expect("non-empty prefix") += 1;
    let response = kv
        .range(pb::RangeRequest {
            key: prefix.as_bytes().to_vec(),
            range_end: end,
            count_only: true,
            ..Default::default()
        })
        .await
        .expect("range")
        .into_inner();
    (response.count, response.header.expect("header").revision)
}

async fn put(kv: &mut KvClient<Channel>, key: &str, lease: i64) -> Result<i64, tonic::Status> {
    let response = kv
        .put(pb::PutRequest {
            key: key.as_bytes().to_vec(),
            value: b"v".to_vec(),
            lease,
            ..Default::default()
        })
        .await?;
    Ok(response.into_inner().header.expect("header").revision)
}

async fn grant(
    lease: &mut LeaseClient<Channel>,
    id: i64,
    ttl: i64,
) -> Result<tonic::Response<pb::LeaseGrantResponse>, tonic::Status> {
    lease.lease_grant(pb::LeaseGrantRequest { ttl, id }).await
}

async fn time_to_live(lease: &mut LeaseClient<Channel>, id: i64) -> pb::LeaseTimeToLiveResponse {
    lease
        .lease_time_to_live(pb::LeaseTimeToLiveRequest { id, keys: true })
        .await
        .expect("time to live")
        .into_inner()
}

async fn exercise(binary: &Path, base: u16) {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = common::Cluster::start(binary, dir.path(), base, &[]);
    let endpoints: Vec<String> = cluster.members.iter().map(common::Member::endpoint).collect();
    let (leader, _) = common::leader(&endpoints, Duration::from_secs(5)).await;
    let follower = &endpoints[(leader + 1) % 3];
    let channel = common::connect(follower, Duration::from_secs(10))
        .await
        .expect("connect");
    let mut lease = LeaseClient::new(channel.clone());
    let mut kv = KvClient::new(channel);

    // A TTL below the minimum is raised to it: 1.5 election timeouts, 2 s.
    let short = grant(&mut lease, 0, 1).await.expect("grant").into_inner();
    assert!(short.id > 0, "{short:?}");
    assert_eq!(short.ttl, 2);

    // Keys attach to a lease by put; time-to-live lists them.
    let long = grant(&mut lease, 0, 60).await.expect("grant").into_inner();
    assert_eq!(long.ttl, 60);
    put(&mut kv, "held/1", long.id).await.expect("put with lease");
    put(&mut kv, "held/2", long.id).await.expect("put with lease");
    let free_revision = put(&mut kv, "free/1", 0).await.expect("put");
    let alive = time_to_live(&mut lease, long.id).await;
    assert_eq!((alive.id, alive.granted_ttl), (long.id, 60));
    assert!((55..=60).contains(&alive.ttl), "{alive:?}");
    // etcd lists a lease's keys in no set order (this project: key order).
    let mut keys = alive.keys.clone();
    keys.sort();
    assert_eq!(keys, vec![b"held/1".to_vec(), b"held/2".to_vec()]);

    // A keep-alive answers the granted TTL.
    // The request is queued before the call: etcd sends the stream's
    // headers only with its first answer.
    let (requests, stream) = tokio::sync::mpsc::channel(4);
    requests
        .send(pb::LeaseKeepAliveRequest { id: long.id })
        .await
        .expect("send");
    let mut answers = lease
        .lease_keep_alive(tokio_stream::wrappers::ReceiverStream::new(stream))
        .await
        .expect("keep-alive stream")
        .into_inner();
    let answer = answers.next().await.expect("an answer").expect("keep-alive");
    assert_eq!((answer.id, answer.ttl), (long.id, 60));
    // An unknown lease answers TTL 0 on the stream, -1 from time-to-live.
    requests.send(pb::LeaseKeepAliveRequest { id: 1 }).await.expect("send");
    let answer = answers.next().await.expect("an answer").expect("keep-alive");
    assert_eq!((answer.id, answer.ttl), (1, 0));
    assert_eq!(time_to_live(&mut lease, 1).await.ttl, -1);

    let listed = lease
        .lease_leases(pb::LeaseLeasesRequest {})
        .await
        .expect("leases")
        .into_inner();
    let mut ids: Vec<i64> = listed.leases.iter().map(|l| l.id).collect();
    ids.sort();
    let mut expected = vec![short.id, long.id];
    expected.sort();
    assert_eq!(ids, expected);

    // The lease rows of the error table.
    common::expect_error(
        "grant an id in use",
        grant(&mut lease, long.id, 60).await,
        Code::FailedPrecondition,
        "etcdserver: lease already exists",
    );
    common::expect_error(
        "grant over the largest TTL",
        grant(&mut lease, 0, 9_000_000_001).await,
        Code::OutOfRange,
        "etcdserver: too large lease TTL",
    );
    common::expect_error(
        "revoke an unknown lease",
        lease.lease_revoke(pb::LeaseRevokeRequest { id: 1 }).await,
        Code::NotFound,
        "etcdserver: requested lease not found",
    );
    match put(&mut kv, "held/3", 1).await {
        Err(status) => {
            assert_eq!(status.code(), Code::NotFound);
            assert_eq!(status.message(), "etcdserver: requested lease not found");
        }
        Ok(revision) => panic!("a put with an unknown lease was taken at {revision}"),
    }

    // Revoking deletes the lease's keys, both under one new revision.
    let revoked = lease
        .lease_revoke(pb::LeaseRevokeRequest { id: long.id })
        .await
        .expect("revoke")
        .into_inner();
    assert_eq!(revoked.header.expect("header").revision, free_revision + 1);
    assert_eq!(count(&mut kv, "held/").await, (0, free_revision + 1));
    assert_eq!(count(&mut kv, "free/").await.0, 1);
    assert_eq!(time_to_live(&mut lease, long.id).await.ttl, -1);

    // Keep-alives hold a 2-second lease well past its TTL.
    put(&mut kv, "short/1", short.id).await.expect("put with lease");
    let kept = Instant::now();
    while kept.elapsed() < KEPT_ALIVE_FOR {
        requests
            .send(pb::LeaseKeepAliveRequest { id: short.id })
            .await
            .expect("send");
        let answer = answers.next().await.expect("an answer").expect("keep-alive");
        assert_eq!(answer.ttl, 2, "the lease expired under keep-alives");
        tokio::time::sleep(KEEP_ALIVE_EVERY).await;
    }
    assert_eq!(count(&mut kv, "short/").await.0, 1);
    drop(requests);

    // Without them it expires, and its key goes with it.
    let stopped = Instant::now();
    loop {
        if count(&mut kv, "short/").await.0 == 0 {
            break;
        }
        assert!(stopped.elapsed() < EXPIRED_WITHIN, "the lease outlived its TTL");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        stopped.elapsed() >= Duration::from_secs(1),
        "expired before its TTL ran out"
    );
    assert_eq!(time_to_live(&mut lease, short.id).await.ttl, -1);
    let listed = lease
        .lease_leases(pb::LeaseLeasesRequest {})
        .await
        .expect("leases")
        .into_inner();
    assert!(listed.leases.is_empty(), "{listed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_etcd_leases_behave_so() {
    exercise(&common::etcd_tool("ETCD_BIN", "etcd"), 3379).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_server_leases_behave_as_etcd_does() {
    exercise(&common::kv_server(), 3479).await;
}
