//! Goal: killing members in the middle of membership changes loses
//! nothing acknowledged, every member comes back, and the members end up
//! agreeing on the membership.
//!
//! Method: three kv-server members on loopback and real etcdctl 3.5.17.
//! 500 keys, then:
//!
//! 1. `member add --learner`, and the new member started with a failpoint
//!    that stops it in the middle of installing its first snapshot
//!    (`kv::restore`); started again, it finishes and serves every key;
//! 2. it is promoted; then `member add --learner` of a 5th member is sent
//!    while the leader is killed with SIGKILL, and the leader restarted
//!    (the add may or may not have been committed: either is right);
//! 3. that 5th member (added again if the kill lost the add; never
//!    started) is given a new peer URL by `member update`, which every
//!    member lists; then `member remove` of it is sent while the leader is
//!    killed again, and restarted;
//! 4. the leader is removed through a follower: it exits, and the others
//!    take writes under a new leader.
//!
//! The restarted members start with their first flags, which name three
//! members: that they agree on four or five shows the membership comes
//! from their stores.
//!
//! After each step, more keys are written, and every running member must
//! serve every acknowledged key and list the same members (each member's
//! own view) within [`AGREE_WITHIN`].
//!
//! Needs etcdctl: `ETCDCTL_BIN`, or the cache that
//! `tools/etcd-peers/build.sh` fills.

mod common;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use kv_server::proto::etcdserverpb as pb;
use kv_server::proto::etcdserverpb::cluster_client::ClusterClient;
use kv_server::proto::etcdserverpb::kv_client::KvClient;

const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the members may take to agree after a step.
const AGREE_WITHIN: Duration = Duration::from_secs(30);
/// How long a reconfiguration refused as "unhealthy" is retried.
const HEALTHY_WITHIN: Duration = Duration::from_secs(20);
const BASE: u16 = 30379;
/// etcd's health interval, and a little more.
const HEALTH_INTERVAL: Duration = Duration::from_millis(5500);

use common::{etcdctl, text};

/// Runs etcdctl until it succeeds, retrying while it says `retry_on`.
fn etcdctl_until(endpoints: &str, args: &[&str], retry_on: &str) -> Output {
    common::etcdctl_until(endpoints, args, retry_on, HEALTHY_WITHIN)
}

/// Puts keys `from..to` through any member that takes them; each
/// acknowledged one is added to `acknowledged`.
async fn write(
    cluster: &common::Cluster,
    running: &[usize],
    range: std::ops::Range<usize>,
    acknowledged: &mut Vec<usize>,
) {
    for i in range {
        let deadline = Instant::now() + AGREE_WITHIN;
        'retry: loop {
            for &m in running {
                let Ok(channel) = common::connect(&cluster.members[m].endpoint(), CALL_TIMEOUT).await else {
                    continue;
                };
                let put = pb::PutRequest {
                    key: format!("crash/{i:05}").into_bytes(),
                    value: format!("value {i}").into_bytes(),
                    ..Default::default()
                };
                if KvClient::new(channel).put(put).await.is_ok() {
                    acknowledged.push(i);
                    break 'retry;
                }
            }
            assert!(Instant::now() < deadline, "no member took put {i}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// How many keys member `m` serves (read serializably) and the members
/// it lists: none while it is a learner, which etcd's rule keeps from
/// answering MemberList.
async fn view(cluster: &common::Cluster, m: usize) -> Option<(usize, Option<Vec<(u64, bool)>>)> {
    let channel = common::connect(&cluster.members[m].endpoint(), CALL_TIMEOUT)
        .await
        .ok()?;
    let all = pb::RangeRequest {
        key: b"crash/".to_vec(),
        range_end: b"crash0".to_vec(),
        serializable: true,
        count_only: true,
        ..Default::default()
    };
    let count = KvClient::new(channel.clone()).range(all).await.ok()?.into_inner().count as usize;
    let members = match ClusterClient::new(channel)
        .member_list(pb::MemberListRequest::default())
        .await
    {
        Ok(list) => {
            let mut members: Vec<(u64, bool)> =
                list.into_inner().members.iter().map(|m| (m.id, m.is_learner)).collect();
            members.sort_unstable();
            Some(members)
        }
        Err(status) if status.message() == "etcdserver: rpc not supported for learner" => None,
        Err(_) => return None,
    };
    Some((count, members))
}

/// Waits until every running member serves every acknowledged key and
/// all that may list members list the same ones; returns that list.
async fn agree(cluster: &common::Cluster, running: &[usize], acknowledged: usize) -> Vec<(u64, bool)> {
    let deadline = Instant::now() + AGREE_WITHIN;
    loop {
        let mut views = Vec::new();
        for &m in running {
            views.push(view(cluster, m).await);
        }
        let counted = views
            .iter()
            .all(|v| v.as_ref().is_some_and(|(count, _)| *count == acknowledged));
        let lists: Vec<&Vec<(u64, bool)>> = views.iter().flatten().filter_map(|(_, list)| list.as_ref()).collect();
        if counted && !lists.is_empty() && lists.iter().all(|list| *list == lists[0]) {
            return lists[0].clone();
        }
        assert!(Instant::now() < deadline, "members do not agree: {views:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Sends `args` through the members other than the leader while the
/// leader is killed, then restarts it.
async fn kill_leader_during(cluster: &mut common::Cluster, running: &[usize], args: &[&str]) {
    let endpoints: Vec<String> = running.iter().map(|&m| cluster.members[m].endpoint()).collect();
    let (leader, _) = common::leader(&endpoints, CALL_TIMEOUT).await;
    let leader = running[leader];
    let others: Vec<String> = running
        .iter()
        .filter(|&&m| m != leader)
        .map(|&m| cluster.members[m].endpoint())
        .collect();
    let change = Command::new(common::etcd_tool("ETCDCTL_BIN", "etcdctl"))
        .args(["--endpoints", &others.join(","), "--command-timeout", "15s"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start etcdctl");
    tokio::time::sleep(Duration::from_millis(30)).await;
    cluster.kill(leader);
    let _ = tokio::task::spawn_blocking(move || {
        let mut change = change;
        change.wait()
    })
    .await;
    cluster.spawn(leader);
    cluster.wait_healthy(&[leader]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_members_lose_nothing_in_membership_changes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cluster = common::Cluster::start(&common::kv_server_with_failpoints(), dir.path(), BASE, &[]);
    let mut acknowledged = Vec::new();
    write(&cluster, &[0, 1, 2], 0..500, &mut acknowledged).await;

    // 1. A learner stopped in the middle of its first snapshot.
    let first_three = cluster.endpoints();
    let peer = format!("http://127.0.0.1:{}", BASE + 31);
    let added = etcdctl_until(
        &first_three,
        &["member", "add", "infra4", "--learner", "--peer-urls", &peer],
        "unhealthy cluster",
    );
    let stop = vec![("FAILPOINTS".into(), "kv::restore=return".into())];
    cluster.add_joining("infra4", BASE + 30, &text(&added), stop);
    cluster.spawn(3);
    let deadline = Instant::now() + AGREE_WITHIN;
    while cluster.exit_status(3).is_none() {
        assert!(Instant::now() < deadline, "the new member never reached the failpoint");
        std::thread::sleep(Duration::from_millis(100));
    }
    cluster.members[3].env.clear();
    cluster.spawn(3);
    cluster.wait_healthy(&[3]);
    let all = [0, 1, 2, 3];
    write(&cluster, &all, 500..600, &mut acknowledged).await;
    let members = agree(&cluster, &all, acknowledged.len()).await;
    assert_eq!(members.len(), 4);
    let learner = members.iter().find(|(_, learner)| *learner).expect("a learner").0;

    // 2. Promoted; a member added while the leader is killed.
    etcdctl_until(&first_three, &["member", "promote", &format!("{learner:x}")], "in sync");
    // Every voter connected for etcd's health interval, so the add is
    // not refused as unhealthy before it reaches raft.
    tokio::time::sleep(HEALTH_INTERVAL).await;
    let fifth = format!("http://127.0.0.1:{}", BASE + 41);
    let add = ["member", "add", "infra5", "--learner", "--peer-urls", &fifth];
    kill_leader_during(&mut cluster, &all, &add).await;
    write(&cluster, &all, 600..700, &mut acknowledged).await;
    let members = agree(&cluster, &all, acknowledged.len()).await;
    assert!(
        members.iter().filter(|(_, learner)| !learner).count() >= 4,
        "{members:?}"
    );

    // 3. The 5th (added now if the kill lost the add) is given a new peer
    //    URL, then removed while the leader is killed.
    let members = if members.len() == 4 {
        etcdctl_until(&first_three, &add, "unhealthy cluster");
        agree(&cluster, &all, acknowledged.len()).await
    } else {
        members
    };
    assert_eq!(members.len(), 5, "{members:?}");
    {
        let ids: Vec<u64> = members.iter().map(|(id, _)| *id).collect();
        let mut known = Vec::new();
        for &m in &all {
            known.push(common::member_id(&cluster.members[m].endpoint(), CALL_TIMEOUT).await);
        }
        let fifth_id = ids
            .into_iter()
            .find(|id| !known.contains(id))
            .expect("the 5th member's id");
        let remove = format!("{fifth_id:x}");
        // MemberUpdate first: every member lists its new peer URL.
        let moved = format!("http://127.0.0.1:{}", BASE + 51);
        let updated = etcdctl(&first_three, &["member", "update", &remove, "--peer-urls", &moved]);
        assert!(updated.status.success(), "{}", text(&updated));
        let deadline = Instant::now() + AGREE_WITHIN;
        for &m in &all {
            while !text(&etcdctl(&cluster.members[m].endpoint(), &["member", "list"])).contains(&moved) {
                assert!(Instant::now() < deadline, "member {m} does not list the new peer URL");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        kill_leader_during(&mut cluster, &all, &["member", "remove", &remove]).await;
    }
    write(&cluster, &all, 700..800, &mut acknowledged).await;
    let members = agree(&cluster, &all, acknowledged.len()).await;
    assert!(members.len() == 4 || members.len() == 5, "{members:?}");

    // 4. The leader removed (through a follower): it exits, and the rest
    //    go on with a new leader and every key.
    let endpoints: Vec<String> = all.iter().map(|&m| cluster.members[m].endpoint()).collect();
    let (leader, leader_id) = common::leader(&endpoints, CALL_TIMEOUT).await;
    let rest: Vec<usize> = all.iter().copied().filter(|&m| m != leader).collect();
    let through = cluster.members[rest[0]].endpoint();
    etcdctl_until(
        &through,
        &["member", "remove", &format!("{leader_id:x}")],
        "unhealthy cluster",
    );
    let deadline = Instant::now() + AGREE_WITHIN;
    while cluster.exit_status(leader).is_none() {
        assert!(Instant::now() < deadline, "the removed leader is still running");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    write(&cluster, &rest, 800..900, &mut acknowledged).await;
    let members = agree(&cluster, &rest, acknowledged.len()).await;
    assert!(!members.iter().any(|(id, _)| *id == leader_id), "{members:?}");
}
