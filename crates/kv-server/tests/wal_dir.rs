//! Goal: `--wal-dir` (kubeasz and KubeBlocks pass it) puts the WAL in its
//! own directory, as etcd 3.5.17 does, and every acknowledged write
//! survives kill -9 of every member; the WAL moved to another directory
//! is found there; and what etcd takes and loses data over is refused at
//! start with a clear error, the data directory untouched: a WAL
//! directory equal to the data directory, and a member whose WAL moved
//! while its flags did not follow.
//!
//! Method: a 3-member cluster of real etcd and one of kv-server, each
//! member's `ETCD_WAL_DIR` a directory beside its data directory; 200
//! puts through etcdctl; every member killed with SIGKILL and restarted;
//! the keys counted, and the WAL directories and data directories listed.

mod common;

use std::path::{Path, PathBuf};

const KEYS: usize = 200;

fn wal_dir(root: &Path, i: usize) -> PathBuf {
    root.join(format!("wal-{i}"))
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|entry| entry.ok())
                .map(|entry| entry.file_name().to_string_lossy().to_string())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn the_wal_lives_in_wal_dir_and_survives_kill_9() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, binary, base) in [
        ("etcd", common::etcd_tool("ETCD_BIN", "etcd"), 18079),
        ("kv-server", common::kv_server(), 18179),
    ] {
        let root = dir.path().join(name);
        let mut cluster = common::Cluster::new(&binary, &root.join("data"), base, 3, &[]);
        for (i, member) in cluster.members.iter_mut().enumerate() {
            member.env = vec![("ETCD_WAL_DIR".into(), wal_dir(&root, i).display().to_string())];
        }
        cluster.start_all();
        let endpoints = cluster.endpoints();
        for i in 0..KEYS {
            let put = common::etcdctl(&endpoints, &["put", &format!("wal/{i:03}"), "v"]);
            assert!(put.status.success(), "{name}: {}", common::text(&put));
        }
        for i in 0..3 {
            cluster.kill(i);
        }
        for i in 0..3 {
            cluster.spawn(i);
        }
        cluster.wait_healthy(&[0, 1, 2]);
        for i in 0..3 {
            let member = cluster.members[i].endpoint();
            let count = common::etcdctl(&member, &["get", "wal/", "--prefix", "--count-only", "-w", "fields"]);
            assert!(
                common::text(&count).contains(&format!("\"Count\" : {KEYS}")),
                "{name} member {i}: {}",
                common::text(&count)
            );
            let wal = files_in(&wal_dir(&root, i));
            assert!(!wal.is_empty(), "{name} member {i}: the WAL is in --wal-dir");
            let data = cluster.data_dir(i);
            assert!(
                !data.join("member/wal").exists(),
                "{name} member {i}: no WAL in the data directory: {:?}",
                files_in(&data.join("member"))
            );
        }
    }
}

/// kv-server's start on `data` with `flags`: whether it was refused, and
/// what it said.
fn refused(data: &Path, flags: &[&str]) -> (bool, String) {
    let output = std::process::Command::new(common::kv_server())
        .args(["--data-dir", data.to_str().expect("a UTF-8 path")])
        .args(["--listen-client-urls", "http://127.0.0.1:18279"])
        .args(["--advertise-client-urls", "http://127.0.0.1:18279"])
        .args(["--listen-peer-urls", "http://127.0.0.1:18280"])
        .args(["--initial-advertise-peer-urls", "http://127.0.0.1:18280"])
        .args(["--initial-cluster", "default=http://127.0.0.1:18280"])
        .args(flags)
        .output()
        .expect("run kv-server");
    (!output.status.success(), common::text(&output))
}

#[test]
fn a_moved_wal_is_followed_and_losing_one_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let (was_refused, said) = refused(&data, &["--wal-dir", data.to_str().expect("path")]);
    assert!(was_refused && said.contains("--wal-dir"), "{said}");
    assert!(!data.exists(), "nothing was written");

    // A member with its WAL in --wal-dir, stopped.
    let mut cluster = common::Cluster::new(&common::kv_server(), &data, 18379, 1, &[]);
    let first = dir.path().join("wal-first");
    cluster.members[0].env = vec![("ETCD_WAL_DIR".into(), first.display().to_string())];
    cluster.start_all();
    let endpoint = cluster.members[0].endpoint();
    for i in 0..20 {
        let put = common::etcdctl(&endpoint, &["put", &format!("moved/{i:02}"), "v"]);
        assert!(put.status.success(), "{}", common::text(&put));
    }
    cluster.kill(0);
    let member_data = cluster.data_dir(0);
    let listing = files_in(&member_data.join("member"));

    // Started without --wal-dir, it would find no log over a full store.
    let (was_refused, said) = refused(&member_data, &[]);
    assert!(was_refused && said.contains("--wal-dir"), "{said}");
    assert_eq!(
        files_in(&member_data.join("member")),
        listing,
        "the data directory is untouched"
    );

    // The WAL moved to another disk, and --wal-dir with it: it serves.
    let second = dir.path().join("wal-second");
    std::fs::rename(&first, &second).expect("move the WAL");
    cluster.members[0].env = vec![("ETCD_WAL_DIR".into(), second.display().to_string())];
    cluster.spawn(0);
    cluster.wait_healthy(&[0]);
    let count = common::etcdctl(
        &endpoint,
        &["get", "moved/", "--prefix", "--count-only", "-w", "fields"],
    );
    assert!(
        common::text(&count).contains("\"Count\" : 20"),
        "{}",
        common::text(&count)
    );
    let put = common::etcdctl(&endpoint, &["put", "moved/after", "v"]);
    assert!(put.status.success(), "{}", common::text(&put));
}
