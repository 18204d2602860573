//! Goal: a defragmentation of the leader under load stops nothing. The
//! leader stays leader in the same term, no member sees a leader change,
//! no put fails, writes are applied while it copies, and afterwards
//! every member holds the same data.
//!
//! Method: a 3-member cluster of real processes. etcd's benchmark tool
//! puts every key of a 1 KiB-valued key space twice, and the cluster is
//! compacted at its revision, so half the leader's store is garbage. Then
//! the tool puts 256-byte values at 200 clients while `etcdctl defrag`
//! runs against the leader alone, its copy of sled forced (with the
//! failpoints built in). The leader's revision before and after the
//! defrag call shows writes applied during it, and its data directory
//! that it switched to the copy; `endpoint status` gives
//! leader and term; `endpoint hashkv` must agree once the load ends.
//! (dbSize is not compared: under load, sled's log-structured file of
//! the fresh copy is, for a while, larger than the live data; the
//! single-member tests/defrag.rs checks that a defrag gives space back.)

mod common;

use std::time::{Duration, Instant};

/// Keys of the fill, each written twice with 1 KiB values: about 40 MB
/// live and as much garbage, so that the copy runs for many chunks.
const KEYS: &str = "40000";
const FILL_PUTS: &str = "80000";
/// Puts of the load during the defragmentation: at 200 clients, several
/// times as long as the defragmentation on this project's test machines.
const LOAD_PUTS: &str = "60000";
/// How long the members may take to converge once the load ends.
const CONVERGE_WITHIN: Duration = Duration::from_secs(20);
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

fn put_args<'a>(endpoints: &'a str, clients: &'a str, total: &'a str, value: &'a str) -> Vec<String> {
    [
        &format!("--endpoints={endpoints}"),
        "--conns=20",
        &format!("--clients={clients}"),
        "put",
        "--key-size=8",
        "--sequential-keys",
        &format!("--key-space-size={KEYS}"),
        &format!("--val-size={value}"),
        "--total",
        total,
    ]
    .iter()
    .map(|arg| arg.to_string())
    .collect()
}

fn benchmark(args: &[String]) -> String {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    common::etcd_benchmark(&args)
}

/// Each member's hash at its current revision, until all agree.
fn converged_hashes(endpoints: &str) -> Vec<u64> {
    let deadline = Instant::now() + CONVERGE_WITHIN;
    loop {
        let output = common::etcdctl(endpoints, &["endpoint", "hashkv", "-w", "json"]);
        assert!(output.status.success(), "{}", common::text(&output));
        let hashes: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
        let hashes: Vec<u64> = hashes
            .as_array()
            .expect("one hash per member")
            .iter()
            .map(|member| member["HashKV"]["hash"].as_u64().expect("hash"))
            .collect();
        if hashes.windows(2).all(|pair| pair[0] == pair[1]) {
            return hashes;
        }
        assert!(Instant::now() < deadline, "members never converged: {hashes:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defragmenting_a_loaded_leader_stops_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cluster = common::Cluster::new(&common::kv_server_with_failpoints(), dir.path(), 26779, 3, &[]);
    // The store is far too small for sled to be bloated, when a
    // defragmentation only reclaims value files: the copy of sled, and
    // the switch to it, are forced where failpoints are built in.
    for member in &mut cluster.members {
        member.env = vec![("FAILPOINTS".into(), "mvcc::defrag_copy_sled=return".into())];
    }
    cluster.start_all();
    let endpoints = cluster.endpoints();
    benchmark(&put_args(&endpoints, "100", FILL_PUTS, "1024"));
    let revision = common::endpoint_status(&endpoints)[0]["header"]["revision"]
        .as_u64()
        .expect("revision");
    let compacted = common::etcdctl(&endpoints, &["compact", &revision.to_string(), "--physical"]);
    assert!(compacted.status.success(), "{}", common::text(&compacted));

    let member_endpoints: Vec<String> = cluster.members.iter().map(|m| m.endpoint()).collect();
    let (leader_at, _) = common::leader(&member_endpoints, CALL_TIMEOUT).await;
    let leader = member_endpoints[leader_at].clone();
    let before = common::leaders_and_terms(&endpoints);
    let ports: Vec<u16> = cluster.members.iter().map(|m| m.client_port).collect();
    let changes: Vec<f64> = ports.iter().map(|&port| common::leader_changes(port)).collect();

    let load = {
        let args = put_args(&endpoints, "200", LOAD_PUTS, "256");
        std::thread::spawn(move || benchmark(&args))
    };
    // Let the load reach the leader before the defragmentation starts.
    std::thread::sleep(Duration::from_secs(1));
    let status = |endpoint: &str| common::endpoint_status(endpoint).remove(0);
    let ahead = status(&leader);
    let defrag = common::etcdctl(&leader, &["defrag"]);
    let behind = status(&leader);
    let report = load.join().expect("the load");

    assert!(defrag.status.success(), "{}", common::text(&defrag));
    let revision_of = |status: &serde_json::Value| status["header"]["revision"].as_u64().expect("revision");
    assert!(
        revision_of(&behind) > revision_of(&ahead),
        "no write was applied during the defragmentation: revision {}",
        revision_of(&ahead)
    );
    // The store switched to its copy: the first generation is gone.
    let member = dir.path().join(&cluster.members[leader_at].name).join("member");
    assert!(
        member.join("kv.1").is_dir() && !member.join("kv").exists(),
        "the leader's store did not switch to its copy"
    );
    assert!(!report.contains("Error distribution"), "puts failed:\n{report}");
    let after = common::leaders_and_terms(&endpoints);
    assert!(
        after == before && before.windows(2).all(|pair| pair[0] == pair[1]),
        "leader or term changed: {before:?} -> {after:?}"
    );
    let changes_after: Vec<f64> = ports.iter().map(|&port| common::leader_changes(port)).collect();
    assert_eq!(changes_after, changes, "leader changes seen");
    converged_hashes(&endpoints);
    cluster.stop();
}
