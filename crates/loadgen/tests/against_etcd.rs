//! Goal: loadgen writes exactly the keys etcd's own benchmark tool writes
//! for the same flags, a run in which requests fail counts the errors by
//! message and finishes, and sweep scrapes etcd's `/metrics` from a URL
//! given in full.
//!
//! Method: real etcd v3.5.17 single-member servers on loopback (from
//! `$ETCD_BIN`, or the cache `tools/etcd-peers/build.sh` fills, as the
//! server's tests find them). etcd's benchmark tool puts into one server
//! and loadgen, with the same flags, into another; both servers must then
//! hold the same set of keys. The flags make sequential key numbers wrap
//! around the key space, where etcd's reused key buffer shows.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn tool(variable: &str, name: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(variable) {
        return PathBuf::from(path);
    }
    let cached = PathBuf::from(std::env::var("HOME").unwrap_or_default())
        .join(".cache/etcd-peers")
        .join(name);
    assert!(
        cached.exists(),
        "{name} not found: set {variable} or run tools/etcd-peers/build.sh"
    );
    cached
}

struct Etcd {
    child: Child,
    port: u16,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn healthy(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream
        .write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response.contains("\"health\":\"true\"")
}

/// A single-member etcd with clients on `port` and its peer on `port + 1`.
fn etcd(dir: &Path, port: u16) -> Etcd {
    let client = format!("http://127.0.0.1:{port}");
    let peer = format!("http://127.0.0.1:{}", port + 1);
    let child = Command::new(tool("ETCD_BIN", "etcd"))
        .args(["--name", "one", "--data-dir"])
        .arg(dir.join(format!("etcd-{port}")))
        .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
        .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
        .args(["--initial-cluster", &format!("one={peer}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start etcd");
    let etcd = Etcd { child, port };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !healthy(port) {
        assert!(Instant::now() < deadline, "etcd on {port} did not become healthy");
        std::thread::sleep(Duration::from_millis(100));
    }
    etcd
}

/// Every key the server holds, hex-encoded, in order.
fn keys(etcd: &Etcd) -> Vec<String> {
    let output = Command::new(tool("ETCDCTL_BIN", "etcdctl"))
        .args(["--endpoints", &format!("127.0.0.1:{}", etcd.port)])
        .args(["get", "", "--from-key", "--keys-only", "-w", "json"])
        .output()
        .expect("run etcdctl");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
    json["kvs"]
        .as_array()
        .map(|kvs| {
            kvs.iter()
                .map(|kv| kv["key"].as_str().expect("base64 key").to_string())
                .collect()
        })
        .unwrap_or_default()
}

const PUT_FLAGS: [&str; 12] = [
    "--sequential-keys",
    "--key-space-size",
    "200",
    "--total",
    "300",
    "--key-size",
    "8",
    "--val-size",
    "16",
    "--clients",
    "4",
    "--conns=2",
];

#[test]
fn keys_match_etcds_benchmark_tool() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (theirs, ours) = (etcd(dir.path(), 12379), etcd(dir.path(), 12479));
    let status = Command::new(tool("ETCD_BENCHMARK_BIN", "etcd-benchmark"))
        .args(["--endpoints", "127.0.0.1:12379", "put"])
        .args(PUT_FLAGS)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run etcd's benchmark tool");
    assert!(status.success());
    let output = Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .args(["put", "--endpoints", "127.0.0.1:12479"])
        .args(PUT_FLAGS)
        .output()
        .expect("run loadgen");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("Requests/sec:"), "{stdout}");
    let (expected, got) = (keys(&theirs), keys(&ours));
    // 200 numbers, and the second pass's 100 differ from the first's
    // where bytes of longer varints remain in the buffer.
    assert!(expected.len() > 200, "{}", expected.len());
    assert_eq!(got, expected);
}

#[test]
fn errors_are_counted_and_the_run_finishes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = etcd(dir.path(), 12579);
    let json = dir.path().join("run.json");
    // Half the connections go to a port where nothing listens. Requests on
    // it fail at once, so without pacing that client could take every
    // request before the other's first answer; 100 requests/s (the shared
    // limiter hands out slots in turn) gives the healthy client its share.
    let output = Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .args([
            "put",
            "--total",
            "40",
            "--clients",
            "2",
            "--conns",
            "2",
            "--rate",
            "100",
        ])
        .args(["--endpoints", &format!("127.0.0.1:{},127.0.0.1:1", server.port)])
        .arg("--json")
        .arg(&json)
        .output()
        .expect("run loadgen");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("Error distribution:"), "{stdout}");
    let run: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("parse");
    let report = &run["report"];
    let errors: u64 = report["errors"]
        .as_object()
        .expect("errors by message")
        .values()
        .map(|v| v.as_u64().expect("count"))
        .sum();
    let successes = report["successes"].as_u64().expect("successes");
    assert!(successes > 0 && errors > 0, "{report}");
    assert_eq!(successes + errors, 40);
    assert_eq!(report["requests"].as_u64(), Some(40));
    assert!(
        report["errors"]
            .as_object()
            .unwrap()
            .keys()
            .all(|message| message.starts_with("rpc error: code = Unavailable")),
        "{report}"
    );
}

// Goal: sweep scrapes a metrics URL given in full
// (`http://host:port/metrics`) and puts the member's WAL fsync p99
// beside its row.
#[test]
fn sweep_scrapes_a_full_metrics_url() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = etcd(dir.path(), 12679);
    let json = dir.path().join("sweep.json");
    let output = Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .args(["sweep", "--val-sizes=16", "--total=20", "--clients=2", "--conns=1"])
        .args(["--endpoints", &format!("127.0.0.1:{}", server.port)])
        .args(["--metrics-urls", &format!("http://127.0.0.1:{}/metrics", server.port)])
        .arg("--json")
        .arg(&json)
        .output()
        .expect("run loadgen");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let rows: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("parse");
    let row = &rows[0];
    assert_eq!(row["errors"].as_u64(), Some(0), "{rows}");
    assert!(
        row["wal_fsync_p99_ms"].as_f64().is_some_and(|ms| ms > 0.0),
        "no WAL fsync p99 from etcd's /metrics: {rows}"
    );
}
