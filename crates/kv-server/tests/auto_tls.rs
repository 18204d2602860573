//! Goal: `--auto-tls --peer-auto-tls` (Bitnami's chart, etcd-druid) serve
//! `https://` client and peer URLs with no certificate files given, as
//! etcd 3.5.17 does: the certificates are self-signed (`O=etcd`, the
//! listen hosts as names, server authentication), kept in
//! `<data-dir>/fixtures/{client,peer}/{cert,key}.pem`, and reused by the
//! next start; etcdctl works over TLS with `--insecure-skip-tls-verify`.
//!
//! Method: one member of real etcd and one of kv-server with the same
//! flags; etcdctl puts and gets over TLS; a Go TLS client (`tests/go/
//! tlspeek`, dialling as etcd's peers dial auto-TLS members) reads the
//! certificate each port presents; the member is killed and started
//! again, and the files compared.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a member may take to answer over TLS after it starts.
const SERVING_WITHIN: Duration = Duration::from_secs(30);

/// etcdctl against the member on `port` over TLS, without verifying its
/// self-signed certificate.
fn etcdctl(port: u16, args: &[&str]) -> (bool, String) {
    let flags = [
        "--insecure-skip-tls-verify".to_string(),
        "--insecure-transport=false".to_string(),
    ];
    common::etcdctl_as(&format!("https://127.0.0.1:{port}"), &flags, args)
}

fn start(binary: &Path, data: &Path, port: u16) -> common::Background {
    let client = format!("https://127.0.0.1:{port}");
    let peer = format!("https://127.0.0.1:{}", port + 1);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(data.with_extension("log"))
        .expect("log");
    let child = Command::new(binary)
        .arg("--data-dir")
        .arg(data)
        .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
        .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
        .args(["--initial-cluster", &format!("default={peer}")])
        .args(["--auto-tls", "--peer-auto-tls"])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start the member");
    let member = common::Background::new(child);
    let deadline = Instant::now() + SERVING_WITHIN;
    loop {
        let (healthy, said) = etcdctl(port, &["endpoint", "health"]);
        if healthy {
            break;
        }
        assert!(Instant::now() < deadline, "not serving over TLS: {said}");
        std::thread::sleep(Duration::from_millis(200));
    }
    member
}

/// What etcdctl, the files and the presented certificates show.
fn observe(binary: &Path, dir: &Path, port: u16, peek: &Path) -> Vec<String> {
    std::fs::create_dir_all(dir).expect("directory");
    let data = dir.join("data");
    let mut seen = Vec::new();
    let member = start(binary, &data, port);
    let (put, said) = etcdctl(port, &["put", "auto", "tls"]);
    seen.push(format!("put over TLS: {put} {}", said.trim()));
    let (_, got) = etcdctl(port, &["get", "auto", "--print-value-only"]);
    seen.push(format!("get over TLS: {}", got.trim()));
    for side in ["client", "peer"] {
        for file in ["cert.pem", "key.pem"] {
            let path = data.join("fixtures").join(side).join(file);
            seen.push(format!("{side}/{file} exists: {}", path.exists()));
        }
    }
    for (side, p) in [("client", port), ("peer", port + 1)] {
        let output = common::run_within(peek, &[&format!("127.0.0.1:{p}")], Duration::from_secs(10));
        let shown: serde_json::Value =
            serde_json::from_slice(&output.stdout).unwrap_or_else(|_| panic!("{side}: {}", common::text(&output)));
        seen.push(format!(
            "{side} port presents: subject {} issuer {} ips {} self-signed {} server auth {} CA {}",
            shown["subject"], shown["issuer"], shown["ips"], shown["self_signed"], shown["server_auth"], shown["is_ca"]
        ));
    }
    let before = std::fs::read(data.join("fixtures/client/cert.pem")).expect("certificate");
    drop(member);
    let again = start(binary, &data, port);
    let after = std::fs::read(data.join("fixtures/client/cert.pem")).expect("certificate");
    seen.push(format!("reused on restart: {}", before == after));
    let (_, got) = etcdctl(port, &["get", "auto", "--print-value-only"]);
    seen.push(format!("get after restart: {}", got.trim()));
    drop(again);
    seen
}

#[test]
fn auto_tls_serves_https_with_generated_certificates_as_etcd_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let peek = common::go_program("tlspeek");
    let etcd = observe(
        &common::etcd_tool("ETCD_BIN", "etcd"),
        &dir.path().join("etcd"),
        21079,
        &peek,
    );
    let ours = observe(&common::kv_server(), &dir.path().join("kv"), 21179, &peek);
    assert_eq!(ours, etcd, "kv-server, then etcd");
    assert!(ours[0].starts_with("put over TLS: true"), "{ours:?}");
    assert!(ours.contains(&"get after restart: tls".to_string()), "{ours:?}");
}
