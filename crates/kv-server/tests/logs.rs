//! Goal: a member logs as etcd 3.5.17 does, for the pipelines and alerts
//! that parse etcd's logs: every line one JSON object with `level`, `ts`,
//! `caller` and `msg`; the lines operators alert on, with etcd's message
//! and fields ("apply request took too long" with `took` and
//! `expected-duration` once `--experimental-warning-apply-duration` is
//! passed; "slow fdatasync" for a stalled WAL sync); and
//! `--log-outputs=FILE` writing there.
//!
//! Method: a single member of real etcd and of kv-server, each with
//! `--log-outputs` naming a file and the apply warning at 1ns; etcdctl
//! puts, compacts and defragments; each file is read line by line. The
//! stalled sync is kv-server's WAL failpoint sleeping 1.1 s (builds with
//! the `failpoints` feature, as the test command makes).

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

/// Every line of `file`, parsed; fails on a line that is not a JSON
/// object with etcd's four keys.
fn lines(file: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .map(|line| {
            let value: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            for key in ["level", "ts", "caller", "msg"] {
                assert!(value.get(key).is_some_and(|v| v.is_string()), "no {key}: {line}");
            }
            value
        })
        .collect()
}

/// The first line of `file` whose message is `message`, waited for.
fn line_with(file: &Path, message: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(line) = lines(file).into_iter().find(|line| line["msg"] == message) {
            return line;
        }
        assert!(Instant::now() < deadline, "no {message:?} in {}", file.display());
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn lines_are_etcds_json_and_say_what_etcd_says() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, binary, base) in [
        ("etcd", common::etcd_tool("ETCD_BIN", "etcd"), 18479),
        ("kv-server", common::kv_server(), 18579),
    ] {
        let log = dir.path().join(format!("{name}.log"));
        let outputs = format!("--log-outputs={}", log.display());
        let flags = [outputs.as_str(), "--experimental-warning-apply-duration=1ns"];
        let cluster = common::Cluster::start_members(&binary, &dir.path().join(name), base, 1, &flags);
        let endpoint = cluster.members[0].endpoint();
        for args in [&["put", "logged", "v"][..], &["compaction", "1"], &["defrag"]] {
            let output = common::etcdctl(&endpoint, args);
            assert!(output.status.success(), "{name} {args:?}: {}", common::text(&output));
        }
        let slow = line_with(&log, "apply request took too long");
        assert_eq!(slow["level"], "warn", "{name}: {slow}");
        assert_eq!(slow["expected-duration"], "1ns", "{name}: {slow}");
        assert!(
            slow["took"].as_str().is_some_and(|took| took.ends_with('s')),
            "{name}: {slow}"
        );
        for message in [
            "ready to serve client requests",
            "serving client traffic insecurely; this is strongly discouraged!",
            "finished scheduled compaction",
            "finished defragmenting directory",
        ] {
            line_with(&log, message);
        }
        let compacted = line_with(&log, "finished scheduled compaction");
        assert_eq!(compacted["compact-revision"], 1, "{name}: {compacted}");
        assert!(lines(&log).len() > 5, "{name}: the whole log went to the file");
    }
}

#[cfg(feature = "failpoints")]
#[test]
fn a_stalled_fdatasync_is_logged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("kv-server.log");
    let outputs = format!("--log-outputs={}", log.display());
    let mut cluster = common::Cluster::new(&common::kv_server(), &dir.path().join("data"), 18679, 1, &[&outputs]);
    cluster.members[0].env = vec![("FAILPOINTS".into(), "wal::fdatasync=20*off->1*sleep(1100)->off".into())];
    cluster.start_all();
    for i in 0..30 {
        let put = common::etcdctl(&cluster.members[0].endpoint(), &["put", &format!("k{i}"), "v"]);
        assert!(put.status.success(), "{}", common::text(&put));
    }
    let slow = line_with(&log, "slow fdatasync");
    assert_eq!(slow["level"], "warn");
    assert_eq!(slow["expected-duration"], "1s");
    assert!(
        slow["took"].as_str().is_some_and(|took| took.starts_with('1')),
        "{slow}"
    );
}
