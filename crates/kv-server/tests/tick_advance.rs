//! Goal: a member moves its election clock forward at start as etcd 3.5.17
//! does, so a cluster gets its leader as soon as etcd's would, and logs
//! the same lines with the same fields: a single member always
//! fast-forwards `election ticks - 1`; members of a larger cluster
//! fast-forward `election ticks - 2` once both peers' streams are up, or
//! skip it with `--initial-election-tick-advance=false`.
//!
//! Method: etcd and kv-server side by side, each as one member and as
//! three, with the default election timeout (10 ticks of 100 ms); each
//! member's log is read for etcd's lines. That the advance reaches raft
//! is shown in the raft loop's own tests, with a fixed election timeout.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

/// The lines of `log` whose message is `message`, parsed.
fn lines_with(log: &Path, message: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|line| line["msg"] == message)
        .collect()
}

/// The one line of `log` with `message`, waited for (the advance of a
/// larger cluster waits for the peers' streams).
fn line_with(log: &Path, message: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(line) = lines_with(log, message).pop() {
            return line;
        }
        assert!(Instant::now() < deadline, "no {message:?} in {}", log.display());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Fields of a fast-forward line, with the member id left out.
fn forward_fields(line: &serde_json::Value) -> Vec<serde_json::Value> {
    [
        "forward-ticks",
        "forward-duration",
        "election-ticks",
        "election-timeout",
    ]
    .iter()
    .map(|field| line[*field].clone())
    .collect()
}

#[test]
fn a_single_member_fast_forwards_as_etcd_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut seen = Vec::new();
    for (name, binary, base) in [
        ("etcd", common::etcd_tool("ETCD_BIN", "etcd"), 22079),
        ("kv-server", common::kv_server(), 22179),
    ] {
        let started = Instant::now();
        let cluster = common::Cluster::start_members(&binary, &dir.path().join(name), base, 1, &[]);
        let to_leader = started.elapsed();
        let line = line_with(
            &cluster.log_path(0),
            "started as single-node; fast-forwarding election ticks",
        );
        assert_eq!(line["level"], "info", "{name}: {line}");
        assert!(line["local-member-id"].is_string(), "{name}: {line}");
        // Health needs a leader. A bound on the start only: the advance's
        // effect on raft is shown by the raft loop's test
        // (`the_tick_advance_makes_a_single_member_lead_at_once`), where
        // the election timeout can be fixed.
        assert!(to_leader < Duration::from_secs(5), "{name}: leader after {to_leader:?}");
        seen.push((name, forward_fields(&line)));
    }
    assert_eq!(seen[0].1, seen[1].1, "{seen:?}");
    assert_eq!(seen[0].1[0], 9, "{seen:?}");
    assert_eq!(seen[0].1[1], "900ms", "{seen:?}");
}

#[test]
fn a_cluster_fast_forwards_once_its_peers_are_up_or_skips_when_told() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, binary, base) in [
        ("etcd", common::etcd_tool("ETCD_BIN", "etcd"), 22279),
        ("kv-server", common::kv_server(), 22479),
    ] {
        let cluster = common::Cluster::start(&binary, &dir.path().join(name), base, &[]);
        for i in 0..3 {
            let log = cluster.log_path(i);
            let started = line_with(&log, "starting initial election tick advance");
            assert_eq!(started["election-ticks"], 10, "{name} {i}: {started}");
            let line = line_with(&log, "initialized peer connections; fast-forwarding election ticks");
            assert_eq!(
                forward_fields(&line),
                [
                    serde_json::json!(8),
                    serde_json::json!("800ms"),
                    serde_json::json!(10),
                    serde_json::json!("1s")
                ],
                "{name} {i}: {line}"
            );
            assert_eq!(line["active-remote-members"], 2, "{name} {i}: {line}");
        }
        drop(cluster);
        let skipped = common::Cluster::start(
            &binary,
            &dir.path().join(format!("{name}-skipped")),
            base + 50,
            &["--initial-election-tick-advance=false"],
        );
        for i in 0..3 {
            let log = skipped.log_path(i);
            let line = line_with(&log, "skipping initial election tick advance");
            assert_eq!(line["election-ticks"], 10, "{name} {i}: {line}");
            assert!(
                lines_with(&log, "initialized peer connections; fast-forwarding election ticks").is_empty(),
                "{name} {i}: advanced although told not to"
            );
        }
    }
}
