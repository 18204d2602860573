//! Goal: `kv-server snapshot restore` takes a snapshot that real etcd
//! wrote, so moving an etcd cluster's data onto kv-server is one command,
//! and nothing of it changes on the way.
//!
//! Method: a real etcd v3.5.17 member on loopback takes 10,000 puts (every
//! tenth key on one of two leases), a compaction at half the revision,
//! then every 7th key overwritten (version 2) and every 13th deleted and
//! put again (a new create revision). Real etcdctl saves a snapshot; `kv-server snapshot
//! restore` (etcdutl's flags) builds a new member from it. The restored
//! member must answer `etcdctl get --prefix -w json` with exactly the
//! source's key-values (key, value, create and mod revision, version,
//! lease), list the same leases, and answer `endpoint hashkv` with the
//! source's hash and compact revision at the same revision. A copy of the
//! file with one byte changed is refused for its SHA-256; the database
//! without the SHA-256 (a member's own file) is refused without
//! `--skip-hash-check`, and restores with it. A restore stopped part way
//! (a failpoint's abort, the store half written) leaves a directory that
//! a member refuses to start from, saying so; removed and restored again,
//! it serves everything, as above.
//!
//! Needs etcd and etcdctl: `ETCD_BIN` and `ETCDCTL_BIN`, or the cache
//! that `tools/etcd-peers/build.sh` fills.

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use kv_server::proto::etcdserverpb as pb;
use kv_server::proto::etcdserverpb::kv_client::KvClient;
use kv_server::proto::etcdserverpb::lease_client::LeaseClient;
use serde_json::Value;

const KEYS: usize = 10_000;
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
const LEASES: [i64; 2] = [0x1111, 0x2222];
/// Puts in flight at once.
const WRITERS: usize = 8;

use common::etcdctl;

fn json(output: Output) -> Value {
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("etcdctl prints JSON")
}

fn put(i: usize, round: usize) -> pb::PutRequest {
    pb::PutRequest {
        key: format!("restore/{i:05}").into_bytes(),
        value: format!("value {i} round {round} {}", "r".repeat(i % 40)).into_bytes(),
        lease: if i.is_multiple_of(10) { LEASES[i / 10 % 2] } else { 0 },
        ..Default::default()
    }
}

/// Runs `requests` with `WRITERS` clients at once.
async fn write_all(endpoint: &str, requests: Vec<Request>) {
    let channel = common::connect(endpoint, CALL_TIMEOUT).await.expect("connect");
    let mut writers = Vec::new();
    for writer in 0..WRITERS {
        let mut kv = KvClient::new(channel.clone());
        let mine: Vec<Request> = requests
            .iter()
            .enumerate()
            .filter(|(n, _)| n % WRITERS == writer)
            .map(|(_, r)| r.clone())
            .collect();
        writers.push(tokio::spawn(async move {
            for request in mine {
                match request {
                    Request::Put(put) => drop(kv.put(put).await.expect("put")),
                    Request::Recreate(put) => {
                        let delete = pb::DeleteRangeRequest {
                            key: put.key.clone(),
                            ..Default::default()
                        };
                        kv.delete_range(delete).await.expect("delete");
                        kv.put(put).await.expect("put again");
                    }
                }
            }
        }));
    }
    for writer in writers {
        writer.await.expect("writer");
    }
}

#[derive(Clone)]
enum Request {
    Put(pb::PutRequest),
    /// Delete the key, then put it again.
    Recreate(pb::PutRequest),
}

/// (hash, compact revision, revision) from `endpoint hashkv -w json`.
fn hash_kv(endpoint: &str) -> (u64, i64, i64) {
    let answer = json(etcdctl(endpoint, &["endpoint", "hashkv", "-w", "json"]));
    let hash_kv = &answer[0]["HashKV"];
    (
        hash_kv["hash"].as_u64().expect("hash"),
        hash_kv["compact_revision"].as_i64().unwrap_or(0),
        hash_kv["header"]["revision"].as_i64().expect("revision"),
    )
}

fn leases(endpoint: &str) -> Vec<String> {
    let output = etcdctl(endpoint, &["lease", "list"]);
    assert!(output.status.success());
    let mut ids: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|line| !line.starts_with("found"))
        .map(str::to_string)
        .collect();
    ids.sort();
    ids
}

fn restore(file: &Path, data_dir: &Path, peer: &str, skip_hash_check: bool) -> Output {
    let command = common::restore_command(&[common::kv_server()], file, data_dir, peer);
    restore_with(command, skip_hash_check)
}

fn restore_with(mut command: Command, skip_hash_check: bool) -> Output {
    if skip_hash_check {
        command.arg("--skip-hash-check");
    }
    command.output().expect("run kv-server snapshot restore")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_etcd_wrote_restores_unchanged() {
    let files = tempfile::tempdir().expect("tempdir");
    let etcd_dir = tempfile::tempdir().expect("tempdir");
    let etcd = common::Cluster::start_members(&common::etcd_tool("ETCD_BIN", "etcd"), etcd_dir.path(), 29579, 1, &[]);
    let source = etcd.members[0].endpoint();
    let channel = common::connect(&source, CALL_TIMEOUT).await.expect("connect");
    for id in LEASES {
        let grant = pb::LeaseGrantRequest { ttl: 3600, id };
        LeaseClient::new(channel.clone())
            .lease_grant(grant)
            .await
            .expect("grant");
    }
    write_all(&source, (0..KEYS).map(|i| Request::Put(put(i, 0))).collect()).await;
    let status = json(etcdctl(&source, &["endpoint", "status", "-w", "json"]));
    let revision = status[0]["Status"]["header"]["revision"].as_i64().expect("revision");
    let compacted = etcdctl(&source, &["compact", &(revision / 2).to_string(), "--physical"]);
    assert!(
        compacted.status.success(),
        "{}",
        String::from_utf8_lossy(&compacted.stderr)
    );
    let later: Vec<Request> = (0..KEYS)
        .filter_map(|i| match (i % 7, i % 13) {
            (_, 0) => Some(Request::Recreate(put(i, 2))),
            (0, _) => Some(Request::Put(put(i, 1))),
            _ => None,
        })
        .collect();
    write_all(&source, later).await;
    let file = files.path().join("etcd.db");
    let saved = etcdctl(&source, &["snapshot", "save", file.to_str().expect("utf-8")]);
    assert!(saved.status.success(), "{}", String::from_utf8_lossy(&saved.stderr));
    let expected = json(etcdctl(&source, &["get", "restore/", "--prefix", "-w", "json"]));
    let expected_hash = hash_kv(&source);
    let expected_leases = leases(&source);
    drop(etcd);
    assert_eq!(expected["kvs"].as_array().map(Vec::len), Some(KEYS));
    assert_eq!(expected_leases.len(), LEASES.len());

    // A changed byte: refused for the digest.
    let damaged = files.path().join("damaged.db");
    let bytes = std::fs::read(&file).expect("read the snapshot");
    let mut changed = bytes.clone();
    let last = changed.len() - 40;
    changed[last] ^= 0xff;
    std::fs::write(&damaged, &changed).expect("write the copy");
    let peer = "http://127.0.0.1:29680";
    let refused = restore(&damaged, &files.path().join("refused"), peer, false);
    assert!(!refused.status.success(), "a damaged file is refused");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("sha256"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );

    // The database alone, as in a member's data directory.
    let raw = files.path().join("raw.db");
    std::fs::write(&raw, &bytes[..bytes.len() - 32]).expect("write the copy");
    let refused = restore(&raw, &files.path().join("unhashed"), peer, false);
    assert!(
        !refused.status.success(),
        "a file without its digest needs --skip-hash-check"
    );
    let unchecked = restore(&raw, &files.path().join("unchecked"), peer, true);
    assert!(
        unchecked.status.success(),
        "{}",
        String::from_utf8_lossy(&unchecked.stderr)
    );

    // Killed part way: the member refuses to start from what is left, and
    // a restore again (after removing it) comes out whole.
    let restored_dir = tempfile::tempdir().expect("tempdir");
    let data_dir = restored_dir.path().join("infra1");
    let mut crash = common::restore_command(&[common::kv_server_with_failpoints()], &file, &data_dir, peer);
    crash.env("FAILPOINTS", "mvcc::restore_started=return");
    let crashed = restore_with(crash, false);
    assert!(!crashed.status.success(), "the restore stops at the failpoint");
    let start = Command::new(common::kv_server())
        .args(["--name", "infra1", "--data-dir"])
        .arg(&data_dir)
        .args([
            "--listen-client-urls",
            "http://127.0.0.1:29679",
            "--listen-peer-urls",
            peer,
        ])
        .output()
        .expect("start on the unfinished directory");
    let said = String::from_utf8_lossy(&start.stderr);
    assert!(!start.status.success() && said.contains("did not finish"), "{said}");
    std::fs::remove_dir_all(&data_dir).expect("remove the unfinished directory");

    let output = restore(&file, &data_dir, peer, false);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let restored = common::Cluster::start_members(&common::kv_server(), restored_dir.path(), 29679, 1, &[]);
    let endpoint = restored.members[0].endpoint();
    let answered = json(etcdctl(&endpoint, &["get", "restore/", "--prefix", "-w", "json"]));
    assert_eq!(answered["kvs"], expected["kvs"], "every key-value as etcd held it");
    assert_eq!(answered["count"], expected["count"]);
    assert_eq!(hash_kv(&endpoint), expected_hash, "HashKV at the same revision");
    assert_eq!(leases(&endpoint), expected_leases);
}
