//! Goal: etcd's own benchmark tool runs against this project's cluster
//! with zero errors: put with 1000 clients over 100 connections, range
//! with linearizable and serializable consistency, and its watch
//! benchmarks (100 watchers on 10 streams receiving every put, and watch
//! latency), which finish only if every watcher gets every event.
//!
//! Method: a 3-member cluster of real processes; the real `benchmark`
//! binary from etcd v3.5.17 (`ETCD_BENCHMARK_BIN`, or the cache that
//! `tools/etcd-peers/build.sh` fills). Totals are kept small for CI (the
//! docs/benchmarks.md has the full-size runs). The tool must exit successfully,
//! print no "Error distribution" section (it prints one whenever any
//! request failed), and report a request rate.

mod common;

/// Requests per run: enough for 1000 clients to each send several, small
/// enough to finish in seconds on 2 cores.
const TOTAL: &str = "5000";

use common::etcd_benchmark as benchmark;

fn requests_per_second(report: &str) -> f64 {
    report
        .lines()
        .find_map(|line| line.trim().strip_prefix("Requests/sec:"))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no Requests/sec in:\n{report}"))
}

#[test]
fn etcd_benchmark_runs_without_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = common::Cluster::start(&common::kv_server(), dir.path(), 5379, &[]);
    let endpoints = cluster.endpoints();
    let endpoints_flag = format!("--endpoints={endpoints}");
    let runs: Vec<Vec<&str>> = vec![
        vec![
            &endpoints_flag,
            "--conns=100",
            "--clients=1000",
            "put",
            "--key-size=8",
            "--sequential-keys",
            "--val-size=256",
            "--total",
            TOTAL,
        ],
        vec![
            &endpoints_flag,
            "--conns=100",
            "--clients=1000",
            "range",
            "foo",
            "--consistency=l",
            "--total",
            TOTAL,
        ],
        vec![
            &endpoints_flag,
            "--conns=100",
            "--clients=1000",
            "range",
            "foo",
            "--consistency=s",
            "--total",
            TOTAL,
        ],
        vec![
            &endpoints_flag,
            "--conns=10",
            "--clients=10",
            "watch",
            "--streams=10",
            "--watch-per-stream=10",
            "--watched-key-total=10",
            "--put-total=500",
        ],
        vec![&endpoints_flag, "watch-latency", "--total=200", "--put-rate=100"],
    ];
    for args in runs {
        let report = benchmark(&args);
        assert!(!report.contains("Error distribution"), "errors in {args:?}:\n{report}");
        let rate = requests_per_second(&report);
        assert!(rate > 0.0, "{args:?}: {rate} requests/s");
        eprintln!("{}: {rate:.0} requests/s", args[1..].join(" "));
    }
}
