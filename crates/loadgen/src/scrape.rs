//! Members' Prometheus metrics, scraped before and after a run, and the
//! p99 of what a histogram recorded in between: the figures IBM's WAL
//! study put beside each run (WAL fsync, backend commit, peer round
//! trip). Works against etcd and this project alike, as both serve
//! etcd's metric names.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long one scrape may take: a member answers `/metrics` in
/// milliseconds; a loaded one within a few seconds.
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);

/// Histogram buckets by name: upper bound (`le`) → cumulative count,
/// summed over every label set and every member scraped.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Histograms(BTreeMap<String, BTreeMap<String, f64>>);

/// GET `/metrics` at `url` (`http://host:port`, HTTP/1.0 so no body is
/// chunked): the body.
pub async fn fetch(url: &str) -> Result<String, String> {
    let address = url.trim_start_matches("http://").trim_end_matches('/');
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(address).await?;
        let request = format!("GET /metrics HTTP/1.0\r\nHost: {address}\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await?;
        Ok::<String, std::io::Error>(response)
    };
    let response = tokio::time::timeout(SCRAPE_TIMEOUT, exchange)
        .await
        .map_err(|_| format!("{url}: no metrics within {SCRAPE_TIMEOUT:?}"))?
        .map_err(|e| format!("{url}: {e}"))?;
    let (_, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("{url}: not an HTTP response"))?;
    Ok(body.to_string())
}

/// Adds the `_bucket` samples of `text` to `into`.
pub fn add_buckets(text: &str, into: &mut Histograms) {
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((sample, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Some((name, labels)) = sample.split_once("_bucket{") else {
            continue;
        };
        let Some(le) = labels.split(',').find_map(|pair| pair.strip_prefix("le=")) else {
            continue;
        };
        let Ok(count) = value.parse::<f64>() else {
            continue;
        };
        let le = le.trim_end_matches('}').trim_matches('"').to_string();
        *into.0.entry(name.to_string()).or_default().entry(le).or_default() += count;
    }
}

/// Scrapes every URL and sums their histograms.
pub async fn histograms(urls: &[String]) -> Result<Histograms, String> {
    let mut all = Histograms::default();
    for url in urls {
        add_buckets(&fetch(url).await?, &mut all);
    }
    Ok(all)
}

/// The p99, in milliseconds, of what histogram `name` recorded between
/// `before` and `after`: the upper bound of the first bucket holding 99%
/// of the new samples. None when it recorded nothing.
pub fn p99_ms_between(before: &Histograms, after: &Histograms, name: &str) -> Option<f64> {
    let after = after.0.get(name)?;
    let empty = BTreeMap::new();
    let before = before.0.get(name).unwrap_or(&empty);
    let mut deltas: Vec<(f64, f64)> = after
        .iter()
        .map(|(le, count)| {
            let bound = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap_or(f64::INFINITY)
            };
            (bound, count - before.get(le).copied().unwrap_or(0.0))
        })
        .collect();
    deltas.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = deltas.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let (bound, _) = deltas.into_iter().find(|(_, count)| *count >= 0.99 * total)?;
    Some(bound * 1e3)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: buckets sum over label sets, and the p99 between two scrapes
    // is the first bucket bound holding 99% of the new samples.
    #[test]
    fn p99_of_the_samples_between_two_scrapes() {
        let mut before = Histograms::default();
        add_buckets(
            "# TYPE x histogram\nx_bucket{To=\"a\",le=\"0.001\"} 5\nx_bucket{To=\"a\",le=\"0.002\"} 5\nx_bucket{To=\"a\",le=\"+Inf\"} 5\n",
            &mut before,
        );
        let mut after = Histograms::default();
        let text = "x_bucket{To=\"a\",le=\"0.001\"} 55\nx_bucket{To=\"a\",le=\"0.002\"} 104\nx_bucket{To=\"a\",le=\"+Inf\"} 105\n\
                    x_bucket{To=\"b\",le=\"0.001\"} 0\nx_bucket{To=\"b\",le=\"0.002\"} 0\nx_bucket{To=\"b\",le=\"+Inf\"} 0\n";
        add_buckets(text, &mut after);
        // 100 new samples: 50 under 1 ms, 99 under 2 ms.
        assert_eq!(p99_ms_between(&before, &after, "x"), Some(2.0));
        assert_eq!(p99_ms_between(&after, &after, "x"), None);
        assert_eq!(p99_ms_between(&before, &after, "missing"), None);
    }
}
