//! Goal: a member replaced as etcd's runbook does it (removed, a learner
//! added at a new peer URL, started with empty data, promoted) joins the
//! simulated cluster, catches up by snapshot, becomes a voter, and holds
//! every write acknowledged before and after; the old member is gone from
//! the membership.
//!
//! Method: three members, snapshots every 20 entries with 5 kept for
//! followers (so the new member must take a snapshot); 60 puts; member 1
//! crashed and replaced through `simulator::replace`; 20 puts more; then
//! the members must agree (applied index, revision, keys, HashKV), list
//! three voters with the new id in place of the old, and read every put
//! at its revision. The cluster's `membership_settled` (the faults lose a
//! member for good only when it holds) is true before the crash, false
//! while member 1 is down, and true again once every member has applied
//! the promotion.

use std::time::Duration;

use simulator::check;
use simulator::harness::{SimCluster, SimSpec};
use simulator::replace::{Progress, Replacement};

/// Simulated time any one step below may take.
const WITHIN: Duration = Duration::from_secs(10);
const STEP: Duration = Duration::from_millis(10);

/// Runs the cluster until `done`, for at most [`WITHIN`].
async fn run_until(cluster: &mut SimCluster, what: &str, mut done: impl FnMut(&mut SimCluster) -> bool) {
    let mut waited = Duration::ZERO;
    while !done(cluster) {
        assert!(waited < WITHIN, "{what} within {WITHIN:?}");
        cluster.run_for(STEP).await.expect("no member fails");
        waited += STEP;
    }
}

/// Puts `count` keys through member 0, one after another; each key and the
/// revision it was acknowledged at.
async fn puts(cluster: &mut SimCluster, from: usize, count: usize) -> Vec<(String, i64)> {
    let mut acknowledged = Vec::new();
    for i in from..from + count {
        let clients = cluster.clients();
        let key = format!("key{i}");
        let put_key = key.clone();
        let put = tokio::spawn(async move { clients.put(0, &put_key, &put_key, 0).await });
        run_until(cluster, "a put", |_| put.is_finished()).await;
        acknowledged.push((key, put.await.unwrap().expect("a put in a healthy cluster")));
    }
    acknowledged
}

#[test]
fn a_replaced_member_joins_catches_up_and_votes() {
    let runtime = simulator::seed::paused_runtime();
    runtime.block_on(async {
        let root = simulator::seed::scratch_root();
        let mut cluster = SimCluster::new(SimSpec {
            members: 3,
            seed: 11,
            root,
            heartbeat: Duration::from_millis(10),
            election_ticks: 10,
            snapshot_count: 20,
            catch_up_entries: 5,
        })
        .expect("the cluster starts");
        run_until(&mut cluster, "a leader", |c| (0..3).all(|m| c.leader(m) != 0)).await;
        let mut acknowledged = puts(&mut cluster, 0, 60).await;
        let old = cluster.id(1);
        assert!(cluster.membership_settled(), "three voters, each applied the same");
        cluster.crash(1).await.expect("a crash");
        assert!(!cluster.membership_settled(), "a member down is not settled");
        let mut replacement = Replacement::begin(&cluster, 1);
        let mut promoted = None;
        run_until(&mut cluster, "the replacement", |c| match replacement.advance(c) {
            Progress::Going => false,
            Progress::Done { promoted: done } => {
                promoted = Some(done);
                true
            }
            Progress::Abandoned(why) => panic!("the replacement was given up: {why}"),
        })
        .await;
        assert_eq!(promoted, Some(true), "the new member became a voter");
        let new = cluster.id(1);
        assert_ne!(new, old, "member 1 is a new member");
        acknowledged.extend(puts(&mut cluster, 60, 20).await);
        run_until(&mut cluster, "agreement", |c| check::agreement(c).is_ok()).await;
        run_until(&mut cluster, "the membership settled", |c| c.membership_settled()).await;
        let clients = cluster.clients();
        let listed = tokio::spawn(async move { clients.member_list(1).await });
        run_until(&mut cluster, "a member list", |_| listed.is_finished()).await;
        let mut voters: Vec<(u64, bool)> = listed
            .await
            .unwrap()
            .expect("the new member lists the members")
            .into_iter()
            .map(|(id, _, learner)| (id, learner))
            .collect();
        voters.sort();
        let mut expected = vec![(cluster.id(0), false), (new, false), (cluster.id(2), false)];
        expected.sort();
        assert_eq!(voters, expected, "three voters, the old member gone");
        for (key, revision) in &acknowledged {
            let held = cluster.read_at(1, key, *revision).expect("the new member reads");
            assert_eq!(held, Some((key.clone(), *revision)), "{key} at revision {revision}");
        }
        assert!(
            cluster.net_stats().snapshots > 0,
            "the new member caught up by snapshot"
        );
    });
}
