//! Goal: the client port's HTTP/2 transport follows etcd's flags as
//! etcd's gRPC server does: `--grpc-keepalive-interval` (a silent client
//! is pinged), `--grpc-keepalive-timeout` (an unanswered ping closes the
//! connection) and `--max-concurrent-streams` (advertised in SETTINGS;
//! etcd's default, no limit, advertises nothing).
//!
//! Method: one member of kv-server and one of etcd 3.5.17 side by side,
//! first with `--grpc-keepalive-interval=1s --grpc-keepalive-timeout=1s
//! --max-concurrent-streams=7`, then with etcd's defaults. A raw HTTP/2
//! client on a TCP socket sends the preface and its SETTINGS, acknowledges
//! the server's, and then says nothing: it reads the server's
//! MAX_CONCURRENT_STREAMS, waits for the server's PING, does not answer
//! it, and times how long the server keeps the connection after it.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// HTTP/2's connection preface, then an empty SETTINGS frame.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";
/// An acknowledgement of the server's SETTINGS.
const SETTINGS_ACK: &[u8] = b"\0\0\0\x04\x01\0\0\0\0";
const FRAME_SETTINGS: u8 = 0x4;
const FRAME_PING: u8 = 0x6;
const FRAME_GOAWAY: u8 = 0x7;
const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
/// How long any step may take before the test gives up on the server.
const PATIENCE: Duration = Duration::from_secs(15);

/// What the raw client saw of one connection.
#[derive(Debug)]
struct Seen {
    /// MAX_CONCURRENT_STREAMS in the server's first SETTINGS, if there.
    max_streams: Option<u32>,
    /// From connecting to the server's first PING.
    ping_after: Option<Duration>,
    /// From that PING to the connection's end (GOAWAY or EOF).
    closed_after_ping: Option<Duration>,
}

/// One frame: its type, flags and payload; `None` at the connection's end.
fn read_frame(stream: &mut TcpStream) -> Option<(u8, u8, Vec<u8>)> {
    let mut header = [0u8; 9];
    stream.read_exact(&mut header).ok()?;
    let length = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
    let mut payload = vec![0u8; length];
    stream.read_exact(&mut payload).ok()?;
    Some((header[3], header[4], payload))
}

/// Connects to `port` as described in the module's doc; reads until the
/// connection ends or `PATIENCE` passes without it.
fn watch_connection(port: u16, wait_for_ping: bool) -> Seen {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream.set_read_timeout(Some(PATIENCE)).expect("read timeout");
    stream.write_all(PREFACE).expect("send the preface");
    let start = Instant::now();
    let mut seen = Seen {
        max_streams: None,
        ping_after: None,
        closed_after_ping: None,
    };
    let mut settings_seen = false;
    while start.elapsed() < PATIENCE * 2 {
        let Some((kind, flags, payload)) = read_frame(&mut stream) else {
            break;
        };
        match kind {
            FRAME_SETTINGS if flags & 1 == 0 && !settings_seen => {
                settings_seen = true;
                for setting in payload.chunks_exact(6) {
                    if u16::from_be_bytes([setting[0], setting[1]]) == SETTINGS_MAX_CONCURRENT_STREAMS {
                        seen.max_streams = Some(u32::from_be_bytes([setting[2], setting[3], setting[4], setting[5]]));
                    }
                }
                stream.write_all(SETTINGS_ACK).expect("acknowledge SETTINGS");
                if !wait_for_ping {
                    return seen;
                }
            }
            FRAME_PING if flags & 1 == 0 && seen.ping_after.is_none() => seen.ping_after = Some(start.elapsed()),
            FRAME_GOAWAY => break,
            _ => {}
        }
    }
    let pinged = seen.ping_after.map(|after| start + after);
    seen.closed_after_ping = pinged.map(|at| at.elapsed());
    seen
}

fn member(binary: &Path, dir: &Path, base: u16, flags: &[&str]) -> common::Cluster {
    common::Cluster::start_members(binary, dir, base, 1, flags)
}

#[test]
fn keepalive_and_stream_bound_follow_etcds_flags() {
    let dir = tempfile::tempdir().expect("tempdir");
    let etcd = common::etcd_tool("ETCD_BIN", "etcd");
    let flags = [
        "--grpc-keepalive-interval=1s",
        "--grpc-keepalive-timeout=1s",
        "--max-concurrent-streams=7",
    ];
    for (name, binary, base) in [("kv-server", common::kv_server(), 25379), ("etcd", etcd.clone(), 25479)] {
        let running = member(&binary, &dir.path().join(name), base, &flags);
        let seen = watch_connection(running.members[0].client_port, true);
        eprintln!("{name} with {flags:?}: {seen:?}");
        assert_eq!(seen.max_streams, Some(7), "{name}: {seen:?}");
        let ping = seen
            .ping_after
            .unwrap_or_else(|| panic!("{name} never pinged a silent client: {seen:?}"));
        assert!(
            ping >= Duration::from_millis(900) && ping < Duration::from_secs(4),
            "{name}: pinged after {ping:?}, the interval is 1s"
        );
        let closed = seen.closed_after_ping.expect("pinged");
        assert!(
            closed >= Duration::from_millis(900) && closed < Duration::from_secs(5),
            "{name}: an unanswered ping closed the connection after {closed:?}, the timeout is 1s"
        );
    }
    for (name, binary, base) in [("kv-server", common::kv_server(), 25779), ("etcd", etcd, 25879)] {
        let running = member(&binary, &dir.path().join(format!("{name}-defaults")), base, &[]);
        let seen = watch_connection(running.members[0].client_port, false);
        eprintln!("{name} with etcd's defaults: {seen:?}");
        assert_eq!(seen.max_streams, None, "{name} advertised a stream bound by default");
    }
}
