//! Repeated runs, as Arm's Graviton study measured: `--warmup N` runs
//! first (reported, not counted), then `--iterations M` measured runs of
//! the same workload. Each run's summary is printed as it ends, then
//! `mean of M iterations: X req/s (stdev S), p99 P ms`, the mean of the
//! runs' rates with their sample standard deviation, and the mean of
//! their p99s.

use serde::Serialize;

use crate::engine::{self, Target};
use crate::report::Report;
use crate::workload::Workload;

/// The measured runs' means.
#[derive(Debug, Serialize, PartialEq)]
pub struct Mean {
    pub iterations: usize,
    pub requests_per_sec: f64,
    /// The sample standard deviation of the runs' rates (0 for one run).
    pub requests_per_sec_stdev: f64,
    pub p99_ms: f64,
}

/// Every run, and the means of the measured ones.
#[derive(Serialize)]
pub struct Iterated {
    pub warmup: Vec<Report>,
    pub iterations: Vec<Report>,
    pub mean: Mean,
}

/// The means of `reports`.
pub fn mean(reports: &[Report]) -> Mean {
    let n = reports.len() as f64;
    let rate = reports.iter().map(|r| r.requests_per_sec).sum::<f64>() / n;
    let variance = if reports.len() > 1 {
        reports.iter().map(|r| (r.requests_per_sec - rate).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    Mean {
        iterations: reports.len(),
        requests_per_sec: rate,
        requests_per_sec_stdev: variance.sqrt(),
        p99_ms: reports.iter().map(|r| r.p99_secs * 1e3).sum::<f64>() / n,
    }
}

/// One run's line.
fn summary(what: &str, i: usize, of: usize, report: &Report) -> String {
    format!(
        "{what} {i}/{of}: {:.1} req/s, p50 {:.2} ms, p99 {:.2} ms, {} errors",
        report.requests_per_sec,
        report.p50_secs * 1e3,
        report.p99_secs * 1e3,
        report.errors.values().sum::<u64>()
    )
}

/// Runs `warmup` then `iterations` runs of `workload` against `target`.
pub async fn run(
    target: &Target,
    workload: &Workload,
    rate: u64,
    warmup: usize,
    iterations: usize,
) -> Result<Iterated, String> {
    if iterations == 0 {
        return Err("--iterations must be at least 1".into());
    }
    let mut warmups = Vec::with_capacity(warmup);
    for i in 1..=warmup {
        let report = engine::run(target, workload, rate).await?;
        println!("{}", summary("warmup", i, warmup, &report));
        warmups.push(report);
    }
    let mut measured = Vec::with_capacity(iterations);
    for i in 1..=iterations {
        let report = engine::run(target, workload, rate).await?;
        println!("{}", summary("iteration", i, iterations, &report));
        measured.push(report);
    }
    let mean = mean(&measured);
    println!(
        "mean of {} iterations: {:.1} req/s (stdev {:.1}), p99 {:.2} ms",
        mean.iterations, mean.requests_per_sec, mean.requests_per_sec_stdev, mean.p99_ms
    );
    Ok(Iterated {
        warmup: warmups,
        iterations: measured,
        mean,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(rate: f64, p99_secs: f64) -> Report {
        Report {
            requests_per_sec: rate,
            p99_secs,
            ..Report::default()
        }
    }

    // Goal: the mean line's arithmetic: mean rate, sample standard
    // deviation, mean p99 in milliseconds.
    #[test]
    fn means_of_three_runs() {
        let mean = mean(&[report(100.0, 0.010), report(200.0, 0.020), report(300.0, 0.030)]);
        assert_eq!(mean.iterations, 3);
        assert!((mean.requests_per_sec - 200.0).abs() < 1e-9);
        assert!((mean.requests_per_sec_stdev - 100.0).abs() < 1e-9);
        assert!((mean.p99_ms - 20.0).abs() < 1e-9);
        assert_eq!(super::mean(&[report(50.0, 0.001)]).requests_per_sec_stdev, 0.0);
    }
}
