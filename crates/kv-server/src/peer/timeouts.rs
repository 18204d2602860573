//! etcd's peer timeouts, as the raft stream's both ends use them.

use std::time::Duration;

/// etcd's `--raft-read-timeout` and `--raft-write-timeout`: a raft
/// stream quiet for `read` is closed by its reader, and one whose bytes
/// wait `write` without the socket taking any is given up by its writer.
/// Senders keep quiet streams alive with a heartbeat frame every third
/// of `read`, as etcd's stream writer does.
#[derive(Debug, Clone, Copy)]
pub struct PeerTimeouts {
    pub read: Duration,
    pub write: Duration,
}

/// etcd's default, and its least: smaller settings are raised to it.
pub const PEER_TIMEOUT_MIN: Duration = Duration::from_secs(5);

impl Default for PeerTimeouts {
    fn default() -> Self {
        PeerTimeouts {
            read: PEER_TIMEOUT_MIN,
            write: PEER_TIMEOUT_MIN,
        }
    }
}

impl PeerTimeouts {
    /// How long a sender lets its stream stay quiet: a third of the read
    /// timeout, so two heartbeats may be late before the reader gives up.
    pub fn heartbeat_interval(&self) -> Duration {
        self.read / 3
    }
}
