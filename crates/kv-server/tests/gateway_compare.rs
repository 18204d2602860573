//! Goal: kv-server's gRPC-JSON gateway answers as etcd 3.5.17's does, rule
//! for rule: every HTTP rule of etcd's protos (KV, Watch, Lease, Cluster,
//! Maintenance, Auth, Lock, Election and the `/v3/kv/lease/*` aliases),
//! their successes and etcd's errors, in snake_case and lowerCamelCase,
//! numbers as strings and as numbers, enums by name and by number; bad
//! JSON, bad base64, unknown paths and methods, `/v3beta/`, CORS, the size
//! limit; the streams (watch with several requests on one stream,
//! keep-alive, snapshot, observe); auth tokens; lock and campaign waiters.
//!
//! Method: `scripts/gateway-compare.py` sends one scripted sequence of
//! 469 HTTP requests to a fresh real etcd 3-member cluster and to a fresh
//! kv-server 3-member cluster (both with `--max-request-bytes 1048576`),
//! each side also starting a fourth member of its own kind as a learner to
//! promote, and compares status, headers and bodies after normalizing only
//! what differs between any two clusters (ids, tokens, hashes, sizes,
//! versions; the script's comments give each reason). It must report no
//! difference.

mod common;

use std::path::Path;
use std::time::Duration;

/// The comparison takes about 20 s a side.
const RUN_WITHIN: Duration = Duration::from_secs(300);

/// How the script starts a learner of `binary` joining a cluster.
fn learner_command(binary: &Path) -> String {
    format!(
        "{} --name {{name}} --data-dir {{data_dir}} --listen-client-urls {{client_url}} \
         --advertise-client-urls {{client_url}} --listen-peer-urls {{peer_url}} \
         --initial-advertise-peer-urls {{peer_url}} --initial-cluster {{initial_cluster}} \
         --initial-cluster-state existing --max-request-bytes 1048576 --log-level warn",
        binary.display()
    )
}

#[test]
fn the_gateway_answers_as_etcds_does() {
    let etcd_binary = common::etcd_tool("ETCD_BIN", "etcd");
    let kv_binary = common::kv_server();
    let flags = ["--max-request-bytes", "1048576"];
    let etcd_dir = tempfile::tempdir().expect("tempdir");
    let kv_dir = tempfile::tempdir().expect("tempdir");
    let etcd = common::Cluster::start_members(&etcd_binary, etcd_dir.path(), 16779, 3, &flags);
    let kv_server = common::Cluster::start_members(&kv_binary, kv_dir.path(), 16879, 3, &flags);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/gateway-compare.py");
    let out = kv_dir.path().join("transcripts");
    let (learner_a, learner_b) = (learner_command(&etcd_binary), learner_command(&kv_binary));
    let output = common::run_within(
        Path::new("python3"),
        &[
            script.to_str().expect("a UTF-8 path"),
            &etcd.members[0].endpoint(),
            &kv_server.members[0].endpoint(),
            "--quiet",
            "--out",
            out.to_str().expect("a UTF-8 path"),
            "--learner-cmd-a",
            &learner_a,
            "--learner-cmd-b",
            &learner_b,
        ],
        RUN_WITHIN,
    );
    let report = common::text(&output);
    assert!(output.status.success(), "{}\n{report}", output.status);
    assert!(report.contains("differences=0"), "{report}");
    let requests: usize = report
        .lines()
        .find_map(|line| line.strip_prefix("requests="))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("a summary line");
    assert!(requests >= 400, "the whole sequence ran: {report}");
}
