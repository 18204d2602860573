//! Goal: a member started with exactly the flags kubeadm 1.32 writes into
//! its etcd static pod (TLS with client-certificate auth on client and
//! peer URLs, the metrics port kubelet probes, `--experimental-*` flags in
//! Go's `--flag=true` syntax) starts, serves etcdctl over that TLS, and
//! answers kubelet's probes (`/livez`, `/readyz`, and the older
//! `/health?exclude=NOSPACE&serializable=true`) on the metrics port as
//! real etcd v3.5.17 does with the same flags. The etcd 3.6 form of the
//! same manifest (`--feature-gates=InitialCorruptCheck=true`,
//! `--watch-progress-notify-interval`) is compared with etcd 3.7.3, which
//! no longer takes the experimental names.
//!
//! Needs etcd 3.5.17, etcd 3.7.3 and etcdctl: `ETCD_BIN`, `ETCD37_BIN`,
//! `ETCDCTL_BIN`, or the cache `tools/etcd-peers/build.sh` fills.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const STARTED_WITHIN: Duration = Duration::from_secs(30);

/// kubeadm 1.32's etcd command line (`--flag=value`, sorted by name, as it
/// writes them), on loopback ports from `base`, with the test's files.
fn kubeadm_flags(dir: &Path, certs: &common::certs::Certs, base: u16, etcd_36_form: bool) -> Vec<String> {
    let client = format!("https://127.0.0.1:{base}");
    let peer = format!("https://127.0.0.1:{}", base + 1);
    let (corrupt_check, progress) = match etcd_36_form {
        false => (
            "--experimental-initial-corrupt-check=true",
            "--experimental-watch-progress-notify-interval=5s",
        ),
        true => (
            "--feature-gates=InitialCorruptCheck=true",
            "--watch-progress-notify-interval=5s",
        ),
    };
    let path = |p: &Path| p.display().to_string();
    vec![
        format!("--advertise-client-urls={client}"),
        format!("--cert-file={}", path(&certs.member.cert)),
        "--client-cert-auth=true".into(),
        format!("--data-dir={}", path(&dir.join("etcd"))),
        corrupt_check.into(),
        progress.into(),
        format!("--initial-advertise-peer-urls={peer}"),
        format!("--initial-cluster=cp1={peer}"),
        format!("--key-file={}", path(&certs.member.key)),
        format!("--listen-client-urls=https://127.0.0.1:{base}"),
        format!("--listen-metrics-urls=http://127.0.0.1:{}", base + 2),
        format!("--listen-peer-urls={peer}"),
        "--name=cp1".into(),
        format!("--peer-cert-file={}", path(&certs.member.cert)),
        "--peer-client-cert-auth=true".into(),
        format!("--peer-key-file={}", path(&certs.member.key)),
        format!("--peer-trusted-ca-file={}", path(&certs.ca)),
        "--snapshot-count=10000".into(),
        format!("--trusted-ca-file={}", path(&certs.ca)),
    ]
}

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// kubelet's probes on the metrics port: (path, status line, body).
fn probes(port: u16) -> Vec<(String, String, String)> {
    ["/livez", "/readyz", "/health?exclude=NOSPACE&serializable=true"]
        .iter()
        .map(|path| {
            let raw = common::http_get(port, path);
            let status = raw.lines().next().unwrap_or_default().replace("HTTP/1.0", "HTTP/1.1");
            let body = raw
                .split_once("\r\n\r\n")
                .map(|(_, b)| b.to_string())
                .unwrap_or_default();
            (path.to_string(), status, body)
        })
        .collect()
}

/// Starts `binary` with kubeadm's flags, checks etcdctl over TLS, and
/// returns what the probes answered.
fn run(binary: &Path, base: u16, etcd_36_form: bool) -> Vec<(String, String, String)> {
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = common::certs::Certs::generate(&dir.path().join("pki"), &["apiserver-etcd-client"]);
    let log = std::fs::File::create(dir.path().join("member.log")).expect("log");
    let _member = Running(
        Command::new(binary)
            .args(kubeadm_flags(dir.path(), &certs, base, etcd_36_form))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start member"),
    );
    let deadline = Instant::now() + STARTED_WITHIN;
    while !common::http_get(base + 2, "/readyz").ends_with("ok\n") {
        let log = std::fs::read_to_string(dir.path().join("member.log")).unwrap_or_default();
        assert!(Instant::now() < deadline, "{} never ready:\n{log}", binary.display());
        std::thread::sleep(Duration::from_millis(100));
    }
    // kube-apiserver's client certificate, as kubeadm names it.
    let flags = certs.client_flags(certs.client("apiserver-etcd-client"));
    let endpoint = format!("https://127.0.0.1:{base}");
    let (ok, said) = common::etcdctl_as(&endpoint, &flags, &["put", "/registry/pods/a", "v"]);
    assert!(ok, "put over kubeadm's TLS: {said}");
    let (ok, said) = common::etcdctl_as(&endpoint, &flags, &["get", "/registry/pods/a", "--print-value-only"]);
    assert!(ok && said.trim() == "v", "get over kubeadm's TLS: {said}");
    // Without a client certificate the member refuses, as kubeadm's asks.
    let bare = vec![format!("--cacert={}", certs.ca.display())];
    let (ok, _) = common::etcdctl_as(&endpoint, &bare, &["get", "a", "--command-timeout=3s"]);
    assert!(!ok, "{} served a client without a certificate", binary.display());
    probes(base + 2)
}

#[test]
fn kubeadm_manifest_starts_and_probes_as_etcd() {
    let kv = run(&common::kv_server(), 26_700, false);
    let etcd = run(&common::etcd_tool("ETCD_BIN", "etcd"), 26_710, false);
    assert_eq!(kv, etcd, "kubeadm 1.32's flags: kv-server and etcd 3.5.17 differ");
    assert!(kv.iter().all(|(_, status, _)| status == "HTTP/1.1 200 OK"), "{kv:?}");

    let kv = run(&common::kv_server(), 26_720, true);
    let etcd = run(&common::etcd_tool("ETCD37_BIN", "etcd-3.7.3"), 26_730, true);
    assert_eq!(kv, etcd, "the etcd 3.6 form: kv-server and etcd 3.7.3 differ");
}
