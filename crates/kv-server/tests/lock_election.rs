//! Goal: etcd's server-side Lock (`v3lockpb`: Lock, Unlock) and Election
//! (`v3electionpb`: Campaign, Proclaim, Leader, Observe, Resign) services
//! behave on kv-server as on etcd 3.5.17, as etcd's own tests
//! (`tests/integration/v3lock_grpc_test.go`, `v3election_grpc_test.go`,
//! `v3_election_test.go`, the concurrency recipes' mutex tests) expect:
//! lock keys `name/<lease hex>` queued by create revision, waiters woken by
//! Unlock, lease revoke and lease expiry; Campaign, Leader, Proclaim,
//! Resign and Observe (every proclamation in order, across a change of
//! leader); and each error's gRPC code and message exactly as etcd gives
//! them (most are `Unknown`, e.g. "etcdserver: requested lease not found",
//! "election: no leader", "election: not leader").
//!
//! Method: `tests/go/concurrency` is a small Go program using etcd's
//! generated gRPC clients for the two services (and its client for leases
//! and keys). It is built with `go build` and run against a real etcd
//! 3-member cluster and a kv-server 3-member cluster, each its own
//! processes on loopback, spreading holders, waiters and observers over
//! the members. It must succeed on both and print the same transcript,
//! which names leases and revisions only by relation so it is the same on
//! every run.

mod common;

use std::time::Duration;

/// The program bounds itself at 60 s; this bounds the process from
/// outside in case it hangs before its own timer starts.
const RUN_WITHIN: Duration = Duration::from_secs(90);
/// Steps the program prints when it gets to the end.
const STEPS: usize = 140;

#[test]
fn lock_and_election_work_as_against_etcd() {
    let program = common::go_program("concurrency");
    let etcd_dir = tempfile::tempdir().expect("tempdir");
    let kv_dir = tempfile::tempdir().expect("tempdir");
    let etcd = common::Cluster::start_members(&common::etcd_tool("ETCD_BIN", "etcd"), etcd_dir.path(), 16379, 3, &[]);
    let kv_server = common::Cluster::start_members(&common::kv_server(), kv_dir.path(), 16479, 3, &[]);

    let mut transcripts = Vec::new();
    for (name, endpoints) in [("etcd", etcd.endpoints()), ("kv-server", kv_server.endpoints())] {
        let output = common::run_within(&program, &["-endpoints", &endpoints], RUN_WITHIN);
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
