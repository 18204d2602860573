//! Goal: `--metrics=extensive` adds `grpc_server_handling_seconds` as etcd
//! 3.5.17 adds it (etcd-mixin's `etcdGRPCRequestsSlow` alert reads it):
//! the same buckets, the same series (every method of etcd's services, at
//! zero from the start), and a Put counted once made; without the flag
//! the family is absent, on both servers.
//!
//! Method: a single member of real etcd and of kv-server, each started
//! with `--metrics=extensive`, then without; etcdctl puts once; each
//! member's `/metrics` is read and its `grpc_server_handling_seconds`
//! lines compared.

mod common;

use std::collections::BTreeSet;

const FAMILY: &str = "grpc_server_handling_seconds";

/// The family's lines of `/metrics` on `port`.
fn handling_lines(port: u16) -> Vec<String> {
    let scraped = common::http_get(port, "/metrics");
    scraped
        .lines()
        .filter(|line| line.starts_with(FAMILY))
        .map(str::to_string)
        .collect()
}

/// The series (labels without `le`) and the bucket bounds of the lines.
fn shape(lines: &[String]) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut series = BTreeSet::new();
    let mut bounds = BTreeSet::new();
    for line in lines
        .iter()
        .filter(|line| line.starts_with(&format!("{FAMILY}_bucket")))
    {
        let labels = &line[line.find('{').expect("labels") + 1..line.find('}').expect("labels")];
        let (rest, le) = labels.rsplit_once(",le=").expect("an le label");
        series.insert(rest.to_string());
        bounds.insert(le.to_string());
    }
    (series, bounds)
}

fn puts_counted(lines: &[String]) -> u64 {
    lines
        .iter()
        .find(|line| line.starts_with(&format!("{FAMILY}_count")) && line.contains("grpc_method=\"Put\""))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|count| count.parse().ok())
        .unwrap_or(0)
}

#[test]
fn extensive_metrics_time_each_call_as_etcds_do() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut shapes = Vec::new();
    for (name, binary, base) in [
        ("etcd", common::etcd_tool("ETCD_BIN", "etcd"), 17579),
        ("kv-server", common::kv_server(), 17679),
    ] {
        let plain = common::Cluster::start_members(&binary, &dir.path().join(format!("{name}-basic")), base, 1, &[]);
        assert!(
            handling_lines(plain.members[0].client_port).is_empty(),
            "{name}: basic metrics have no {FAMILY}"
        );
        drop(plain);
        let cluster =
            common::Cluster::start_members(&binary, &dir.path().join(name), base + 50, 1, &["--metrics=extensive"]);
        let port = cluster.members[0].client_port;
        let before = handling_lines(port);
        assert!(!before.is_empty(), "{name}: no {FAMILY} with --metrics=extensive");
        let put = common::etcdctl(&cluster.members[0].endpoint(), &["put", "timed", "once"]);
        assert!(put.status.success(), "{name}: {}", common::text(&put));
        let after = handling_lines(port);
        assert_eq!(
            puts_counted(&after),
            puts_counted(&before) + 1,
            "{name}: the put is timed"
        );
        shapes.push(shape(&before));
    }
    assert_eq!(shapes[1].1, shapes[0].1, "the same buckets");
    assert_eq!(shapes[1].0, shapes[0].0, "the same series from the start");
}
