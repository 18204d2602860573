//! Goal: Maintenance.MoveLeader behaves as etcd's: refused by a follower
//! ("not leader") and for a target that is not a member ("bad leader
//! transferee"), and otherwise answered once the target leads; then
//! etcdctl's `move-leader` hands leadership on again, and writes go on.
//!
//! Method: the same calls against a real etcd v3.5.17 cluster and against
//! this project's, each three member processes on loopback, with every
//! expectation asserted against both.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use kv_server::proto::etcdserverpb as pb;
use kv_server::proto::etcdserverpb::kv_client::KvClient;
use kv_server::proto::etcdserverpb::maintenance_client::MaintenanceClient;
use tonic::Code;

/// A member id no member has.
const NOT_A_MEMBER: u64 = 12345;
/// How long a call may take; a transfer takes a few heartbeats.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

async fn maintenance(endpoint: &str) -> MaintenanceClient<tonic::transport::Channel> {
    MaintenanceClient::new(common::connect(endpoint, CALL_TIMEOUT).await.expect("connect"))
}

async fn exercise(binary: &Path, base: u16) {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = common::Cluster::start(binary, dir.path(), base, &[]);
    let endpoints: Vec<String> = cluster.members.iter().map(common::Member::endpoint).collect();
    let (leader, leader_id) = common::leader(&endpoints, CALL_TIMEOUT).await;
    let follower = (leader + 1) % 3;
    let follower_id = common::member_id(&endpoints[follower], CALL_TIMEOUT).await;

    common::expect_error(
        "move-leader through a follower",
        maintenance(&endpoints[follower])
            .await
            .move_leader(pb::MoveLeaderRequest { target_id: follower_id })
            .await,
        Code::FailedPrecondition,
        "etcdserver: not leader",
    );
    common::expect_error(
        "move-leader to a non-member",
        maintenance(&endpoints[leader])
            .await
            .move_leader(pb::MoveLeaderRequest {
                target_id: NOT_A_MEMBER,
            })
            .await,
        Code::FailedPrecondition,
        "etcdserver: bad leader transferee",
    );

    let moved = maintenance(&endpoints[leader])
        .await
        .move_leader(pb::MoveLeaderRequest { target_id: follower_id })
        .await
        .expect("move-leader")
        .into_inner();
    assert_eq!(moved, pb::MoveLeaderResponse::default());
    let (now, now_id) = common::leader(&endpoints, CALL_TIMEOUT).await;
    assert_eq!((now, now_id), (follower, follower_id));

    // etcdctl finds the leader among the endpoints and moves it back.
    let etcdctl = common::etcd_tool("ETCDCTL_BIN", "etcdctl");
    let output = Command::new(etcdctl)
        .arg(format!("--endpoints={}", endpoints.join(",")))
        .args(["--command-timeout=10s", "move-leader", &format!("{leader_id:x}")])
        .output()
        .expect("run etcdctl");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        stdout.trim(),
        format!("Leadership transferred from {follower_id:x} to {leader_id:x}")
    );
    assert_eq!(common::leader(&endpoints, CALL_TIMEOUT).await, (leader, leader_id));

    let mut kv = KvClient::new(
        common::connect(&endpoints[follower], CALL_TIMEOUT)
            .await
            .expect("connect"),
    );
    kv.put(pb::PutRequest {
        key: b"after".to_vec(),
        value: b"moves".to_vec(),
        ..Default::default()
    })
    .await
    .expect("a write after the moves");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_etcd_moves_its_leader_so() {
    exercise(&common::etcd_tool("ETCD_BIN", "etcd"), 13379).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_server_moves_its_leader_as_etcd_does() {
    exercise(&common::kv_server(), 13479).await;
}
