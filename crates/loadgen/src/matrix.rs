//! etcd's documented benchmark matrix (its v3 performance doc: 3 members,
//! 8-byte keys, 256-byte values), replayed row by row with the flags the
//! doc gives, and printed beside the doc's figures.
//!
//! The doc's put rows use `--sequential-keys` with the tool's default key
//! space of 1, so every put writes the same key; that is kept, to measure
//! what the doc measured. The range rows read one key, which the matrix
//! first puts with a 256-byte value.

use etcd_proto::etcdserverpb as pb;
use etcd_proto::etcdserverpb::kv_client::KvClient;
use serde::{Deserialize, Serialize};

use crate::engine::{self, Target};
use crate::report::Report;
use crate::workload::{PutSpec, RangeSpec, Workload};

/// The key the range rows read.
pub const RANGE_KEY: &[u8] = b"matrix/range-key";

#[derive(Debug, Clone, Copy)]
pub struct Row {
    pub workload: &'static str,
    pub conns: usize,
    pub clients: usize,
    pub total: u64,
    pub target_leader: bool,
    /// The doc's figures: QPS, average latency (ms), RSS (MB) if given.
    pub doc_qps: f64,
    pub doc_avg_ms: f64,
    pub doc_rss_mb: Option<f64>,
}

/// The doc's table, in its order.
pub const ROWS: [Row; 7] = [
    Row {
        workload: "put",
        conns: 1,
        clients: 1,
        total: 10_000,
        target_leader: true,
        doc_qps: 583.0,
        doc_avg_ms: 1.6,
        doc_rss_mb: Some(48.0),
    },
    Row {
        workload: "put",
        conns: 100,
        clients: 1000,
        total: 100_000,
        target_leader: true,
        doc_qps: 44_341.0,
        doc_avg_ms: 22.0,
        doc_rss_mb: Some(124.0),
    },
    Row {
        workload: "put",
        conns: 100,
        clients: 1000,
        total: 100_000,
        target_leader: false,
        doc_qps: 50_104.0,
        doc_avg_ms: 20.0,
        doc_rss_mb: Some(126.0),
    },
    Row {
        workload: "range-l",
        conns: 1,
        clients: 1,
        total: 10_000,
        target_leader: false,
        doc_qps: 1_353.0,
        doc_avg_ms: 0.7,
        doc_rss_mb: None,
    },
    Row {
        workload: "range-s",
        conns: 1,
        clients: 1,
        total: 10_000,
        target_leader: false,
        doc_qps: 2_909.0,
        doc_avg_ms: 0.3,
        doc_rss_mb: None,
    },
    Row {
        workload: "range-l",
        conns: 100,
        clients: 1000,
        total: 100_000,
        target_leader: false,
        doc_qps: 141_578.0,
        doc_avg_ms: 5.5,
        doc_rss_mb: None,
    },
    Row {
        workload: "range-s",
        conns: 100,
        clients: 1000,
        total: 100_000,
        target_leader: false,
        doc_qps: 185_758.0,
        doc_avg_ms: 2.2,
        doc_rss_mb: None,
    },
];

/// One measured row, with the doc's figures beside it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Measured {
    pub row: String,
    pub workload: String,
    pub conns: usize,
    pub clients: usize,
    pub total: u64,
    pub target: String,
    pub doc_qps: f64,
    pub doc_avg_ms: f64,
    pub doc_rss_mb: Option<f64>,
    /// Largest resident memory among `--rss-pids` after the row, in MB.
    pub rss_mb: Option<f64>,
    pub report: Report,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MatrixResult {
    pub label: String,
    pub scale: f64,
    pub rows: Vec<Measured>,
}

impl Row {
    pub fn name(&self) -> String {
        let target = if self.target_leader { "leader" } else { "all" };
        format!("{} {}x{} {}", self.workload, self.conns, self.clients, target)
    }

    /// The row at `scale`: the total shrinks, and clients never exceed it.
    pub fn scaled(&self, scale: f64) -> (u64, usize, usize) {
        let total = ((self.total as f64 * scale).round() as u64).max(1);
        let clients = self.clients.min(total as usize);
        let conns = self.conns.min(clients);
        (total, conns, clients)
    }

    fn workload(&self, total: u64) -> Workload {
        match self.workload {
            "put" => Workload::Put(PutSpec {
                total,
                key_size: 8,
                val_size: 256,
                sequential_keys: true,
                key_space_size: 1,
            }),
            consistency => Workload::Range(RangeSpec {
                total,
                key: RANGE_KEY.to_vec(),
                end: Vec::new(),
                serializable: consistency == "range-s",
                limit: 0,
                count_only: false,
                expect_count: None,
            }),
        }
    }
}

/// Resident memory of a process, in MB, from `/proc/<pid>/status`.
pub fn rss_mb(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// Puts `key` with `value` through the first endpoint.
pub async fn put_key(endpoints: &[String], key: &[u8], value: Vec<u8>) -> Result<(), String> {
    let channel = crate::dial::channel(&endpoints[0]).await?;
    KvClient::new(channel)
        .put(pb::PutRequest {
            key: key.to_vec(),
            value,
            ..Default::default()
        })
        .await
        .map_err(|s| format!("putting {}: {}", String::from_utf8_lossy(key), s.message()))?;
    Ok(())
}

/// Runs every row against `endpoints`, printing each report as it ends.
pub async fn run(endpoints: &[String], scale: f64, rss_pids: &[u32], label: &str) -> Result<MatrixResult, String> {
    if !(scale > 0.0 && scale <= 10.0) {
        return Err(format!("--scale must be in (0, 10], not {scale}"));
    }
    put_key(endpoints, RANGE_KEY, vec![b'v'; 256]).await?;
    let mut rows = Vec::new();
    for row in ROWS {
        let (total, conns, clients) = row.scaled(scale);
        let target = Target {
            endpoints: endpoints.to_vec(),
            conns,
            clients,
            target_leader: row.target_leader,
            gateway: false,
        };
        println!("\n== {} ({total} requests)", row.name());
        let report = engine::run(&target, &row.workload(total), 0).await?;
        print!("{}", report.render());
        let rss_mb = rss_pids.iter().filter_map(|&pid| rss_mb(pid)).reduce(f64::max);
        rows.push(Measured {
            row: row.name(),
            workload: row.workload.to_string(),
            conns,
            clients,
            total,
            target: if row.target_leader { "leader" } else { "all" }.to_string(),
            doc_qps: row.doc_qps,
            doc_avg_ms: row.doc_avg_ms,
            doc_rss_mb: row.doc_rss_mb,
            rss_mb,
            report,
        });
    }
    Ok(MatrixResult {
        label: label.to_string(),
        scale,
        rows,
    })
}

fn or_blank(value: Option<f64>, digits: usize) -> String {
    value.map_or(String::new(), |v| format!("{v:.digits$}"))
}

/// The matrix as a markdown table, measured figures beside the doc's.
pub fn markdown(result: &MatrixResult) -> String {
    let mut out = format!(
        "| workload | conns | clients | total | target | QPS ({}) | doc QPS | avg ms | doc avg ms | p50 ms | p99 ms | RSS MB | doc RSS MB | errors |\n",
        result.label
    );
    out += "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for row in &result.rows {
        let report = &row.report;
        out += &format!(
            "| {} | {} | {} | {} | {} | {:.0} | {:.0} | {:.2} | {} | {:.2} | {:.2} | {} | {} | {} |\n",
            row.workload,
            row.conns,
            row.clients,
            row.total,
            row.target,
            report.requests_per_sec,
            row.doc_qps,
            report.average_secs * 1e3,
            row.doc_avg_ms,
            report.p50_secs * 1e3,
            report.p99_secs * 1e3,
            or_blank(row.rss_mb, 0),
            or_blank(row.doc_rss_mb, 0),
            report.errors.values().sum::<u64>(),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: scaling shrinks totals and never leaves more clients than
    // requests or more connections than clients.
    #[test]
    fn scaling_keeps_rows_sane() {
        assert_eq!(ROWS[1].scaled(1.0), (100_000, 100, 1000));
        assert_eq!(ROWS[1].scaled(0.01), (1000, 100, 1000));
        assert_eq!(ROWS[1].scaled(0.001), (100, 100, 100));
        assert_eq!(ROWS[0].scaled(0.00001), (1, 1, 1));
    }

    #[test]
    fn this_process_has_a_resident_size() {
        let rss = rss_mb(std::process::id()).expect("linux /proc");
        assert!(rss > 0.5 && rss < 10_000.0, "{rss}");
    }
}
