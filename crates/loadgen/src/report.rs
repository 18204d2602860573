//! The report of one run, computed from the merged latency histogram and
//! printed in etcd's benchmark layout: the summary (with `Requests/sec:`),
//! the 11-bucket response-time histogram, the latency distribution, and
//! the error distribution. After etcd's lines come p99.99 and the maximum.
//!
//! Arithmetic follows etcd's `pkg/report`:
//! - `Total` is the wall time of the run, and `Requests/sec` counts
//!   successful requests only over it;
//! - average and standard deviation (population) are over successes;
//! - a percentile `p` is the sample at sorted position `ceil(n * p / 100)`
//!   (0-based), the first whose rank reaches `p`;
//! - histogram bucket `i < 10` ends at `fastest + i * (slowest - fastest) /
//!   10`, the last at `slowest`; a sample counts in the first bucket whose
//!   end it does not exceed, and bars are `count * 40 / max` long.
//!
//! Latencies are kept in nanoseconds in an HDR histogram with 3
//! significant digits, so every figure is within 0.1 % of the exact one;
//! each latency stands for the highest value of its HDR bucket.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Significant decimal digits the latency histograms keep.
pub const HISTOGRAM_SIGNIFICANT_DIGITS: u8 = 3;

/// etcd's latency distribution percentiles.
pub const PERCENTILES: [f64; 8] = [10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.9];

/// Whether reports print their figures in full (`--precise`) rather than
/// to four decimals; one setting for the whole process, as in etcd's tool.
static PRECISE: AtomicBool = AtomicBool::new(false);

/// Sets how reports print their figures (`--precise`).
pub fn set_precise(precise: bool) {
    PRECISE.store(precise, Ordering::Relaxed);
}

/// A figure as the report prints it: `%4.4f`, or in full with
/// `--precise`.
fn figure(value: f64) -> String {
    if PRECISE.load(Ordering::Relaxed) {
        format!("{value}")
    } else {
        format!("{value:4.4}")
    }
}

/// A new, empty latency histogram (nanoseconds, growing as needed).
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new(HISTOGRAM_SIGNIFICANT_DIGITS).expect("3 significant digits is valid")
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bucket {
    /// Upper end of the bucket, in seconds.
    pub le_secs: f64,
    pub count: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub total_secs: f64,
    pub requests: u64,
    pub successes: u64,
    pub requests_per_sec: f64,
    pub fastest_secs: f64,
    pub slowest_secs: f64,
    pub average_secs: f64,
    pub stddev_secs: f64,
    /// etcd's percentiles, as `(percent, seconds)`.
    pub percentiles: Vec<(f64, f64)>,
    pub p50_secs: f64,
    pub p99_secs: f64,
    pub p9999_secs: f64,
    pub max_secs: f64,
    pub histogram: Vec<Bucket>,
    /// Failed requests by error message.
    pub errors: BTreeMap<String, u64>,
}

fn secs(nanos: u64) -> f64 {
    nanos as f64 / 1e9
}

/// The sample at 0-based sorted position `rank`, as its bucket's highest
/// value.
fn value_at_rank(histogram: &Histogram<u64>, rank: u64) -> u64 {
    let mut seen = 0;
    for value in histogram.iter_recorded() {
        seen += value.count_at_value();
        if seen > rank {
            return value.value_iterated_to();
        }
    }
    histogram.max()
}

/// etcd's percentile: the sample at position `ceil(n * p / 100)`.
fn percentile(histogram: &Histogram<u64>, percent: f64) -> u64 {
    let n = histogram.len();
    let rank = ((n as f64) * percent / 100.0).ceil() as u64;
    value_at_rank(histogram, rank.min(n.saturating_sub(1)))
}

/// etcd's 11-bucket histogram: ten equal steps from the fastest to the
/// slowest, then the slowest; each latency counts in the first bucket
/// whose end is at or above it.
fn buckets(recorded: &[(u64, u64)], fastest: u64, slowest: u64) -> Vec<Bucket> {
    let width = (slowest - fastest) as f64 / 10.0;
    let mut ends: Vec<f64> = (0..10).map(|i| fastest as f64 + width * i as f64).collect();
    ends.push(slowest as f64);
    let mut counts = [0u64; 11];
    let mut bucket = 0;
    for &(value, count) in recorded {
        while bucket < 10 && value as f64 > ends[bucket] {
            bucket += 1;
        }
        counts[bucket] += count;
    }
    ends.iter()
        .zip(counts)
        .map(|(&end, count)| Bucket {
            le_secs: end / 1e9,
            count,
        })
        .collect()
}

impl Report {
    /// Computes the report of a run that took `total` and recorded these
    /// successful latencies and these errors.
    pub fn new(total: Duration, latencies: &Histogram<u64>, errors: BTreeMap<String, u64>) -> Report {
        let successes = latencies.len();
        let failed: u64 = errors.values().sum();
        let total_secs = total.as_secs_f64();
        let mut report = Report {
            total_secs,
            requests: successes + failed,
            successes,
            requests_per_sec: if total_secs > 0.0 {
                successes as f64 / total_secs
            } else {
                0.0
            },
            fastest_secs: 0.0,
            slowest_secs: 0.0,
            average_secs: 0.0,
            stddev_secs: 0.0,
            percentiles: Vec::new(),
            p50_secs: 0.0,
            p99_secs: 0.0,
            p9999_secs: 0.0,
            max_secs: 0.0,
            histogram: Vec::new(),
            errors,
        };
        if successes == 0 {
            return report;
        }
        let recorded: Vec<(u64, u64)> = latencies
            .iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_at_value()))
            .collect();
        let fastest = recorded.first().map_or(0, |r| r.0);
        let slowest = recorded.last().map_or(0, |r| r.0);
        let mean = recorded.iter().map(|&(v, c)| v as f64 * c as f64).sum::<f64>() / successes as f64;
        let variance = recorded
            .iter()
            .map(|&(v, c)| (v as f64 - mean).powi(2) * c as f64)
            .sum::<f64>()
            / successes as f64;
        report.fastest_secs = secs(fastest);
        report.slowest_secs = secs(slowest);
        report.max_secs = secs(slowest);
        report.average_secs = mean / 1e9;
        report.stddev_secs = variance.sqrt() / 1e9;
        report.percentiles = PERCENTILES
            .iter()
            .map(|&p| (p, secs(percentile(latencies, p))))
            .collect();
        report.p50_secs = secs(percentile(latencies, 50.0));
        report.p99_secs = secs(percentile(latencies, 99.0));
        report.p9999_secs = secs(percentile(latencies, 99.99));

        report.histogram = buckets(&recorded, fastest, slowest);
        report
    }

    /// The report in etcd's layout, with p99.99 and the maximum after
    /// etcd's percentiles.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if self.successes > 0 {
            out += "\nSummary:\n";
            out += &format!("  Total:\t{} secs.\n", figure(self.total_secs));
            out += &format!("  Slowest:\t{} secs.\n", figure(self.slowest_secs));
            out += &format!("  Fastest:\t{} secs.\n", figure(self.fastest_secs));
            out += &format!("  Average:\t{} secs.\n", figure(self.average_secs));
            out += &format!("  Stddev:\t{} secs.\n", figure(self.stddev_secs));
            out += &format!("  Requests/sec:\t{}\n", figure(self.requests_per_sec));
            out += "\nResponse time histogram:\n";
            let max = self.histogram.iter().map(|b| b.count).max().unwrap_or(0);
            for bucket in &self.histogram {
                let bar = (bucket.count * 40).checked_div(max).unwrap_or(0);
                out += &format!(
                    "  {} [{}]\t|{}\n",
                    figure(bucket.le_secs),
                    bucket.count,
                    "∎".repeat(bar as usize)
                );
            }
            out += "\nLatency distribution:\n";
            for &(percent, value) in &self.percentiles {
                if value > 0.0 {
                    out += &format!("  {percent}% in {} secs.\n", figure(value));
                }
            }
            out += &format!("  99.99% in {} secs.\n", figure(self.p9999_secs));
            out += &format!("  Max:\t{} secs.\n", figure(self.max_secs));
        }
        if !self.errors.is_empty() {
            out += "\nError distribution:\n";
            for (message, count) in &self.errors {
                out += &format!("  [{count}]\t{message}\n");
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(got: f64, want: f64) -> bool {
        (got - want).abs() <= want.abs() * 0.001 + 1e-9
    }

    /// 1, 2, ..., 1000 ms, once each, over a 2-second run, plus 3 errors.
    fn known() -> Report {
        let mut histogram = new_histogram();
        for ms in 1..=1000u64 {
            histogram.record(ms * 1_000_000).unwrap();
        }
        let errors = BTreeMap::from([("etcdserver: too many requests".to_string(), 3)]);
        Report::new(Duration::from_secs(2), &histogram, errors)
    }

    // Goal: every figure on a histogram of known latencies is what etcd's
    // report computes from the exact samples (to HDR's 0.1 %).
    #[test]
    fn arithmetic_on_known_latencies() {
        let report = known();
        assert_eq!((report.requests, report.successes), (1003, 1000));
        assert!(close(report.requests_per_sec, 500.0), "{}", report.requests_per_sec);
        assert!(close(report.fastest_secs, 0.001));
        assert!(close(report.slowest_secs, 1.0));
        assert!(close(report.average_secs, 0.5005), "{}", report.average_secs);
        // Population stddev of 1..=1000 ms: sqrt((1000^2 - 1) / 12) ms.
        assert!(close(report.stddev_secs, 0.288_674_7), "{}", report.stddev_secs);
        // etcd takes sorted[ceil(n p / 100)]: p50 -> sorted[500] = 501 ms.
        let expected = [0.101, 0.251, 0.501, 0.751, 0.901, 0.951, 0.991, 1.0];
        for ((percent, got), want) in report.percentiles.iter().zip(expected) {
            assert!(close(*got, want), "p{percent}: {got} vs {want}");
        }
        assert!(close(report.p9999_secs, 1.0));
        // Buckets end at 1, 100.9, 200.8, ... ms: 1 sample, then 99 each,
        // then the rest; the last ends at the slowest.
        let counts: Vec<u64> = report.histogram.iter().map(|b| b.count).collect();
        assert_eq!(counts.iter().sum::<u64>(), 1000);
        assert_eq!(counts[0], 1);
        assert!(counts[1..10].iter().all(|&c| (99..=101).contains(&c)), "{counts:?}");
        assert!(close(report.histogram[10].le_secs, 1.0));
    }

    // Goal: the printed layout is etcd's, line by line, with our extra
    // lines after its percentiles, and errors counted by message.
    #[test]
    fn renders_in_etcd_layout() {
        let text = known().render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[1], "Summary:");
        assert!(lines[2].starts_with("  Total:\t2.0000 secs."), "{}", lines[2]);
        assert!(lines[7].starts_with("  Requests/sec:\t500.0"), "{}", lines[7]);
        assert_eq!(lines[9], "Response time histogram:");
        assert!(lines[10].starts_with("  0.0010 [1]\t|"), "{}", lines[10]);
        // The fullest bucket draws 40 bars; the single-sample one none.
        let bars: Vec<usize> = lines[10..21].iter().map(|l| l.matches('∎').count()).collect();
        assert_eq!(bars.iter().max(), Some(&40), "{bars:?}");
        assert_eq!(bars[0], 0);
        assert_eq!(lines[22], "Latency distribution:");
        assert!(lines[23].starts_with("  10% in 0.10"), "{}", lines[23]);
        assert!(lines[30].starts_with("  99.9% in 1.00"), "{}", lines[30]);
        assert!(lines[31].starts_with("  99.99% in "), "{}", lines[31]);
        assert!(lines[32].starts_with("  Max:\t1.00"), "{}", lines[32]);
        assert_eq!(lines[34], "Error distribution:");
        assert_eq!(lines[35], "  [3]\tetcdserver: too many requests");
    }

    #[test]
    fn a_run_of_only_errors_prints_them() {
        let report = Report::new(
            Duration::from_secs(1),
            &new_histogram(),
            BTreeMap::from([("boom".to_string(), 2)]),
        );
        assert_eq!(report.requests_per_sec, 0.0);
        assert_eq!(report.render(), "\nError distribution:\n  [2]\tboom\n");
    }
}
