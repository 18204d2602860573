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

use std::time::Duration;

/// The program bounds itself at 60 s; this bounds the process from
/// outside in case it hangs before its own timer starts.
const RUN_WITHIN: Duration = Duration::from_secs(90);
/// Steps the program prints when it gets to the end.
const STEPS: usize = 18;

#[test]
fn leasing_kv_works_as_against_etcd() {
    let program = common::go_program("leasing");
    let etcd_dir = tempfile::tempdir().expect("tempdir");
    let kv_dir = tempfile::tempdir().expect("tempdir");
    let etcd = common::Cluster::start_members(&common::etcd_tool("ETCD_BIN", "etcd"), etcd_dir.path(), 16379, 1, &[]);
    let kv_server = common::Cluster::start_members(&common::kv_server(), kv_dir.path(), 16479, 1, &[]);

    let mut transcripts = Vec::new();
    for (name, endpoint) in [
        ("etcd", etcd.members[0].endpoint()),
        ("kv-server", kv_server.members[0].endpoint()),
    ] {
        let output = common::run_within(&program, &["-endpoint", &endpoint], RUN_WITHIN);
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
