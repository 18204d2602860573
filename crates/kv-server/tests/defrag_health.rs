//! Goal: `--experimental-stop-grpc-service-on-defrag` (3.6's
//! `StopGRPCServiceOnDefrag` gate) turns the gRPC health status to
//! NOT_SERVING while a defragmentation runs and back to SERVING after it,
//! as etcd does, so clients that check health move to another member;
//! without it, the status stays SERVING throughout.
//!
//! Method: one member of kv-server and one of etcd 3.5.17 side by side,
//! each given 40 MiB of puts over 20,000 keys and compacted (so that
//! defragmentation has half of it to reclaim and takes a while), with a
//! gRPC health checker (`tests/go/healthwatch`, grpc-go's health client)
//! asking every millisecond while `etcdctl defrag` runs. With the flag
//! each must be seen NOT_SERVING and then SERVING again; without it,
//! never NOT_SERVING. The 3.6 gate is started once on kv-server too.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Puts of [`VALUE_BYTES`] each over [`KEYS`] keys before the
/// defragmentation: each key twice, so compaction leaves half as garbage.
const PUTS: &str = "40000";
const KEYS: &str = "20000";
const VALUE_BYTES: &str = "1024";

/// The statuses the health checker saw change to, in order, while
/// `etcdctl defrag` ran against the member on `port`.
fn statuses_during_defrag(watcher: &Path, port: u16) -> Vec<String> {
    let endpoint = format!("127.0.0.1:{port}");
    common::etcd_benchmark(&[
        "--endpoints",
        &endpoint,
        "--clients",
        "50",
        "--conns",
        "5",
        "put",
        "--key-space-size",
        KEYS,
        "--sequential-keys",
        "--val-size",
        VALUE_BYTES,
        "--total",
        PUTS,
    ]);
    let status = common::endpoint_status(&endpoint);
    let revision = status[0]["header"]["revision"].as_u64().expect("revision");
    let compacted = common::etcdctl(&endpoint, &["compact", &revision.to_string(), "--physical"]);
    assert!(compacted.status.success(), "compact: {}", common::text(&compacted));
    // The checker stops when its input closes (after the defrag), or at
    // the latest after a minute.
    let mut checker = Command::new(watcher)
        .args([endpoint.as_str(), "60s"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the health checker");
    std::thread::sleep(Duration::from_millis(500));
    let defrag = common::etcdctl(&endpoint, &["--command-timeout=30s", "defrag"]);
    assert!(defrag.status.success(), "defrag: {}", common::text(&defrag));
    std::thread::sleep(Duration::from_millis(500));
    drop(checker.stdin.take());
    let seen = checker.wait_with_output().expect("health checker output");
    // A check that failed outright (a busy machine's deadline) says
    // nothing of the status: left out, with the repeat it leaves.
    let mut statuses: Vec<String> = String::from_utf8_lossy(&seen.stdout)
        .lines()
        .filter(|line| *line != "ERROR")
        .map(str::to_string)
        .collect();
    statuses.dedup();
    statuses
}

#[test]
fn health_is_not_serving_during_defrag_with_the_flag() {
    let dir = tempfile::tempdir().expect("tempdir");
    let watcher = common::go_program("healthwatch");
    let etcd = common::etcd_tool("ETCD_BIN", "etcd");
    let flag = "--experimental-stop-grpc-service-on-defrag=true";
    let cases = [
        ("kv-server", common::kv_server(), 24879, Some(flag)),
        ("etcd", etcd.clone(), 24979, Some(flag)),
        (
            "kv-server-gate",
            common::kv_server(),
            25079,
            Some("--feature-gates=StopGRPCServiceOnDefrag=true"),
        ),
        ("kv-server-off", common::kv_server(), 25179, None),
        ("etcd-off", etcd, 25279, None),
    ];
    for (name, binary, base, flag) in cases {
        let flags: Vec<&str> = flag.into_iter().collect();
        let member = common::Cluster::start_members(&binary, &dir.path().join(name), base, 1, &flags);
        let seen = statuses_during_defrag(&watcher, member.members[0].client_port);
        eprintln!("{name}: {seen:?}");
        let expected: &[&str] = if flag.is_some() {
            &["SERVING", "NOT_SERVING", "SERVING"]
        } else {
            &["SERVING"]
        };
        assert_eq!(seen, expected, "{name}");
    }
}
