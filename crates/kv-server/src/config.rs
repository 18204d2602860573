//! Command-line flags, named and defaulted as etcd names them, so a script
//! written for etcd starts a kv-server cluster by changing the binary name.
//!
//! This is the typed, canonical form of the flags. `crate::flags` reads a
//! command line, the `ETCD_*` variables or a config file as etcd does, and
//! hands this definition `--flag=value` arguments; see there for the
//! syntax and for etcd's flags that have no effect here.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

/// etcd's default `--max-request-bytes`: 1.5 MiB.
pub const MAX_REQUEST_BYTES_DEFAULT: usize = 1_572_864;
/// etcd's default `--quota-backend-bytes`: 2 GiB.
pub const QUOTA_BACKEND_BYTES_DEFAULT: u64 = 2 << 30;
/// gRPC accepts this much more than `--max-request-bytes` on the wire
/// before refusing a message outright, as etcd does (512 KiB of headroom),
/// so an oversized request reaches the server's own size check and gets
/// etcd's error rather than a transport error.
pub const GRPC_OVERHEAD_BYTES: usize = 512 * 1024;

/// etcd's default watch progress interval, which it also serves for 0.
pub const WATCH_PROGRESS_NOTIFY_INTERVAL_DEFAULT: &str = "10m";

/// Learners a cluster may have at once unless `--max-learners` says
/// otherwise: etcd's default, one being enough to catch a new member up
/// before it votes.
pub const LEARNERS_MAX: usize = 1;

#[derive(Debug, Clone, Parser)]
#[command(name = "kv-server", version, about = "An etcd v3 API server on raft-rs")]
pub struct Config {
    /// Human-readable name for this member.
    #[arg(long, default_value = "default")]
    pub name: String,
    /// Path to the data directory (default: `<name>.etcd`).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// debug, info, warn or error (zap's levels; `logging.rs`).
    #[arg(long, default_value = "info")]
    pub log_level: String,
    /// Where log lines go: `default` (standard error), `stderr`, `stdout`
    /// or file paths, comma-separated.
    #[arg(long, default_value = "default")]
    pub log_outputs: String,
    /// Rotates the one file of --log-outputs by size (`logging/rotation.rs`).
    #[arg(long, action = clap::ArgAction::Set, default_value_t = false)]
    pub enable_log_rotation: bool,
    /// The rotation's settings, as etcd's JSON: `maxsize` (MiB),
    /// `maxage` (days), `maxbackups`, `localtime`, `compress`.
    #[arg(
        long,
        default_value = r#"{"maxsize": 100, "maxage": 0, "maxbackups": 0, "localtime": false, "compress": false}"#
    )]
    pub log_rotation_config_json: String,
    /// `json` (zap's lines, etcd's default) or `console`.
    #[arg(long, default_value = "json")]
    pub log_format: String,
    /// The logger: `zap`, the only one etcd 3.5 has.
    #[arg(long, default_value = "zap")]
    pub logger: String,
    /// Comma-separated URLs to listen on for client traffic.
    #[arg(long, default_value = "http://localhost:2379")]
    pub listen_client_urls: String,
    /// Comma-separated URLs that serve HTTP only (`/health`, `/metrics`,
    /// the gRPC-JSON gateway); when set, --listen-client-urls serve gRPC
    /// only, as etcd splits them.
    #[arg(long, default_value = "")]
    pub listen_client_http_urls: String,
    /// Comma-separated client URLs to advertise to the cluster.
    #[arg(long, default_value = "http://localhost:2379")]
    pub advertise_client_urls: String,
    /// Comma-separated URLs to listen on for peer traffic.
    #[arg(long, default_value = "http://localhost:2380")]
    pub listen_peer_urls: String,
    /// Comma-separated peer URLs of this member, as the others reach it.
    #[arg(long, default_value = "http://localhost:2380")]
    pub initial_advertise_peer_urls: String,
    /// `name=peer-url,...` for every member of the initial cluster.
    #[arg(long, default_value = "default=http://localhost:2380")]
    pub initial_cluster: String,
    /// `new` or `existing`.
    #[arg(long, default_value = "new")]
    pub initial_cluster_state: String,
    /// Token that makes the cluster's ids unique.
    #[arg(long, default_value = "etcd-cluster")]
    pub initial_cluster_token: String,
    /// Applied entries between snapshots.
    #[arg(long, default_value_t = 100_000)]
    pub snapshot_count: u64,
    /// Applied entries kept in memory for followers slightly behind; one
    /// further behind gets a snapshot (etcd 3.6's flag and default).
    #[arg(
        long = "experimental-snapshot-catchup-entries",
        default_value_t = crate::raft::node::SNAPSHOT_CATCH_UP_ENTRIES_DEFAULT
    )]
    pub snapshot_catch_up_entries: u64,
    /// Largest client request accepted, in bytes.
    #[arg(long, default_value_t = MAX_REQUEST_BYTES_DEFAULT)]
    pub max_request_bytes: usize,
    /// Raise an alarm and refuse writes that would grow the store past
    /// this many bytes.
    #[arg(long, default_value_t = QUOTA_BACKEND_BYTES_DEFAULT)]
    pub quota_backend_bytes: u64,
    /// Most operations in one txn list.
    #[arg(long, default_value_t = mvcc::validate::MAX_TXN_OPS_DEFAULT)]
    pub max_txn_ops: usize,
    /// Heartbeat interval in milliseconds (one raft tick).
    #[arg(long = "heartbeat-interval", default_value_t = 100)]
    pub heartbeat_interval_ms: u64,
    /// Election timeout in milliseconds.
    #[arg(long = "election-timeout", default_value_t = 1000)]
    pub election_timeout_ms: u64,
    /// How often a watcher created with `progress_notify` hears the
    /// revision it has reached while nothing happens (etcd's default 10m).
    #[arg(
        long,
        default_value = WATCH_PROGRESS_NOTIFY_INTERVAL_DEFAULT,
        value_parser = parse_duration
    )]
    pub experimental_watch_progress_notify_interval: Duration,

    /// Refuse a membership change that could cost the cluster its quorum,
    /// as etcd does: adding or promoting a voter while too few members
    /// have started, adding a member while a voter has not been connected
    /// for the last `RECONFIG_HEALTH_INTERVAL`, removing a voter the
    /// quorum needs. `false` skips those checks, as etcd's flag does, for
    /// an operator who must force a change through an unhealthy cluster
    /// (and for the simulator, whose faults leave no 5 s of calm).
    #[arg(long, action = clap::ArgAction::Set, default_value_t = true)]
    pub strict_reconfig_check: bool,

    /// Advance the election clock at start once the peers' streams are up
    /// (`member/tick_advance.rs`), as etcd does by default; a cluster of
    /// one always advances.
    #[arg(long, action = clap::ArgAction::Set, default_value_t = true)]
    pub initial_election_tick_advance: bool,

    /// Campaign with raft's pre-vote round first, as etcd does by
    /// default: a member cut off from the quorum keeps its term.
    #[arg(long, action = clap::ArgAction::Set, default_value_t = true)]
    pub pre_vote: bool,

    /// Bind the client, peer and metrics listeners with `SO_REUSEPORT`,
    /// so that another process may listen on the same port (etcd's flag).
    #[arg(long, action = clap::ArgAction::Set, default_value_t = false)]
    pub socket_reuse_port: bool,

    /// How long a client connection may stay silent before the member
    /// pings it (HTTP/2 PING), as etcd's gRPC server does; 0 is etcd's
    /// default, two hours.
    #[arg(long, default_value = "2h0m0s", value_parser = parse_duration_or_zero)]
    pub grpc_keepalive_interval: Duration,

    /// The least time a client must leave between its pings while it has
    /// a stream open (none open: two hours); a client that pings more
    /// often gets GOAWAY `too_many_pings`, as from etcd's gRPC server
    /// (`server/ping_policy.rs`). 0 is gRPC's default, five minutes.
    #[arg(long, default_value = "5s", value_parser = parse_duration_or_zero)]
    pub grpc_keepalive_min_time: Duration,

    /// How long the member waits for the answer to its ping before it
    /// closes the connection; 0 is etcd's default, 20 s.
    #[arg(long, default_value = "20s", value_parser = parse_duration_or_zero)]
    pub grpc_keepalive_timeout: Duration,

    /// etcd's `--raft-read-timeout`: a raft stream from a peer quiet this
    /// long is closed (peers' heartbeats keep live ones busy). Below 5 s,
    /// etcd's least, it is raised to 5 s, with etcd's log line.
    #[arg(long, default_value = "5s", value_parser = parse_duration_or_zero)]
    pub raft_read_timeout: Duration,

    /// etcd's `--raft-write-timeout`: bytes for a peer that wait this long
    /// with the peer's socket taking none end that stream. Raised to 5 s
    /// as the read timeout is.
    #[arg(long, default_value = "5s", value_parser = parse_duration_or_zero)]
    pub raft_write_timeout: Duration,

    /// Streams one client connection may have open at once, advertised
    /// in HTTP/2's SETTINGS; etcd's default, 4294967295, is no limit and
    /// is not advertised (`server/client_port.rs`).
    #[arg(long, default_value_t = u32::MAX)]
    pub max_concurrent_streams: u32,

    /// Learners the cluster may hold at once (etcd 3.6's flag); MemberAdd
    /// of one more learner gets etcd's "too many learner members".
    #[arg(long, default_value_t = LEARNERS_MAX)]
    pub max_learners: usize,

    /// Compare this member's HashKV with its peers' once it has started;
    /// a mismatch raises the CORRUPT alarm for it.
    #[arg(long, action = clap::ArgAction::Set, default_value_t = false)]
    pub experimental_initial_corrupt_check: bool,

    /// While a defragmentation runs, report the gRPC health service as
    /// NOT_SERVING, so clients that check it go to another member (etcd
    /// 3.5's flag; 3.6's `StopGRPCServiceOnDefrag` gate).
    #[arg(long, action = clap::ArgAction::Set, default_value_t = false)]
    pub experimental_stop_grpc_service_on_defrag: bool,

    /// A directory of its own for the WAL (etcd's advice: a disk of its
    /// own); everything else stays in --data-dir.
    #[arg(long)]
    pub wal_dir: Option<PathBuf>,

    /// How --auto-compaction-retention is read: `periodic` (a duration, or
    /// whole hours) or `revision` (a number of revisions to keep).
    #[arg(long, default_value = "periodic")]
    pub auto_compaction_mode: String,

    /// How much history auto-compaction keeps (`server/compactor.rs`); 0
    /// turns it off.
    #[arg(long, default_value = "0")]
    pub auto_compaction_retention: String,

    /// An applied request slower than this is logged ("apply request took
    /// too long") and counted as slow, as etcd does.
    #[arg(long, default_value = "100ms", value_parser = parse_duration)]
    pub experimental_warning_apply_duration: Duration,

    /// A unary call slower than this is logged ("request stats", with
    /// what it asked and answered), as etcd 3.6 does.
    #[arg(long, default_value = "300ms", value_parser = parse_duration)]
    pub warning_unary_request_duration: Duration,

    /// `extensive` adds `grpc_server_handling_seconds` to the metrics, as
    /// etcd does; anything else serves etcd's basic set.
    #[arg(long, default_value = "basic")]
    pub metrics: String,

    /// Serve etcd's gRPC-JSON gateway (`POST /v3/...` as JSON) on the
    /// client URLs beside gRPC, as etcd does unless told not to.
    #[arg(long, action = clap::ArgAction::Set, default_value_t = true)]
    pub enable_grpc_gateway: bool,

    /// Origins the client URLs' HTTP answers allow cross-origin requests
    /// from (CORS), comma-separated; `*` or nothing allows any, etcd's
    /// default.
    #[arg(long, default_value = "*")]
    pub cors: String,

    /// Host names a plain-http request to the client URLs may carry in
    /// its `Host` header, comma-separated; `*` or nothing allows any.
    /// etcd's guard against DNS rebinding (TLS requests are not checked).
    #[arg(long, default_value = "*")]
    pub host_whitelist: String,

    /// How often the leader compares its HashKV with every member's; the
    /// members outside the hash a quorum holds get the CORRUPT alarm
    /// (see `member/corruption.rs`). 0 (etcd's default) turns the check
    /// off.
    #[arg(
        long,
        default_value = "0s",
        value_parser = parse_duration_or_zero
    )]
    pub experimental_corrupt_check_time: Duration,

    /// Have the leader compare the hashes its compactions recorded with
    /// its peers' at the same revisions, every
    /// --experimental-compact-hash-check-time (`member/corruption.rs`).
    #[arg(long, action = clap::ArgAction::Set, default_value_t = false)]
    pub experimental_compact_hash_check_enabled: bool,

    /// How often the compaction hash check runs; above zero, as etcd
    /// checks it whether or not the check is enabled.
    #[arg(long, default_value = "1m", value_parser = parse_duration_or_zero)]
    pub experimental_compact_hash_check_time: Duration,

    /// Have the leader checkpoint long leases' remaining TTLs through raft
    /// every five minutes, so that a new leader does not restart their
    /// clocks at the full TTL (`lease/lessor.rs`).
    #[arg(long, action = clap::ArgAction::Set, default_value_t = false)]
    pub experimental_enable_lease_checkpoint: bool,

    /// Store lease checkpoints as well, so that a restart does not restart
    /// the clocks either; needs --experimental-enable-lease-checkpoint.
    #[arg(long, action = clap::ArgAction::Set, default_value_t = false)]
    pub experimental_enable_lease_checkpoint_persist: bool,

    /// Keys or revisions one step of compaction takes, under the store's
    /// lock; 0 is etcd's default, 1000 (mvcc's compaction.rs).
    #[arg(long, default_value_t = mvcc::compaction::COMPACTION_BATCH_LIMIT_DEFAULT)]
    pub experimental_compaction_batch_limit: usize,

    /// The least pause between two steps of compaction; 0 is etcd's
    /// default, 10ms (apply/stage.rs).
    #[arg(
        long,
        default_value = "10ms",
        value_parser = parse_compaction_sleep
    )]
    pub experimental_compaction_sleep_interval: Duration,

    /// Extra URLs to serve `/metrics` and `/health` on (http:// only).
    #[arg(long, default_value = "")]
    pub listen_metrics_urls: String,

    /// The auth token type: only etcd's default, `simple`, is supported.
    #[arg(long, default_value = "simple", value_parser = ["simple"])]
    pub auth_token: String,

    /// Seconds a simple token lives after its last use.
    #[arg(long, default_value_t = crate::auth::tokens::TOKEN_TTL_DEFAULT_SECONDS)]
    pub auth_token_ttl: u64,

    /// bcrypt's cost for hashing passwords (4 to 31).
    #[arg(
        long,
        default_value_t = crate::auth::BCRYPT_COST_DEFAULT,
        value_parser = clap::value_parser!(u32).range(4..=31)
    )]
    pub bcrypt_cost: u32,

    /// Recover from a lost quorum: rewrite the membership to this member
    /// alone, keeping every committed entry (`server/force_new_cluster.rs`).
    #[arg(long, action = clap::ArgAction::Set, default_value_t = false)]
    pub force_new_cluster: bool,

    /// TLS for the client and peer URLs.
    #[command(flatten)]
    pub tls: crate::tls::TlsFlags,
}

/// A duration as etcd's flags write them (Go's syntax: `10m`, `1m30s`,
/// `500ms`), where 0 means off.
fn parse_duration_or_zero(text: &str) -> Result<Duration, String> {
    crate::flags::go_syntax::parse_duration(text).map_err(|_| "parse error".to_string())
}

/// `--experimental-compaction-sleep-interval`: 0 is etcd's default.
fn parse_compaction_sleep(text: &str) -> Result<Duration, String> {
    let duration = parse_duration_or_zero(text)?;
    Ok(match duration.is_zero() {
        true => crate::apply::stage::COMPACTION_SLEEP_INTERVAL_DEFAULT,
        false => duration,
    })
}

/// A duration as etcd's flags write them, above zero.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let duration = parse_duration_or_zero(text)?;
    if duration.is_zero() {
        return Err("must be above zero".into());
    }
    Ok(duration)
}

impl Config {
    /// The peer transport's timeouts, each raised to etcd's least (5 s)
    /// as etcd raises them; the flags raised are named, for the log.
    pub fn peer_timeouts(&self) -> (crate::peer::PeerTimeouts, Vec<&'static str>) {
        use crate::peer::PEER_TIMEOUT_MIN;
        let mut raised = Vec::new();
        let mut at_least = |value: Duration, flag: &'static str| {
            if value < PEER_TIMEOUT_MIN {
                raised.push(flag);
            }
            value.max(PEER_TIMEOUT_MIN)
        };
        let timeouts = crate::peer::PeerTimeouts {
            read: at_least(self.raft_read_timeout, "raft-read-timeout"),
            write: at_least(self.raft_write_timeout, "raft-write-timeout"),
        };
        (timeouts, raised)
    }

    /// The data directory's layout, with `--wal-dir` if given.
    pub fn layout(&self) -> crate::storage::layout::DataDir {
        crate::storage::layout::DataDir::with_wal_dir(self.data_dir(), self.wal_dir.clone())
    }

    pub fn data_dir(&self) -> PathBuf {
        self.data_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("{}.etcd", self.name)))
    }

    /// One raft tick: the heartbeat interval.
    pub fn tick_interval(&self) -> Duration {
        Duration::from_millis(self.heartbeat_interval_ms.max(1))
    }

    pub fn election_timeout(&self) -> Duration {
        Duration::from_millis(self.election_timeout_ms.max(1))
    }

    /// Ticks without hearing from a leader before a follower campaigns.
    pub fn election_ticks(&self) -> usize {
        (self.election_timeout_ms / self.heartbeat_interval_ms.max(1)).max(2) as usize
    }
}

/// Splits a comma-separated URL list.
pub fn urls(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(String::from)
        .collect()
}

/// Whether a URL asks for TLS: `https://`, or `unixs://` (a Unix socket
/// with TLS).
pub fn is_tls(url: &str) -> bool {
    url.starts_with("https://") || url.starts_with("unixs://")
}

/// Where a listen URL listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddr {
    Tcp(SocketAddr),
    /// A Unix socket (`unix://`, `unixs://`): its path is what follows
    /// `//`, as etcd takes it (`unix://localhost:2379` is the file
    /// `localhost:2379` in the working directory, `unix:///run/etcd.sock`
    /// an absolute path).
    Unix(PathBuf),
}

/// Where `url` listens.
pub fn listen_addr(url: &str) -> Result<ListenAddr, String> {
    match url.split_once("://") {
        Some(("unix" | "unixs", path)) if !path.is_empty() => Ok(ListenAddr::Unix(PathBuf::from(path))),
        Some(("http" | "https", _)) => socket_addr(url).map(ListenAddr::Tcp),
        _ => Err(format!("URL scheme must be http, https, unix, or unixs: {url}")),
    }
}

/// The socket address of an `http://host:port` or `https://host:port`
/// URL. `localhost` binds the IPv4 loopback, as the default URLs intend.
pub fn socket_addr(url: &str) -> Result<SocketAddr, String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| format!("{url}: only http:// and https:// URLs are supported"))?;
    let host_port = rest.trim_end_matches('/');
    let host_port = match host_port.strip_prefix("localhost:") {
        Some(port) => format!("127.0.0.1:{port}"),
        None => host_port.to_string(),
    };
    host_port.parse().map_err(|e| format!("{url}: {e}"))
}

/// The listen URLs checked at start: client URLs may be `http://`,
/// `https://`, `unix://` or `unixs://`; peer and metrics URLs are TCP
/// (etcd's Unix peer sockets are a corner no deployment uses, and its
/// `unixs://` peer URLs are not even TLS, so kv-server refuses them
/// rather than serve them differently).
pub fn check_listen_urls(config: &Config) -> Result<(), crate::error::Error> {
    let refuse = |flag, reason| crate::error::Error::Flag { flag, reason };
    let mut grpc = Vec::new();
    for url in urls(&config.listen_client_urls) {
        grpc.push(listen_addr(&url).map_err(|reason| refuse("listen-client-urls", reason))?);
    }
    for url in urls(&config.listen_client_http_urls) {
        let address = listen_addr(&url).map_err(|reason| refuse("listen-client-http-urls", reason))?;
        if grpc.contains(&address) {
            return Err(refuse(
                "listen-client-http-urls",
                format!("cannot bind both --client-listen-urls and --client-listen-http-urls on the same url {url}"),
            ));
        }
    }
    for (flag, list) in [
        ("listen-peer-urls", &config.listen_peer_urls),
        ("listen-metrics-urls", &config.listen_metrics_urls),
    ] {
        for url in urls(list) {
            if let ListenAddr::Unix(_) = listen_addr(&url).map_err(|reason| refuse(flag, reason))? {
                return Err(refuse(
                    flag,
                    format!("{url}: Unix sockets are served on client URLs only"),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: etcd's flag names, defaults and both value spellings parse.
    #[test]
    fn etcd_flags_parse() {
        let config = Config::parse_from([
            "kv-server",
            "--name",
            "infra1",
            "--listen-client-urls=http://127.0.0.1:2379",
            "--initial-cluster",
            "infra1=http://127.0.0.1:2380,infra2=http://127.0.0.1:22380",
            "--snapshot-count=500",
        ]);
        assert_eq!(config.name, "infra1");
        assert_eq!(config.data_dir(), PathBuf::from("infra1.etcd"));
        assert_eq!(config.snapshot_count, 500);
        assert_eq!(config.max_request_bytes, MAX_REQUEST_BYTES_DEFAULT);
        assert_eq!(config.election_ticks(), 10);
        assert_eq!(
            socket_addr("http://localhost:2379").unwrap(),
            "127.0.0.1:2379".parse().unwrap()
        );
        assert_eq!(
            socket_addr("https://127.0.0.1:2379").unwrap(),
            "127.0.0.1:2379".parse().unwrap()
        );
        assert!(socket_addr("unix://127.0.0.1:2379").is_err());
        assert_eq!(
            config.experimental_watch_progress_notify_interval,
            Duration::from_secs(600)
        );
        for (text, expected) in [("1m30s", 90_000), ("500ms", 500), ("2s", 2000)] {
            assert_eq!(parse_duration(text), Ok(Duration::from_millis(expected)), "{text}");
        }
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("soon").is_err());
    }
}
