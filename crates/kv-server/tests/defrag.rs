//! Goal: `etcdctl defrag` gives back the space of what was deleted and
//! compacted, as etcd's does, and a member killed while it defragments
//! loses nothing.
//!
//! Method: a single-member kv-server and a single-member real etcd
//! v3.5.17: 20,000 puts of 1 KiB, all but 1,000 keys deleted, compacted at
//! the current revision; `endpoint status -w json` before and after
//! `etcdctl defrag` must show dbSize at least halved (and dbSizeInUse no
//! more than dbSize), and every kept key still served. Then for kv-server,
//! three times: 1,000 more puts, and a defrag, copying sled, that stops
//! the process (a failpoint's abort) once the value files are reclaimed,
//! once the copy is complete, then once the new generation is current
//! and the old one not yet removed; restarted, the member serves every
//! key it acknowledged, and defragments again.
//!
//! Needs etcd and etcdctl: `ETCD_BIN` and `ETCDCTL_BIN`, or the cache that
//! `tools/etcd-peers/build.sh` fills.

mod common;

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use kv_server::proto::etcdserverpb as pb;
use kv_server::proto::etcdserverpb::kv_client::KvClient;
use serde_json::Value;

const KEYS: usize = 20_000;
const KEPT: usize = 1000;
const VALUE_BYTES: usize = 1024;
/// Puts in flight at once while filling.
const WRITERS: usize = 8;
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

use common::etcdctl;

fn succeeded(output: Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// (dbSize, dbSizeInUse, revision) from `endpoint status -w json`.
fn sizes(endpoint: &str) -> (u64, u64, u64) {
    let status: Value =
        serde_json::from_str(&succeeded(etcdctl(endpoint, &["endpoint", "status", "-w", "json"]))).expect("json");
    let status = &status[0]["Status"];
    (
        status["dbSize"].as_u64().expect("dbSize"),
        status["dbSizeInUse"].as_u64().expect("dbSizeInUse"),
        status["header"]["revision"].as_u64().expect("revision"),
    )
}

fn key(i: usize) -> Vec<u8> {
    format!("defrag/{i:05}").into_bytes()
}

/// Puts keys `range` with `WRITERS` clients at once.
async fn fill(endpoint: &str, range: std::ops::Range<usize>) {
    let channel = common::connect(endpoint, CALL_TIMEOUT).await.expect("connect");
    let mut writers = Vec::new();
    for writer in 0..WRITERS {
        let mut kv = KvClient::new(channel.clone());
        let keys: Vec<usize> = range.clone().filter(|i| i % WRITERS == writer).collect();
        writers.push(tokio::spawn(async move {
            for i in keys {
                let put = pb::PutRequest {
                    key: key(i),
                    value: vec![b'a' + (i % 26) as u8; VALUE_BYTES],
                    ..Default::default()
                };
                kv.put(put).await.expect("put");
            }
        }));
    }
    for writer in writers {
        writer.await.expect("writer");
    }
}

/// How many keys under `defrag/` the member serves, each checked to hold
/// its value.
async fn served(endpoint: &str) -> usize {
    let kvs = common::range(endpoint, b"defrag/", b"defrag0", CALL_TIMEOUT).await;
    for kv in &kvs {
        let i: usize = String::from_utf8_lossy(&kv.key[7..]).parse().expect("numbered key");
        assert_eq!(kv.value, vec![b'a' + (i % 26) as u8; VALUE_BYTES], "key {i}");
    }
    kvs.len()
}

/// How long Status's `dbSizeInUse` may take to show a change: etcd's
/// shows it at its next backend commit (100 ms), kv-server's at its next
/// count (about a second while the store changes, at once after a
/// compaction's apply and again once its removals, done in steps, are
/// over).
const IN_USE_SHOWS_WITHIN: Duration = Duration::from_secs(10);

/// Waits until the member's (dbSize, dbSizeInUse) satisfy `holds`;
/// returns them.
fn in_use_until(endpoint: &str, what: &str, holds: impl Fn(u64, u64) -> bool) -> (u64, u64) {
    let deadline = std::time::Instant::now() + IN_USE_SHOWS_WITHIN;
    loop {
        let (size, in_use, _) = sizes(endpoint);
        if holds(size, in_use) {
            return (size, in_use);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: in use {in_use} of {size}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Fills (in use shows it), deletes all but `KEPT` keys, compacts (in use
/// falls to at most half the size) and defragments; checks the size at
/// least halves.
async fn shrinks(binary: &Path, dir: &Path, port: u16) -> common::Cluster {
    let cluster = common::Cluster::start_members(binary, dir, port, 1, &[]);
    let endpoint = cluster.members[0].endpoint();
    fill(&endpoint, 0..KEYS).await;
    let filled = (KEYS * VALUE_BYTES) as u64;
    in_use_until(&endpoint, "after the fill", |_, in_use| in_use >= filled);
    let from = String::from_utf8(key(KEPT)).expect("utf-8");
    succeeded(etcdctl(&endpoint, &["del", &from, "defrag0"]));
    let (_, _, revision) = sizes(&endpoint);
    succeeded(etcdctl(&endpoint, &["compact", &revision.to_string(), "--physical"]));
    let (before, _) = in_use_until(&endpoint, "after the compaction", |size, in_use| in_use * 2 <= size);
    let said = succeeded(etcdctl(&endpoint, &["defrag"]));
    assert!(said.contains("Finished defragmenting etcd member"), "{said}");
    let (after, in_use, _) = sizes(&endpoint);
    eprintln!("{}: dbSize {before} before defrag, {after} after", binary.display());
    assert!(after * 2 <= before, "dbSize {before} before defrag, {after} after");
    assert!(in_use <= after, "in use {in_use}, size {after}");
    let kept_bytes = (KEPT * VALUE_BYTES) as u64;
    assert!(
        in_use >= kept_bytes,
        "in use {in_use}, below the {kept_bytes} bytes kept"
    );
    assert_eq!(served(&endpoint).await, KEPT);
    cluster
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defrag_gives_space_back_as_etcds_does() {
    let etcd_dir = tempfile::tempdir().expect("tempdir");
    drop(shrinks(&common::etcd_tool("ETCD_BIN", "etcd"), etcd_dir.path(), 21379).await);

    let dir = tempfile::tempdir().expect("tempdir");
    let mut cluster = shrinks(&common::kv_server_with_failpoints(), dir.path(), 21479).await;
    let endpoint = cluster.members[0].endpoint();

    // Killed in the middle of a defragmentation, at each point a crash
    // leaves something to clean up: the copy complete, and the new
    // generation current with the old one not yet removed.
    let mut expected = KEPT;
    // The copy of sled is forced: the store is far too small for sled to
    // be bloated, when a defragmentation reclaims the value files only.
    let crash_points = ["mvcc::defrag_reclaimed", "mvcc::defrag_copied", "mvcc::defrag_switched"];
    for (round, crash_at) in crash_points.iter().enumerate() {
        let more = KEYS + round * 1000;
        fill(&endpoint, more..more + 1000).await;
        expected += 1000;
        cluster.kill(0);
        let armed = format!("mvcc::defrag_copy_sled=return;{crash_at}=return");
        cluster.members[0].env = vec![("FAILPOINTS".into(), armed)];
        cluster.spawn(0);
        cluster.wait_healthy(&[0]);
        let output = etcdctl(&endpoint, &["defrag"]);
        assert!(!output.status.success(), "the member stops at {crash_at}");
        cluster.kill(0);
        cluster.members[0].env.clear();
        cluster.spawn(0);
        cluster.wait_healthy(&[0]);
        assert_eq!(
            served(&endpoint).await,
            expected,
            "every acknowledged key after {crash_at}"
        );
        let said = succeeded(etcdctl(&endpoint, &["defrag"]));
        assert!(said.contains("Finished defragmenting etcd member"), "{said}");
        assert_eq!(served(&endpoint).await, expected);
    }
}
