//! Goal: `/health`, `/livez` and `/readyz` answer as real etcd's do, on
//! the client port and on `--listen-metrics-urls`: the same status codes
//! and the same bodies, byte for byte (verbose check lines compared as a
//! set, since etcd lists them in a Go map's random order), healthy, for a
//! learner, under a NOSPACE alarm, and with no leader.
//!
//! Method: one sequence of steps against a real etcd 3.7.3 cluster and a
//! kv-server cluster (three voters on loopback, then a learner added with
//! etcdctl), each step's answers collected and compared. `/health`'s rows
//! are also compared with etcd 3.5.17 (its livez/readyz differ from 3.7.3
//! only by the learner check, which kv-server takes from 3.7.3).
//!
//! Needs etcd 3.7.3, etcd 3.5.17 and etcdctl: `ETCD37_BIN`, `ETCD_BIN`,
//! `ETCDCTL_BIN`, or the cache `tools/etcd-peers/build.sh` fills.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use kv_server::proto::etcdserverpb as pb;
use kv_server::proto::etcdserverpb::kv_client::KvClient;

/// A quota small enough to reach in a few seconds of puts.
const QUOTA: &str = "--quota-backend-bytes=16777216";
const VALUE_BYTES: usize = 8000;
/// Puts tried before the quota must have refused one: five times it.
const PUTS_MAX: usize = 10_000;
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a member left alone may take to say it has no leader: a few
/// election timeouts.
const LEADER_LOST_WITHIN: Duration = Duration::from_secs(15);

/// What a path answered: status code and body, verbose lines sorted.
type Answer = (String, u16, String);

fn answer(port: u16, path: &str, method: &str) -> Answer {
    let raw = common::http_request(port, method, path);
    let code = raw.get(9..12).and_then(|code| code.parse().ok()).unwrap_or(0);
    let body = raw.split_once("\r\n\r\n").map(|(_, body)| body).unwrap_or_default();
    // etcd lists check lines in a random order: compare them as a set.
    let mut lines: Vec<&str> = body.split_inclusive('\n').collect();
    lines.sort_unstable();
    (format!("{method} {path}"), code, lines.concat())
}

const PATHS: &[&str] = &[
    "/health",
    "/health?serializable=true",
    "/health?exclude=NOSPACE&serializable=true",
    "/health?exclude=NOSPACE",
    "/livez",
    "/livez?verbose",
    "/livez/serializable_read",
    "/livez/nope",
    "/readyz",
    "/readyz?verbose",
    "/readyz?verbose&exclude=linearizable_read&exclude=nope",
    "/readyz/data_corruption?verbose",
    "/readyz/non_learner",
];

fn all_paths(ports: &[u16]) -> Vec<Answer> {
    let mut answers = Vec::new();
    for &port in ports {
        for path in PATHS {
            answers.push(answer(port, path, "GET"));
        }
        answers.push(answer(port, "/livez", "POST"));
    }
    answers
}

/// Fills the store through `endpoint` until the quota refuses a put.
async fn fill_to_quota(endpoint: &str) {
    let mut kv = KvClient::new(common::connect(endpoint, CALL_TIMEOUT).await.expect("connect"));
    for i in 0..PUTS_MAX {
        let put = pb::PutRequest {
            key: format!("fill/{:03}", i % 300).into_bytes(),
            value: vec![b'v'; VALUE_BYTES],
            ..Default::default()
        };
        if kv.put(put).await.is_err() {
            return;
        }
    }
    panic!("the quota never refused a put");
}

/// The answers of one server through every step.
async fn walk_through(binary: &Path, base: u16) -> Vec<(&'static str, Vec<Answer>)> {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cluster = common::Cluster::new(binary, dir.path(), base, 3, &[QUOTA]);
    let metrics = |i: u16| base + 5 + 10 * i;
    for (i, member) in cluster.members.iter_mut().enumerate() {
        let url = format!("http://127.0.0.1:{}", metrics(i as u16));
        member.env.push(("ETCD_LISTEN_METRICS_URLS".into(), url));
    }
    cluster.start_all();
    let first = cluster.members[0].endpoint();
    let mut steps = Vec::new();
    let client0 = cluster.members[0].client_port;
    steps.push(("healthy", all_paths(&[client0, metrics(0)])));

    // A learner: etcd 3.7.3 calls it not ready, and healthy.
    let learner_port = base + 40;
    let said = common::etcdctl_until(
        &first,
        &[
            "member",
            "add",
            "learner",
            &format!("--peer-urls=http://127.0.0.1:{}", learner_port + 1),
            "--learner",
        ],
        "unhealthy cluster",
        Duration::from_secs(20),
    );
    let said = common::text(&said);
    let learner = cluster.add_joining("learner", learner_port, &said, Vec::new());
    cluster.spawn(learner);
    cluster.wait_healthy(&[learner]);
    steps.push(("learner", all_paths(&[learner_port])));

    // NOSPACE: only /health says so; the probes stay healthy.
    fill_to_quota(&first).await;
    steps.push(("nospace", all_paths(&[client0, metrics(0)])));

    // No leader: two of three voters gone.
    cluster.kill(1);
    cluster.kill(2);
    let deadline = Instant::now() + LEADER_LOST_WITHIN;
    while !answer(client0, "/health?exclude=NOSPACE", "GET")
        .2
        .contains("RAFT NO LEADER")
    {
        assert!(Instant::now() < deadline, "member 0 never lost its leader");
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut lost = Vec::new();
    for path in [
        "/health",
        "/health?exclude=NOSPACE",
        "/health?exclude=NOSPACE&serializable=true",
        "/livez",
    ] {
        lost.push(answer(client0, path, "GET"));
    }
    // The linearizable check fails after the request timeout; etcd's
    // reason then is a timeout or a leader change, so the line is
    // compared up to its reason.
    let (label, code, body) = answer(client0, "/readyz?verbose", "GET");
    let failed = body
        .lines()
        .any(|line| line.starts_with("[-]linearizable_read failed: etcdserver: "));
    lost.push((label, code, format!("linearizable_read failed: {failed}")));
    steps.push(("no leader", lost));
    steps
}

fn compare(label: &str, ours: &[(&str, Vec<Answer>)], theirs: &[(&str, Vec<Answer>)], only: impl Fn(&str) -> bool) {
    assert_eq!(ours.len(), theirs.len());
    for ((step, kv), (_, etcd)) in ours.iter().zip(theirs) {
        for (a, b) in kv.iter().zip(etcd).filter(|(a, _)| only(&a.0)) {
            assert_eq!(a, b, "{step}: kv-server and {label} differ");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_endpoints_answer_as_etcd() {
    let etcd_37 = common::etcd_tool("ETCD37_BIN", "etcd-3.7.3");
    let etcd_35 = common::etcd_tool("ETCD_BIN", "etcd");
    let kv = walk_through(&common::kv_server(), 26_400).await;
    let etcd = walk_through(&etcd_37, 26_500).await;
    compare("etcd 3.7.3", &kv, &etcd, |_| true);
    let etcd = walk_through(&etcd_35, 26_600).await;
    compare("etcd 3.5.17", &kv, &etcd, |path| path.starts_with("GET /health"));

    // What the comparison showed, spelled out.
    let find = |step: &str, path: &str| {
        kv.iter()
            .find(|(s, _)| *s == step)
            .and_then(|(_, answers)| answers.iter().find(|a| a.0 == format!("GET {path}")))
            .cloned()
            .unwrap_or_else(|| panic!("{step} {path}"))
    };
    assert_eq!(find("healthy", "/readyz").1, 200);
    assert_eq!(find("learner", "/readyz").1, 503);
    assert_eq!(
        find("nospace", "/health").2,
        "{\"health\":\"false\",\"reason\":\"ALARM NOSPACE\"}\n"
    );
    assert_eq!(find("nospace", "/livez").1, 200);
    assert_eq!(find("nospace", "/readyz").1, 200);
    assert_eq!(
        find("no leader", "/health?exclude=NOSPACE").2,
        "{\"health\":\"false\",\"reason\":\"RAFT NO LEADER\"}\n"
    );
}
