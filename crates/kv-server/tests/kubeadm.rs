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
//!
//! Also kubeadm's stacked 3-node control plane: the first node, then two
//! joined as kubeadm 1.32 joins them (learner, then promoted), each with
//! the same flags; every node probes as etcd's, and etcdctl writes through
//! the first and reads through the last over TLS.
//!
//! Needs etcd 3.5.17, etcd 3.7.3 and etcdctl: `ETCD_BIN`, `ETCD37_BIN`,
//! `ETCDCTL_BIN`, or the cache `tools/etcd-peers/build.sh` fills.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const STARTED_WITHIN: Duration = Duration::from_secs(30);

/// One control-plane node's etcd: its name, client port (peer port one
/// above, metrics port two above), and the `--initial-cluster` kubeadm
/// writes for it (`None`: the first node, a cluster of itself).
struct Node<'a> {
    name: &'a str,
    base: u16,
    joins: Option<String>,
}

/// kubeadm 1.32's etcd command line (`--flag=value`, sorted by name, as it
/// writes them), on loopback ports, with the test's files. A joining node
/// gets the `--initial-cluster` and `--initial-cluster-state=existing`
/// kubeadm writes after adding it.
fn kubeadm_flags(dir: &Path, certs: &common::certs::Certs, node: &Node, etcd_36_form: bool) -> Vec<String> {
    let (name, base) = (node.name, node.base);
    let client = format!("https://127.0.0.1:{base}");
    let peer = format!("https://127.0.0.1:{}", base + 1);
    let initial_cluster = node.joins.clone().unwrap_or_else(|| format!("{name}={peer}"));
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
        format!("--data-dir={}", path(&dir.join(name))),
        corrupt_check.into(),
        progress.into(),
        format!("--initial-advertise-peer-urls={peer}"),
        format!("--initial-cluster={initial_cluster}"),
        format!("--key-file={}", path(&certs.member.key)),
        format!("--listen-client-urls=https://127.0.0.1:{base}"),
        format!("--listen-metrics-urls=http://127.0.0.1:{}", base + 2),
        format!("--listen-peer-urls={peer}"),
        format!("--name={name}"),
        format!("--peer-cert-file={}", path(&certs.member.cert)),
        "--peer-client-cert-auth=true".into(),
        format!("--peer-key-file={}", path(&certs.member.key)),
        format!("--peer-trusted-ca-file={}", path(&certs.ca)),
        "--snapshot-count=10000".into(),
        format!("--trusted-ca-file={}", path(&certs.ca)),
    ]
    .into_iter()
    .chain(
        node.joins
            .as_ref()
            .map(|_| "--initial-cluster-state=existing".to_string()),
    )
    .collect()
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

/// Starts `binary` as `node` with kubeadm's flags; waits until its
/// metrics port answers `/livez` (kubelet's startup wait).
fn start(binary: &Path, dir: &Path, certs: &common::certs::Certs, node: &Node, etcd_36_form: bool) -> Running {
    let log_path = dir.join(format!("{}.log", node.name));
    let member = Running(
        Command::new(binary)
            .args(kubeadm_flags(dir, certs, node, etcd_36_form))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log_path).expect("log"))
            .spawn()
            .expect("start member"),
    );
    wait_ok(node, "/livez", &log_path);
    member
}

/// Waits until `node`'s metrics port answers `path` with ok, at most
/// STARTED_WITHIN; the failure shows the member's log.
fn wait_ok(node: &Node, path: &str, log_path: &Path) {
    let deadline = Instant::now() + STARTED_WITHIN;
    while !common::http_get(node.base + 2, path).ends_with("ok\n") {
        let log = std::fs::read_to_string(log_path).unwrap_or_default();
        assert!(
            Instant::now() < deadline,
            "{} never answered {path} ok:\n{log}",
            node.name
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until `node`'s `/readyz` says ok.
fn wait_ready(dir: &Path, node: &Node) {
    wait_ok(node, "/readyz", &dir.join(format!("{}.log", node.name)));
}

/// etcdctl as kube-apiserver (its client certificate) against `endpoint`.
fn apiserver_etcdctl(certs: &common::certs::Certs, endpoint: &str, args: &[&str]) -> (bool, String) {
    let flags = certs.client_flags(certs.client("apiserver-etcd-client"));
    common::etcdctl_as(endpoint, &flags, args)
}

/// Starts `binary` with kubeadm's flags, checks etcdctl over TLS, and
/// returns what the probes answered.
fn run(binary: &Path, base: u16, etcd_36_form: bool) -> Vec<(String, String, String)> {
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = common::certs::Certs::generate(&dir.path().join("pki"), &["apiserver-etcd-client"]);
    let node = Node {
        name: "cp1",
        base,
        joins: None,
    };
    let _member = start(binary, dir.path(), &certs, &node, etcd_36_form);
    wait_ready(dir.path(), &node);
    let endpoint = format!("https://127.0.0.1:{base}");
    let (ok, said) = apiserver_etcdctl(&certs, &endpoint, &["put", "/registry/pods/a", "v"]);
    assert!(ok, "put over kubeadm's TLS: {said}");
    let (ok, said) = apiserver_etcdctl(&certs, &endpoint, &["get", "/registry/pods/a", "--print-value-only"]);
    // etcdctl's stdout comes first; its stderr may follow with warnings.
    assert!(ok && said.lines().next() == Some("v"), "get over kubeadm's TLS: {said}");
    // Without a client certificate the member refuses, as kubeadm's asks.
    let bare = vec![format!("--cacert={}", certs.ca.display())];
    let (ok, _) = common::etcdctl_as(&endpoint, &bare, &["get", "a", "--command-timeout=3s"]);
    assert!(!ok, "{} served a client without a certificate", binary.display());
    probes(base + 2)
}

/// How long kubeadm's join steps are retried: a new member must be
/// connected for etcd's 5 s health interval before the next change, and a
/// learner must catch up before its promotion.
const JOIN_WITHIN: Duration = Duration::from_secs(30);

/// etcdctl as kube-apiserver, retried while it fails, at most JOIN_WITHIN.
fn apiserver_etcdctl_until(certs: &common::certs::Certs, endpoint: &str, args: &[&str]) -> String {
    let deadline = Instant::now() + JOIN_WITHIN;
    loop {
        let (ok, said) = apiserver_etcdctl(certs, endpoint, args);
        if ok {
            return said;
        }
        assert!(Instant::now() < deadline, "etcdctl {args:?}: {said}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// kubeadm's stacked 3-node control plane: the first node, then two
/// nodes joined as kubeadm 1.32 joins them (`member add --learner`, start
/// with the printed cluster and state existing, `member promote`). Returns
/// every node's probes.
fn three_nodes(binary: &Path, base: u16) -> Vec<(String, String, String)> {
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = common::certs::Certs::generate(&dir.path().join("pki"), &["apiserver-etcd-client"]);
    let first = Node {
        name: "cp1",
        base,
        joins: None,
    };
    let endpoint = format!("https://127.0.0.1:{base}");
    let mut members = vec![start(binary, dir.path(), &certs, &first, false)];
    wait_ready(dir.path(), &first);
    let mut nodes = vec![first];
    for (name, node_base) in [("cp2", base + 10), ("cp3", base + 20)] {
        let peer = format!("--peer-urls=https://127.0.0.1:{}", node_base + 1);
        let said = apiserver_etcdctl_until(&certs, &endpoint, &["member", "add", name, &peer, "--learner"]);
        let cluster = said
            .lines()
            .find_map(|line| line.strip_prefix("ETCD_INITIAL_CLUSTER=\""))
            .and_then(|line| line.strip_suffix('"'))
            .unwrap_or_else(|| panic!("no ETCD_INITIAL_CLUSTER in {said}"))
            .to_string();
        let id = said
            .lines()
            .find_map(|line| line.strip_prefix("Member "))
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no member id in {said}"))
            .to_string();
        let node = Node {
            name,
            base: node_base,
            joins: Some(cluster),
        };
        members.push(start(binary, dir.path(), &certs, &node, false));
        apiserver_etcdctl_until(&certs, &endpoint, &["member", "promote", &id]);
        wait_ready(dir.path(), &node);
        nodes.push(node);
    }
    let last = format!("https://127.0.0.1:{}", base + 20);
    let (ok, said) = apiserver_etcdctl(&certs, &endpoint, &["put", "/registry/nodes/cp3", "ready"]);
    assert!(ok, "{said}");
    let (ok, said) = apiserver_etcdctl(&certs, &last, &["get", "/registry/nodes/cp3", "--print-value-only"]);
    assert!(
        ok && said.lines().next() == Some("ready"),
        "read from the last node: {said}"
    );
    let (ok, said) = apiserver_etcdctl(&certs, &endpoint, &["member", "list"]);
    assert!(
        ok && said.lines().filter(|line| line.contains(", started, ")).count() == 3,
        "{said}"
    );
    let answers = nodes.iter().flat_map(|node| probes(node.base + 2)).collect();
    drop(members);
    answers
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

#[test]
fn kubeadm_three_node_control_plane() {
    let kv = three_nodes(&common::kv_server(), 26_740);
    let etcd = three_nodes(&common::etcd_tool("ETCD_BIN", "etcd"), 26_770);
    assert_eq!(kv, etcd, "kubeadm's 3-node etcd: kv-server and etcd 3.5.17 differ");
    assert_eq!(kv.len(), 9);
    assert!(kv.iter().all(|(_, status, _)| status == "HTTP/1.1 200 OK"), "{kv:?}");
}
