//! Goal: `unix://` and `unixs://` client listen URLs (OpenShift's etcd
//! pod) work as on etcd 3.5.17: the socket's path is what follows `//`
//! (`unix://localhost:N` is a file in the working directory, `unix:///…`
//! an absolute path), a stale file there is replaced at start, etcdctl
//! reads and writes through both sockets (TLS with the CA on `unixs://`),
//! and a stopped member removes its socket files.
//!
//! Method: one member of real etcd and one of kv-server, each in its own
//! working directory, with a TCP URL, an absolute `unix://` socket and a
//! relative `unixs://` one; etcdctl run in the same directory; SIGTERM,
//! then the directory listed.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::certs::Certs;

/// How long a member may take to answer on its sockets after it starts,
/// and to exit after SIGTERM.
const WITHIN: Duration = Duration::from_secs(30);

/// etcdctl run in `cwd` (relative socket paths are resolved there).
fn etcdctl(cwd: &Path, endpoint: &str, flags: &[String], args: &[&str]) -> (bool, String) {
    let output = Command::new(common::etcd_tool("ETCDCTL_BIN", "etcdctl"))
        .current_dir(cwd)
        .env_remove("ETCDCTL_BIN")
        .args(["--endpoints", endpoint, "--command-timeout", "20s"])
        .args(flags)
        .args(args)
        .output()
        .expect("run etcdctl");
    (output.status.success(), common::text(&output))
}

fn observe(binary: &Path, dir: &Path, port: u16, certs: &Certs) -> Vec<String> {
    std::fs::create_dir_all(dir).expect("directory");
    let absolute = dir.join("abs.sock");
    let relative = format!("localhost:{}", port + 2);
    // A stale file where the relative socket goes: replaced at start.
    std::fs::write(dir.join(&relative), "stale").expect("stale file");
    let tcp = format!("http://127.0.0.1:{port}");
    let plain = format!("unix://{}", absolute.display());
    let secure = format!("unixs://{relative}");
    let log = std::fs::File::create(dir.join("member.log")).expect("log");
    let peer = format!("http://127.0.0.1:{}", port + 1);
    let mut child = Command::new(binary)
        .current_dir(dir)
        .args(["--data-dir", "data"])
        .args(["--listen-client-urls", &format!("{tcp},{plain},{secure}")])
        .args(["--advertise-client-urls", &tcp])
        .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
        .args(["--initial-cluster", &format!("default={peer}")])
        .arg("--cert-file")
        .arg(&certs.member.cert)
        .arg("--key-file")
        .arg(&certs.member.key)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start the member");
    let tls = vec![format!("--cacert={}", certs.ca.display())];
    let deadline = Instant::now() + WITHIN;
    while !etcdctl(dir, &plain, &[], &["endpoint", "health"]).0 {
        assert!(Instant::now() < deadline, "{} not serving on {plain}", binary.display());
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut seen = Vec::new();
    let (put, said) = etcdctl(dir, &plain, &[], &["put", "over", "unix"]);
    seen.push(format!("put on unix://: {put} {}", said.trim()));
    let (put, said) = etcdctl(dir, &secure, &tls, &["put", "over", "unixs"]);
    seen.push(format!("put on unixs://: {put} {}", said.trim()));
    let (_, got) = etcdctl(dir, &plain, &[], &["get", "over", "--print-value-only"]);
    seen.push(format!("get on unix://: {}", got.trim()));
    let (_, got) = etcdctl(dir, &tcp, &[], &["get", "over", "--print-value-only"]);
    seen.push(format!("get on http://: {}", got.trim()));
    let is_socket = |path: &Path| {
        std::os::unix::fs::FileTypeExt::is_socket(&std::fs::metadata(path).expect("the socket file").file_type())
    };
    seen.push(format!(
        "sockets: {} {}",
        is_socket(&absolute),
        is_socket(&dir.join(&relative))
    ));
    // SAFETY: kill(2) on the member's own pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + WITHIN;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("{} did not stop on SIGTERM", binary.display());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    seen.push(format!(
        "removed on stop: {} {}",
        !absolute.exists(),
        !dir.join(&relative).exists()
    ));
    seen
}

#[test]
fn unix_socket_client_urls_work_as_on_etcd() {
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = Certs::generate(&dir.path().join("certs"), &[]);
    let etcd = observe(
        &common::etcd_tool("ETCD_BIN", "etcd"),
        &dir.path().join("etcd"),
        21279,
        &certs,
    );
    let ours = observe(&common::kv_server(), &dir.path().join("kv"), 21379, &certs);
    assert_eq!(ours, etcd, "kv-server, then etcd");
    assert_eq!(ours[0], "put on unix://: true OK");
    assert_eq!(ours.last().expect("steps"), "removed on stop: true true");
}
