//! etcd's initial election tick advance: at start, a member's election
//! clock is moved forward so that a cluster gets its leader sooner.
//! - A cluster of one member always advances `election ticks - 1`: it has
//!   no one to wait for, and campaigns within a tick or a few.
//! - Otherwise, with `--initial-election-tick-advance` (on by default),
//!   the member waits up to [`PEER_WAIT_MAX`] for more than one peer's
//!   stream to be up, then advances `election ticks - 2`, leaving two
//!   ticks for a leader's heartbeat to arrive before it campaigns. If
//!   they never come up, nothing is advanced.
//!
//! The ticks go to the raft loop as one input; it ticks raft that many
//! times in its next turn.

use std::time::Duration;

use crate::logging::go_duration;
use crate::member::core::Member;
use crate::raft::input::NodeInput;

/// How long a member waits for its peers' streams before it gives up
/// advancing: etcd's wait, its peer connection read timeout (5 s).
pub const PEER_WAIT_MAX: Duration = Duration::from_secs(5);

/// How often the peers' streams are looked at meanwhile, as etcd does.
const PEER_WAIT_POLL: Duration = Duration::from_millis(50);

impl Member {
    /// Advances the election clock as etcd does at start; returns once
    /// done or given up.
    pub async fn advance_election_ticks(&self) {
        let local = format!("{:x}", self.member_id());
        let election_ticks = self.config().election_ticks();
        let tick = self.config().tick_interval();
        let members = self.membership.get().peers().count() + 1;
        if members == 1 {
            let ticks = election_ticks.saturating_sub(1);
            tracing::info!(
                "local-member-id" = %local,
                "forward-ticks" = ticks,
                "forward-duration" = %go_duration(tick * ticks as u32),
                "election-ticks" = election_ticks,
                "election-timeout" = %go_duration(tick * election_ticks as u32),
                "started as single-node; fast-forwarding election ticks"
            );
            self.send_ticks(ticks);
            return;
        }
        if !self.config().initial_election_tick_advance {
            tracing::info!(
                "election-ticks" = election_ticks,
                "skipping initial election tick advance"
            );
            return;
        }
        tracing::info!(
            "election-ticks" = election_ticks,
            "starting initial election tick advance"
        );
        let mut every = tokio::time::interval(PEER_WAIT_POLL);
        every.tick().await;
        for _ in 0..PEER_WAIT_MAX.as_millis() / PEER_WAIT_POLL.as_millis() {
            every.tick().await;
            let active = self
                .membership
                .get()
                .peers()
                .filter(|peer| self.peers.active_since(peer.id).is_some())
                .count();
            if active > 1 {
                let ticks = election_ticks.saturating_sub(2);
                tracing::info!(
                    "local-member-id" = %local,
                    "forward-ticks" = ticks,
                    "forward-duration" = %go_duration(tick * ticks as u32),
                    "election-ticks" = election_ticks,
                    "election-timeout" = %go_duration(tick * election_ticks as u32),
                    "active-remote-members" = active,
                    "initialized peer connections; fast-forwarding election ticks"
                );
                self.send_ticks(ticks);
                return;
            }
        }
    }

    fn send_ticks(&self, ticks: usize) {
        // A full queue means the loop is busy with inputs already (a
        // leader's messages, or a stop): the advance is skipped, and said.
        if let Err(error) = self.node.try_send(NodeInput::AdvanceTicks(ticks)) {
            tracing::warn!(%error, "ticks" = ticks, "the election tick advance was skipped");
        }
    }
}
