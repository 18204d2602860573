//! Goal: a gRPC answer carries the headers etcd 3.5.17's carries, and no
//! `Date` (grpc-go sends none, and kv-server leaves it out to save the
//! work on every call), while HTTP answers on the same port keep theirs,
//! as Go's net/http sends it.
//!
//! Method: one member of real etcd and one of kv-server; a raw HTTP/2
//! client on a real socket makes a unary Range call and reads the
//! response's header names; an HTTP/1.1 `GET /health` and, on
//! kv-server, an HTTP/2 one read the `Date`.

mod common;

use std::collections::BTreeSet;

/// A Range of key "a": gRPC's frame (uncompressed, 3 bytes long) around
/// `RangeRequest { key: "a" }`.
const RANGE_A: &[u8] = &[0, 0, 0, 0, 3, 0x0a, 0x01, b'a'];

/// A ready HTTP/2 client on 127.0.0.1:`port` (prior knowledge, no TLS),
/// and the task driving its connection.
async fn h2_client(port: u16) -> (h2::client::SendRequest<bytes::Bytes>, tokio::task::JoinHandle<()>) {
    let socket = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let (client, connection) = h2::client::handshake(socket).await.expect("HTTP/2 handshake");
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    (client.ready().await.expect("ready for a request"), driver)
}

/// The header names of a unary Range call's response, and its status.
async fn grpc_header_names(port: u16) -> (u16, BTreeSet<String>) {
    let (mut client, driver) = h2_client(port).await;
    let request = http::Request::post(format!("http://127.0.0.1:{port}/etcdserverpb.KV/Range"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .expect("request");
    let (response, mut body) = client.send_request(request, false).expect("the Range call");
    body.send_data(bytes::Bytes::from_static(RANGE_A), true)
        .expect("the request message");
    let response = response.await.expect("the response headers");
    let names = response.headers().keys().map(|name| name.as_str().to_owned()).collect();
    driver.abort();
    (response.status().as_u16(), names)
}

/// The `Date` of a `GET /health` over HTTP/2 with prior knowledge.
async fn http2_health_date(port: u16) -> Option<String> {
    let (mut client, driver) = h2_client(port).await;
    let request = http::Request::get(format!("http://127.0.0.1:{port}/health"))
        .body(())
        .expect("request");
    let (response, _) = client.send_request(request, true).expect("the health request");
    let response = response.await.expect("the health answer");
    driver.abort();
    let date = response.headers().get(http::header::DATE)?;
    Some(date.to_str().expect("an ASCII date").to_owned())
}

/// The `Date` of a `GET /health` over HTTP/1.1.
fn http1_health_date(port: u16) -> Option<String> {
    let answer = common::health_response(port);
    let head = answer.split("\r\n\r\n").next().unwrap_or("");
    head.lines().skip(1).find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("date")
            .then(|| value.trim().to_owned())
    })
}

#[test]
fn grpc_answers_have_no_date_and_http_answers_do_as_on_etcd() {
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut seen = Vec::new();
    for (name, binary, base) in [
        ("etcd", common::etcd_tool("ETCD_BIN", "etcd"), 28979),
        ("kv-server", common::kv_server(), 28989),
    ] {
        let cluster = common::Cluster::start_members(&binary, &dir.path().join(name), base, 1, &[]);
        let port = cluster.members[0].client_port;
        let (status, names) = runtime.block_on(grpc_header_names(port));
        assert_eq!(status, 200, "{name}: the Range call's HTTP status");
        assert!(!names.contains("date"), "{name}: a gRPC answer with a Date: {names:?}");
        assert!(
            http1_health_date(port).is_some(),
            "{name}: an HTTP/1.1 answer without a Date"
        );
        if name == "kv-server" {
            let date = runtime.block_on(http2_health_date(port));
            assert!(date.is_some(), "{name}: an HTTP/2 answer without a Date");
        }
        seen.push(names);
    }
    assert_eq!(
        seen[0], seen[1],
        "the Range answers' header names, etcd's then kv-server's"
    );
}
