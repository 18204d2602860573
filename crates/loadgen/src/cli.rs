//! Command-line flags, named and defaulted as etcd's benchmark tool names
//! them. Global flags are accepted before or after the subcommand, so
//! `loadgen --clients 10 put` and `loadgen put --clients 10` are the same.
//! Boolean flags take no value, or `=true` / `=false` as Go's do.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "loadgen",
    about = "A load generator for etcd-API endpoints, compatible with etcd's benchmark tool"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args)]
pub struct Global {
    /// gRPC endpoints, comma-separated (`host:port` or URLs).
    #[arg(long, global = true, value_delimiter = ',', default_value = "127.0.0.1:2379")]
    pub endpoints: Vec<String>,
    /// Total number of gRPC connections (for sweep, a comma-separated
    /// list of them).
    #[arg(long, global = true, value_delimiter = ',', default_value = "1")]
    pub conns: Vec<usize>,
    /// Total number of gRPC clients, requests in flight at once (for
    /// sweep, a comma-separated list of them).
    #[arg(long, global = true, value_delimiter = ',', default_value = "1")]
    pub clients: Vec<usize>,
    /// Connect only to the leader.
    #[arg(long, global = true, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub target_leader: bool,
    /// Also write every figure of the run as JSON to this file.
    #[arg(long, global = true)]
    pub json: Option<PathBuf>,
    /// Runs of put, range or txn-put made first and not counted.
    #[arg(long, global = true, default_value_t = 0)]
    pub warmup: usize,
    /// Measured runs of put, range or txn-put; more than one prints their
    /// mean.
    #[arg(long, global = true, default_value_t = 1)]
    pub iterations: usize,
    /// Send put, range and txn-put through etcd's gRPC-JSON gateway
    /// (`POST /v3/kv/...` as JSON over HTTP/1.1, one keep-alive
    /// connection per client; --conns is not used) instead of gRPC.
    #[arg(long, global = true)]
    pub gateway: bool,
    #[command(flatten)]
    pub tls: TlsArgs,
    #[command(flatten)]
    pub auth: AuthArgs,
    /// Print the report's figures in full, not to four decimals (etcd's
    /// tool's `--precise`).
    #[arg(long, global = true)]
    pub precise: bool,
}

impl Global {
    /// The one number of connections a run (other than sweep) takes.
    pub fn conns(&self) -> usize {
        self.conns[0]
    }

    /// The one number of clients a run (other than sweep) takes.
    pub fn clients(&self) -> usize {
        self.clients[0]
    }

    /// Refuses lists of clients or connections outside sweep.
    pub fn check_single(&self) -> Result<(), String> {
        if self.conns.len() != 1 || self.clients.len() != 1 {
            return Err("--conns and --clients take one number, except for sweep".into());
        }
        Ok(())
    }

    /// Refuses `--warmup` and `--iterations` for a command they do not
    /// apply to, rather than ignore them.
    pub fn check_not_iterated(&self, command: &str) -> Result<(), String> {
        if self.warmup > 0 || self.iterations != 1 {
            return Err(format!(
                "--warmup and --iterations apply to put, range and txn-put, not to {command}"
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Benchmark put.
    Put(PutArgs),
    /// Benchmark range: KEY, or the range [KEY, END).
    Range(RangeArgs),
    /// Benchmark txns of puts.
    TxnPut(TxnPutArgs),
    /// Run etcd's documented put/range matrix and print it beside etcd's
    /// published figures.
    Matrix(MatrixArgs),
    /// Benchmark watch, as etcd's tool's `watch`.
    Watch(WatchArgs),
    /// Benchmark watch latency, as etcd's tool's `watch-latency`.
    WatchLatency(WatchLatencyArgs),
    /// A grid of puts over value sizes, clients and connections, with the
    /// members' WAL fsync, backend commit and peer round-trip p99 from
    /// their `/metrics` beside each row.
    Sweep(SweepArgs),
    /// Compare two matrix JSON files (a baseline and a candidate) in a
    /// table and an SVG chart.
    Compare(CompareArgs),
    /// Hold watchers open (idle, or on streams that stop reading), for
    /// the watch benchmarks in scripts/watch-bench.sh.
    Watchers(WatchersArgs),
}

#[derive(Debug, Args)]
pub struct WatchersArgs {
    /// Watch streams to open, spread over --conns connections.
    #[arg(long, default_value_t = 10)]
    pub streams: usize,
    /// Watchers created on each stream.
    #[arg(long, default_value_t = 100)]
    pub watch_per_stream: usize,
    /// Key watched; empty (the default) watches every key. (Not `--key`,
    /// which names the TLS key, as in etcd's tool.)
    #[arg(long, default_value = "")]
    pub watched_key: String,
    /// End of the watched range (empty: the key alone, or every key when
    /// --key is empty too).
    #[arg(long, default_value = "")]
    pub range_end: String,
    /// Seconds to hold the watchers once every one is created.
    #[arg(long, default_value_t = 10)]
    pub hold: u64,
    /// Read what arrives while holding; `--read=false` never reads.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "true")]
    pub read: bool,
}

#[derive(Debug, Args)]
pub struct PutArgs {
    /// Total number of put requests.
    #[arg(long, default_value_t = 10_000)]
    pub total: u64,
    /// Key size of put request.
    #[arg(long, default_value_t = 8)]
    pub key_size: usize,
    /// Value size of put request.
    #[arg(long, default_value_t = 8)]
    pub val_size: usize,
    /// Use sequential keys.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub sequential_keys: bool,
    /// Maximum possible keys.
    #[arg(long, default_value_t = 1)]
    pub key_space_size: u64,
    /// Maximum puts per second (0 is no limit).
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
}

#[derive(Debug, Args)]
pub struct RangeArgs {
    pub key: String,
    pub end: Option<String>,
    /// Linearizable (l) or serializable (s).
    #[arg(long, default_value = "l")]
    pub consistency: String,
    /// Total number of range requests.
    #[arg(long, default_value_t = 10_000)]
    pub total: u64,
    /// Maximum range requests per second (0 is no limit).
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
    /// Maximum keys per range (0 is no limit).
    #[arg(long, default_value_t = 0)]
    pub limit: i64,
    /// Ask only for the count of keys.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub count_only: bool,
    /// Every key from KEY on (as etcdctl's `--from-key`); with an empty
    /// KEY, every key.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub from_key: bool,
    /// Count a response whose key count differs from this as an error
    /// (for checks: every acknowledged key must be readable).
    #[arg(long)]
    pub expect_count: Option<i64>,
}

#[derive(Debug, Args)]
pub struct TxnPutArgs {
    /// Total number of txn requests.
    #[arg(long, default_value_t = 10_000)]
    pub total: u64,
    /// Key size of txn put.
    #[arg(long, default_value_t = 8)]
    pub key_size: usize,
    /// Value size of txn put.
    #[arg(long, default_value_t = 8)]
    pub val_size: usize,
    /// Number of puts per txn.
    #[arg(long, default_value_t = 1)]
    pub txn_ops: u64,
    /// Maximum txns per second (0 is no limit).
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
    /// Maximum possible keys.
    #[arg(long, default_value_t = 1)]
    pub key_space_size: u64,
}

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Total watch streams.
    #[arg(long, default_value_t = 10)]
    pub streams: usize,
    /// Total watchers per stream.
    #[arg(long, default_value_t = 100)]
    pub watch_per_stream: usize,
    /// Total number of keys to be watched.
    #[arg(long, default_value_t = 1)]
    pub watched_key_total: usize,
    /// Number of keys to put per second (0 is no limit).
    #[arg(long, default_value_t = 0)]
    pub put_rate: u64,
    /// Number of put requests.
    #[arg(long, default_value_t = 1000)]
    pub put_total: usize,
    /// Key size of watch request.
    #[arg(long, default_value_t = 32)]
    pub key_size: usize,
    /// Maximum possible keys.
    #[arg(long, default_value_t = 1)]
    pub key_space_size: u64,
    /// Use sequential keys.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub sequential_keys: bool,
}

#[derive(Debug, Args)]
pub struct WatchLatencyArgs {
    /// Total number of put requests.
    #[arg(long, default_value_t = 10_000)]
    pub total: usize,
    /// Number of keys to put per second.
    #[arg(long, default_value_t = 100)]
    pub put_rate: u64,
    /// Key size of watch response.
    #[arg(long, default_value_t = 32)]
    pub key_size: usize,
    /// Value size of watch response.
    #[arg(long, default_value_t = 32)]
    pub val_size: usize,
}

#[derive(Debug, Args)]
pub struct SweepArgs {
    /// Value sizes in bytes.
    #[arg(long, value_delimiter = ',', default_value = "256,1024,2048")]
    pub val_sizes: Vec<usize>,
    /// Puts per row.
    #[arg(long, default_value_t = 100_000)]
    pub total: u64,
    /// The members' metrics URLs, scraped before and after each row:
    /// `http://host:port/metrics`, `https://host:port/metrics`, or
    /// `http://host:port` or `host:port` (plain HTTP, path `/metrics`).
    #[arg(long, value_delimiter = ',')]
    pub metrics_urls: Vec<String>,
    /// Also draw QPS and p99 against clients to this SVG file.
    #[arg(long)]
    pub svg: Option<PathBuf>,
}

/// etcd's benchmark tool's TLS flags: with `--cacert`, every endpoint is
/// dialled over TLS (`dial.rs`), and sweep's `https://` metrics URLs too.
#[derive(Debug, Clone, Default, Args)]
pub struct TlsArgs {
    /// Verify the servers' certificates with this CA bundle (PEM), and
    /// dial every endpoint over TLS.
    #[arg(long, global = true)]
    pub cacert: Option<PathBuf>,
    /// Identify to the servers with this TLS certificate file (PEM; needs
    /// --key).
    #[arg(long, global = true)]
    pub cert: Option<PathBuf>,
    /// The private key of --cert (PEM). (Its id is its own: `range`
    /// takes a positional key.)
    #[arg(long = "key", id = "tls_key", global = true)]
    pub key: Option<PathBuf>,
}

/// etcd's benchmark tool's auth flags: every request is made as this
/// user, after one login (`dial.rs`).
#[derive(Debug, Clone, Default, Args)]
pub struct AuthArgs {
    /// `NAME[:PASSWORD]` to make requests as.
    #[arg(long, global = true)]
    pub user: Option<String>,
    /// The password of --user, when --user names none.
    #[arg(long, global = true)]
    pub password: Option<String>,
}

#[derive(Debug, Args)]
pub struct MatrixArgs {
    /// Which documented matrix: `v3` (etcd's v3 performance doc) or
    /// `v2.2.0-rc` (the v2.2.0-rc benchmark page, replayed over v3).
    #[arg(long, default_value = "v3", value_parser = ["v3", "v2.2.0-rc"])]
    pub doc: String,
    /// Multiplies every row's total (clients are capped at the total), for
    /// quick runs: 0.01 runs 1% of the documented requests.
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Server process ids whose resident memory is recorded after each row
    /// (the largest is reported), when the servers run on this machine.
    #[arg(long, value_delimiter = ',')]
    pub rss_pids: Vec<u32>,
    /// A name for the servers measured, shown in the table and the JSON.
    #[arg(long, default_value = "servers")]
    pub label: String,
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Matrix JSON of the baseline (etcd).
    pub baseline: PathBuf,
    /// Matrix JSON of the candidate (this project).
    pub candidate: PathBuf,
    /// Write the chart of throughput and p99 per row here (SVG).
    #[arg(long)]
    pub svg: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from(args).unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    // Goal: global flags parse the same before and after the subcommand,
    // with etcd's names and defaults.
    #[test]
    fn global_flags_parse_in_both_orders() {
        let before = parse(&[
            "loadgen",
            "--endpoints",
            "127.0.0.1:2379,127.0.0.1:22379",
            "--conns=100",
            "--clients",
            "1000",
            "--target-leader",
            "put",
            "--total=500",
        ]);
        let after = parse(&[
            "loadgen",
            "put",
            "--total=500",
            "--endpoints=127.0.0.1:2379,127.0.0.1:22379",
            "--conns",
            "100",
            "--clients=1000",
            "--target-leader",
        ]);
        for cli in [&before, &after] {
            assert_eq!(cli.global.endpoints, vec!["127.0.0.1:2379", "127.0.0.1:22379"]);
            assert_eq!((cli.global.conns(), cli.global.clients()), (100, 1000));
            assert!(cli.global.target_leader);
            match &cli.command {
                Command::Put(put) => assert_eq!(put.total, 500),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn etcd_defaults_and_go_style_booleans() {
        let cli = parse(&["loadgen", "put", "--sequential-keys=true", "--key-space-size", "100000"]);
        assert_eq!(cli.global.endpoints, vec!["127.0.0.1:2379"]);
        assert_eq!((cli.global.conns(), cli.global.clients()), (1, 1));
        assert!(!cli.global.target_leader);
        match cli.command {
            Command::Put(put) => {
                assert!(put.sequential_keys);
                assert_eq!((put.total, put.key_size, put.val_size), (10_000, 8, 8));
                assert_eq!((put.key_space_size, put.rate), (100_000, 0));
            }
            other => panic!("{other:?}"),
        }
        let cli = parse(&[
            "loadgen",
            "range",
            "foo",
            "fop",
            "--consistency",
            "s",
            "--clients=4",
            "--count-only",
        ]);
        assert_eq!(cli.global.clients(), 4);
        match cli.command {
            Command::Range(range) => {
                assert_eq!((range.key.as_str(), range.end.as_deref()), ("foo", Some("fop")));
                assert_eq!(range.consistency, "s");
                assert!(range.count_only);
                assert_eq!((range.total, range.limit), (10_000, 0));
            }
            other => panic!("{other:?}"),
        }
        let cli = parse(&["loadgen", "txn-put", "--txn-ops", "4"]);
        match cli.command {
            Command::TxnPut(txn) => assert_eq!((txn.txn_ops, txn.total), (4, 10_000)),
            other => panic!("{other:?}"),
        }
    }

    // Goal: sweep takes metrics URLs in any form (checked when scraped)
    // and etcd's tool's TLS flags, beside watchers' own `--key`.
    #[test]
    fn sweep_takes_metrics_urls_and_tls_flags() {
        let cli = parse(&[
            "loadgen",
            "sweep",
            "--metrics-urls",
            "https://127.0.0.1:2379/metrics,127.0.0.1:22379",
            "--cacert=ca.pem",
            "--cert",
            "client.pem",
            "--key",
            "client-key.pem",
        ]);
        assert_eq!(cli.global.tls.cacert, Some(PathBuf::from("ca.pem")));
        assert_eq!(cli.global.tls.cert, Some(PathBuf::from("client.pem")));
        assert_eq!(cli.global.tls.key, Some(PathBuf::from("client-key.pem")));
        match cli.command {
            Command::Sweep(sweep) => assert_eq!(
                sweep.metrics_urls,
                vec!["https://127.0.0.1:2379/metrics", "127.0.0.1:22379"]
            ),
            other => panic!("{other:?}"),
        }
        let watchers = parse(&["loadgen", "watchers", "--watched-key", "foo", "--key", "k.pem"]);
        assert_eq!(watchers.global.tls.key, Some(PathBuf::from("k.pem")));
        match watchers.command {
            Command::Watchers(watchers) => assert_eq!(watchers.watched_key, "foo"),
            other => panic!("{other:?}"),
        }
        let put = parse(&["loadgen", "put", "--user", "root:pw", "--cacert", "ca.pem"]);
        assert_eq!(put.global.auth.user.as_deref(), Some("root:pw"));
        assert_eq!(put.global.tls.cacert, Some(PathBuf::from("ca.pem")));
        let sweep = parse(&["loadgen", "sweep"]);
        assert_eq!(
            (sweep.global.tls.cacert, sweep.global.tls.cert, sweep.global.tls.key),
            (None, None, None)
        );
    }
}
