//! Goal: kv-server's `/metrics` carries etcd 3.5's metrics as etcd does:
//! for every metric an operator's dashboards use (the list below), the
//! same name, type and label names, and for histograms the same bucket
//! boundaries; the WAL fsync count grows with the puts; the gRPC
//! message counts keep etcd's relations (a unary call that succeeded
//! received one message and sent one; an open watch stream received its
//! create request and sent its `created` answer); and
//! `--listen-metrics-urls` serves the same metrics.
//!
//! Method: a real etcd 3.5.17 cluster and a kv-server cluster, each three
//! member processes on loopback, each member also given a metrics URL.
//! The same workload on each, through etcd's benchmark tool: 100 puts
//! from one client (the fsync count of member 1 is read before and
//! after), then 200 puts and 200 ranges from 10 clients, while a watch
//! is open. Then member 1's `/metrics` from each server is parsed and
//! compared, family by family, once both show a peer round trip.
//!
//! Needs etcd and the benchmark tool: `ETCD_BIN`, `ETCD_BENCHMARK_BIN`,
//! or the cache that `tools/etcd-peers/build.sh` fills.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

/// The metrics compared: every one the issue lists.
const COMPARED: &[&str] = &[
    "etcd_disk_wal_fsync_duration_seconds",
    "etcd_disk_backend_commit_duration_seconds",
    "etcd_disk_wal_write_bytes_total",
    "etcd_server_has_leader",
    "etcd_server_is_leader",
    "etcd_server_leader_changes_seen_total",
    "etcd_server_proposals_committed_total",
    "etcd_server_proposals_applied_total",
    "etcd_server_proposals_pending",
    "etcd_server_proposals_failed_total",
    "etcd_server_slow_apply_total",
    "etcd_server_apply_duration_seconds",
    "etcd_server_quota_backend_bytes",
    "etcd_server_id",
    "etcd_server_version",
    "etcd_mvcc_db_total_size_in_bytes",
    "etcd_mvcc_db_total_size_in_use_in_bytes",
    "etcd_mvcc_put_total",
    "etcd_mvcc_range_total",
    "etcd_mvcc_delete_total",
    "etcd_mvcc_txn_total",
    "etcd_debugging_mvcc_keys_total",
    "etcd_debugging_mvcc_watcher_total",
    "etcd_debugging_mvcc_slow_watcher_total",
    "etcd_debugging_lease_granted_total",
    "etcd_debugging_mvcc_index_compaction_pause_duration_milliseconds",
    "etcd_debugging_mvcc_db_compaction_pause_duration_milliseconds",
    "etcd_debugging_mvcc_db_compaction_keys_total",
    "etcd_network_peer_round_trip_time_seconds",
    "etcd_network_peer_sent_bytes_total",
    "etcd_network_peer_received_bytes_total",
    "etcd_network_client_grpc_received_bytes_total",
    "etcd_network_client_grpc_sent_bytes_total",
    "grpc_server_started_total",
    "grpc_server_handled_total",
    "grpc_server_msg_received_total",
    "grpc_server_msg_sent_total",
    "process_resident_memory_bytes",
    "process_cpu_seconds_total",
];

/// How long etcd's prober may take to record a first round trip.
const ROUND_TRIP_WITHIN: Duration = Duration::from_secs(30);

/// One metric family as scraped: its type, the label names its samples
/// carry (`le` aside), and its bucket boundaries.
#[derive(Debug, Default, PartialEq)]
struct Family {
    kind: String,
    labels: BTreeSet<String>,
    buckets: BTreeSet<String>,
}

/// The families in Prometheus text.
fn parse(text: &str) -> BTreeMap<String, Family> {
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("a TYPE line names a type");
            families.entry(name.to_string()).or_default().kind = kind.to_string();
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let sample = &line[..name_end];
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| sample.strip_suffix(suffix).filter(|base| families.contains_key(*base)))
            .unwrap_or(sample);
        let Some(entry) = families.get_mut(family) else {
            continue;
        };
        let Some(labels) = line[name_end..].strip_prefix('{').and_then(|l| l.split_once('}')) else {
            continue;
        };
        for pair in labels.0.split(',').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').expect("label=value");
            if key == "le" {
                entry.buckets.insert(value.trim_matches('"').to_string());
            } else {
                entry.labels.insert(key.to_string());
            }
        }
    }
    families
}

/// The body of member `port`'s metrics at `path`.
fn scrape(port: u16) -> String {
    let response = common::http_get(port, "/metrics");
    let (_, body) = response.split_once("\r\n\r\n").unwrap_or(("", ""));
    body.to_string()
}

/// The value of the sample `name` (no labels) in `text`.
fn value(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in the metrics"))
}

/// The sum of `name`'s samples in `text` for `service`'s `method`, only
/// those with `grpc_code` `code` if one is given.
fn method_total(text: &str, name: &str, service: &str, method: &str, code: Option<&str>) -> f64 {
    let wanted = [
        format!("grpc_service=\"{service}\""),
        format!("grpc_method=\"{method}\""),
        code.map_or_else(String::new, |code| format!("grpc_code=\"{code}\"")),
    ];
    text.lines()
        .filter_map(|line| line.strip_prefix(name)?.strip_prefix('{')?.split_once("} "))
        .filter(|(labels, _)| wanted.iter().all(|label| labels.contains(label.as_str())))
        .map(|(_, value)| value.trim().parse::<f64>().expect("a sample's value"))
        .sum()
}

/// A server's gRPC message counts after the workload: for each unary
/// method the workload called (Put, Range), received, sent and handled
/// OK; for the watch stream, received and sent.
#[derive(Debug, PartialEq)]
struct MessageCounts {
    unary: Vec<(&'static str, [f64; 3])>,
    watch: [f64; 2],
}

fn message_counts(text: &str) -> MessageCounts {
    let count =
        |name: &str, service: &str, method: &str, code: Option<&str>| method_total(text, name, service, method, code);
    let unary = ["Put", "Range"]
        .map(|method| {
            (
                method,
                [
                    count("grpc_server_msg_received_total", "etcdserverpb.KV", method, None),
                    count("grpc_server_msg_sent_total", "etcdserverpb.KV", method, None),
                    count("grpc_server_handled_total", "etcdserverpb.KV", method, Some("OK")),
                ],
            )
        })
        .to_vec();
    let watch = [
        count("grpc_server_msg_received_total", "etcdserverpb.Watch", "Watch", None),
        count("grpc_server_msg_sent_total", "etcdserverpb.Watch", "Watch", None),
    ];
    MessageCounts { unary, watch }
}

fn benchmark(endpoints: &str, args: &[&str]) {
    let endpoints = format!("--endpoints={endpoints}");
    let mut all = vec![endpoints.as_str()];
    all.extend_from_slice(args);
    let report = common::etcd_benchmark(&all);
    assert!(!report.contains("Error distribution"), "{report}");
}

/// Runs the workload on `binary`'s cluster; member 1's families once they
/// show a peer round trip, its fsync count before and after 100 puts
/// from one client, and its gRPC message counts.
fn measure(binary: &Path, base: u16) -> (BTreeMap<String, Family>, f64, f64, MessageCounts) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cluster = common::Cluster::new(binary, dir.path(), base, 3, &[]);
    for (i, member) in cluster.members.iter_mut().enumerate() {
        let url = format!("http://127.0.0.1:{}", base + 5 + 10 * i as u16);
        member.env.push(("ETCD_LISTEN_METRICS_URLS".into(), url));
    }
    cluster.start_all();
    let endpoints = cluster.endpoints();
    let port = cluster.members[0].client_port;
    let fsyncs = |text: &str| value(text, "etcd_disk_wal_fsync_duration_seconds_count");
    let before = fsyncs(&scrape(port));
    let one_client = [
        "--conns=1",
        "--clients=1",
        "put",
        "--key-size=8",
        "--sequential-keys",
        "--total=100",
    ];
    benchmark(&endpoints, &one_client);
    let after = fsyncs(&scrape(port));
    let watch = common::etcdctl_watch_in_background(&cluster.members[0].endpoint(), "watched");
    benchmark(&endpoints, &["--conns=10", "--clients=10", "put", "--total=200"]);
    benchmark(&endpoints, &["--conns=10", "--clients=10", "range", "k", "--total=200"]);
    let deadline = Instant::now() + ROUND_TRIP_WITHIN;
    let (families, text) = loop {
        let text = scrape(port);
        let families = parse(&text);
        let probed = families
            .get("etcd_network_peer_round_trip_time_seconds")
            .is_some_and(|f| !f.buckets.is_empty());
        if probed {
            break (families, text);
        }
        assert!(Instant::now() < deadline, "{}: no peer round trip", binary.display());
        std::thread::sleep(Duration::from_millis(500));
    };
    let metrics_port = base + 5;
    let listened = parse(&scrape(metrics_port));
    assert_eq!(
        listened,
        families,
        "{}: --listen-metrics-urls serves other metrics (names, types, labels or buckets)",
        binary.display()
    );
    drop(watch);
    (families, before, after, message_counts(&text))
}

#[test]
fn metrics_match_etcd() {
    let (etcd, etcd_before, etcd_after, etcd_messages) = measure(&common::etcd_tool("ETCD_BIN", "etcd"), 31979);
    let (ours, before, after, messages) = measure(&common::kv_server(), 30479);
    // etcd's relations on member 1, whatever share of the calls its
    // clients' balancer sent there: a unary call that succeeded received
    // one message and sent one, and the watch stream received its create
    // request and sent its `created` answer.
    for (server, counts) in [("etcd", &etcd_messages), ("kv-server", &messages)] {
        for (method, [received, sent, ok]) in &counts.unary {
            assert!(
                received == sent && sent == ok,
                "{server}: {method}'s messages received {received}, sent {sent}, calls handled OK {ok}"
            );
        }
        let [received, sent] = counts.watch;
        assert!(
            received >= 1.0 && sent >= 1.0,
            "{server}: the watch stream's messages: {counts:?}"
        );
    }
    for (method, [_, sent, _]) in &messages.unary {
        assert!(*sent > 0.0, "kv-server: member 1 answered no {method}: {messages:?}");
    }
    for (server, before, after) in [("etcd", etcd_before, etcd_after), ("kv-server", before, after)] {
        assert!(
            after - before >= 50.0,
            "{server}: 100 puts from one client made {} WAL fsyncs on member 1",
            after - before
        );
    }
    let mut differences = Vec::new();
    for name in COMPARED {
        let (theirs, mine) = (etcd.get(*name), ours.get(*name));
        match (theirs, mine) {
            (Some(theirs), Some(mine)) if theirs == mine => {}
            _ => differences.push(format!("{name}:\n  etcd      {theirs:?}\n  kv-server {mine:?}")),
        }
    }
    assert!(differences.is_empty(), "metrics differ:\n{}", differences.join("\n"));
}
