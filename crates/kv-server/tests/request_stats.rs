//! Goal: `--warning-unary-request-duration` logs each unary call slower
//! than it with etcd's "request stats" line: the same fields, counts,
//! sizes and request content (a put's value left out) as etcd 3.7.3
//! writes for the same calls.
//!
//! Method: one member of kv-server and one of etcd 3.7.3 side by side,
//! each with `--warning-unary-request-duration=1ns` so that every unary
//! call is slow. etcdctl runs a txn, puts, gets a prefix, deletes, and
//! asks for the member list; each member's log must then hold one line
//! per call with etcd's field names, and for the KV calls the same
//! counts, sizes and content as etcd's line.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

/// The calls, as etcdctl arguments, and the method each logs as.
const CALLS: &[(&[&str], &str)] = &[
    (&["put", "stats/a", "value-1"], "/etcdserverpb.KV/Put"),
    (&[], "/etcdserverpb.KV/Txn"),
    (&["get", "stats/", "--prefix", "--limit=5"], "/etcdserverpb.KV/Range"),
    (&["del", "stats/a"], "/etcdserverpb.KV/DeleteRange"),
    (&["member", "list"], "/etcdserverpb.Cluster/MemberList"),
];

/// The fields of etcd's line that both must write alike (start time,
/// time spent and remote differ by nature; the content is compared by
/// its words).
const COMPARED: &[&str] = &[
    "level",
    "msg",
    "response type",
    "request count",
    "request size",
    "response count",
    "response size",
];

/// The "request stats" lines of `log`, by response type.
fn stats_lines(log: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|line| line["msg"] == "request stats")
        .collect()
}

/// A txn through etcdctl's interactive form: compare, success, failure.
fn txn(endpoint: &str) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new(common::etcd_tool("ETCDCTL_BIN", "etcdctl"))
        .env_remove("ETCDCTL_BIN")
        .args(["--endpoints", endpoint, "txn"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run etcdctl txn");
    // Two compares and no failure ops: etcd writes every list, even empty.
    let script = "mod(\"stats/b\") > \"0\"\nversion(\"stats/b\") = \"1\"\n\nput stats/c value-3\nget stats/b\n\n\n";
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(script.as_bytes())
        .expect("write the txn");
    let output = child.wait_with_output().expect("etcdctl txn");
    assert!(output.status.success(), "txn: {}", common::text(&output));
}

fn run_calls(binary: &Path, dir: &Path, base: u16) -> Vec<serde_json::Value> {
    let cluster = common::Cluster::start_members(binary, dir, base, 1, &["--warning-unary-request-duration=1ns"]);
    let endpoint = cluster.members[0].endpoint();
    let put = common::etcdctl(&endpoint, &["put", "stats/b", "x"]);
    assert!(put.status.success(), "{}", common::text(&put));
    txn(&endpoint);
    for (args, _) in CALLS.iter().filter(|(args, _)| !args.is_empty()) {
        let output = common::etcdctl(&endpoint, args);
        assert!(output.status.success(), "{args:?}: {}", common::text(&output));
    }
    let log = cluster.log_path(0);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let lines = stats_lines(&log);
        let logged = |method: &str| lines.iter().any(|line| line["response type"] == method);
        if CALLS.iter().all(|(_, method)| logged(method)) || Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn slow_calls_are_logged_as_etcd_logs_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let etcd = common::etcd_tool("ETCD37_BIN", "etcd-3.7.3");
    // The same ports, one after the other: the responses' headers carry
    // member and cluster ids made from the peer URLs, whose varints'
    // lengths are part of the response sizes compared.
    let ours = run_calls(&common::kv_server(), &dir.path().join("kv"), 25979);
    let theirs = run_calls(&etcd, &dir.path().join("etcd"), 25979);
    for (args, method) in CALLS {
        let pick = |lines: &[serde_json::Value]| {
            lines
                .iter()
                .rev()
                .find(|line| line["response type"] == *method)
                .cloned()
                .unwrap_or_else(|| panic!("no request stats line for {method} ({args:?}) in {lines:#?}"))
        };
        let (our, their) = (pick(&ours), pick(&theirs));
        eprintln!("{method}:\n  kv-server {our}\n  etcd      {their}");
        for key in ["start time", "time spent", "remote"] {
            assert!(our.get(key).is_some(), "{method}: no {key:?} in {our}");
        }
        // The client's own address, as etcd logs it, not a placeholder.
        let remote = our["remote"].as_str().unwrap_or_default();
        assert!(remote.starts_with("127.0.0.1:"), "{method}: remote {remote:?}");
        for key in COMPARED {
            assert_eq!(our[key], their[key], "{method}: {key:?}");
        }
        // etcd 3.7's text form of a message spaces its fields by one or
        // two blanks at random (protobuf-go does so on purpose, so that
        // nothing relies on it), so the content is compared word by word.
        let words = |line: &serde_json::Value| {
            let content = line["request content"].as_str().unwrap_or_default().to_string();
            content.split_whitespace().collect::<Vec<_>>().join(" ")
        };
        assert_eq!(words(&our), words(&their), "{method}: request content");
    }
}
