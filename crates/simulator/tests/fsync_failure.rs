//! Goal: in a simulated cluster, a member whose fdatasync fails stops,
//! alone: the fault is its own (not the process's), and the other two
//! members go on electing and taking writes.
//!
//! Method: three members on the simulator's runtime; once a leader is
//! known, member 0's disk fails every sync; a put through member 0 makes
//! it sync. Once the other two agree on a leader, puts through each must
//! succeed.

use std::time::Duration;

use simulator::harness::{CallError, SimCluster, SimSpec};

/// Simulated time any one step below may take: elections and commits take
/// tens of milliseconds at 10 ms ticks.
const WITHIN: Duration = Duration::from_secs(5);
const STEP: Duration = Duration::from_millis(10);

#[test]
fn a_failed_fsync_stops_its_member_alone() {
    let runtime = simulator::seed::paused_runtime();
    runtime.block_on(async {
        let root = simulator::seed::scratch_root();
        let mut cluster = SimCluster::new(SimSpec {
            members: 3,
            seed: 7,
            root,
            heartbeat: Duration::from_millis(10),
            election_ticks: 10,
            snapshot_count: 10_000,
            catch_up_entries: 5_000,
        })
        .expect("the cluster starts");
        let mut waited = Duration::ZERO;
        while (0..3).any(|m| cluster.leader(m) == 0) {
            assert!(waited < WITHIN, "a leader within {WITHIN:?}");
            cluster.run_for(STEP).await.unwrap();
            waited += STEP;
        }
        cluster.fail_syncs(0);
        let clients = cluster.clients();
        let put = tokio::spawn(async move { clients.put(0, "k", "v0", 0).await });
        let mut waited = Duration::ZERO;
        while cluster.is_running(0) {
            assert!(waited < WITHIN, "member 0 stops within {WITHIN:?}");
            cluster.run_for(STEP).await.expect("an injected fault is no failure");
            waited += STEP;
        }
        assert_eq!(cluster.stats().fsync_faults, 1, "member 0 stopped on its failed sync");
        assert!(cluster.is_running(1) && cluster.is_running(2), "the others run on");
        // A proposal forwarded to a leader that is gone is lost (the
        // client times out, as etcd's does): wait for the two to agree on
        // a leader among them.
        let stopped = cluster.id(0);
        let mut waited = Duration::ZERO;
        while cluster.leader(1) != cluster.leader(2) || [0, stopped].contains(&cluster.leader(1)) {
            assert!(waited < WITHIN, "the two left elect a leader within {WITHIN:?}");
            cluster.run_for(STEP).await.unwrap();
            waited += STEP;
        }
        for member in [1, 2] {
            let clients = cluster.clients();
            let value = format!("v{member}");
            let write = tokio::spawn(async move { clients.put(member, "k", &value, 0).await });
            let mut waited = Duration::ZERO;
            while !write.is_finished() {
                assert!(waited < WITHIN, "a put through member {member} within {WITHIN:?}");
                cluster.run_for(STEP).await.unwrap();
                waited += STEP;
            }
            let revision = write.await.unwrap().expect("the two left take writes");
            assert!(revision > 1);
        }
        let first = put.await.unwrap();
        assert!(
            matches!(first, Err(CallError::Failed(_))) || first.is_ok(),
            "the put through member 0 either failed with it or committed through the others: {first:?}"
        );
    });
}
