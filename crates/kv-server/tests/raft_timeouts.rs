//! Goal: etcd's `--raft-read-timeout` and `--raft-write-timeout` are
//! honoured as etcd 3.5.17 honours them:
//! - a value under 5 s is raised to 5 s, logged with etcd's words
//!   ("raft-write-timeout increased to minimum value: 5s");
//! - a connection to the peer port that says nothing is closed, not
//!   before the read timeout and within twice it, on both (etcd closes
//!   it after two read timeouts, kv-server after one);
//! - on kv-server, a raft stream that goes quiet after its hello is
//!   closed the same way (a live peer's stream carries heartbeats, shown
//!   by `peer::transport`'s unit tests, as are the write timeout's).
//!
//! Method: one member of real etcd and one of kv-server with the same
//! flags; raw TCP connections to their peer ports, timed until the
//! member closes them.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The read timeout the members run with: above etcd's least, so it is
/// the setting, not the floor, that shows.
const READ_TIMEOUT: Duration = Duration::from_secs(7);

/// How much later than the timeout a close may come on a busy machine.
const CLOSE_SLACK: Duration = Duration::from_secs(3);

/// How long after `connected` the member closed `stream`, which sends
/// nothing more; None if it was still open well past the timeout.
fn closed_after(mut stream: TcpStream, connected: Instant) -> Option<Duration> {
    stream
        .set_read_timeout(Some(READ_TIMEOUT * 2 + CLOSE_SLACK * 2))
        .expect("read timeout");
    let mut byte = [0u8; 64];
    loop {
        match stream.read(&mut byte) {
            Ok(0) => return Some(connected.elapsed()),
            // Whatever the member says first (etcd says nothing) is read past.
            Ok(_) => continue,
            Err(error) if matches!(error.kind(), std::io::ErrorKind::ConnectionReset) => {
                return Some(connected.elapsed())
            }
            Err(_) => return None,
        }
    }
}

/// Whether `took` is at least the read timeout and at most `times` it,
/// give or take the machine.
fn is_the_read_timeout(took: Option<Duration>, times: u32) -> bool {
    took.is_some_and(|took| {
        took + Duration::from_millis(200) >= READ_TIMEOUT && took <= READ_TIMEOUT * times + CLOSE_SLACK
    })
}

#[test]
fn raft_timeouts_are_honoured_as_on_etcd() {
    let dir = tempfile::tempdir().expect("tempdir");
    let flags = ["--raft-read-timeout=7s", "--raft-write-timeout=1s"];
    for (name, binary, base) in [
        ("etcd", common::etcd_tool("ETCD_BIN", "etcd"), 28779),
        ("kv-server", common::kv_server(), 28789),
    ] {
        let mut cluster = common::Cluster::start_members(&binary, &dir.path().join(name), base, 1, &flags);
        let peer_port = cluster.members[0].peer_port;
        let silent = TcpStream::connect(("127.0.0.1", peer_port)).expect("connect to the peer port");
        let took = closed_after(silent, Instant::now());
        assert!(
            is_the_read_timeout(took, 2),
            "{name}: a silent peer connection closed after {took:?}, not the read timeout"
        );
        if name == "kv-server" {
            let mut quiet = TcpStream::connect(("127.0.0.1", peer_port)).expect("connect to the peer port");
            let mut hello = b"KVRAFT01".to_vec();
            hello.extend_from_slice(&7u64.to_le_bytes());
            quiet.write_all(&hello).expect("hello");
            let took = closed_after(quiet, Instant::now());
            assert!(
                is_the_read_timeout(took, 1),
                "a quiet raft stream closed after {took:?}, not the read timeout"
            );
        }
        cluster.stop();
        let log = std::fs::read_to_string(cluster.log_path(0)).expect("the member's log");
        assert!(
            log.contains("raft-write-timeout increased to minimum value: 5s"),
            "{name} did not raise the write timeout: {log}"
        );
        assert!(
            !log.contains("raft-read-timeout increased"),
            "{name} raised a read timeout above the least"
        );
    }
}
