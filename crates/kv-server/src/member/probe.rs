//! The round trip to each peer, probed every `PEER_PROBE_EVERY`, as
//! etcd's prober measures it for `etcd_network_peer_round_trip_time_seconds`:
//! one small call over the peer port, timed. A peer that does not answer
//! is skipped until the next probe.

use crate::member::core::Member;
use crate::metrics::{metrics, PEER_PROBE_EVERY};
use crate::proto::kvserverpb::MembersRequest;

impl Member {
    /// Probes every peer, every [`PEER_PROBE_EVERY`], for as long as the
    /// member runs.
    pub async fn probe_peers(&self) {
        let mut every = tokio::time::interval(PEER_PROBE_EVERY);
        loop {
            every.tick().await;
            let peers: Vec<u64> = self.membership.get().peers().map(|m| m.id).collect();
            for peer in peers {
                let Ok(mut client) = self.leader_channels.client(peer) else {
                    continue;
                };
                let started = tokio::time::Instant::now();
                if client.members(MembersRequest {}).await.is_ok() {
                    metrics()
                        .network
                        .peer_round_trip
                        .with_label_values(&[&format!("{peer:x}")])
                        .observe(started.elapsed().as_secs_f64());
                }
            }
        }
    }
}
