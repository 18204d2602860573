//! Goal: an operator's membership runbook works against kv-server as it
//! does against etcd, through real etcdctl v3.5.17, and keeps the data at
//! every step.
//!
//! Method: the same steps against a real etcd v3.5.17 cluster and a
//! kv-server cluster, each three member processes on loopback:
//!
//! 1. 1,000 keys are written;
//! 2. `member add --learner` adds a 4th member, started with the
//!    `ETCD_INITIAL_CLUSTER` line the command printed and state existing;
//!    as a learner it refuses a put and a linearizable read with "rpc not
//!    supported for learner";
//! 3. `member promote` promotes it once it has caught up (tried until the
//!    leader finds it in sync, at most [`CATCH_UP_WITHIN`]); it serves
//!    every key;
//! 4. `member remove` removes the 1st member, whose process then exits;
//! 5. `member list` shows three voters;
//! 6. a key written through the new member reads back linearizably from
//!    another;
//! 7. `snapshot save` from the new member;
//! 8. the file is restored (`kv-server snapshot restore` with etcdutl's
//!    flags, and etcdutl itself for etcd) into a fresh single member,
//!    which serves every key with the value written.
//!
//! Then `member list -w json` and `endpoint status -w json` from both
//! clusters after step 5 must agree field for field once ids, terms,
//! raft indexes, sizes and ports are blanked (revisions stay: the same
//! writes give the same revision).
//!
//! Needs etcd, etcdctl and etcdutl: `ETCD_BIN`, `ETCDCTL_BIN` and
//! `ETCDUTL_BIN`, or the cache that `tools/etcd-peers/build.sh` fills.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use kv_server::proto::etcdserverpb as pb;
use kv_server::proto::etcdserverpb::kv_client::KvClient;
use serde_json::Value;

const KEYS: usize = 1000;
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the learner may take to catch up before its promotion.
const CATCH_UP_WITHIN: Duration = Duration::from_secs(30);
/// How long a removed member may take to exit.
const EXIT_WITHIN: Duration = Duration::from_secs(30);
/// How long a reconfiguration refused as "unhealthy" (peers connected for
/// under etcd's 5 s health interval, which a cluster just started is) is
/// retried.
const HEALTHY_WITHIN: Duration = Duration::from_secs(15);

/// What one run of the runbook leaves to compare.
struct Outcome {
    member_list: Value,
    endpoint_status: Value,
}

use common::{etcdctl, etcdctl_until, text};

fn json(output: &Output) -> Value {
    assert!(output.status.success(), "{}", text(output));
    serde_json::from_slice(&output.stdout).expect("etcdctl prints JSON")
}

async fn write_keys(endpoint: &str) {
    let channel = common::connect(endpoint, CALL_TIMEOUT).await.expect("connect");
    let mut kv = KvClient::new(channel);
    for i in 0..KEYS {
        let put = pb::PutRequest {
            key: key(i).into_bytes(),
            value: value(i).into_bytes(),
            ..Default::default()
        };
        kv.put(put).await.expect("put");
    }
}

fn key(i: usize) -> String {
    format!("runbook/{i:04}")
}

fn value(i: usize) -> String {
    format!("value {i} {}", "v".repeat(i % 50))
}

/// Every key under `runbook/` that `endpoint` serves, as (key, value),
/// read with etcdctl (serializably when asked). Keys and values here hold
/// no newline, so etcdctl's plain output is key and value lines.
fn served(endpoint: &str, serializable: bool) -> Vec<(String, String)> {
    let mut args = vec!["get", "runbook/", "--prefix"];
    if serializable {
        args.push("--consistency=s");
    }
    let output = etcdctl(endpoint, &args);
    assert!(output.status.success(), "{}", text(&output));
    let stdout = String::from_utf8(output.stdout).expect("utf-8");
    let lines: Vec<&str> = stdout.lines().collect();
    lines
        .chunks(2)
        .map(|pair| (pair[0].to_string(), pair.get(1).unwrap_or(&"").to_string()))
        .collect()
}

/// The keys the runbook writes, sorted, with the one written through the
/// new member once it has been.
fn expected_keys(with_new: bool) -> Vec<(String, String)> {
    let mut keys: Vec<(String, String)> = (0..KEYS).map(|i| (key(i), value(i))).collect();
    if with_new {
        keys.push(("runbook/new".into(), "through the new member".into()));
    }
    keys.sort();
    keys
}

/// The member ids by name, from `member list -w json`.
fn member_ids(list: &Value) -> Vec<(String, u64)> {
    list["members"]
        .as_array()
        .expect("members")
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap_or("").to_string(),
                m["ID"].as_u64().expect("ID"),
            )
        })
        .collect()
}

fn wait_exit(cluster: &mut common::Cluster, i: usize) {
    let deadline = Instant::now() + EXIT_WITHIN;
    while cluster.exit_status(i).is_none() {
        assert!(Instant::now() < deadline, "the removed member is still running");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Steps 1–7 on a running 3-member cluster; returns the snapshot's path
/// and what to compare.
async fn runbook(cluster: &mut common::Cluster, files: &Path) -> (PathBuf, Outcome) {
    let base = cluster.members[0].client_port;
    write_keys(&cluster.members[0].endpoint()).await;

    // 2. A learner.
    let first_three = cluster.endpoints();
    let peer = format!("http://127.0.0.1:{}", base + 31);
    let added = etcdctl_until(
        &first_three,
        &["member", "add", "infra4", "--learner", "--peer-urls", &peer],
        "unhealthy cluster",
        HEALTHY_WITHIN,
    );
    cluster.add_joining("infra4", base + 30, &text(&added), Vec::new());
    cluster.spawn(3);
    cluster.wait_healthy(&[3]);
    let learner = cluster.members[3].endpoint();
    // A member lists as started once it has published its name.
    let deadline = Instant::now() + CATCH_UP_WITHIN;
    while !text(&etcdctl(&first_three, &["member", "list"])).contains("infra4") {
        assert!(Instant::now() < deadline, "the new member never published its name");
        std::thread::sleep(Duration::from_millis(200));
    }
    let list = json(&etcdctl(&first_three, &["member", "list", "-w", "json"]));
    let ids = member_ids(&list);
    let id_of = |name: &str| ids.iter().find(|(n, _)| n == name).map(|(_, id)| *id);
    let learner_id = list["members"]
        .as_array()
        .and_then(|members| members.iter().find(|m| m["isLearner"] == Value::Bool(true)))
        .and_then(|m| m["ID"].as_u64())
        .expect("the learner is listed as one");

    // A learner serves serializable reads only: every key, once caught up.
    let deadline = Instant::now() + CATCH_UP_WITHIN;
    while served(&learner, true) != expected_keys(false) {
        assert!(Instant::now() < deadline, "the learner never held every key");
        std::thread::sleep(Duration::from_millis(200));
    }
    for refused in [&["put", "runbook/refused", "v"][..], &["get", "runbook/0001"][..]] {
        let answer = etcdctl(&learner, refused);
        let said = text(&answer);
        assert!(
            !answer.status.success() && said.contains("etcdserver: rpc not supported for learner"),
            "{refused:?} on the learner: {said}"
        );
    }

    // 3. Promoted once in sync.
    let promote = format!("{learner_id:x}");
    etcdctl_until(
        &first_three,
        &["member", "promote", &promote],
        "in sync with leader",
        CATCH_UP_WITHIN,
    );
    assert_eq!(
        served(&learner, true),
        expected_keys(false),
        "the new member holds every key"
    );

    // 4. The first member removed; it exits.
    let first = format!("{:x}", id_of("infra1").expect("infra1 listed"));
    let others = [1, 2, 3].map(|i| cluster.members[i].endpoint()).join(",");
    etcdctl_until(
        &others,
        &["member", "remove", &first],
        "unhealthy cluster",
        HEALTHY_WITHIN,
    );
    wait_exit(cluster, 0);
    assert_eq!(
        served(&cluster.members[2].endpoint(), false),
        expected_keys(false),
        "the members left hold every key"
    );

    // 5. Three voters, each holding every key.
    let member_list = json(&etcdctl(&others, &["member", "list", "-w", "json"]));
    let members = member_list["members"].as_array().expect("members");
    assert_eq!(members.len(), 3, "{member_list}");
    assert!(members.iter().all(|m| m.get("isLearner").is_none_or(|l| l == false)));
    for i in 1..4 {
        let endpoint = cluster.members[i].endpoint();
        assert_eq!(served(&endpoint, true), expected_keys(false), "voter {i}");
    }
    let endpoint_status = json(&etcdctl(&others, &["endpoint", "status", "-w", "json"]));

    // 6. Written through the new member, read linearizably from another.
    let put = etcdctl(&learner, &["put", "runbook/new", "through the new member"]);
    assert!(put.status.success(), "{}", text(&put));
    assert_eq!(served(&cluster.members[1].endpoint(), false), expected_keys(true));

    // 7. A snapshot from the new member.
    let path = files.join(format!("runbook-{base}.db"));
    let saved = etcdctl(&learner, &["snapshot", "save", path.to_str().expect("utf-8 path")]);
    assert!(saved.status.success(), "{}", text(&saved));
    // The file holds the data: step 8 restores it and reads every key.
    let length = std::fs::metadata(&path).expect("the snapshot file").len();
    assert!(length > (KEYS * 10) as u64, "a snapshot of {length} bytes");
    let outcome = Outcome {
        member_list: blank(member_list, base),
        endpoint_status: blank(endpoint_status, base),
    };
    (path, outcome)
}

/// Step 8: restores `file` with `tool` (argv before the file) into a new
/// single member on `port`, starts it with `binary`, and checks it serves
/// every key.
async fn restore_and_check(tool: &[PathBuf], binary: &Path, file: &Path, dir: &Path, port: u16) {
    let peer = format!("http://127.0.0.1:{}", port + 1);
    let output = common::restore_command(tool, file, &dir.join("infra1"), &peer)
        .output()
        .expect("run the restore");
    assert!(output.status.success(), "{}", text(&output));
    let single = common::Cluster::start_members(binary, dir, port, 1, &[]);
    assert_eq!(served(&single.members[0].endpoint(), false), expected_keys(true));
}

/// `value` with every field that differs between two healthy clusters by
/// nature blanked: ids, terms, raft indexes, sizes, and ports
/// (written as their offset from the cluster's `base` port).
fn blank(value: Value, base: u16) -> Value {
    const BLANKED: [&str; 10] = [
        "ID",
        "cluster_id",
        "member_id",
        "raft_term",
        "dbSize",
        "dbSizeInUse",
        "leader",
        "raftIndex",
        "raftTerm",
        "raftAppliedIndex",
    ];
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| {
                    let v = if BLANKED.contains(&k.as_str()) {
                        Value::from(0)
                    } else {
                        blank(v, base)
                    };
                    (k, v)
                })
                .collect(),
        ),
        Value::Array(items) => {
            let mut items: Vec<Value> = items.into_iter().map(|v| blank(v, base)).collect();
            items.sort_by_key(|v| v.to_string());
            Value::Array(items)
        }
        Value::String(s) => Value::String(offset_ports(&s, base)),
        other => other,
    }
}

/// Writes every `127.0.0.1:<port>` in `s` as `127.0.0.1:+<port - base>`.
fn offset_ports(s: &str, base: u16) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(at) = rest.find("127.0.0.1:") {
        let after = &rest[at + "127.0.0.1:".len()..];
        let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
        out.push_str(&rest[..at]);
        match digits.parse::<u16>() {
            Ok(port) => out.push_str(&format!("127.0.0.1:+{}", port.wrapping_sub(base))),
            Err(_) => out.push_str("127.0.0.1:"),
        }
        rest = &after[digits.len()..];
    }
    out.push_str(rest);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_membership_runbook_matches_etcd() {
    let files = tempfile::tempdir().expect("tempdir");

    let etcd_bin = common::etcd_tool("ETCD_BIN", "etcd");
    let etcd_dir = tempfile::tempdir().expect("tempdir");
    let mut etcd = common::Cluster::start(&etcd_bin, etcd_dir.path(), 27379, &[]);
    let (etcd_file, etcd_outcome) = runbook(&mut etcd, files.path()).await;
    drop(etcd);
    let restored = tempfile::tempdir().expect("tempdir");
    let etcdutl = common::etcd_tool("ETCDUTL_BIN", "etcdutl");
    restore_and_check(&[etcdutl], &etcd_bin, &etcd_file, restored.path(), 27429).await;

    let kv_dir = tempfile::tempdir().expect("tempdir");
    let mut kv = common::Cluster::start(&common::kv_server(), kv_dir.path(), 28379, &[]);
    let (kv_file, kv_outcome) = runbook(&mut kv, files.path()).await;
    drop(kv);
    let restored = tempfile::tempdir().expect("tempdir");
    restore_and_check(
        &[common::kv_server()],
        &common::kv_server(),
        &kv_file,
        restored.path(),
        28429,
    )
    .await;

    assert_eq!(kv_outcome.member_list, etcd_outcome.member_list, "member list -w json");
    assert_eq!(
        kv_outcome.endpoint_status, etcd_outcome.endpoint_status,
        "endpoint status -w json"
    );
}
