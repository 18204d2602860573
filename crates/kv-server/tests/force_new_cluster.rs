//! Goal: the documented recovery from a lost quorum works as on etcd
//! 3.5.17 (OpenShift's quorum-restore pod, RKE2's `--cluster-reset`): a
//! 3-member cluster loses two members to kill -9; the third, restarted
//! with `--force-new-cluster` (as `ETCD_FORCE_NEW_CLUSTER`, and as
//! `force-new-cluster: true` in a `--config-file`), serves alone with
//! every key and takes writes; restarted without the flag it is still
//! alone; two members added back with `member add` make it three again
//! with no key lost. And the flag on an empty data directory is refused
//! at start, nothing written (etcd would start a new, empty cluster).
//!
//! Method: the same steps, through etcdctl, on a cluster of real etcd and
//! one of kv-server; member lists compared step by step, and kv-server's
//! key counts checked to hold every acknowledged put. etcd's are only
//! printed: it drops WAL entries past the survivor's recorded commit
//! index, and so at times the last acknowledged put (a deviation
//! documented in docs/operations.md).

mod common;

use std::path::Path;
use std::time::Duration;

const KEYS: usize = 100;

/// How the flag is given.
#[derive(Clone, Copy, Debug)]
enum Given {
    Environment,
    ConfigFile,
}

fn count(endpoint: &str) -> String {
    let output = common::etcdctl(endpoint, &["get", "fnc/", "--prefix", "--count-only", "-w", "fields"]);
    let text = common::text(&output);
    text.lines()
        .find(|line| line.starts_with("\"Count\""))
        .unwrap_or(&text)
        .to_string()
}

fn members(endpoint: &str) -> usize {
    let output = common::etcdctl(endpoint, &["member", "list"]);
    assert!(output.status.success(), "{}", common::text(&output));
    String::from_utf8_lossy(&output.stdout).lines().count()
}

/// Member `i` restarted with the flag, given `how`.
fn start_forced(cluster: &mut common::Cluster, i: usize, how: Given) {
    match how {
        Given::Environment => cluster
            .spawn_with(i, &[("ETCD_FORCE_NEW_CLUSTER".into(), "true".into())])
            .expect("start"),
        Given::ConfigFile => {
            let member = &cluster.members[i];
            let client = format!("http://127.0.0.1:{}", member.client_port);
            let peer = format!("http://127.0.0.1:{}", member.peer_port);
            let file = cluster.dir.join("forced.yaml");
            let yaml = format!(
                "name: {}\ndata-dir: {}\nlisten-client-urls: {client}\nadvertise-client-urls: {client}\n\
                 listen-peer-urls: {peer}\ninitial-advertise-peer-urls: {peer}\n\
                 initial-cluster: {}\ninitial-cluster-token: test-cluster\nforce-new-cluster: true\n",
                member.name,
                cluster.data_dir(i).display(),
                cluster.initial_cluster(),
            );
            std::fs::write(&file, yaml).expect("config file");
            let log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(cluster.log_path(i))
                .expect("log");
            let child = std::process::Command::new(&cluster.spec.binary)
                .arg("--config-file")
                .arg(&file)
                .stdout(std::process::Stdio::null())
                .stderr(log)
                .spawn()
                .expect("start with a config file");
            cluster.members[i].child = Some(child);
        }
    }
    cluster.wait_healthy(&[i]);
}

/// The whole recovery on `binary`; returns what etcdctl saw at each step.
fn recover(binary: &Path, dir: &Path, base: u16, how: Given) -> Vec<String> {
    let mut seen = Vec::new();
    let mut cluster = common::Cluster::new(binary, dir, base, 3, &[]);
    cluster.start_all();
    let endpoints = cluster.endpoints();
    for i in 0..KEYS {
        let put = common::etcdctl(&endpoints, &["put", &format!("fnc/{i:03}"), "v"]);
        assert!(put.status.success(), "{}", common::text(&put));
    }
    // The member a runbook recovers from is the one with every write:
    // a linearizable read through it makes sure it has applied them all.
    let first = cluster.members[0].endpoint();
    assert_eq!(count(&first), format!("\"Count\" : {KEYS}"));
    for i in 0..3 {
        cluster.kill(i);
    }
    start_forced(&mut cluster, 0, how);
    let survivor = cluster.members[0].endpoint();
    seen.push(format!("forced: {} members, {}", members(&survivor), count(&survivor)));
    let put = common::etcdctl(&survivor, &["put", "fnc/after", "v"]);
    seen.push(format!("write after: {}", put.status.success()));

    cluster.kill(0);
    cluster.spawn(0);
    cluster.wait_healthy(&[0]);
    seen.push(format!(
        "restarted: {} members, {}",
        members(&survivor),
        count(&survivor)
    ));

    for (n, port) in [(1u16, base + 30), (2, base + 40)] {
        let name = format!("added{n}");
        // etcd refuses a voter while the last one added has been
        // connected for under five seconds ("unhealthy cluster").
        let peer_urls = format!("--peer-urls=http://127.0.0.1:{}", port + 1);
        let said = common::etcdctl_until(
            &survivor,
            &["member", "add", &name, &peer_urls],
            "unhealthy cluster",
            Duration::from_secs(30),
        );
        let index = cluster.add_joining(&name, port, &common::text(&said), Vec::new());
        cluster.spawn(index);
        cluster.wait_healthy(&[index]);
    }
    for i in [0, 3, 4] {
        let endpoint = cluster.members[i].endpoint();
        seen.push(format!(
            "member {i}: {} members, {}",
            members(&endpoint),
            count(&endpoint)
        ));
    }
    seen
}

#[test]
fn a_lost_quorum_is_recovered_as_on_etcd() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (how, etcd_base, kv_base) in [(Given::Environment, 20079, 20179), (Given::ConfigFile, 20279, 20379)] {
        let etcd = recover(
            &common::etcd_tool("ETCD_BIN", "etcd"),
            &dir.path().join(format!("etcd-{how:?}")),
            etcd_base,
            how,
        );
        let ours = recover(
            &common::kv_server(),
            &dir.path().join(format!("kv-{how:?}")),
            kv_base,
            how,
        );
        eprintln!("{how:?}: etcd {etcd:?}\n{how:?}: kv-server {ours:?}");
        // The same members at every step as etcd.
        assert_eq!(
            without_counts(&ours),
            without_counts(&etcd),
            "{how:?}: kv-server, then etcd"
        );
        // Every acknowledged key at every step: etcd may lose the last
        // ones here (docs/operations.md, "Recovering from a lost quorum").
        let all = format!("\"Count\" : {KEYS}");
        let and_after = format!("\"Count\" : {}", KEYS + 1);
        assert_eq!(
            ours,
            [
                format!("forced: 1 members, {all}"),
                "write after: true".to_string(),
                format!("restarted: 1 members, {and_after}"),
                format!("member 0: 3 members, {and_after}"),
                format!("member 3: 3 members, {and_after}"),
                format!("member 4: 3 members, {and_after}"),
            ]
        );
    }
}

/// Each step with its key count left out.
fn without_counts(steps: &[String]) -> Vec<String> {
    steps
        .iter()
        .map(|step| step.split(", \"Count\"").next().unwrap_or(step).to_string())
        .collect()
}

#[test]
fn force_new_cluster_on_an_empty_data_dir_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let output = std::process::Command::new(common::kv_server())
        .arg("--data-dir")
        .arg(&data)
        .args(["--listen-client-urls", "http://127.0.0.1:20479"])
        .args(["--advertise-client-urls", "http://127.0.0.1:20479"])
        .args(["--listen-peer-urls", "http://127.0.0.1:20480"])
        .args(["--initial-advertise-peer-urls", "http://127.0.0.1:20480"])
        .args(["--initial-cluster", "default=http://127.0.0.1:20480"])
        .arg("--force-new-cluster")
        .output()
        .expect("run kv-server");
    let said = common::text(&output);
    assert!(!output.status.success(), "{said}");
    assert!(
        said.contains("--force-new-cluster") && said.contains("no member to recover"),
        "{said}"
    );
    assert!(!data.exists(), "nothing was written");
}
