//! Goal: etcd's auth, as etcd serves it, with the same answers from
//! etcd 3.5.17 and kv-server: `user add root` and `auth enable`; a
//! password login; a wrong password refused with etcd's message; a user
//! named by its client certificate's common name, holding a role with
//! readwrite on `alice/`, may put `alice/x` and gets "permission denied"
//! on `bob/x` and on a watch of `bob/`; after `role revoke-permission` it
//! gets "permission denied" on `alice/y`. The auth state reaches a member
//! that catches up by snapshot, and survives a full-cluster restart.
//!
//! Method: certificates made here (rcgen). For each server, three member
//! processes on loopback with TLS and certificate auth on client and peer
//! URLs, `--snapshot-count=100`; real etcdctl 3.5.17 and etcd's benchmark
//! tool (both etcd's Go client). The third member is killed, a user is
//! added and 6000 puts made (past etcd's 5000 entries kept for
//! followers), and it restarts: a login with the new user's password
//! through it must work, and its log must show a snapshot installed.
//!
//! Needs etcd, etcdctl and the benchmark tool: `ETCD_BIN`, `ETCDCTL_BIN`,
//! `ETCD_BENCHMARK_BIN`, or the cache that `tools/etcd-peers/build.sh`
//! fills.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::certs::Certs;

const DENIED: &str = "etcdserver: permission denied";
const BAD_PASSWORD: &str = "etcdserver: authentication failed, invalid user ID or password";
/// How long a restarted member may take to catch up and serve a login.
const CATCH_UP_WITHIN: Duration = Duration::from_secs(60);
/// How long the cluster may take to elect a new leader.
const ELECTION_WITHIN: Duration = Duration::from_secs(30);
/// How long a refused watch may take to end.
const WATCH_ENDS_WITHIN: Duration = Duration::from_secs(20);
/// Puts while a member is down: past the 5000 entries etcd keeps for
/// followers, so it catches up by snapshot.
const PUTS_WHILE_DOWN: &str = "6000";

#[test]
fn auth_as_etcd() {
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = Certs::generate(&dir.path().join("certs"), &["root", "alice"]);
    let etcd = common::etcd_tool("ETCD_BIN", "etcd");
    walk_through(&etcd, &dir.path().join("etcd"), 31579, &certs);
    walk_through(&common::kv_server(), &dir.path().join("kv"), 31679, &certs);
}

use common::etcdctl_as as etcdctl;

/// Asserts etcdctl succeeds and prints `expected`.
fn ok(what: &str, endpoint: &str, flags: &[String], args: &[&str], expected: &str) {
    let (ok, said) = etcdctl(endpoint, flags, args);
    assert!(ok && said.contains(expected), "{what}: {args:?}: {said}");
}

/// As [`ok`], trying again while the cluster elects a leader (the member
/// just killed may have led).
fn ok_after_election(what: &str, endpoint: &str, flags: &[String], args: &[&str], expected: &str) {
    let deadline = Instant::now() + ELECTION_WITHIN;
    loop {
        let (ok, said) = etcdctl(endpoint, flags, args);
        if ok && said.contains(expected) {
            return;
        }
        let electing = ["leader changed", "no leader", "timed out", "deadline exceeded"]
            .iter()
            .any(|e| said.contains(e));
        assert!(electing && Instant::now() < deadline, "{what}: {args:?}: {said}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Asserts etcdctl fails with `expected`.
fn refused(what: &str, endpoint: &str, flags: &[String], args: &[&str], expected: &str) {
    let (ok, said) = etcdctl(endpoint, flags, args);
    assert!(
        !ok && said.contains(expected),
        "{what}: {args:?} was not refused with {expected}: {said}"
    );
}

/// What `etcdctl watch` printed before it ended, killed after
/// [`WATCH_ENDS_WITHIN`] if it did not end by itself.
fn watch(endpoint: &str, flags: &[String], args: &[&str]) -> String {
    let child = Command::new(common::etcd_tool("ETCDCTL_BIN", "etcdctl"))
        .args(["--endpoints", endpoint])
        .args(flags)
        .arg("watch")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run etcdctl watch");
    let pid = child.id();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(WATCH_ENDS_WITHIN);
        let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
    });
    let output = child.wait_with_output().expect("watch output");
    drop(killer);
    common::text(&output)
}

fn walk_through(binary: &Path, dir: &Path, base: u16, certs: &Certs) {
    std::fs::create_dir_all(dir).expect("data dir");
    let extra = ["--snapshot-count=100"];
    let mut cluster = common::Cluster::start_tls(binary, dir, base, certs, "root", &extra);
    let what = binary.file_name().expect("name").to_string_lossy().to_string();
    let what = what.as_str();
    let endpoint = cluster.members[0].endpoint();
    let plain = certs.client_flags(certs.client("root"));
    let alice = certs.client_flags(certs.client("alice"));
    // A password login on a connection whose certificate names alice: the
    // token wins over the certificate, as in etcd.
    let as_user = |user: &str| [alice.clone(), vec![format!("--user={user}")]].concat();
    let root = as_user("root:rootpw");

    ok(
        what,
        &endpoint,
        &plain,
        &["user", "add", "root", "--new-user-password=rootpw"],
        "User root created",
    );
    ok(what, &endpoint, &plain, &["auth", "enable"], "Authentication Enabled");
    ok(what, &endpoint, &root, &["put", "k", "v"], "OK");
    refused(what, &endpoint, &as_user("root:wrong"), &["get", "k"], BAD_PASSWORD);
    ok(
        what,
        &endpoint,
        &root,
        &["role", "add", "alice-rw"],
        "Role alice-rw created",
    );
    let prefix = [
        "role",
        "grant-permission",
        "alice-rw",
        "readwrite",
        "alice/",
        "--prefix",
    ];
    ok(what, &endpoint, &root, &prefix, "Role alice-rw updated");
    ok(
        what,
        &endpoint,
        &root,
        &["user", "add", "alice", "--no-password"],
        "User alice created",
    );
    ok(
        what,
        &endpoint,
        &root,
        &["user", "grant-role", "alice", "alice-rw"],
        "Role alice-rw is granted to user alice",
    );

    ok(what, &endpoint, &alice, &["put", "alice/x", "1"], "OK");
    refused(what, &endpoint, &alice, &["put", "bob/x", "1"], DENIED);
    let watched = watch(&endpoint, &alice, &["bob/", "--prefix"]);
    assert!(
        watched.contains(DENIED),
        "{what}: a watch of bob/ was not denied: {watched}"
    );
    let revoke = ["role", "revoke-permission", "alice-rw", "alice/", "--prefix"];
    ok(
        what,
        &endpoint,
        &root,
        &revoke,
        "Permission of range [alice/, alice0) is revoked from role alice-rw",
    );
    refused(what, &endpoint, &alice, &["put", "alice/y", "1"], DENIED);

    catch_up_by_snapshot(what, &mut cluster, certs, &root);

    for i in 0..3 {
        cluster.kill(i);
    }
    for i in 0..3 {
        cluster.spawn(i);
    }
    cluster.wait_healthy(&[0, 1, 2]);
    ok(
        what,
        &endpoint,
        &root,
        &["auth", "status"],
        "Authentication Status: true",
    );
    refused(what, &endpoint, &alice, &["put", "alice/z", "1"], DENIED);
    ok(what, &endpoint, &root, &["get", "alice/x", "--print-value-only"], "1");
    refused(what, &endpoint, &as_user("carol:carolpw"), &["get", "k"], DENIED);
}

/// Kills the third member, adds user carol and makes enough puts that
/// the member must catch up by snapshot; then carol logs in through it.
fn catch_up_by_snapshot(what: &str, cluster: &mut common::Cluster, certs: &Certs, root: &[String]) {
    let endpoint = cluster.members[0].endpoint();
    cluster.kill(2);
    ok_after_election(
        what,
        &endpoint,
        root,
        &["user", "add", "carol", "--new-user-password=carolpw"],
        "User carol created",
    );
    let endpoints = format!("--endpoints={}", cluster.members[0].endpoint());
    let mut args: Vec<&str> = vec![&endpoints];
    let flags = certs.client_flags(certs.client("root"));
    args.extend(flags.iter().map(String::as_str));
    args.extend([
        "--user=root:rootpw",
        "--conns=10",
        "--clients=100",
        "put",
        "--key-size=8",
        "--sequential-keys",
        "--val-size=16",
        "--total",
        PUTS_WHILE_DOWN,
    ]);
    let report = common::etcd_benchmark(&args);
    assert!(!report.contains("Error distribution"), "{what}: puts failed:\n{report}");
    cluster.spawn(2);
    cluster.wait_healthy(&[2]);
    let third = cluster.members[2].endpoint();
    let carol = [
        certs.client_flags(certs.client("alice")),
        vec!["--user=carol:carolpw".into()],
    ]
    .concat();
    let deadline = Instant::now() + CATCH_UP_WITHIN;
    loop {
        // carol holds no role: a denial shows the login itself worked.
        let (_, said) = etcdctl(&third, &carol, &["get", "k"]);
        if said.contains(DENIED) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: carol cannot log in through the restarted member: {said}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let log = std::fs::read_to_string(cluster.dir.join("infra3.log")).expect("member log");
    assert!(
        log.contains("installed a snapshot") || log.contains("applied snapshot"),
        "{what}: the restarted member did not catch up by snapshot; its log is in {}",
        cluster.dir.display()
    );
}
