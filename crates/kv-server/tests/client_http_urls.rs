//! Goal: `--listen-client-http-urls` splits the client port as etcd does:
//! those URLs serve plain HTTP (`/health`, the gRPC-JSON gateway) and no
//! gRPC, and the client URLs then serve gRPC and no HTTP; one address in
//! both lists is refused at start with etcd's message.
//!
//! Method: one member of kv-server and one of etcd 3.5.17 side by side,
//! each with its HTTP URL five ports above its client URL. On each,
//! etcdctl puts through the client URL; `/health` and a gateway range
//! through the HTTP URL answer; `/health` on the client URL and etcdctl on
//! the HTTP URL get no answer. Then each is started with the same address
//! in both flags and must exit with etcd's message.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// How far above the client port the HTTP-only port is.
const HTTP_OFFSET: u16 = 5;

/// What one server did, step by step, for comparing the two.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    grpc_put_on_client_url: bool,
    health_on_http_url: bool,
    gateway_range_on_http_url: bool,
    http_on_client_url: bool,
    grpc_on_http_url: bool,
}

fn split_member(binary: &Path, dir: &Path, base: u16) -> common::Cluster {
    let http_url = format!("--listen-client-http-urls=http://127.0.0.1:{}", base + HTTP_OFFSET);
    let mut cluster = common::Cluster::new(binary, dir, base, 1, &[http_url.as_str()]);
    // The client URL no longer answers HTTP: the launcher asks the other.
    cluster.spec.probe = Some(cluster::Probe::Custom(Arc::new(|port, path| {
        common::http_get(port + HTTP_OFFSET, path)
    })));
    cluster.start_all();
    cluster
}

fn outcome(port: u16) -> Outcome {
    let client = format!("127.0.0.1:{port}");
    let http = format!("127.0.0.1:{}", port + HTTP_OFFSET);
    let put = common::etcdctl(&client, &["put", "split", "yes"]);
    let health = common::http_get(port + HTTP_OFFSET, "/health");
    let range = common::gateway::post(port + HTTP_OFFSET, "/v3/kv/range", r#"{"key":"c3BsaXQ="}"#);
    let on_client = common::http_get(port, "/health");
    let get = common::etcdctl(&http, &["--dial-timeout=2s", "--command-timeout=3s", "get", "split"]);
    Outcome {
        grpc_put_on_client_url: put.status.success(),
        health_on_http_url: health.starts_with("HTTP/1") && health.contains(r#""health":"true""#),
        gateway_range_on_http_url: range.status == 200 && range.text().contains(r#""value":"eWVz""#),
        http_on_client_url: on_client.starts_with("HTTP/"),
        grpc_on_http_url: get.status.success(),
    }
}

#[test]
fn http_urls_split_the_client_port_as_etcd_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let etcd = common::etcd_tool("ETCD_BIN", "etcd");
    let expected = Outcome {
        grpc_put_on_client_url: true,
        health_on_http_url: true,
        gateway_range_on_http_url: true,
        http_on_client_url: false,
        grpc_on_http_url: false,
    };
    for (name, binary, base) in [("kv-server", common::kv_server(), 24579), ("etcd", etcd.clone(), 24679)] {
        let running = split_member(&binary, &dir.path().join(name), base);
        let seen = outcome(running.members[0].client_port);
        eprintln!("{name}: {seen:?}");
        assert_eq!(seen, expected, "{name}");
    }

    for (name, binary) in [("kv-server", common::kv_server()), ("etcd", etcd)] {
        let data = dir.path().join(format!("{name}-same"));
        let url = "http://127.0.0.1:24779";
        let args = [
            "--name",
            "same",
            "--data-dir",
            data.to_str().expect("utf-8"),
            "--listen-client-urls",
            url,
            "--advertise-client-urls",
            url,
            "--listen-client-http-urls",
            url,
            "--listen-peer-urls",
            "http://127.0.0.1:24780",
            "--initial-advertise-peer-urls",
            "http://127.0.0.1:24780",
            "--initial-cluster",
            "same=http://127.0.0.1:24780",
        ];
        let output = common::run_within(&binary, &args, Duration::from_secs(15));
        let said = common::text(&output);
        assert!(
            !output.status.success(),
            "{name} started with one URL in both flags:\n{said}"
        );
        assert!(
            said.contains("cannot bind both --client-listen-urls and --client-listen-http-urls on the same url http://127.0.0.1:24779"),
            "{name}:\n{said}"
        );
    }
}
