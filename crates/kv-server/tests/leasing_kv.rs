//! Goal: etcd's leasing KV (`go.etcd.io/etcd/client/v3/leasing`, etcd
//! 3.5.17's Go client) works against kv-server as against etcd. It wraps
//! every write in a txn guarded by its leasing keys, so users' txns reach
//! the server nested two and three levels deep, with one key put in both
//! branches of the innermost txn.
//!
//! Method: `tests/go/leasing` is a small Go program using etcd's client:
//! two leasing clients put, get (cached and after the other's write),
//! commit txns of both shapes taking either branch, and delete single keys
//! and prefixes, checking what each step sees. It is built with `go build`
//! and run against a real etcd single member and a kv-server single
//! member, each its own process on loopback. It must succeed on both and
//! print the same transcript.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The program bounds itself at 60 s; this bounds the process from
/// outside in case it hangs before its own timer starts.
const RUN_WITHIN: Duration = Duration::from_secs(90);
/// Steps the program prints when it gets to the end.
const STEPS: usize = 18;

fn build_program() -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/go/leasing");
    let binary = Path::new(env!("CARGO_TARGET_TMPDIR")).join("leasing-check");
    let status = Command::new("go")
        .args(["build", "-o"])
        .arg(&binary)
        .arg(".")
        .current_dir(&source)
        .env("GOFLAGS", "-mod=mod")
        .status()
        .expect("go is needed to build the leasing client (CI installs it to build etcd's tools)");
    assert!(status.success(), "go build in {} failed", source.display());
    binary
}

fn run(program: &Path, endpoint: &str) -> Output {
    let mut child = Command::new(program)
        .args(["-endpoint", endpoint])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the leasing client");
    let deadline = Instant::now() + RUN_WITHIN;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() >= deadline {
            child.kill().expect("kill");
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

#[test]
fn leasing_kv_works_as_against_etcd() {
    let program = build_program();
    let etcd_dir = tempfile::tempdir().expect("tempdir");
    let kv_dir = tempfile::tempdir().expect("tempdir");
    let etcd = common::Cluster::start_members(&common::etcd_tool("ETCD_BIN", "etcd"), etcd_dir.path(), 16379, 1, &[]);
    let kv_server = common::Cluster::start_members(&common::kv_server(), kv_dir.path(), 16479, 1, &[]);

    let mut transcripts = Vec::new();
    for (name, endpoint) in [
        ("etcd", etcd.members[0].endpoint()),
        ("kv-server", kv_server.members[0].endpoint()),
    ] {
        let output = run(&program, &endpoint);
        let stdout = String::from_utf8_lossy(&output.stdout).to_string();
        assert!(
            output.status.success(),
            "{name}: {}\n{stdout}{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        assert_eq!(stdout.lines().count(), STEPS, "{name}: {stdout}");
        transcripts.push(stdout);
    }
    assert_eq!(transcripts[1], transcripts[0]);
}
