//! `loadgen sweep`: IBM's Optane/NVMe WAL study's grid. Puts of each
//! value size, with each number of clients over each number of
//! connections; beside each row, the p99 of the members' WAL fsync,
//! backend commit and peer round trip over the row, from their
//! `/metrics` scraped before and after it. JSON rows carry `qps`,
//! `p99_ms`, `wal_fsync_p99_ms`, `backend_commit_p99_ms` and
//! `peer_rtt_p99_ms`; the SVG draws QPS and p99 against clients, a
//! column of panels per connection count with a line per value size.

use std::path::Path;

use plotters::prelude::*;
use serde::{Deserialize, Serialize};

use crate::engine::{self, Target};
use crate::scrape::{self, Scraper};
use crate::workload::{PutSpec, Workload};

/// The grid and where to run it.
pub struct Grid {
    pub val_sizes: Vec<usize>,
    pub clients: Vec<usize>,
    pub conns: Vec<usize>,
    pub total: u64,
    pub target_leader: bool,
    /// The members' `/metrics`, scraped around each row.
    pub scraper: Scraper,
}

/// One row's figures.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SweepRow {
    pub val_size: usize,
    pub clients: usize,
    pub conns: usize,
    pub total: u64,
    pub qps: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub errors: u64,
    pub wal_fsync_p99_ms: Option<f64>,
    pub backend_commit_p99_ms: Option<f64>,
    pub peer_rtt_p99_ms: Option<f64>,
}

const WAL_FSYNC: &str = "etcd_disk_wal_fsync_duration_seconds";
const BACKEND_COMMIT: &str = "etcd_disk_backend_commit_duration_seconds";
const PEER_RTT: &str = "etcd_network_peer_round_trip_time_seconds";

/// Runs the grid against `endpoints`, printing each row as it ends.
pub async fn run(endpoints: &[String], grid: &Grid) -> Result<Vec<SweepRow>, String> {
    let mut rows = Vec::new();
    for &val_size in &grid.val_sizes {
        for &conns in &grid.conns {
            for &clients in &grid.clients {
                let row = run_row(endpoints, grid, val_size, conns, clients).await?;
                println!("{}", line(&row));
                rows.push(row);
            }
        }
    }
    Ok(rows)
}

async fn run_row(
    endpoints: &[String],
    grid: &Grid,
    val_size: usize,
    conns: usize,
    clients: usize,
) -> Result<SweepRow, String> {
    // Every client makes at least one request; every connection has a
    // client.
    let clients = clients.min(grid.total as usize).max(1);
    let conns = conns.min(clients);
    let target = Target {
        endpoints: endpoints.to_vec(),
        conns,
        clients,
        target_leader: grid.target_leader,
        gateway: false,
    };
    let workload = Workload::Put(PutSpec {
        total: grid.total,
        key_size: 8,
        val_size,
        sequential_keys: true,
        key_space_size: 100_000,
    });
    let before = grid.scraper.histograms().await?;
    let report = engine::run(&target, &workload, 0).await?;
    let after = grid.scraper.histograms().await?;
    Ok(SweepRow {
        val_size,
        clients,
        conns,
        total: grid.total,
        qps: report.requests_per_sec,
        p50_ms: report.p50_secs * 1e3,
        p99_ms: report.p99_secs * 1e3,
        errors: report.errors.values().sum(),
        wal_fsync_p99_ms: scrape::p99_ms_between(&before, &after, WAL_FSYNC),
        backend_commit_p99_ms: scrape::p99_ms_between(&before, &after, BACKEND_COMMIT),
        peer_rtt_p99_ms: scrape::p99_ms_between(&before, &after, PEER_RTT),
    })
}

fn or_dash(value: Option<f64>) -> String {
    value.map_or("-".into(), |v| format!("{v:.2}"))
}

/// A row as one printed line.
pub fn line(row: &SweepRow) -> String {
    format!(
        "{} B, {} clients, {} conns: {:.0} req/s, p50 {:.2} ms, p99 {:.2} ms, {} errors; \
         wal fsync p99 {} ms, backend commit p99 {} ms, peer rtt p99 {} ms",
        row.val_size,
        row.clients,
        row.conns,
        row.qps,
        row.p50_ms,
        row.p99_ms,
        row.errors,
        or_dash(row.wal_fsync_p99_ms),
        or_dash(row.backend_commit_p99_ms),
        or_dash(row.peer_rtt_p99_ms)
    )
}

/// The rows as a markdown table.
pub fn markdown(rows: &[SweepRow]) -> String {
    let mut out = String::from(
        "| value B | clients | conns | req/s | p50 ms | p99 ms | errors | WAL fsync p99 ms | backend commit p99 ms | peer RTT p99 ms |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
    );
    for row in rows {
        out += &format!(
            "| {} | {} | {} | {:.0} | {:.2} | {:.2} | {} | {} | {} | {} |\n",
            row.val_size,
            row.clients,
            row.conns,
            row.qps,
            row.p50_ms,
            row.p99_ms,
            row.errors,
            or_dash(row.wal_fsync_p99_ms),
            or_dash(row.backend_commit_p99_ms),
            or_dash(row.peer_rtt_p99_ms)
        );
    }
    out
}

/// QPS (top row) and p99 (bottom row) against clients, log scales: a
/// column of two panels per connection count, a line per value size in
/// each (a value size keeps its colour), all on the same axes.
pub fn chart(rows: &[SweepRow], path: &Path) -> Result<(), String> {
    let conns = distinct(rows, |r| r.conns);
    let columns = conns.len().max(1);
    let root = SVGBackend::new(path, (450 * columns as u32, 800)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let areas = root.split_evenly((2, columns));
    let (qps, p99) = areas.split_at(columns);
    for (i, &conn_count) in conns.iter().enumerate() {
        let title = format!("requests/s, {conn_count} conns");
        panel(&qps[i], &title, rows, conn_count, |r| r.qps)?;
        let title = format!("p99 latency (ms), {conn_count} conns");
        panel(&p99[i], &title, rows, conn_count, |r| r.p99_ms)?;
    }
    root.present().map_err(|e| e.to_string())
}

/// The values `field` takes over `rows`, each once, in ascending order.
fn distinct(rows: &[SweepRow], field: impl Fn(&SweepRow) -> usize) -> Vec<usize> {
    let mut values: Vec<usize> = rows.iter().map(field).collect();
    values.sort_unstable();
    values.dedup();
    values
}

/// One panel: `rows` with `conns` connections, a line per value size,
/// on axes that fit every row (so that panels compare at a glance).
fn panel(
    area: &DrawingArea<SVGBackend, plotters::coord::Shift>,
    title: &str,
    rows: &[SweepRow],
    conns: usize,
    value: impl Fn(&SweepRow) -> f64,
) -> Result<(), String> {
    let positive = |v: f64| v.max(1e-3);
    let x_max = rows.iter().map(|r| r.clients).max().unwrap_or(1) as f64 * 1.5;
    let x_min = rows.iter().map(|r| r.clients).min().unwrap_or(1) as f64 / 1.5;
    let y_max = rows.iter().map(|r| positive(value(r))).fold(1e-3, f64::max) * 1.5;
    let y_min = rows
        .iter()
        .map(|r| positive(value(r)))
        .fold(f64::MAX, f64::min)
        .min(y_max)
        / 1.5;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d((x_min..x_max).log_scale(), (y_min..y_max).log_scale())
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("clients")
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, &val_size) in distinct(rows, |r| r.val_size).iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let points: Vec<(f64, f64)> = rows
            .iter()
            .filter(|r| r.val_size == val_size && r.conns == conns)
            .map(|r| (r.clients as f64, positive(value(r))))
            .collect();
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(format!("{val_size} B values"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())
}
