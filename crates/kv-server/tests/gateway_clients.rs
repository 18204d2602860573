//! Goal: the real clients that speak only etcd's gRPC-JSON gateway work
//! against kv-server as against etcd 3.5.17: Patroni's own etcd3 DCS code
//! (its HA key flows: initialize, members, the leader race under a lease,
//! leader update, expiry and delete, config, history, failover and sync
//! keys, and its watch-fed cache), with and without etcd auth, and
//! OpenStack's etcd3gw (keys, prefixes, leases with keys, its lock,
//! watches of a key and a prefix).
//!
//! Method: `tests/clients/setup.sh` installs the pinned clients from PyPI
//! into a virtualenv under the target directory (once; later runs reuse
//! it). A real etcd 3-member cluster and a kv-server 3-member cluster run
//! side by side on loopback; each client program drives its flows against
//! each cluster in turn, must pass its own checks of etcd's semantics,
//! and must print the same transcript on both (values, booleans, names:
//! nothing that differs between two correct clusters).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Each program stops itself after 55 s; this bounds it from outside.
const RUN_WITHIN: Duration = Duration::from_secs(90);
/// pip's install of the clients, the first time, from PyPI.
const SETUP_WITHIN: Duration = Duration::from_secs(600);

fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients")
}

/// The virtualenv's python, with the clients installed.
fn python() -> PathBuf {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("gateway-clients-venv");
    let output = common::run_within(
        &clients_dir().join("setup.sh"),
        &[venv.to_str().expect("a UTF-8 path")],
        SETUP_WITHIN,
    );
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "setup.sh failed: {}\n{stdout}{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    PathBuf::from(stdout.lines().last().expect("setup.sh prints the python").trim())
}

/// Runs client program `script` with `args`: its transcript, after
/// requiring that it passed.
fn run(python: &Path, cluster: &str, script: &str, args: &[&str]) -> String {
    let mut all = vec![clients_dir().join(script).to_str().expect("a UTF-8 path").to_string()];
    all.extend(args.iter().map(|arg| arg.to_string()));
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    let output = common::run_within(python, &all, RUN_WITHIN);
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "{script} against {cluster}: {}\n{stdout}{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[test]
fn patroni_and_etcd3gw_work_as_against_etcd() {
    let python = python();
    assert!(Command::new(&python)
        .arg("--version")
        .status()
        .expect("python")
        .success());
    let etcd_dir = tempfile::tempdir().expect("tempdir");
    let kv_dir = tempfile::tempdir().expect("tempdir");
    let etcd = common::Cluster::start_members(&common::etcd_tool("ETCD_BIN", "etcd"), etcd_dir.path(), 16379, 3, &[]);
    let kv_server = common::Cluster::start_members(&common::kv_server(), kv_dir.path(), 16479, 3, &[]);

    let mut transcripts = Vec::new();
    for (name, cluster) in [("etcd", &etcd), ("kv-server", &kv_server)] {
        let endpoints = cluster.endpoints();
        let first = endpoints.split(',').next().expect("a member").to_string();
        // One after the other: etcd3gw's prefix watch covers far more than
        // its prefix, so the flows must not overlap.
        let transcript = [
            run(&python, name, "patroni_flows.py", &["--endpoints", &endpoints]),
            run(&python, name, "etcd3gw_flows.py", &["--endpoint", &first]),
            run(
                &python,
                name,
                "patroni_flows.py",
                &["--endpoints", &endpoints, "--auth", "--scope", "authrun"],
            ),
        ];
        assert!(
            transcript.iter().all(|lines| lines.lines().count() >= 28),
            "{name}: {transcript:?}"
        );
        transcripts.push(transcript);
    }
    for (etcd, kv_server) in transcripts[0].iter().zip(&transcripts[1]) {
        assert_eq!(kv_server, etcd);
    }
}
