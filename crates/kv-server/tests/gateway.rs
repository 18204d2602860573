//! Goal: etcd's gRPC-JSON gateway is as reliable as the gRPC API beside it.
//! - A watch over the gateway under 5,000 puts/s delivers every event, in
//!   order, the same events as a gRPC watch of the same keys in the same
//!   run.
//! - Bad input gets etcd's answer and nothing else happens: a body over
//!   the limit, invalid JSON, bad base64, an unknown path or method. No
//!   member restarts and no acknowledged write is lost.
//! - A gateway watch left unread while 100 MiB is written costs its member
//!   a bounded amount of memory, as a stalled gRPC watch does, and
//!   delivers every event once read.
//! - The gateway is served where etcd serves it: on TLS client URLs (over
//!   HTTP/1.1 and, by ALPN, HTTP/2) and as plain HTTP/2 beside gRPC; with
//!   `--client-cert-auth` and auth on, a request showing a certificate
//!   with a common name gets etcd's refusal, on etcd and kv-server alike;
//!   `--enable-grpc-gateway=false` turns it off and gRPC goes on.
//!
//! Method: real kv-server members on loopback; the load is etcd's
//! benchmark tool at a fixed rate; the gRPC watch is etcdctl's (`-w json`);
//! the gateway is spoken on plain sockets (`common::gateway`), and through
//! curl for TLS and HTTP/2.

mod common;

use std::time::{Duration, Instant};

use common::gateway;
use kv_server::WATCH_STREAM_STALLED_BYTES_MAX;

/// A watch of every key (`\0` to `\0`) from `revision`.
fn watch_all_from(revision: i64) -> String {
    format!(r#"{{"create_request":{{"key":"AA==","range_end":"AA==","start_revision":"{revision}"}}}}"#)
}

fn revision(port: u16) -> i64 {
    let answer = gateway::post(port, "/v3/kv/range", r#"{"key":"AA==","count_only":true}"#);
    assert_eq!(answer.status, 200, "{}", answer.text());
    answer.json()["header"]["revision"]
        .as_str()
        .expect("a revision")
        .parse()
        .expect("a number")
}

/// The (key, mod revision) of each event of gateway watch responses.
fn gateway_events(response: &serde_json::Value) -> Vec<(String, i64)> {
    let events = response["result"]["events"].as_array().cloned().unwrap_or_default();
    events
        .iter()
        .map(|event| {
            let kv = &event["kv"];
            let key = kv["key"].as_str().unwrap_or_default().to_string();
            let revision = kv["mod_revision"].as_str().unwrap_or("0").parse().expect("a revision");
            (key, revision)
        })
        .collect()
}

/// Puts of the benchmark run below.
const LOAD_PUTS: i64 = 25_000;
/// Its offered load, puts per second.
const LOAD_RATE: &str = "5000";
/// How long the watchers may take to see the last event after the load.
const DRAIN_WITHIN: Duration = Duration::from_secs(60);

#[test]
fn a_gateway_watch_under_load_delivers_what_a_grpc_watch_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = common::Cluster::start_members(&common::kv_server(), dir.path(), 16579, 3, &[]);
    let port = cluster.members[0].client_port;
    let endpoints = cluster.endpoints();
    let start = revision(port) + 1;
    let last = start + LOAD_PUTS - 1;

    let mut stream = gateway::Stream::open(port, "/v3/watch", &watch_all_from(start), DRAIN_WITHIN);
    assert_eq!(stream.status, 200);
    let created = stream.next().expect("the created response");
    assert_eq!(created["result"]["created"], true, "{created}");
    let grpc_out = dir.path().join("grpc-watch.json");
    let grpc_watch = std::process::Command::new(common::etcd_tool("ETCDCTL_BIN", "etcdctl"))
        .args([
            "--endpoints",
            &endpoints,
            "watch",
            "--prefix",
            "",
            "--rev",
            &start.to_string(),
            "-w",
            "json",
        ])
        .stdout(std::fs::File::create(&grpc_out).expect("output file"))
        .spawn()
        .expect("etcdctl watch");
    let grpc_watch = common::Background::new(grpc_watch);

    let reader = std::thread::spawn(move || {
        let mut seen = Vec::new();
        while seen.last().is_none_or(|(_, revision)| *revision < last) {
            let Some(response) = stream.next() else { break };
            seen.extend(gateway_events(&response));
        }
        seen
    });
    common::etcd_benchmark(&[
        "--endpoints",
        &endpoints,
        "--clients",
        "50",
        "--conns",
        "5",
        "put",
        "--rate",
        LOAD_RATE,
        "--total",
        &LOAD_PUTS.to_string(),
        "--key-size",
        "8",
        "--val-size",
        "256",
        "--key-space-size",
        "100000",
    ]);
    let over_gateway = reader.join().expect("the gateway reader");

    let deadline = Instant::now() + DRAIN_WITHIN;
    let over_grpc = loop {
        let text = std::fs::read_to_string(&grpc_out).unwrap_or_default();
        let events: Vec<(String, i64)> = text
            .lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .flat_map(|response| {
                response["Events"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|event| {
                        let kv = &event["kv"];
                        (
                            kv["key"].as_str().unwrap_or_default().to_string(),
                            kv["mod_revision"].as_i64().unwrap_or(0),
                        )
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        if events.last().is_some_and(|(_, revision)| *revision >= last) || Instant::now() > deadline {
            break events;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    drop(grpc_watch);

    let revisions: Vec<i64> = over_gateway.iter().map(|(_, revision)| *revision).collect();
    let expected: Vec<i64> = (start..=last).collect();
    assert_eq!(revisions.len(), expected.len(), "every put's event, once");
    assert!(revisions == expected, "events in revision order, none missing");
    assert!(
        over_gateway == over_grpc,
        "the gateway watch and the gRPC watch saw the same events"
    );
}

fn pids(cluster: &common::Cluster) -> Vec<Option<u32>> {
    cluster.members.iter().map(|member| member.pid()).collect()
}

fn rss_bytes(pid: u32) -> i64 {
    common::status_bytes(pid, "VmRSS:")
}

/// Writes acknowledged before the bad input, read back after it.
const ACKED: usize = 100;
/// Puts made while a gateway watch is left unread: 25,600 × 4 KiB =
/// 100 MiB, ten times a stalled stream's bound.
const STALL_PUTS: &str = "25600";
const STALL_VALUE_BYTES: &str = "4096";
/// A stalled gateway stream's own queue on top of its watch's bound: a
/// few answers of up to 1 MiB of events each, in JSON (base64's 4/3 and
/// the names), plus the allocator's and the store's noise.
const GATEWAY_QUEUE_AND_NOISE_BYTES: i64 = 24 << 20;
/// How long the member is given to free a closed stream's memory.
const SETTLE: Duration = Duration::from_secs(2);

#[test]
fn bad_input_gets_etcds_answer_and_nothing_else_happens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = common::Cluster::start_members(
        &common::kv_server(),
        dir.path(),
        16679,
        3,
        &["--max-request-bytes", "1048576"],
    );
    let port = cluster.members[0].client_port;
    let before = pids(&cluster);
    for i in 0..ACKED {
        let body = format!(r#"{{"key":"{}","value":"dg=="}}"#, base64_of(&format!("acked/{i:03}")));
        assert_eq!(gateway::post(port, "/v3/kv/put", &body).status, 200);
    }

    // A body over the limit: 4 MiB of base64, past twice gRPC's limit.
    let huge = format!(r#"{{"key":"aw==","value":"{}"}}"#, "A".repeat(4 << 20));
    let answer = gateway::post(port, "/v3/kv/put", &huge);
    assert_eq!(answer.status, 429, "{}", answer.text());
    assert_eq!(answer.json()["code"], 8);
    // A value over --max-request-bytes but under gRPC's limit: etcd's own
    // answer from the server.
    let large = format!(r#"{{"key":"aw==","value":"{}"}}"#, "A".repeat(1_600_000));
    let answer = gateway::post(port, "/v3/kv/put", &large);
    assert_eq!(answer.status, 400, "{}", answer.text());
    assert_eq!(answer.json()["error"], "etcdserver: request is too large");
    let cases = [
        (
            "/v3/kv/put",
            "{bad",
            400,
            "invalid character 'b' looking for beginning of object key string",
        ),
        (
            "/v3/kv/put",
            r#"{"key":"!!!"}"#,
            400,
            "illegal base64 data at input byte 0",
        ),
        (
            "/v3/kv/range",
            r#"{"limit":"x"}"#,
            400,
            "invalid character 'x' looking for beginning of value",
        ),
        ("/v3/kv/range", r#"{"key":"aw==""#, 400, "unexpected EOF"),
    ];
    for (path, body, status, message) in cases {
        let answer = gateway::post(port, path, body);
        assert_eq!(answer.status, status, "{body}: {}", answer.text());
        assert_eq!(answer.json()["error"], message, "{body}");
        assert_eq!(answer.json()["code"], 3, "{body}");
    }
    let unknown = gateway::post(port, "/v3/kv/nothing", "{}");
    assert_eq!((unknown.status, unknown.text()), (404, "Not Found\n".to_string()));
    let wrong_method = gateway::request(port, "GET", "/v3/kv/range", &[], b"");
    assert_eq!(
        (wrong_method.status, wrong_method.text()),
        (405, "Method Not Allowed\n".to_string())
    );

    // A watch of every key, never read while 100 MiB is written.
    let pid = cluster.members[0].pid().expect("running");
    let from = revision(port) + 1;
    let mut stalled = gateway::Stream::open(port, "/v3/watch", &watch_all_from(from), Duration::from_secs(60));
    common::etcd_benchmark(&[
        "--endpoints",
        &cluster.members[0].endpoint(),
        "--clients",
        "32",
        "--conns",
        "4",
        "put",
        "--total",
        STALL_PUTS,
        "--val-size",
        STALL_VALUE_BYTES,
        "--key-space-size",
        "1000",
    ]);
    let loaded = rss_bytes(pid);
    // Read now, the stream delivers every event, in order.
    let last = revision(port);
    let mut next = from;
    let within = Instant::now() + Duration::from_secs(120);
    while next <= last && Instant::now() < within {
        let Some(response) = stalled.next() else { break };
        for (_, revision) in gateway_events(&response) {
            assert_eq!(revision, next, "events in order, none missing");
            next += 1;
        }
    }
    assert_eq!(next, last + 1, "the stalled stream delivered every event once read");
    drop(stalled);
    std::thread::sleep(SETTLE);
    // The member returns freed memory within milliseconds
    // (`allocator.rs`), well inside the settle: the drop is what the
    // stalled stream held (the store's growth is in both readings).
    let held = loaded - rss_bytes(pid);
    let bound = WATCH_STREAM_STALLED_BYTES_MAX as i64 + GATEWAY_QUEUE_AND_NOISE_BYTES;
    eprintln!("a stalled gateway watch held {held} bytes; its bound is {bound}");
    assert!(
        held <= bound,
        "a stalled gateway watch held {held} bytes, over its bound {bound}"
    );

    assert_eq!(pids(&cluster), before, "no member restarted");
    for i in 0..3 {
        assert!(common::healthy(cluster.members[i].client_port), "member {i} healthy");
    }
    let read = gateway::post(
        port,
        "/v3/kv/range",
        &format!(
            r#"{{"key":"{}","range_end":"{}"}}"#,
            base64_of("acked/"),
            base64_of("acked0")
        ),
    );
    assert_eq!(
        read.json()["count"],
        ACKED.to_string(),
        "no acknowledged write was lost"
    );
}

fn base64_of(text: &str) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes = text.as_bytes();
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// curl's answer to a gateway POST of `body` to `url`: the HTTP version
/// it spoke, the status, and the body.
fn curl(url: &str, body: &str, flags: &[&str]) -> (String, u16, String) {
    let output = std::process::Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "10",
            "-X",
            "POST",
            "-d",
            body,
            "-w",
            "\n%{http_version} %{http_code}",
        ])
        .args(flags)
        .arg(url)
        .output()
        .expect("curl is needed for the TLS and HTTP/2 checks");
    let text = String::from_utf8_lossy(&output.stdout).to_string();
    let (answer, last) = text.rsplit_once('\n').expect("curl's trailer line");
    let (version, status) = last.split_once(' ').expect("version and status");
    (version.to_string(), status.parse().unwrap_or(0), answer.to_string())
}

const PUT: &str = r#"{"key":"Z3cvdGxz","value":"dGxz"}"#;
const RANGE: &str = r#"{"key":"Z3cvdGxz"}"#;

#[test]
fn the_gateway_is_served_on_tls_and_http2_and_can_be_turned_off() {
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = common::certs::Certs::generate(&dir.path().join("certs"), &["root"]);
    let root = certs.client("root");
    let tls_flags = [
        "--cacert".to_string(),
        certs.ca.display().to_string(),
        "--cert".to_string(),
        root.cert.display().to_string(),
        "--key".to_string(),
        root.key.display().to_string(),
    ];
    let tls_flags: Vec<&str> = tls_flags.iter().map(String::as_str).collect();
    let mut refusals = Vec::new();
    for (name, binary, base) in [
        ("etcd", common::etcd_tool("ETCD_BIN", "etcd"), 16979),
        ("kv-server", common::kv_server(), 17079),
    ] {
        let cluster_dir = dir.path().join(name);
        std::fs::create_dir_all(&cluster_dir).expect("data dir");
        let cluster = common::Cluster::start_tls(&binary, &cluster_dir, base, &certs, "root", &[]);
        let url = |path: &str| format!("https://127.0.0.1:{}{path}", cluster.members[0].client_port);
        if name == "kv-server" {
            let mut http1 = tls_flags.clone();
            http1.push("--http1.1");
            let (version, status, answer) = curl(&url("/v3/kv/put"), PUT, &http1);
            assert_eq!((version.as_str(), status), ("1.1", 200), "{answer}");
            let mut http2 = tls_flags.clone();
            http2.push("--http2");
            let (version, status, answer) = curl(&url("/v3/kv/range"), RANGE, &http2);
            assert_eq!((version.as_str(), status), ("2", 200), "{answer}");
            assert!(answer.contains(r#""value":"dGxz""#), "{answer}");
        }
        // Auth on: the client certificate names "root", which the gateway
        // cannot act as; etcd says so.
        let flags = certs.client_flags(root);
        let (ok, said) = common::etcdctl_as(&cluster.members[0].endpoint(), &flags, &["user", "add", "root:pw"]);
        assert!(ok, "{name}: {said}");
        let (ok, said) = common::etcdctl_as(&cluster.members[0].endpoint(), &flags, &["auth", "enable"]);
        assert!(ok, "{name}: {said}");
        refusals.push(curl(&url("/v3/kv/range"), RANGE, &tls_flags));
    }
    assert_eq!(refusals[0].1, 400, "{:?}", refusals[0]);
    assert_eq!(refusals[1], refusals[0], "kv-server refuses as etcd does");

    let plain = common::Cluster::start_members(&common::kv_server(), &dir.path().join("plain"), 17179, 1, &[]);
    let url = format!("http://127.0.0.1:{}/v3/kv/put", plain.members[0].client_port);
    let (version, status, answer) = curl(&url, PUT, &["--http2-prior-knowledge"]);
    assert_eq!(
        (version.as_str(), status),
        ("2", 200),
        "JSON over plain HTTP/2: {answer}"
    );

    let off = common::Cluster::start_members(
        &common::kv_server(),
        &dir.path().join("off"),
        17279,
        1,
        &["--enable-grpc-gateway=false"],
    );
    let port = off.members[0].client_port;
    let answer = gateway::post(port, "/v3/kv/put", PUT);
    assert_eq!(
        (answer.status, answer.text()),
        (404, "404 page not found\n".to_string())
    );
    let put = common::etcdctl(&off.members[0].endpoint(), &["put", "gw/off", "grpc"]);
    assert!(put.status.success(), "gRPC goes on: {}", common::text(&put));
}
