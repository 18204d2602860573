//! Goal: auto-compaction as Milvus, Mimir and etcd-druid set it, behaving
//! as etcd 3.5.17's does:
//! - `ETCD_AUTO_COMPACTION_MODE=periodic` and
//!   `ETCD_AUTO_COMPACTION_RETENTION=5s`: an overwritten revision reads
//!   "required revision has been compacted" as soon as on etcd (etcd's
//!   schedule gives 5–11 s), and again after the leader is killed: the
//!   new leader takes compaction over;
//! - revision mode keeps exactly the last N revisions (its five-minute
//!   check shortened to 1 s by `KV_SERVER_REVISION_COMPACTION_INTERVAL`,
//!   so kv-server alone);
//! - a bad retention is refused at start with etcd's message, the data
//!   directory untouched.
//!
//! Method: 3-member clusters of real processes, real etcdctl.

mod common;

use std::time::{Duration, Instant};

/// How long an old revision may stay readable: etcd's schedule gives at
/// most two periods and a sample interval (5 + 5 + 0.5 s); the rest is
/// an election, when the leader was killed, and a loaded machine.
const COMPACTED_WITHIN: Duration = Duration::from_secs(25);

const COMPACTED: &str = "required revision has been compacted";

/// Puts `key` twice through `endpoint`; the revision of the first put,
/// which the second makes obsolete.
fn overwritten_revision(endpoint: &str, key: &str) -> i64 {
    let first = common::etcdctl(endpoint, &["put", key, "1", "-w", "json"]);
    assert!(first.status.success(), "{}", common::text(&first));
    let answer: serde_json::Value = serde_json::from_slice(&first.stdout).expect("json");
    let revision = answer["header"]["revision"].as_i64().expect("revision");
    let second = common::etcdctl(endpoint, &["put", key, "2"]);
    assert!(second.status.success(), "{}", common::text(&second));
    revision
}

/// How long until `key` at `revision` reads as compacted.
fn time_to_compaction(endpoint: &str, key: &str, revision: i64) -> Duration {
    let started = Instant::now();
    loop {
        let read = common::etcdctl(endpoint, &["get", key, "--rev", &revision.to_string()]);
        if common::text(&read).contains(COMPACTED) {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < COMPACTED_WITHIN,
            "revision {revision} still readable after {COMPACTED_WITHIN:?}: {}",
            common::text(&read)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn periodic_compaction_follows_etcds_schedule_and_the_leader() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut times = Vec::new();
    for (name, binary, base) in [
        ("etcd", common::etcd_tool("ETCD_BIN", "etcd"), 17779),
        ("kv-server", common::kv_server(), 17879),
    ] {
        let mut cluster = common::Cluster::new(&binary, &dir.path().join(name), base, 3, &[]);
        for member in &mut cluster.members {
            member.env = vec![
                ("ETCD_AUTO_COMPACTION_MODE".into(), "periodic".into()),
                ("ETCD_AUTO_COMPACTION_RETENTION".into(), "5s".into()),
            ];
        }
        cluster.start_all();
        let endpoints = cluster.endpoints();
        let revision = overwritten_revision(&endpoints, "auto/k");
        let first = time_to_compaction(&endpoints, "auto/k", revision);
        let killed = common::leader_index(&cluster);
        cluster.kill(killed);
        let alive: Vec<usize> = (0..3).filter(|&i| i != killed).collect();
        // Writes wait for the survivors' election, as a client would.
        cluster.wait_healthy(&alive);
        let survivors: Vec<String> = alive.iter().map(|&i| cluster.members[i].endpoint()).collect();
        let survivors = survivors.join(",");
        let revision = overwritten_revision(&survivors, "auto/after");
        let after = time_to_compaction(&survivors, "auto/after", revision);
        eprintln!("{name}: compacted after {first:?}, and after {after:?} under a new leader");
        times.push(first);
    }
    // As soon as on etcd: within one period and a sample interval more.
    assert!(
        times[1] <= times[0] + Duration::from_millis(5500),
        "kv-server took {:?}, etcd {:?}",
        times[1],
        times[0]
    );
}

#[test]
fn revision_compaction_keeps_exactly_the_last_n() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cluster = common::Cluster::new(
        &common::kv_server(),
        dir.path(),
        17979,
        3,
        &["--auto-compaction-mode", "revision", "--auto-compaction-retention", "5"],
    );
    for member in &mut cluster.members {
        member.env = vec![("KV_SERVER_REVISION_COMPACTION_INTERVAL".into(), "1s".into())];
    }
    cluster.start_all();
    let endpoint = cluster.members[0].endpoint();
    for i in 0..20 {
        let put = common::etcdctl(&endpoint, &["put", "rev/k", &i.to_string()]);
        assert!(put.status.success(), "{}", common::text(&put));
    }
    let status = common::endpoint_status(&endpoint);
    let current = status[0]["header"]["revision"].as_i64().expect("revision");
    // Kept: current - 5 and later; compacted: everything before.
    let oldest_kept = current - 5;
    time_to_compaction(&endpoint, "rev/k", oldest_kept - 1);
    let kept = common::etcdctl(&endpoint, &["get", "rev/k", "--rev", &oldest_kept.to_string()]);
    assert!(
        kept.status.success(),
        "revision {oldest_kept} is kept: {}",
        common::text(&kept)
    );
}

#[test]
fn a_bad_retention_is_refused_at_start_with_etcds_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let output = std::process::Command::new(common::kv_server())
        .args(["--data-dir", data.to_str().expect("a UTF-8 path")])
        .args(["--auto-compaction-retention", "abc"])
        .output()
        .expect("run kv-server");
    let said = common::text(&output);
    assert!(!output.status.success(), "{said}");
    assert!(
        said.contains("error parsing CompactionRetention: time: invalid duration \"abc\""),
        "{said}"
    );
    assert!(!data.exists(), "the data directory was not made");
}
