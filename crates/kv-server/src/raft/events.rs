//! What the raft loop tells operators, in etcd's words:
//! - a leader's heartbeat to a peer later than twice the heartbeat
//!   interval after the one before: "leader failed to send out heartbeat
//!   on time; took too long, leader is overloaded likely from slow disk",
//!   with `to`, `heartbeat-interval`, `expected-duration` and
//!   `exceeded-duration`, counted in
//!   `etcd_server_heartbeat_send_failures_total`;
//! - a change of leader: raft's "elected leader", "changed leader" and
//!   "lost leader" lines (`raft.node: …`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use raft::prelude::{Message, MessageType};

use crate::logging::go_duration;

pub struct Events {
    id: u64,
    heartbeat: Duration,
    /// When the last heartbeat to each peer left.
    last_heartbeat: HashMap<u64, Instant>,
    /// The leader last seen.
    leader: u64,
}

impl Events {
    pub fn new(id: u64, heartbeat: Duration) -> Events {
        Events {
            id,
            heartbeat,
            last_heartbeat: HashMap::new(),
            leader: 0,
        }
    }

    /// Notes the heartbeats among `messages`, about to leave at `now`.
    pub fn sending(&mut self, messages: &[Message], now: Instant) {
        let expected = self.heartbeat * 2;
        for message in messages
            .iter()
            .filter(|m| m.get_msg_type() == MessageType::MsgHeartbeat)
        {
            let previous = self.last_heartbeat.insert(message.to, now);
            let Some(gap) = previous.map(|previous| now.saturating_duration_since(previous)) else {
                continue;
            };
            if gap > expected {
                crate::metrics::metrics().server.heartbeat_send_failures.inc();
                tracing::warn!(
                    to = format!("{:x}", message.to),
                    "heartbeat-interval" = %go_duration(self.heartbeat),
                    "expected-duration" = %go_duration(expected),
                    "exceeded-duration" = %go_duration(gap - expected),
                    "leader failed to send out heartbeat on time; took too long, leader is overloaded likely from slow disk"
                );
            }
        }
    }

    /// Notes the leader raft knows at `term`, logging a change.
    pub fn leader(&mut self, leader: u64, term: u64) {
        if leader == self.leader {
            return;
        }
        let (id, before) = (self.id, self.leader);
        match (before, leader) {
            (0, _) => tracing::info!(target: "raft", "raft.node: {id:x} elected leader {leader:x} at term {term}"),
            (_, 0) => tracing::info!(target: "raft", "raft.node: {id:x} lost leader {before:x} at term {term}"),
            _ => tracing::info!(
                target: "raft",
                "raft.node: {id:x} changed leader from {before:x} to {leader:x} at term {term}"
            ),
        }
        if leader != id {
            self.last_heartbeat.clear();
        }
        self.leader = leader;
    }
}
