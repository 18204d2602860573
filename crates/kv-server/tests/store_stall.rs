//! Goal: the raft loop never waits on store work. A store stalled for
//! 5 s under load, on every member and so on the leader, costs no
//! election: the leader stays leader in the same term, and no member sees
//! a leader change. The writers wait out the stall and nothing fails.
//!
//! Method: a 3-member cluster of real processes built with the
//! `failpoints` feature, each member armed with
//! `mvcc::apply=N*off->1*sleep(5000)`: its store's apply sleeps 5 s,
//! holding the store's lock, at its (N+1)th apply batch, which comes
//! while etcd's benchmark tool puts. `--snapshot-count` is low, so that
//! snapshots (which flush the store) fall due during the stall: before
//! the raft loop handed its flushes to the apply stage, it waited for
//! the lock there and its heartbeats stopped. The benchmark's slowest put
//! shows the stall happened; `endpoint status` before and after gives
//! every member's leader and term; each member's
//! `etcd_server_leader_changes_seen_total` must not move.

mod common;

/// Apply batches each member takes before its store stalls: past the
/// cluster's start, early in the benchmark's puts.
const BATCHES_BEFORE_STALL: u32 = 200;
/// How long the store stalls, in milliseconds.
const STALL_MS: u64 = 5_000;
/// Puts at 200 clients: long enough (well over the stall) that the stall
/// comes under load on every member.
const PUTS: &str = "40000";

#[test]
fn a_stalled_store_costs_no_election() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cluster = common::Cluster::new(
        &common::kv_server_with_failpoints(),
        dir.path(),
        26579,
        3,
        &[
            "--snapshot-count",
            "500",
            "--experimental-snapshot-catchup-entries",
            "500",
        ],
    );
    let failpoint = format!("mvcc::apply={BATCHES_BEFORE_STALL}*off->1*sleep({STALL_MS})");
    for member in &mut cluster.members {
        member.env.push(("FAILPOINTS".into(), failpoint.clone()));
    }
    cluster.start_all();
    let endpoints = cluster.endpoints();
    let before = common::leaders_and_terms(&endpoints);
    let (leader, term) = before[0];
    assert!(before.iter().all(|&status| status == (leader, term)), "{before:?}");
    let ports: Vec<u16> = cluster.members.iter().map(|m| m.client_port).collect();
    let changes: Vec<f64> = ports.iter().map(|&port| common::leader_changes(port)).collect();

    let report = common::etcd_benchmark(&[
        &format!("--endpoints={endpoints}"),
        "--conns=20",
        "--clients=200",
        "put",
        "--key-size=8",
        "--sequential-keys",
        "--val-size=256",
        "--total",
        PUTS,
    ]);
    let slowest: f64 = report
        .lines()
        .find_map(|line| line.trim().strip_prefix("Slowest:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|seconds| seconds.parse().ok())
        .unwrap_or_else(|| panic!("no slowest put in:\n{report}"));
    assert!(
        slowest >= (STALL_MS as f64 / 1000.0) * 0.8,
        "the stall did not happen under load: slowest put {slowest} s\n{report}"
    );

    let after = common::leaders_and_terms(&endpoints);
    assert!(
        after.iter().all(|&status| status == (leader, term)),
        "leader or term changed: {before:?} -> {after:?}"
    );
    let changes_after: Vec<f64> = ports.iter().map(|&port| common::leader_changes(port)).collect();
    assert_eq!(changes_after, changes, "leader changes seen");
    cluster.stop();
}
