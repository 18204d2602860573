//! Goal: TLS on client and peer URLs with certificate auth on both, as
//! etcd serves it: a client with a certificate from the trusted CA puts
//! and gets; a client without a certificate, or with one from another CA,
//! is refused and writes nothing; `/health` and `/version` answer on the
//! same TLS listener; and etcd's benchmark tool puts 2000 keys over TLS
//! with no errors.
//!
//! Method: certificates made here (rcgen). The same walk-through runs
//! against a real etcd 3.5.17 cluster and a kv-server cluster, each three
//! member processes on loopback with `https://` client and peer URLs,
//! `--client-cert-auth` and `--peer-client-cert-auth`, driven by real
//! etcdctl 3.5.17 and etcd's benchmark tool.
//!
//! Needs etcd, etcdctl and the benchmark tool: `ETCD_BIN`, `ETCDCTL_BIN`,
//! `ETCD_BENCHMARK_BIN`, or the cache that `tools/etcd-peers/build.sh`
//! fills.

mod common;

use std::path::Path;

use common::certs::{https_get, tls_accepts, Certs};

#[test]
fn tls_with_client_certificates_as_etcd() {
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = Certs::generate(&dir.path().join("certs"), &["root"]);
    let etcd = common::etcd_tool("ETCD_BIN", "etcd");
    walk_through(&etcd, &dir.path().join("etcd"), 31379, &certs);
    walk_through(&common::kv_server(), &dir.path().join("kv"), 31479, &certs);
}

use common::etcdctl_as as etcdctl;

fn walk_through(binary: &Path, dir: &Path, base: u16, certs: &Certs) {
    std::fs::create_dir_all(dir).expect("data dir");
    let cluster = common::Cluster::start_tls(binary, dir, base, certs, "root", &[]);
    let what = binary.display();
    let endpoint = cluster.members[1].endpoint();
    let root = certs.client_flags(certs.client("root"));
    let (ok, said) = etcdctl(&endpoint, &root, &["put", "tls/a", "over tls"]);
    assert!(ok && said.contains("OK"), "{what}: put with a certificate: {said}");
    let (ok, said) = etcdctl(&endpoint, &root, &["get", "tls/a", "--print-value-only"]);
    assert!(ok && said.lines().any(|l| l == "over tls"), "{what}: get: {said}");

    let no_certificate = vec![format!("--cacert={}", certs.ca.display())];
    let stranger = certs.client_flags(&certs.stranger);
    for (who, flags) in [("no certificate", &no_certificate), ("another CA", &stranger)] {
        let mut flags = flags.clone();
        flags.push("--dial-timeout=2s".into());
        flags.push("--command-timeout=3s".into());
        let (ok, said) = etcdctl(&endpoint, &flags, &["put", "tls/refused", who]);
        assert!(!ok, "{what}: a client with {who} was let in: {said}");
    }
    let (ok, said) = etcdctl(
        &endpoint,
        &root,
        &["get", "tls/refused", "--count-only", "-w", "fields"],
    );
    assert!(
        ok && said.contains("\"Count\" : 0"),
        "{what}: a refused client wrote: {said}"
    );

    let (ca, pair) = (&certs.ca, certs.client("root"));
    let port = cluster.members[1].client_port;
    let health = https_get(port, "/health", ca, pair);
    assert!(
        health.contains("\"health\":\"true\""),
        "{what}: /health over TLS: {health}"
    );
    let version = https_get(port, "/version", ca, pair);
    assert!(
        version.contains("\"etcdcluster\""),
        "{what}: /version over TLS: {version}"
    );
    let refused = https_get(port, "/health", ca, &certs.stranger);
    assert!(
        !refused.contains("200 OK"),
        "{what}: /health answered a certificate from another CA: {refused}"
    );
    let metrics = https_get(port, "/metrics", ca, pair);
    assert!(
        metrics.contains("etcd_server_has_leader 1"),
        "{what}: /metrics over TLS: {}",
        &metrics[..metrics.len().min(500)]
    );
    // The peer port takes a certificate of the cluster's CA and refuses
    // one from another CA.
    let peer_port = cluster.members[1].peer_port;
    let trusted = tls_accepts(peer_port, ca, pair);
    assert!(
        trusted.is_ok(),
        "{what}: the peer port refused a trusted certificate: {trusted:?}"
    );
    let stranger = tls_accepts(peer_port, ca, &certs.stranger);
    assert!(
        stranger.is_err(),
        "{what}: the peer port took a certificate from another CA"
    );

    let endpoints = format!("--endpoints={}", cluster.endpoints());
    let mut args: Vec<&str> = vec![&endpoints];
    args.extend(root.iter().map(String::as_str));
    args.extend([
        "--conns=10",
        "--clients=100",
        "put",
        "--key-size=8",
        "--sequential-keys",
        "--val-size=256",
        "--total=2000",
    ]);
    let report = common::etcd_benchmark(&args);
    assert!(
        !report.contains("Error distribution"),
        "{what}: the benchmark saw errors over TLS:\n{report}"
    );
    assert!(report.contains("Requests/sec"), "{what}: no report:\n{report}");
}
