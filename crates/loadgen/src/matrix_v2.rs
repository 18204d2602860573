//! etcd's v2.2.0-rc benchmark page, replayed over v3: reads and writes of
//! one single key, values of 64 and 256 bytes, 1, 64 and 256 clients, to
//! the leader or to all members, with each row's QPS and 90th-percentile
//! latency beside the page's.
//!
//! The page drove v2's HTTP API with `hey`, one connection per client;
//! v2 is gone (etcd 3.6 removed it), so reads here are linearizable v3
//! ranges of the key and writes are v3 puts to it, with one connection
//! per client as there. The page gives no request counts; each row makes
//! [`ROW_TOTAL`] requests (times `--scale`). Its figures are from 3
//! members on GCE n1-highcpu-2 machines with local SSDs, so compare the
//! shape (how rows relate), not the numbers.

use serde::{Deserialize, Serialize};

use crate::engine::{self, Target};
use crate::matrix::put_key;
use crate::report::Report;
use crate::workload::{PutSpec, RangeSpec, Workload};

/// Requests per row at scale 1: enough for 256 clients to make about 40
/// each, and a row to take seconds.
pub const ROW_TOTAL: u64 = 10_000;

/// The key every row reads or writes.
pub const KEY: &[u8] = b"v2-matrix/key";

/// One row of the page's table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Row {
    pub read: bool,
    pub value_size: usize,
    pub clients: usize,
    pub all_members: bool,
    pub doc_qps: f64,
    pub doc_p90_ms: f64,
}

const fn row(read: bool, value_size: usize, clients: usize, all_members: bool, doc_qps: f64, doc_p90_ms: f64) -> Row {
    Row {
        read,
        value_size,
        clients,
        all_members,
        doc_qps,
        doc_p90_ms,
    }
}

/// The page's table, in its order.
pub const ROWS: [Row; 20] = [
    row(true, 64, 1, false, 2804.0, 0.4),
    row(true, 64, 64, false, 17816.0, 5.7),
    row(true, 64, 256, false, 18667.0, 20.4),
    row(true, 256, 1, false, 2181.0, 0.5),
    row(true, 256, 64, false, 17435.0, 6.0),
    row(true, 256, 256, false, 18180.0, 21.3),
    row(true, 64, 64, true, 46965.0, 2.1),
    row(true, 64, 256, true, 55286.0, 7.4),
    row(true, 256, 64, true, 46603.0, 2.1),
    row(true, 256, 256, true, 55291.0, 7.3),
    row(false, 64, 1, false, 76.0, 19.4),
    row(false, 64, 64, false, 2461.0, 31.8),
    row(false, 64, 256, false, 4275.0, 69.6),
    row(false, 256, 1, false, 64.0, 16.7),
    row(false, 256, 64, false, 2385.0, 31.5),
    row(false, 256, 256, false, 4353.0, 74.0),
    row(false, 64, 64, true, 2005.0, 49.8),
    row(false, 64, 256, true, 4868.0, 81.5),
    row(false, 256, 64, true, 1925.0, 47.7),
    row(false, 256, 256, true, 4975.0, 70.3),
];

/// One measured row, with the page's figures beside it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Measured {
    pub op: String,
    pub value_size: usize,
    pub clients: usize,
    pub target: String,
    pub total: u64,
    pub qps: f64,
    pub p90_ms: f64,
    pub doc_qps: f64,
    pub doc_p90_ms: f64,
    pub report: Report,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct V2Result {
    pub label: String,
    pub scale: f64,
    pub rows: Vec<Measured>,
}

impl Row {
    fn op(&self) -> &'static str {
        if self.read {
            "read"
        } else {
            "write"
        }
    }

    fn target(&self) -> &'static str {
        if self.all_members {
            "all"
        } else {
            "leader"
        }
    }

    /// The row's requests at `scale`, at least one per client.
    pub fn total(&self, scale: f64) -> u64 {
        ((ROW_TOTAL as f64 * scale).round() as u64).max(self.clients as u64)
    }

    fn workload(&self, total: u64) -> Workload {
        if self.read {
            Workload::Range(RangeSpec {
                total,
                key: KEY.to_vec(),
                end: Vec::new(),
                serializable: false,
                limit: 0,
                count_only: false,
                expect_count: None,
            })
        } else {
            // One key (etcd's tool's first sequential key), as the page's
            // writes all went to one key.
            Workload::Put(PutSpec {
                total,
                key_size: 8,
                val_size: self.value_size,
                sequential_keys: true,
                key_space_size: 1,
            })
        }
    }
}

/// The 90th percentile of a report, in milliseconds.
pub fn p90_ms(report: &Report) -> f64 {
    report
        .percentiles
        .iter()
        .find(|(percent, _)| (*percent - 90.0).abs() < f64::EPSILON)
        .map_or(f64::NAN, |(_, secs)| secs * 1e3)
}

/// Runs every row against `endpoints`, printing each report as it ends.
pub async fn run(endpoints: &[String], scale: f64, label: &str) -> Result<V2Result, String> {
    if !(scale > 0.0 && scale <= 10.0) {
        return Err(format!("--scale must be in (0, 10], not {scale}"));
    }
    let mut rows = Vec::new();
    for row in ROWS {
        if row.read {
            put_key(endpoints, KEY, vec![b'v'; row.value_size]).await?;
        }
        let total = row.total(scale);
        let target = Target {
            endpoints: endpoints.to_vec(),
            conns: row.clients,
            clients: row.clients,
            target_leader: !row.all_members,
            gateway: false,
        };
        println!(
            "\n== {} {} B, {} clients, {} ({total} requests)",
            row.op(),
            row.value_size,
            row.clients,
            row.target()
        );
        let report = engine::run(&target, &row.workload(total), 0).await?;
        print!("{}", report.render());
        rows.push(Measured {
            op: row.op().into(),
            value_size: row.value_size,
            clients: row.clients,
            target: row.target().into(),
            total,
            qps: report.requests_per_sec,
            p90_ms: p90_ms(&report),
            doc_qps: row.doc_qps,
            doc_p90_ms: row.doc_p90_ms,
            report,
        });
    }
    Ok(V2Result {
        label: label.to_string(),
        scale,
        rows,
    })
}

/// The rows as a markdown table, measured figures beside the page's.
pub fn markdown(result: &V2Result) -> String {
    let mut out = format!(
        "| op | size | clients | target | QPS ({}) | page QPS | p90 ms | page p90 ms | errors |\n",
        result.label
    );
    out += "|---|---|---|---|---|---|---|---|---|\n";
    for row in &result.rows {
        out += &format!(
            "| {} | {} | {} | {} | {:.0} | {:.0} | {:.1} | {:.1} | {} |\n",
            row.op,
            row.value_size,
            row.clients,
            row.target,
            row.qps,
            row.doc_qps,
            row.p90_ms,
            row.doc_p90_ms,
            row.report.errors.values().sum::<u64>()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: the table is the page's (20 rows: 10 reads, 10 writes, the
    // all-members rows only at 64 and 256 clients), and every row makes
    // at least one request per client.
    #[test]
    fn the_pages_rows() {
        assert_eq!(ROWS.iter().filter(|r| r.read).count(), 10);
        assert!(ROWS.iter().filter(|r| r.all_members).all(|r| r.clients >= 64));
        assert_eq!(ROWS[0].total(1.0), ROW_TOTAL);
        assert_eq!(ROWS[2].total(0.001), 256);
        let report = Report {
            percentiles: vec![(50.0, 0.001), (90.0, 0.0025)],
            ..Report::default()
        };
        assert!((p90_ms(&report) - 2.5).abs() < 1e-9);
    }
}
