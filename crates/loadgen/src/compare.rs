//! Side-by-side comparison of two matrix runs (a baseline, real etcd, and
//! a candidate, this project): a markdown table per row with QPS, average,
//! p50, p99 and RSS of each and the candidate-to-baseline ratios, and an
//! SVG chart of throughput and p99 per row.

use std::path::Path;

use plotters::prelude::*;

use crate::matrix::MatrixResult;

fn ms(secs: f64) -> f64 {
    secs * 1e3
}

fn ratio(candidate: f64, baseline: f64) -> String {
    if baseline > 0.0 {
        format!("{:.2}×", candidate / baseline)
    } else {
        "–".into()
    }
}

fn rss(value: Option<f64>) -> String {
    value.map_or("–".into(), |v| format!("{v:.0}"))
}

/// Rows are matched by position; both runs must be of the same matrix.
pub fn check(baseline: &MatrixResult, candidate: &MatrixResult) -> Result<(), String> {
    let names = |m: &MatrixResult| m.rows.iter().map(|r| r.row.clone()).collect::<Vec<_>>();
    if names(baseline) != names(candidate) {
        return Err("the two runs are not of the same matrix rows".into());
    }
    Ok(())
}

/// The comparison table in markdown.
pub fn markdown(baseline: &MatrixResult, candidate: &MatrixResult) -> String {
    let (b, c) = (&baseline.label, &candidate.label);
    let mut out = format!(
        "| row | total | QPS {b} | QPS {c} | QPS ratio | avg ms {b} | avg ms {c} | p50 ms {b} | p50 ms {c} | p99 ms {b} | p99 ms {c} | p99 ratio | RSS MB {b} | RSS MB {c} | errors {b} / {c} |\n"
    );
    out += "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (base, cand) in baseline.rows.iter().zip(&candidate.rows) {
        let (x, y) = (&base.report, &cand.report);
        out += &format!(
            "| {} | {} | {:.0} | {:.0} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} | {} | {} / {} |\n",
            base.row,
            base.total,
            x.requests_per_sec,
            y.requests_per_sec,
            ratio(y.requests_per_sec, x.requests_per_sec),
            ms(x.average_secs),
            ms(y.average_secs),
            ms(x.p50_secs),
            ms(y.p50_secs),
            ms(x.p99_secs),
            ms(y.p99_secs),
            ratio(y.p99_secs, x.p99_secs),
            rss(base.rss_mb),
            rss(cand.rss_mb),
            x.errors.values().sum::<u64>(),
            y.errors.values().sum::<u64>(),
        );
    }
    out
}

/// Writes the chart: throughput (top) and p99 latency (bottom, on a log
/// scale, since rows differ a hundredfold), one pair of bars per row.
pub fn chart(baseline: &MatrixResult, candidate: &MatrixResult, path: &Path) -> Result<(), String> {
    let names: Vec<String> = baseline.rows.iter().map(|r| r.row.clone()).collect();
    let qps = |m: &MatrixResult| m.rows.iter().map(|r| r.report.requests_per_sec).collect::<Vec<f64>>();
    let p99 = |m: &MatrixResult| m.rows.iter().map(|r| ms(r.report.p99_secs)).collect::<Vec<f64>>();
    let root = SVGBackend::new(path, (1100, 800)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (top, bottom) = root.split_vertically(400);
    let labels = (&baseline.label, &candidate.label);
    let throughput = (qps(baseline), qps(candidate));
    panel(&top, "Throughput (requests/s)", &names, &throughput, labels, false)?;
    let latency = (p99(baseline), p99(candidate));
    panel(&bottom, "p99 latency (ms, log scale)", &names, &latency, labels, true)?;
    root.present().map_err(|e| e.to_string())
}

type Series = (Vec<f64>, Vec<f64>);

fn panel(
    area: &DrawingArea<SVGBackend, plotters::coord::Shift>,
    title: &str,
    names: &[String],
    (base, cand): &Series,
    (base_label, cand_label): (&String, &String),
    log: bool,
) -> Result<(), String> {
    let values = || base.iter().chain(cand).cloned().filter(|v| *v > 0.0);
    let top = values().fold(0.0, f64::max).max(1e-9) * 1.15;
    let bottom = if log {
        values().fold(f64::MAX, f64::min).min(top) / 2.0
    } else {
        0.0
    };
    let n = names.len() as f64;
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(70);
    let bars = Bars {
        names,
        base,
        cand,
        base_label,
        cand_label,
        bottom,
    };
    if log {
        let chart = builder
            .build_cartesian_2d(-0.5..n - 0.5, (bottom..top).log_scale())
            .map_err(|e| e.to_string())?;
        bars.draw(chart)
    } else {
        let chart = builder
            .build_cartesian_2d(-0.5..n - 0.5, bottom..top)
            .map_err(|e| e.to_string())?;
        bars.draw(chart)
    }
}

/// One panel's bars, drawn on a linear or a log axis.
struct Bars<'a> {
    names: &'a [String],
    base: &'a [f64],
    cand: &'a [f64],
    base_label: &'a str,
    cand_label: &'a str,
    bottom: f64,
}

impl Bars<'_> {
    fn draw<'a, Y>(
        &self,
        mut chart: ChartContext<'a, SVGBackend<'a>, Cartesian2d<plotters::coord::types::RangedCoordf64, Y>>,
    ) -> Result<(), String>
    where
        Y: Ranged<ValueType = f64> + plotters::coord::ranged1d::ValueFormatter<f64>,
    {
        let names = self.names;
        let bottom = self.bottom;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(names.len() + 1)
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 0.01 && i >= 0.0 {
                    names.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .draw()
            .map_err(|e| e.to_string())?;
        let colours = [RGBColor(0x41, 0x69, 0xe1), RGBColor(0xe6, 0x7e, 0x22)];
        for (series, (values, label, offset)) in [(self.base, self.base_label, -0.4), (self.cand, self.cand_label, 0.0)]
            .into_iter()
            .enumerate()
        {
            let colour = colours[series];
            chart
                .draw_series(values.iter().enumerate().map(|(i, &v)| {
                    let x = i as f64 + offset;
                    Rectangle::new([(x, bottom), (x + 0.38, v.max(bottom))], colour.filled())
                }))
                .map_err(|e| e.to_string())?
                .label(label.to_string())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], colour.filled()));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::Measured;
    use crate::report::{new_histogram, Report};
    use std::collections::BTreeMap;
    use std::time::Duration;

    fn result(label: &str, qps_scale: u64) -> MatrixResult {
        let mut histogram = new_histogram();
        for ms in 1..=100u64 {
            histogram.record(ms * 1_000_000).unwrap();
        }
        let report = Report::new(Duration::from_millis(1000 / qps_scale), &histogram, BTreeMap::new());
        MatrixResult {
            label: label.into(),
            scale: 0.01,
            rows: vec![Measured {
                row: "put 1x1 leader".into(),
                workload: "put".into(),
                conns: 1,
                clients: 1,
                total: 100,
                target: "leader".into(),
                doc_qps: 583.0,
                doc_avg_ms: 1.6,
                doc_rss_mb: Some(48.0),
                rss_mb: Some(100.0),
                report,
            }],
        }
    }

    // Goal: the table carries both sides' figures and the ratio, and the
    // chart is written as an SVG with both series.
    #[test]
    fn table_and_chart() {
        let (etcd, ours) = (result("etcd", 1), result("kv-server", 2));
        check(&etcd, &ours).unwrap();
        let table = markdown(&etcd, &ours);
        let row = table.lines().nth(2).unwrap();
        assert!(row.starts_with("| put 1x1 leader | 100 | 100 | 200 | 2.00× |"), "{row}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("chart.svg");
        chart(&etcd, &ours, &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("kv-server") && svg.contains("Throughput"));
    }
}
