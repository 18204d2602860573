//! Goal: the TLS security settings etcd's operators set are honoured as
//! etcd 3.5.17 honours them, none accepted and ignored:
//! - a client certificate listed in `--client-crl-file` is refused on the
//!   client port, and one in `--peer-crl-file` on the peer port, both
//!   logging etcd's "certificate serial … revoked";
//! - a peer certificate whose CN `--peer-cert-allowed-cn` does not list
//!   is refused ("client certificate authentication failed");
//! - `--tls-min-version=TLS1.3` refuses a TLS 1.2 client;
//! - an unknown `--cipher-suites` name, a bad TLS version and an allowed
//!   CN list beside an allowed hostname list are refused at start with
//!   etcd's messages;
//! - `--peer-client-cert-file` and `--peer-client-key-file` are what a
//!   member shows when it dials its peers: with a peer server
//!   certificate made for server authentication only, a 3-member cluster
//!   with `--peer-client-cert-auth` forms and serves through them;
//! - `--client-cert-file` without its key, or with a key it does not
//!   belong to, is refused at start with etcd's messages (etcd checks the
//!   pair before it serves, though only its gateway would show it);
//! - a revocation list that does not parse is refused at start with the
//!   data directory untouched (etcd starts, then refuses every client
//!   that shows a certificate: kv-server's deliberate difference).
//!
//! Method: one member of real etcd and one of kv-server with the same
//! flags and certificates (made at test time); handshakes by a rustls
//! client as each certificate; the members' logs read for the reasons.

mod common;

use std::path::Path;

use common::certs::{self, Certs, Pair};

/// What a member did with each kind of connection, and what it logged.
fn outcomes(binary: &Path, dir: &Path, base: u16, certs: &Certs, revoked: &Pair, intruder: &Pair) -> Vec<String> {
    let crl = certs.revocation_list(&[revoked], "crl.pem");
    let crl = crl.to_str().expect("a UTF-8 path");
    let flags = [
        "--client-crl-file",
        crl,
        "--peer-crl-file",
        crl,
        "--peer-cert-allowed-cn",
        "member,revoked-member",
        "--tls-min-version",
        "TLS1.3",
    ];
    let mut cluster = common::Cluster::new_tls(binary, dir, base, 1, certs, "root", &flags);
    cluster.start_all();
    let (client, peer) = (cluster.members[0].client_port, cluster.members[0].peer_port);
    let good = certs.client("root");
    let verdict = |result: Result<(), String>| if result.is_ok() { "taken" } else { "refused" };
    let seen = vec![
        format!(
            "client port, good: {}",
            verdict(certs::tls_accepts(client, &certs.ca, good))
        ),
        format!(
            "client port, revoked: {}",
            verdict(certs::tls_accepts(client, &certs.ca, revoked))
        ),
        format!(
            "client port, TLS 1.2: {}",
            verdict(certs::tls12_accepts(client, &certs.ca, good))
        ),
        format!(
            "peer port, member: {}",
            verdict(certs::tls_accepts(peer, &certs.ca, &certs.member))
        ),
        format!(
            "peer port, revoked: {}",
            verdict(certs::tls_accepts(peer, &certs.ca, revoked))
        ),
        format!(
            "peer port, CN not allowed: {}",
            verdict(certs::tls_accepts(peer, &certs.ca, intruder))
        ),
    ];
    let serial = certs::serial_hex(&revoked.cert);
    let log = cluster.log_path(0);
    let mut said = seen;
    said.push(format!(
        "logged revoked: {}",
        logged(&log, &format!("transport: certificate serial {serial} revoked"))
    ));
    said.push(format!(
        "logged CN refusal: {}",
        logged(&log, "client certificate authentication failed")
    ));
    said
}

/// How long a member may take to log a refused handshake after the
/// client has seen the refusal (the two race).
const LOGGED_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether the log at `path` says `line` within [`LOGGED_WITHIN`].
fn logged(path: &Path, line: &str) -> bool {
    let deadline = std::time::Instant::now() + LOGGED_WITHIN;
    loop {
        let log = std::fs::read_to_string(path).unwrap_or_default();
        if log.contains(line) {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn revocation_allowed_names_and_versions_are_honoured_as_on_etcd() {
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = Certs::generate(&dir.path().join("certs"), &["root"]);
    // CN `revoked-member` is allowed on the peer port, so only its
    // revocation can refuse it there.
    let revoked = certs.another("revoked-member", "revoked");
    let intruder = certs.another("intruder", "intruder");
    let etcd = outcomes(
        &common::etcd_tool("ETCD_BIN", "etcd"),
        &dir.path().join("etcd"),
        20679,
        &certs,
        &revoked,
        &intruder,
    );
    let ours = outcomes(
        &common::kv_server(),
        &dir.path().join("kv"),
        20779,
        &certs,
        &revoked,
        &intruder,
    );
    assert_eq!(ours, etcd, "kv-server, then etcd");
    assert_eq!(
        ours,
        [
            "client port, good: taken",
            "client port, revoked: refused",
            "client port, TLS 1.2: refused",
            "peer port, member: taken",
            "peer port, revoked: refused",
            "peer port, CN not allowed: refused",
            "logged revoked: true",
            "logged CN refusal: true",
        ]
    );
}

/// `binary` started on `data` with `flags`: whether it was refused, and
/// what it said.
fn start_refused(binary: &Path, data: &Path, flags: &[&str]) -> (bool, String) {
    let data = data.to_str().expect("a UTF-8 path");
    let mut args = vec![
        "--data-dir",
        data,
        "--listen-client-urls",
        "http://127.0.0.1:20879",
        "--advertise-client-urls",
        "http://127.0.0.1:20879",
        "--listen-peer-urls",
        "http://127.0.0.1:20880",
        "--initial-advertise-peer-urls",
        "http://127.0.0.1:20880",
        "--initial-cluster",
        "default=http://127.0.0.1:20880",
    ];
    args.extend_from_slice(flags);
    // A member that starts after all is stopped, and fails the check.
    let output = common::run_within(binary, &args, START_REFUSED_WITHIN);
    (!output.status.success(), common::text(&output))
}

/// How long a refused start may take: a refusal comes before anything
/// is served, in well under a second.
const START_REFUSED_WITHIN: std::time::Duration = std::time::Duration::from_secs(20);

#[test]
fn bad_tls_settings_are_refused_at_start_with_etcds_messages() {
    let dir = tempfile::tempdir().expect("tempdir");
    let etcd = common::etcd_tool("ETCD_BIN", "etcd");
    let cases: [(&[&str], &str); 3] = [
        (
            &["--cipher-suites", "TLS_FOO_BAR"],
            "unexpected TLS cipher suite \\\"TLS_FOO_BAR\\\"",
        ),
        (
            &["--tls-min-version", "TLS1.1"],
            "unexpected TLS version \\\"TLS1.1\\\" (must be one of: TLS1.2, TLS1.3)",
        ),
        (
            &["--tls-min-version", "TLS1.3", "--tls-max-version", "TLS1.2"],
            "min version (TLS1.3) is greater than max version (TLS1.2)",
        ),
    ];
    for (n, (flags, message)) in cases.iter().enumerate() {
        // etcd's JSON log escapes the quotes; kv-server's error is plain.
        let (refused, said) = start_refused(&etcd, &dir.path().join(format!("etcd-{n}")), flags);
        assert!(refused && said.contains(message), "etcd {flags:?}: {said}");
        let data = dir.path().join(format!("kv-{n}"));
        let (refused, said) = start_refused(&common::kv_server(), &data, flags);
        let plain = message.replace("\\\"", "\"");
        assert!(refused && said.contains(&plain), "kv-server {flags:?}: {said}");
        assert!(!data.exists(), "kv-server {flags:?}: nothing was written");
    }
    // etcd checks this one only when it builds a TLS listener; kv-server
    // checks every setting at start.
    let data = dir.path().join("kv-names");
    let (refused, said) = start_refused(
        &common::kv_server(),
        &data,
        &["--peer-cert-allowed-cn", "a", "--peer-cert-allowed-hostname", "b"],
    );
    assert!(
        refused
            && said.contains("AllowedCNs and AllowedHostnames are mutually exclusive (cns=[\"a\"], hostnames=[\"b\"])"),
        "{said}"
    );
    assert!(!data.exists(), "nothing was written");
    let garbage = dir.path().join("garbage-crl.pem");
    std::fs::write(&garbage, "not a revocation list").expect("write");
    let data = dir.path().join("kv-crl");
    let (refused, said) = start_refused(
        &common::kv_server(),
        &data,
        &["--client-crl-file", garbage.to_str().expect("a UTF-8 path")],
    );
    assert!(refused && said.contains("--client-crl-file"), "{said}");
    assert!(!data.exists(), "nothing was written");
}

// Goal: a client certificate pair etcd refuses is refused by kv-server
// with the same words, before its data directory is made.
// Method: both started with an https client URL, the member's pair,
// and a `--client-cert-file` alone, then with another certificate's key.
#[test]
fn a_bad_client_certificate_pair_is_refused_at_start_as_etcd_refuses_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = Certs::generate(&dir.path().join("certs"), &["root"]);
    let root = certs.client("root");
    let path = |p: &Path| p.to_str().expect("a UTF-8 path").to_string();
    let alone = ["--client-cert-file".to_string(), path(&root.cert)];
    let mismatched = [
        "--client-cert-file".to_string(),
        path(&root.cert),
        "--client-key-file".to_string(),
        path(&certs.member.key),
    ];
    let cases: [(&[String], String); 2] = [
        (
            &alone,
            format!(
                "ClientKeyFile and ClientCertFile must both be present or both absent: key: , cert: {}]",
                root.cert.display()
            ),
        ),
        (&mismatched, "tls: private key does not match public key".to_string()),
    ];
    for (n, (extra, message)) in cases.iter().enumerate() {
        let mut flags = vec![
            "--cert-file".to_string(),
            path(&certs.member.cert),
            "--key-file".to_string(),
            path(&certs.member.key),
            "--listen-client-urls".to_string(),
            "https://127.0.0.1:20881".to_string(),
            "--advertise-client-urls".to_string(),
            "https://127.0.0.1:20881".to_string(),
        ];
        flags.extend(extra.iter().cloned());
        for (name, binary) in [
            ("etcd", common::etcd_tool("ETCD_BIN", "etcd")),
            ("kv-server", common::kv_server()),
        ] {
            let data = dir.path().join(format!("{name}-{n}"));
            let (refused, said) = start_https_refused(&binary, &data, &flags);
            assert!(refused && said.contains(message.as_str()), "{name} {extra:?}: {said}");
            if name == "kv-server" {
                assert!(!data.exists(), "kv-server {extra:?}: nothing was written");
            }
        }
    }
}

/// `binary` started on `data` with `flags`, which name the client URLs:
/// whether it was refused, and what it said.
fn start_https_refused(binary: &Path, data: &Path, flags: &[String]) -> (bool, String) {
    let mut args = vec![
        "--data-dir".to_string(),
        data.to_str().expect("a UTF-8 path").to_string(),
        "--listen-peer-urls".to_string(),
        "http://127.0.0.1:20882".to_string(),
        "--initial-advertise-peer-urls".to_string(),
        "http://127.0.0.1:20882".to_string(),
        "--initial-cluster".to_string(),
        "default=http://127.0.0.1:20882".to_string(),
    ];
    args.extend(flags.iter().cloned());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = common::run_within(binary, &args, START_REFUSED_WITHIN);
    (!output.status.success(), common::text(&output))
}

#[test]
fn members_dial_their_peers_with_the_peer_client_certificate() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, binary, base) in [
        ("etcd", common::etcd_tool("ETCD_BIN", "etcd"), 21679),
        ("kv-server", common::kv_server(), 21779),
    ] {
        let root = dir.path().join(name);
        let mut certs = Certs::generate(&root.join("certs"), &["root"]);
        certs.make_member_server_only();
        let dialler = certs.another("member", "peer-client");
        let (cert, key) = (dialler.cert.display().to_string(), dialler.key.display().to_string());
        let flags = ["--peer-client-cert-file", &cert, "--peer-client-key-file", &key];
        let mut cluster = common::Cluster::new_tls(&binary, &root.join("data"), base, 3, &certs, "root", &flags);
        // Healthy only once the members reach each other over the peer port.
        cluster.start_all();
        let tls = certs.client_flags(certs.client("root"));
        let endpoint = format!("https://127.0.0.1:{}", cluster.members[2].client_port);
        let (put, said) = common::etcdctl_as(&endpoint, &tls, &["put", "dialled", "with-client-cert"]);
        assert!(put, "{name}: {said}");
    }
}
