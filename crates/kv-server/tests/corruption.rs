//! Goal: a member whose store was altered while it was stopped raises the
//! CORRUPT alarm at start with `--experimental-initial-corrupt-check`, and
//! the leader's periodic check (`--experimental-corrupt-check-time`)
//! raises it for such a member too, whether the altered member follows or
//! leads (the members that agree are a quorum, so the odd one out is
//! named); every member then refuses writes with etcd's code and message
//! ("etcdserver: corrupt cluster"), and reads still work.
//!
//! Method: for each case, three kv-server members on loopback. 200 puts,
//! one of them a known value; once the store has written them (an idle
//! second), the third member is killed, its store opened here, the
//! value's bytes changed in place (same length, same revisions) and the
//! store written back. The member restarts; real etcdctl 3.5.17's `alarm
//! list` must show its CORRUPT alarm within [`ALARM_WITHIN`].
//! - initial: every member has the check; the two intact ones pass it.
//! - periodic, altered follower: every member has the check; whichever
//!   leads, the altered member is the one named.
//! - periodic, altered leader: only the altered member has the check (set
//!   through `ETCD_EXPERIMENTAL_CORRUPT_CHECK_TIME` on its restart), and
//!   leadership is moved to it, so it is the one comparing and must name
//!   itself.
//!
//! - compaction hashes: every member has
//!   `--experimental-compact-hash-check-enabled` at 1s; after the restart
//!   the altered history is compacted, and the leader's check must name
//!   the altered member. Beside it, etcd 3.5.17 and kv-server, intact,
//!   both log "successfully checked hash on whole cluster" for the
//!   compacted revision with two peers checked, raise nothing, and both
//!   refuse a check interval of 0s at start.
//!
//! Needs etcdctl: `ETCDCTL_BIN`, or the cache that
//! `tools/etcd-peers/build.sh` fills.

mod common;

use std::time::{Duration, Instant};

use kv_server::proto::etcdserverpb as pb;
use kv_server::proto::etcdserverpb::kv_client::KvClient;

const CALL_TIMEOUT: Duration = Duration::from_secs(30);
const INTACT: &[u8] = b"intact value!";
const ALTERED: &[u8] = b"ALTERED value";
/// How long the restarted member may take to catch up, compare and raise.
const ALARM_WITHIN: Duration = Duration::from_secs(30);

/// Runs etcdctl: whether it succeeded, and what it printed.
fn etcdctl(endpoint: &str, args: &[&str]) -> (bool, String) {
    let output = common::etcdctl(endpoint, args);
    (output.status.success(), common::text(&output))
}

/// Changes the known value in the stopped member's store in place.
fn alter(store_path: &std::path::Path) {
    let store = mvcc::Store::open(store_path).expect("open the stopped member's store");
    let (index, mut dump) = store.snapshot().expect("dump");
    let at = dump
        .windows(INTACT.len())
        .position(|window| window == INTACT)
        .expect("the store holds the value");
    dump[at..at + ALTERED.len()].copy_from_slice(ALTERED);
    store.restore(index, &dump).expect("write back");
    store.flush().expect("flush");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_altered_store_raises_corrupt_at_start() {
    let mut cluster = Altered::start(&["--experimental-initial-corrupt-check"], 23379).await;
    cluster.restart_altered(Vec::new());
    cluster.expect_corrupt().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leaders_periodic_check_finds_an_altered_member() {
    let mut cluster = Altered::start(&["--experimental-corrupt-check-time=1s"], 23479).await;
    cluster.restart_altered(Vec::new());
    cluster.expect_corrupt().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_altered_leader_names_itself() {
    let mut cluster = Altered::start(&[], 23579).await;
    let check = ("ETCD_EXPERIMENTAL_CORRUPT_CHECK_TIME".to_string(), "1s".to_string());
    cluster.restart_altered(vec![check]);
    let endpoints: Vec<String> = cluster.cluster.members.iter().map(|m| m.endpoint()).collect();
    let (leader, _) = common::leader(&endpoints, CALL_TIMEOUT).await;
    if leader != 2 {
        let target = format!("{:x}", cluster.altered_id);
        let moved = common::etcdctl_until(&endpoints[leader], &["move-leader", &target], "", ALARM_WITHIN);
        assert!(moved.status.success(), "{}", common::text(&moved));
    }
    cluster.expect_corrupt().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compaction_hash_check_finds_an_altered_member() {
    let flags = [
        "--experimental-compact-hash-check-enabled",
        "--experimental-compact-hash-check-time=1s",
    ];
    let mut cluster = Altered::start(&flags, 23679).await;
    cluster.restart_altered(Vec::new());
    // The altered history is compacted: each member records the hash of
    // what it compacted, and the altered member's differs.
    // The altered member may have led when it was killed: until the
    // others elect a leader a proposal can time out, so the compaction is
    // retried (a retry of one that did apply is told it is compacted).
    let first = cluster.cluster.members[0].endpoint();
    let deadline = Instant::now() + ALARM_WITHIN;
    loop {
        let (ok, said) = etcdctl(&first, &["compaction", "150"]);
        if ok || said.contains("required revision has been compacted") {
            break;
        }
        assert!(Instant::now() < deadline, "{said}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    cluster.expect_corrupt().await;
}

/// The leader's log line with `message`, from any member's log, waited for.
fn leader_line(cluster: &common::Cluster, message: &str) -> serde_json::Value {
    leader_line_where(cluster, message, |_| true)
}

/// The first log line with `message` that `wanted` accepts, from any
/// member's log, waited for.
fn leader_line_where(
    cluster: &common::Cluster,
    message: &str,
    wanted: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + ALARM_WITHIN;
    loop {
        for i in 0..cluster.members.len() {
            let text = std::fs::read_to_string(cluster.log_path(i)).unwrap_or_default();
            let found = text
                .lines()
                .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
                .find(|line| line["msg"] == message && wanted(line));
            if let Some(line) = found {
                return line;
            }
        }
        assert!(Instant::now() < deadline, "no {message:?} logged");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn the_compaction_hash_check_passes_and_logs_as_etcds() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, binary, base) in [
        ("etcd", common::etcd_tool("ETCD_BIN", "etcd"), 23779),
        ("kv-server", common::kv_server(), 23879),
    ] {
        let refused = common::run_within(
            &binary,
            &[
                "--data-dir",
                dir.path().join(format!("{name}-refused")).to_str().expect("path"),
                "--experimental-compact-hash-check-time=0s",
            ],
            Duration::from_secs(20),
        );
        let said = common::text(&refused);
        assert!(!refused.status.success(), "{name}: {said}");
        assert!(
            said.contains("compact-hash-check-time") && said.contains("must be >0 (set to 0s)"),
            "{name}: {said}"
        );

        let flags = [
            "--experimental-compact-hash-check-enabled",
            "--experimental-compact-hash-check-time=1s",
        ];
        let cluster = common::Cluster::start(&binary, &dir.path().join(name), base, &flags);
        let first = cluster.members[0].endpoint();
        for i in 0..20 {
            let (ok, said) = etcdctl(&first, &["put", &format!("hashed/{i}"), "v"]);
            assert!(ok, "{name}: {said}");
        }
        let (ok, said) = etcdctl(&first, &["compaction", "15"]);
        assert!(ok, "{name}: {said}");
        let checked = leader_line(&cluster, "successfully checked hash on whole cluster");
        assert_eq!(checked["number-of-peers-checked"], 2, "{name}: {checked}");
        assert_eq!(checked["revision"], 15, "{name}: {checked}");
        // The run that checked the compaction's hash says it checked one.
        leader_line_where(&cluster, "finished compaction hash check", |line| {
            line["number-of-hashes-checked"] == 1
        });
        leader_line(&cluster, "starting compact hash check");
        let (ok, alarms) = etcdctl(&first, &["alarm", "list"]);
        assert!(ok && !alarms.contains("CORRUPT"), "{name}: {alarms}");
    }
}

/// A three-member cluster whose third member's store gets altered.
struct Altered {
    _dir: tempfile::TempDir,
    cluster: common::Cluster,
    kv: KvClient<tonic::transport::Channel>,
    altered_id: u64,
}

impl Altered {
    /// Starts the cluster with `flags` and writes the 200 keys.
    async fn start(flags: &[&str], base: u16) -> Altered {
        let dir = tempfile::tempdir().expect("tempdir");
        let cluster = common::Cluster::start(&common::kv_server(), dir.path(), base, flags);
        let first = cluster.members[0].endpoint();
        let mut kv = KvClient::new(common::connect(&first, CALL_TIMEOUT).await.expect("connect"));
        for i in 0..200 {
            let value = if i == 100 {
                INTACT.to_vec()
            } else {
                format!("value {i}").into_bytes()
            };
            let put = pb::PutRequest {
                key: format!("corruption/{i:03}").into_bytes(),
                value,
                ..Default::default()
            };
            kv.put(put).await.expect("put");
        }
        let altered_id = common::member_id(&cluster.members[2].endpoint(), CALL_TIMEOUT).await;
        Altered {
            _dir: dir,
            cluster,
            kv,
            altered_id,
        }
    }

    /// Kills the third member, alters its store and starts it again with
    /// `env` added.
    fn restart_altered(&mut self, env: Vec<(String, String)>) {
        // Idle long enough for every member's store to commit what it applied.
        std::thread::sleep(Duration::from_secs(1));
        self.cluster.kill(2);
        alter(&self.cluster.dir.join("infra3/member/kv"));
        self.cluster.members[2].env = env;
        self.cluster.spawn(2);
        // Not /health: the alarm this test waits for may already be up,
        // and /health reports a member with an alarm as unhealthy.
        self.cluster.wait_live(&[2]);
    }

    /// Waits for the altered member's CORRUPT alarm, then checks that
    /// writes are refused as etcd refuses them and reads still work.
    async fn expect_corrupt(&mut self) {
        let first = self.cluster.members[0].endpoint();
        let expected = format!("memberID:{} alarm:CORRUPT", self.altered_id);
        let deadline = Instant::now() + ALARM_WITHIN;
        loop {
            let (ok, listed) = etcdctl(&first, &["alarm", "list"]);
            assert!(ok, "{listed}");
            if listed.contains(&expected) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no CORRUPT alarm for the altered member: {listed}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let (ok, refused) = etcdctl(&first, &["put", "after", "corruption"]);
        assert!(!ok && refused.contains("etcdserver: corrupt cluster"), "{refused}");
        let put = pb::PutRequest {
            key: b"after".to_vec(),
            value: b"corruption".to_vec(),
            ..Default::default()
        };
        let refused = self.kv.put(put).await.expect_err("writes are refused");
        assert_eq!(
            (refused.code(), refused.message()),
            (tonic::Code::DataLoss, "etcdserver: corrupt cluster")
        );
        let (ok, value) = etcdctl(&first, &["get", "corruption/100", "--print-value-only"]);
        // (etcdctl's warnings, on stderr, may come with the value.)
        assert!(
            ok && value.lines().any(|line| line == "intact value!"),
            "reads still work: {value}"
        );
    }
}
