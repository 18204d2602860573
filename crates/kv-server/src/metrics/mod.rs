//! etcd 3.5's Prometheus metrics, with its names, types, labels, help
//! texts and bucket boundaries, so dashboards and alerts built for etcd
//! work unchanged. Served as Prometheus text on `/metrics` of every client
//! URL and of `--listen-metrics-urls`.
//!
//! - Counters and histograms on paths that run per request are updated
//!   where the work happens: an atomic add, or a histogram's bucket
//!   search and two atomic adds.
//! - Gauges that describe state (leader, indexes, sizes, key and watcher
//!   counts) are read from the member when scraped, so they cost the hot
//!   path nothing.
//! - [`grpc`] counts gRPC calls as go-grpc-prometheus does.
//!
//! The metrics are process-wide, as Go's default registry is in etcd:
//! one member runs per process, and every part that reports (the raft
//! loop, the apply stage, the peer transport, the client listener) can
//! reach them without threading a handle through every constructor.
//!
//! Differences from etcd, each kept to what the name promises:
//! - `etcd_disk_wal_fsync_duration_seconds` times the WAL's fdatasync;
//!   `etcd_disk_wal_write_bytes_total` counts the framed bytes written.
//! - `etcd_network_client_grpc_{received,sent}_bytes_total` count bytes
//!   read from and written to client connections, HTTP/2 framing (and
//!   TLS records) included, where etcd counts gRPC payloads.
//! - `etcd_network_peer_round_trip_time_seconds` records each probe's
//!   round trip to each peer, one every [`PEER_PROBE_EVERY`] as etcd's
//!   prober sends them. etcd records only its smoothed round trip, every
//!   30 s, so this histogram's count grows 7.5 times as fast, and a run
//!   shorter than 30 s (a sweep row) sees samples where etcd's has none.
//!
//! [`store_observer`] times the store's applies and commits into them;
//! [`grpc`] has the gRPC request metrics, [`handles`] the metric handles.

mod store_observer;

pub use store_observer::StoreObserver;

pub mod grpc;
pub mod handles;

use std::sync::LazyLock;
use std::time::Duration;

use prometheus::core::Collector;
use prometheus::{
    exponential_buckets, Encoder, Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

/// How often each member's round trip to each peer is probed: etcd's
/// prober runs every 5 s less a second.
pub const PEER_PROBE_EVERY: Duration = Duration::from_secs(4);

/// etcd's default warning threshold for an apply
/// (`--experimental-warning-apply-duration`): an apply slower counts in
/// `etcd_server_slow_apply_total` and is logged.
pub const SLOW_APPLY: Duration = Duration::from_millis(100);

/// The threshold in force, in nanoseconds (set from the flag at start).
static WARNING_APPLY_NANOS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(100_000_000);

/// Sets the slow-apply threshold (`--experimental-warning-apply-duration`).
pub fn set_warning_apply_duration(threshold: Duration) {
    WARNING_APPLY_NANOS.store(threshold.as_nanos() as u64, std::sync::atomic::Ordering::Relaxed);
}

/// The slow-apply threshold in force.
pub fn warning_apply_duration() -> Duration {
    Duration::from_nanos(WARNING_APPLY_NANOS.load(std::sync::atomic::Ordering::Relaxed))
}

/// The version the server reports, as `/version` does.
pub const SERVER_VERSION: &str = "3.5.17";

/// Every metric this server reports, grouped as etcd's packages
/// report them.
pub struct Metrics {
    registry: Registry,
    pub disk: DiskMetrics,
    pub server: ServerMetrics,
    pub mvcc: MvccMetrics,
    pub network: NetworkMetrics,
    pub grpc: grpc::GrpcMetrics,
}

/// The process's metrics.
pub fn metrics() -> &'static Metrics {
    static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);
    &METRICS
}

/// The WAL's and the backend's: etcd's `etcd_disk_*`.
pub struct DiskMetrics {
    pub wal_fsync: handles::Histogram,
    pub backend_commit: handles::Histogram,
    pub wal_write_bytes: handles::Gauge,
}

impl DiskMetrics {
    fn new() -> DiskMetrics {
        DiskMetrics {
            wal_fsync: histogram(
                "etcd_disk_wal_fsync_duration_seconds",
                "The latency distributions of fsync called by WAL.",
                0.001,
                14,
            ),
            backend_commit: histogram(
                "etcd_disk_backend_commit_duration_seconds",
                "The latency distributions of commit called by backend.",
                0.001,
                14,
            ),
            wal_write_bytes: int_gauge(
                "etcd_disk_wal_write_bytes_total",
                "Total number of bytes written in WAL.",
            ),
        }
    }

    fn collectors(&self) -> Vec<Box<dyn Collector>> {
        vec![
            self.wal_fsync.collector(),
            self.backend_commit.collector(),
            self.wal_write_bytes.collector(),
        ]
    }
}

/// Raft and apply: etcd's `etcd_server_*`.
pub struct ServerMetrics {
    pub has_leader: handles::Gauge,
    pub is_leader: handles::Gauge,
    pub leader_changes: handles::Counter,
    pub proposals_committed: handles::Gauge,
    pub proposals_applied: handles::Gauge,
    pub proposals_pending: handles::Gauge,
    pub proposals_failed: handles::Counter,
    pub slow_apply: handles::Counter,
    pub heartbeat_send_failures: handles::Counter,
    pub apply_duration: handles::HistogramVec,
    pub quota_backend_bytes: handles::FloatGauge,
    pub server_id: handles::GaugeVec,
    pub server_version: handles::GaugeVec,
    pub health_success: handles::Counter,
    pub health_failures: handles::Counter,
}

/// `/health`'s counters: successes and failures.
fn health_counters() -> (handles::Counter, handles::Counter) {
    (
        int_counter(
            "etcd_server_health_success",
            "The total number of successful health checks",
        ),
        int_counter(
            "etcd_server_health_failures",
            "The total number of failed health checks",
        ),
    )
}

impl ServerMetrics {
    fn new() -> ServerMetrics {
        let (health_success, health_failures) = health_counters();
        ServerMetrics {
            has_leader: int_gauge(
                "etcd_server_has_leader",
                "Whether or not a leader exists. 1 is existence, 0 is not.",
            ),
            is_leader: int_gauge(
                "etcd_server_is_leader",
                "Whether or not this member is a leader. 1 if is, 0 otherwise.",
            ),
            leader_changes: int_counter(
                "etcd_server_leader_changes_seen_total",
                "The number of leader changes seen.",
            ),
            proposals_committed: int_gauge(
                "etcd_server_proposals_committed_total",
                "The total number of consensus proposals committed.",
            ),
            proposals_applied: int_gauge(
                "etcd_server_proposals_applied_total",
                "The total number of consensus proposals applied.",
            ),
            proposals_pending: int_gauge(
                "etcd_server_proposals_pending",
                "The current number of pending proposals to commit.",
            ),
            proposals_failed: int_counter(
                "etcd_server_proposals_failed_total",
                "The total number of failed proposals seen.",
            ),
            slow_apply: int_counter(
                "etcd_server_slow_apply_total",
                "The total number of slow apply requests (likely overloaded from slow disk).",
            ),
            heartbeat_send_failures: int_counter(
                "etcd_server_heartbeat_send_failures_total",
                "The total number of leader heartbeat send failures (likely overloaded from slow disk).",
            ),
            apply_duration: histogram_vec(
                "etcd_server_apply_duration_seconds",
                "The latency distributions of v2 apply called by backend.",
                0.0001,
                20,
                &["version", "op", "success"],
            ),
            quota_backend_bytes: handles::FloatGauge(
                Gauge::new(
                    "etcd_server_quota_backend_bytes",
                    "Current backend storage quota size in bytes.",
                )
                .expect("valid gauge"),
            ),
            server_id: gauge_vec(
                "etcd_server_id",
                "Server or member ID in hexadecimal format. 1 for 'server_id' label with current ID.",
                "server_id",
            ),
            server_version: gauge_vec(
                "etcd_server_version",
                "Which version is running. 1 for 'server_version' label with current version.",
                "server_version",
            ),
            health_success,
            health_failures,
        }
    }

    fn collectors(&self) -> Vec<Box<dyn Collector>> {
        vec![
            self.has_leader.collector(),
            self.is_leader.collector(),
            self.leader_changes.collector(),
            self.proposals_committed.collector(),
            self.proposals_applied.collector(),
            self.proposals_pending.collector(),
            self.proposals_failed.collector(),
            self.slow_apply.collector(),
            self.heartbeat_send_failures.collector(),
            self.apply_duration.collector(),
            self.quota_backend_bytes.collector(),
            self.server_id.collector(),
            self.server_version.collector(),
            self.health_success.collector(),
            self.health_failures.collector(),
        ]
    }
}

/// The store's: etcd's `etcd_mvcc_*` and `etcd_debugging_*`.
pub struct MvccMetrics {
    pub db_total_size: handles::Gauge,
    pub db_total_size_in_use: handles::Gauge,
    pub put_total: handles::Counter,
    pub range_total: handles::Counter,
    pub delete_total: handles::Counter,
    pub txn_total: handles::Counter,
    pub keys_total: handles::Gauge,
    pub watcher_total: handles::Gauge,
    pub slow_watcher_total: handles::Gauge,
    pub lease_granted: handles::Counter,
    pub index_compaction_pause: handles::Histogram,
    pub db_compaction_pause: handles::Histogram,
    pub db_compaction_keys: handles::Counter,
}

impl MvccMetrics {
    fn new() -> MvccMetrics {
        MvccMetrics {
            db_total_size: int_gauge(
                "etcd_mvcc_db_total_size_in_bytes",
                "Total size of the underlying database physically allocated in bytes.",
            ),
            db_total_size_in_use: int_gauge(
                "etcd_mvcc_db_total_size_in_use_in_bytes",
                "Total size of the underlying database logically in use in bytes.",
            ),
            put_total: int_counter("etcd_mvcc_put_total", "Total number of puts seen by this member."),
            range_total: int_counter("etcd_mvcc_range_total", "Total number of ranges seen by this member."),
            delete_total: int_counter("etcd_mvcc_delete_total", "Total number of deletes seen by this member."),
            txn_total: int_counter("etcd_mvcc_txn_total", "Total number of txns seen by this member."),
            keys_total: int_gauge("etcd_debugging_mvcc_keys_total", "Total number of keys."),
            watcher_total: int_gauge("etcd_debugging_mvcc_watcher_total", "Total number of watchers."),
            slow_watcher_total: int_gauge(
                "etcd_debugging_mvcc_slow_watcher_total",
                "Total number of unsynced slow watchers.",
            ),
            lease_granted: int_counter(
                "etcd_debugging_lease_granted_total",
                "The total number of granted leases.",
            ),
            index_compaction_pause: histogram(
                "etcd_debugging_mvcc_index_compaction_pause_duration_milliseconds",
                "Bucketed histogram of index compaction pause duration.",
                0.5,
                14,
            ),
            db_compaction_pause: histogram(
                "etcd_debugging_mvcc_db_compaction_pause_duration_milliseconds",
                "Bucketed histogram of db compaction pause duration.",
                1.0,
                13,
            ),
            db_compaction_keys: int_counter(
                "etcd_debugging_mvcc_db_compaction_keys_total",
                "Total number of db keys compacted.",
            ),
        }
    }

    fn collectors(&self) -> Vec<Box<dyn Collector>> {
        vec![
            self.db_total_size.collector(),
            self.db_total_size_in_use.collector(),
            self.put_total.collector(),
            self.range_total.collector(),
            self.delete_total.collector(),
            self.txn_total.collector(),
            self.keys_total.collector(),
            self.watcher_total.collector(),
            self.slow_watcher_total.collector(),
            self.lease_granted.collector(),
            self.index_compaction_pause.collector(),
            self.db_compaction_pause.collector(),
            self.db_compaction_keys.collector(),
        ]
    }
}

/// Peers and clients: etcd's `etcd_network_*`.
pub struct NetworkMetrics {
    pub peer_round_trip: handles::HistogramVec,
    pub peer_sent_bytes: handles::CounterVec,
    pub peer_received_bytes: handles::CounterVec,
    /// Raft messages handed to the peer transport (snapshots included):
    /// this server's own count, with no etcd equivalent, so that a
    /// benchmark can report raft messages per request.
    pub peer_raft_messages_sent: handles::Counter,
    pub client_received_bytes: handles::Counter,
    pub client_sent_bytes: handles::Counter,
}

impl NetworkMetrics {
    fn new() -> NetworkMetrics {
        NetworkMetrics {
            peer_round_trip: histogram_vec(
                "etcd_network_peer_round_trip_time_seconds",
                "Round-Trip-Time histogram between peers",
                0.0001,
                16,
                &["To"],
            ),
            peer_sent_bytes: counter_vec(
                "etcd_network_peer_sent_bytes_total",
                "The total number of bytes sent to peers.",
                "To",
            ),
            peer_received_bytes: counter_vec(
                "etcd_network_peer_received_bytes_total",
                "The total number of bytes received from peers.",
                "From",
            ),
            peer_raft_messages_sent: int_counter(
                "kv_server_peer_raft_messages_sent_total",
                "The total number of raft messages sent to peers.",
            ),
            client_received_bytes: int_counter(
                "etcd_network_client_grpc_received_bytes_total",
                "The total number of bytes received from grpc clients.",
            ),
            client_sent_bytes: int_counter(
                "etcd_network_client_grpc_sent_bytes_total",
                "The total number of bytes sent to grpc clients.",
            ),
        }
    }

    fn collectors(&self) -> Vec<Box<dyn Collector>> {
        vec![
            self.peer_round_trip.collector(),
            self.peer_sent_bytes.collector(),
            self.peer_received_bytes.collector(),
            self.peer_raft_messages_sent.collector(),
            self.client_received_bytes.collector(),
            self.client_sent_bytes.collector(),
        ]
    }
}

fn histogram(name: &str, help: &str, start: f64, count: usize) -> handles::Histogram {
    let buckets = exponential_buckets(start, 2.0, count).expect("valid buckets");
    handles::Histogram(Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets)).expect("valid histogram"))
}

fn histogram_vec(name: &str, help: &str, start: f64, count: usize, labels: &[&str]) -> handles::HistogramVec {
    let buckets = exponential_buckets(start, 2.0, count).expect("valid buckets");
    handles::HistogramVec(
        HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels).expect("valid histogram"),
    )
}

fn int_gauge(name: &str, help: &str) -> handles::Gauge {
    handles::Gauge(IntGauge::new(name, help).expect("valid gauge"))
}

fn gauge_vec(name: &str, help: &str, label: &str) -> handles::GaugeVec {
    handles::GaugeVec(IntGaugeVec::new(Opts::new(name, help), &[label]).expect("valid gauge"))
}

fn counter_vec(name: &str, help: &str, label: &str) -> handles::CounterVec {
    handles::CounterVec(IntCounterVec::new(Opts::new(name, help), &[label]).expect("valid counter"))
}

fn int_counter(name: &str, help: &str) -> handles::Counter {
    handles::Counter(IntCounter::new(name, help).expect("valid counter"))
}

impl Metrics {
    fn new() -> Metrics {
        let metrics = Metrics {
            registry: Registry::new(),
            disk: DiskMetrics::new(),
            server: ServerMetrics::new(),
            mvcc: MvccMetrics::new(),
            network: NetworkMetrics::new(),
            grpc: grpc::GrpcMetrics::default(),
        };
        let mut collectors = metrics.disk.collectors();
        collectors.extend(metrics.server.collectors());
        collectors.extend(metrics.mvcc.collectors());
        collectors.extend(metrics.network.collectors());
        collectors.extend(metrics.grpc.collectors());
        collectors.push(Box::new(prometheus::process_collector::ProcessCollector::for_self()));
        for collector in collectors {
            metrics
                .registry
                .register(collector)
                .expect("each metric registers once");
        }
        metrics
    }

    /// Sets what is fixed for the member's life: its id, the version and
    /// the quota.
    pub fn describe_member(&self, member_id: u64, quota_backend_bytes: u64) {
        self.server
            .server_id
            .with_label_values(&[&format!("{member_id:x}")])
            .set(1);
        self.server.server_version.with_label_values(&[SERVER_VERSION]).set(1);
        self.server.quota_backend_bytes.set(quota_backend_bytes as f64);
    }

    /// `--metrics=extensive`: adds `grpc_server_handling_seconds`, as etcd
    /// adds it. Anything else leaves etcd's basic set, as etcd does.
    pub fn set_level(&self, level: &str) {
        if level != "extensive" {
            return;
        }
        if let Some(histogram) = self.grpc.enable_handling_histogram() {
            self.registry
                .register(Box::new(histogram))
                .expect("the histogram registers once");
        }
    }

    /// Every metric as Prometheus text (format 0.0.4, as etcd serves).
    pub fn encode(&self) -> Vec<u8> {
        let mut text = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut text)
            .expect("text encoding does not fail");
        text
    }
}
