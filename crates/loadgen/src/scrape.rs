//! Members' Prometheus metrics, scraped before and after a run, and the
//! p99 of what a histogram recorded in between: the figures IBM's WAL
//! study put beside each run (WAL fsync, backend commit, peer round
//! trip). Works against etcd and this project alike, as both serve
//! etcd's metric names.
//!
//! A metrics URL is `http://host:port/metrics`, `https://host:port/metrics`,
//! `http://host:port` (the path defaults to `/metrics`) or a bare
//! `host:port` (plain HTTP, `/metrics`); [`metrics_url`] reads each, and a
//! [`Scraper`] refuses an unusable one, naming it, before anything runs.
//! reqwest makes the requests (HTTP/1.1, no proxy, no redirects), with
//! [`crate::tls`]'s rustls config from `--cacert`, `--cert` and `--key`
//! when a URL is `https://`.

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::Url;

use crate::cli::TlsArgs;

/// How long one scrape may take, from connecting to the body's last byte:
/// a member answers `/metrics` in milliseconds; a loaded one within a few
/// seconds.
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest `/metrics` body read. A member's (etcd's or this
/// project's) is a few hundred KiB; 16 MiB leaves room for far more label
/// sets, while a URL that points at something else (a large file, an
/// endless stream) fails instead of filling memory.
pub const MAX_METRICS_BYTES: usize = 16 << 20;

/// The path scraped when a URL names none, where etcd and this project
/// serve their metrics.
const DEFAULT_PATH: &str = "/metrics";

/// Histogram buckets by name: upper bound (`le`) → cumulative count,
/// summed over every label set and every member scraped.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Histograms(BTreeMap<String, BTreeMap<String, f64>>);

/// `text` as the URL to scrape: `http://` when it names no scheme, and
/// `/metrics` when it names no path. An error says which URL and why.
pub fn metrics_url(text: &str) -> Result<Url, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("an empty metrics URL (a stray comma in --metrics-urls?)".into());
    }
    let bad = |why: String| format!("metrics URL {text:?}: {why}");
    let full = if text.contains("://") {
        text.to_string()
    } else {
        format!("http://{text}")
    };
    let mut url = Url::parse(&full).map_err(|e| bad(e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad(format!("the scheme {:?} is neither http nor https", url.scheme())));
    }
    if url.path() == "/" {
        url.set_path(DEFAULT_PATH);
    }
    Ok(url)
}

/// The members' metrics URLs and the HTTP client that scrapes them.
#[derive(Debug)]
pub struct Scraper {
    client: reqwest::Client,
    urls: Vec<Url>,
}

impl Scraper {
    /// Reads every URL with [`metrics_url`] and builds the client: with
    /// `tls`'s CA and identity when a URL is `https://` (then `--cacert`
    /// is required).
    pub fn new(urls: &[String], tls: &TlsArgs) -> Result<Scraper, String> {
        let urls = urls.iter().map(|url| metrics_url(url)).collect::<Result<Vec<_>, _>>()?;
        let mut builder = reqwest::Client::builder()
            .timeout(SCRAPE_TIMEOUT)
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none());
        if urls.iter().any(|url| url.scheme() == "https") {
            let mut config = crate::tls::client_config(tls).map_err(|e| format!("https:// metrics URLs: {e}"))?;
            // reqwest is built without HTTP/2 (no default features).
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            builder = builder.use_preconfigured_tls(config);
        }
        let client = builder
            .build()
            .map_err(|e| format!("the metrics client: {}", with_causes(&e)))?;
        Ok(Scraper { client, urls })
    }

    /// Scrapes every URL and sums their histograms.
    pub async fn histograms(&self) -> Result<Histograms, String> {
        let mut all = Histograms::default();
        for url in &self.urls {
            add_buckets(&self.fetch(url).await?, &mut all);
        }
        Ok(all)
    }

    /// GET `url`: the body of a 2xx answer, at most [`MAX_METRICS_BYTES`].
    async fn fetch(&self, url: &Url) -> Result<String, String> {
        let failed = |e: reqwest::Error| {
            if e.is_timeout() {
                format!("scraping {url}: no metrics within {SCRAPE_TIMEOUT:?}")
            } else {
                format!("scraping {url}: {}", with_causes(&e.without_url()))
            }
        };
        let mut response = self.client.get(url.clone()).send().await.map_err(failed)?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("scraping {url}: the answer is {status}"));
        }
        let too_large = || format!("scraping {url}: the body is over {MAX_METRICS_BYTES} bytes");
        if response
            .content_length()
            .is_some_and(|length| length > MAX_METRICS_BYTES as u64)
        {
            return Err(too_large());
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(failed)? {
            if body.len() + chunk.len() > MAX_METRICS_BYTES {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        String::from_utf8(body).map_err(|e| format!("scraping {url}: the body is not UTF-8: {e}"))
    }
}

/// `error` and its causes, one after another: reqwest's own message
/// ("error sending request") leaves out why.
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text += &format!(": {cause}");
        source = cause.source();
    }
    text
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
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
    use tokio::task::JoinHandle;

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

    // Goal: every documented form becomes a full URL (http unless named,
    // /metrics unless a path is named), and a URL that cannot be used is
    // an error naming it and saying why.
    #[test]
    fn metrics_urls_take_every_form() {
        let cases = [
            ("127.0.0.1:2379", "http://127.0.0.1:2379/metrics"),
            (" localhost:2379 ", "http://localhost:2379/metrics"),
            ("[::1]:2379", "http://[::1]:2379/metrics"),
            ("http://127.0.0.1:2379", "http://127.0.0.1:2379/metrics"),
            ("http://127.0.0.1:2379/", "http://127.0.0.1:2379/metrics"),
            ("http://127.0.0.1:2381/metrics", "http://127.0.0.1:2381/metrics"),
            ("https://member-1:2379/metrics", "https://member-1:2379/metrics"),
            ("https://127.0.0.1:2379", "https://127.0.0.1:2379/metrics"),
            ("HTTP://127.0.0.1:2379/other/path", "http://127.0.0.1:2379/other/path"),
        ];
        for (given, expected) in cases {
            let url = metrics_url(given).unwrap_or_else(|e| panic!("{given:?}: {e}"));
            assert_eq!(url.as_str(), expected, "{given:?}");
        }
        let garbage = [
            // The url crate words a bad host differently across versions.
            ("not a url", "domain"),
            ("127.0.0.1:port", "invalid port number"),
            ("http://127.0.0.1:99999/metrics", "invalid port number"),
            ("http://", "empty host"),
            ("ftp://127.0.0.1:21/metrics", "neither http nor https"),
        ];
        for (given, why) in garbage {
            let error = metrics_url(given).expect_err(given);
            assert!(error.contains(&format!("{given:?}")), "{given:?}: {error}");
            assert!(error.contains(why), "{given:?}: {error}");
        }
        assert!(metrics_url(" ").expect_err("empty").contains("empty metrics URL"));
        let urls = ["127.0.0.1:2379".to_string(), "bad:url".to_string()];
        let error = Scraper::new(&urls, &TlsArgs::default()).expect_err("a bad URL");
        assert!(error.contains("\"bad:url\""), "{error}");
    }

    // Goal: an https:// URL without --cacert is refused before any scrape.
    #[tokio::test]
    async fn https_needs_a_ca() {
        let error = Scraper::new(&["https://127.0.0.1:2379".to_string()], &TlsArgs::default()).expect_err("no CA");
        assert!(error.contains("--cacert"), "{error}");
        // Plain HTTP needs no TLS flag.
        assert!(Scraper::new(&["127.0.0.1:2379".to_string()], &TlsArgs::default()).is_ok());
    }

    /// Answers one HTTP/1.1 request on `stream` with `response`: the
    /// request's first line.
    async fn answer(mut stream: impl AsyncRead + AsyncWrite + Unpin, response: &[u8]) -> String {
        let mut request = Vec::new();
        let mut buffer = [0u8; 1024];
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return String::new(),
                Ok(read) => request.extend_from_slice(&buffer[..read]),
            }
        }
        let _ = stream.write_all(response).await;
        let _ = stream.shutdown().await;
        let request = String::from_utf8_lossy(&request).into_owned();
        request.lines().next().unwrap_or_default().to_string()
    }

    /// A 200 response carrying `body`.
    fn ok(body: &str) -> Vec<u8> {
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }

    /// A plain-HTTP server on a loopback port answering one request with
    /// `response`: its port, and the request's first line.
    async fn serve_http(response: Vec<u8>) -> (u16, JoinHandle<String>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("address").port();
        let served = tokio::spawn(async move {
            let (socket, _) = listener.accept().await.expect("accept");
            answer(socket, &response).await
        });
        (port, served)
    }

    const BODY: &str = "# TYPE x histogram\nx_bucket{le=\"0.001\"} 3\nx_bucket{le=\"+Inf\"} 4\n";

    // Goal: a bare host:port is scraped with GET /metrics, and a body over
    // the bound or a non-2xx answer is an error naming the URL.
    #[tokio::test]
    async fn scrapes_plain_http_within_bounds() {
        let (port, served) = serve_http(ok(BODY)).await;
        let scraper = Scraper::new(&[format!("127.0.0.1:{port}")], &TlsArgs::default()).expect("scraper");
        let histograms = scraper.histograms().await.expect("scrape");
        assert_eq!(served.await.expect("server"), "GET /metrics HTTP/1.1");
        let mut expected = Histograms::default();
        add_buckets(BODY, &mut expected);
        assert_eq!(histograms, expected);

        let huge = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            MAX_METRICS_BYTES + 1
        );
        let (port, _served) = serve_http(huge.into_bytes()).await;
        let url = format!("http://127.0.0.1:{port}/metrics");
        let scraper = Scraper::new(std::slice::from_ref(&url), &TlsArgs::default()).expect("scraper");
        let error = scraper.histograms().await.expect_err("too large");
        assert!(error.contains(&url) && error.contains("over"), "{error}");

        let missing = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec();
        let (port, _served) = serve_http(missing).await;
        let scraper = Scraper::new(&[format!("http://127.0.0.1:{port}")], &TlsArgs::default()).expect("scraper");
        let error = scraper.histograms().await.expect_err("404");
        assert!(error.contains("404"), "{error}");
    }

    /// A test CA: its certificate's PEM file, and the issuer that signs
    /// leaf certificates.
    struct Authority {
        ca: PathBuf,
        issuer: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
    }

    impl Authority {
        fn new(dir: &Path) -> Authority {
            use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose};
            let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params.distinguished_name.push(DnType::CommonName, "loadgen test CA");
            params.key_usages = vec![
                KeyUsagePurpose::KeyCertSign,
                KeyUsagePurpose::CrlSign,
                KeyUsagePurpose::DigitalSignature,
            ];
            let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().expect("CA key")).expect("CA");
            let ca = dir.join("ca.pem");
            std::fs::write(&ca, issuer.pem()).expect("write CA");
            Authority { ca, issuer }
        }

        /// A certificate for `name` (and `hosts`), for server and client
        /// use: (certificate, key) files.
        fn leaf(&self, dir: &Path, name: &str, hosts: &[&str]) -> (PathBuf, PathBuf) {
            use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, KeyPair, KeyUsagePurpose};
            let hosts: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
            let mut params = CertificateParams::new(hosts).expect("leaf params");
            params.distinguished_name.push(DnType::CommonName, name);
            params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
            let key = KeyPair::generate().expect("leaf key");
            let certificate = params.signed_by(&key, &self.issuer).expect("leaf");
            let (cert_path, key_path) = (dir.join(format!("{name}.pem")), dir.join(format!("{name}-key.pem")));
            std::fs::write(&cert_path, certificate.pem()).expect("write certificate");
            std::fs::write(&key_path, key.serialize_pem()).expect("write key");
            (cert_path, key_path)
        }
    }

    /// An HTTPS server on a loopback port with `cert` and `key`, which
    /// requires a client certificate signed by `ca` and answers one
    /// request with `response`: its port, and the request's first line
    /// (empty when the handshake failed).
    async fn serve_https(cert: &Path, key: &Path, ca: &Path, response: Vec<u8>) -> (u16, JoinHandle<String>) {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_file(ca).expect("CA file"))
            .expect("add CA");
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .expect("client verifier");
        let chain = vec![CertificateDer::from_pem_file(cert).expect("certificate file")];
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, PrivateKeyDer::from_pem_file(key).expect("key file"))
            .expect("server config");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("address").port();
        let served = tokio::spawn(async move {
            let (socket, _) = listener.accept().await.expect("accept");
            match acceptor.accept(socket).await {
                Ok(stream) => answer(stream, &response).await,
                Err(_) => String::new(),
            }
        });
        (port, served)
    }

    // Goal: an https:// URL is scraped over TLS with --cacert as the
    // trust and --cert/--key as the client's identity, and a server that
    // wants a client certificate refuses a scrape without one.
    #[tokio::test]
    async fn scrapes_https_with_a_client_certificate() {
        let dir = tempfile::tempdir().expect("tempdir");
        let authority = Authority::new(dir.path());
        let (server_cert, server_key) = authority.leaf(dir.path(), "member", &["127.0.0.1", "localhost"]);
        let (client_cert, client_key) = authority.leaf(dir.path(), "client", &[]);
        let tls = TlsArgs {
            cacert: Some(authority.ca.clone()),
            cert: Some(client_cert),
            key: Some(client_key),
        };

        let (port, served) = serve_https(&server_cert, &server_key, &authority.ca, ok(BODY)).await;
        let scraper = Scraper::new(&[format!("https://127.0.0.1:{port}/metrics")], &tls).expect("scraper");
        let histograms = scraper.histograms().await.expect("scrape over TLS");
        assert_eq!(served.await.expect("server"), "GET /metrics HTTP/1.1");
        let mut expected = Histograms::default();
        add_buckets(BODY, &mut expected);
        assert_eq!(histograms, expected);

        let (port, _served) = serve_https(&server_cert, &server_key, &authority.ca, ok(BODY)).await;
        let url = format!("https://127.0.0.1:{port}/metrics");
        let anonymous = TlsArgs {
            cacert: Some(authority.ca.clone()),
            ..TlsArgs::default()
        };
        let scraper = Scraper::new(std::slice::from_ref(&url), &anonymous).expect("scraper");
        let error = scraper.histograms().await.expect_err("no client certificate");
        assert!(error.contains(&url), "{error}");
    }
}
