//! Goal: `--grpc-keepalive-min-time` is honoured as etcd 3.5.17 honours
//! it: a client that pings sooner than the minimum while it has a stream
//! open is told GOAWAY `ENHANCE_YOUR_CALM` at its third strike, and one
//! that keeps the minimum is served on.
//!
//! Method: one member of real etcd and one of kv-server with
//! `--grpc-keepalive-min-time=1s`; a raw HTTP/2 client on a real socket
//! opens a Watch stream and sends pings back to back, then, on a second
//! connection, 1.5 s apart.

mod common;

use std::time::Duration;

/// The minimum the members are given.
const MIN_TIME: &str = "--grpc-keepalive-min-time=1s";

/// Pings sent on each connection: the first is never judged, so the
/// fourth is the third strike when they come too often.
const PINGS: usize = 6;

/// How a connection ended up after its pings.
#[derive(Debug, PartialEq)]
enum Outcome {
    /// Still serving: every ping was answered and the connection is up.
    Served,
    /// Ended by the server's GOAWAY with this reason.
    GoAway(h2::Reason),
    /// Ended some other way.
    Other(String),
}

/// Opens a Watch stream on `port`, sends [`PINGS`] pings `apart`, and
/// says how the connection fared.
async fn ping(port: u16, apart: Duration) -> Outcome {
    let socket = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let (client, mut connection) = h2::client::handshake(socket).await.expect("HTTP/2 handshake");
    let mut ping_pong = connection.ping_pong().expect("the ping handle");
    let driver = tokio::spawn(connection);
    let mut client = client.ready().await.expect("ready for a request");
    let request = http::Request::post(format!("http://127.0.0.1:{port}/etcdserverpb.Watch/Watch"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .expect("request");
    // The request body is left open: the stream stays active.
    let (_response, _body) = client.send_request(request, false).expect("the Watch stream");
    for n in 0..PINGS {
        if n > 0 {
            tokio::time::sleep(apart).await;
        }
        if ping_pong.ping(h2::Ping::opaque()).await.is_err() {
            break;
        }
    }
    match tokio::time::timeout(Duration::from_secs(2), driver).await {
        Err(_) => Outcome::Served,
        Ok(Ok(Err(error))) if error.is_go_away() => Outcome::GoAway(error.reason().expect("a reason")),
        Ok(ended) => Outcome::Other(format!("{ended:?}")),
    }
}

#[test]
fn pings_too_often_get_goaway_as_from_etcd() {
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    for (name, binary, base) in [
        ("etcd", common::etcd_tool("ETCD_BIN", "etcd"), 28879),
        ("kv-server", common::kv_server(), 28889),
    ] {
        let cluster = common::Cluster::start_members(&binary, &dir.path().join(name), base, 1, &[MIN_TIME]);
        let port = cluster.members[0].client_port;
        let often = runtime.block_on(ping(port, Duration::ZERO));
        assert_eq!(
            often,
            Outcome::GoAway(h2::Reason::ENHANCE_YOUR_CALM),
            "{name}, back to back"
        );
        let spaced = runtime.block_on(ping(port, Duration::from_millis(1500)));
        assert_eq!(spaced, Outcome::Served, "{name}, 1.5 s apart");
    }
}
