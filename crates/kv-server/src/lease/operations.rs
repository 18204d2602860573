//! The member's lease operations, as etcd's server does them.
//!
//! Grants and revocations go through raft (see `mvcc::lease` for what the
//! store keeps). Keep-alives and time-to-live need the leader's deadlines
//! (`lessor.rs`), so any other member forwards them to the leader over the
//! peer service, as etcd's do. The leader revokes expired leases every
//! [`LEASE_EXPIRY_CHECK`] by proposing their revocation.

use std::sync::Arc;
use std::time::Duration;

use tonic::transport::Channel;

use crate::auth::Caller;
use crate::config::Config;
use crate::error::RequestError;
use crate::lease::lessor::LEASE_CHECKPOINT_BATCH;
use crate::member::core::Member;
use crate::proto::etcdserverpb as pb;
use crate::proto::kvserverpb::peer_client::PeerClient;
use crate::proto::kvserverpb::raft_request;

/// How often the leader looks for expired leases: etcd's revoke checker
/// runs every 500 ms.
pub const LEASE_EXPIRY_CHECK: Duration = Duration::from_millis(500);

/// Revocations proposed per check at most: etcd's rate of 1000 expired
/// leases a second, over one 500 ms check, so that a mass expiry does not
/// flood raft; the rest wait for the next check.
pub const LEASE_REVOKES_PER_CHECK: usize = 500;

/// Bytes a grant counts against the quota: etcd's lease overhead.
pub const LEASE_GRANT_BYTES: usize = 64;

/// How long a keep-alive or time-to-live waits for this member to apply
/// what was committed when it arrived (so a lease granted just before is
/// known): etcd's one-second apply timeout for the same wait.
pub const WAIT_APPLIED_TIMEOUT: Duration = Duration::from_secs(1);

/// The shortest TTL granted, in seconds: etcd's one and a half election
/// timeouts, rounded up, so a lease cannot expire during a leader change.
pub fn min_ttl(config: &Config) -> i64 {
    let millis = (3 * config.election_ticks() as u64 / 2) * config.heartbeat_interval_ms.max(1);
    millis.div_ceil(1000) as i64
}

/// Where a keep-alive or time-to-live is answered.
enum Route {
    Here,
    Leader(PeerClient<Channel>),
}

impl Member {
    /// Whether this member tracks lease deadlines now (it leads), after
    /// following a change of role (see `Lessor::sync`).
    fn lessor_sync(&self) -> bool {
        let leading = self.leader() == self.member_id();
        let extend = self.config.election_timeout();
        self.lessor
            .sync(leading, self.status.term(), extend, || self.store.lease_ttls())
    }

    fn route(&self) -> Result<Route, RequestError> {
        if self.lessor_sync() {
            return Ok(Route::Here);
        }
        match self.leader() {
            0 => Err(RequestError::NoLeader),
            leader => Ok(Route::Leader(self.leader_channels.client(leader)?)),
        }
    }

    /// Grants a lease: TTL raised to [`min_ttl`], id chosen if 0.
    pub async fn lease_grant(&self, ttl: i64, id: i64) -> Result<mvcc::LeaseGrantResponse, RequestError> {
        self.check_quota(LEASE_GRANT_BYTES).await?;
        let grant = pb::LeaseGrantRequest {
            ttl: ttl.max(min_ttl(&self.config)),
            id: if id == 0 { self.lease_ids.next() } else { id },
        };
        match self.propose(raft_request::Request::LeaseGrant(grant)).await? {
            mvcc::WriteResponse::LeaseGrant(granted) => Ok(granted),
            other => unreachable!("a lease grant answered {other:?}"),
        }
    }

    pub async fn lease_revoke(&self, id: i64) -> Result<mvcc::LeaseRevokeResponse, RequestError> {
        self.lease_revoke_as(id, &Caller::default()).await
    }

    /// A client's revoke, whose permissions were checked for `caller`: it
    /// applies only if auth has not changed since.
    pub async fn lease_revoke_as(&self, id: i64, caller: &Caller) -> Result<mvcc::LeaseRevokeResponse, RequestError> {
        let revoke = raft_request::Request::LeaseRevoke(pb::LeaseRevokeRequest { id });
        match self.propose_as(revoke, caller).await? {
            mvcc::WriteResponse::LeaseRevoke(revoked) => Ok(revoked),
            other => unreachable!("a lease revoke answered {other:?}"),
        }
    }

    /// A keep-alive, answered here if this member leads, else by the
    /// leader.
    pub async fn lease_keep_alive(&self, id: i64) -> Result<pb::LeaseKeepAliveResponse, RequestError> {
        match self.route()? {
            Route::Here => self.keep_alive_as_leader(id).await,
            Route::Leader(mut leader) => {
                let mut response = leader
                    .lease_keep_alive(pb::LeaseKeepAliveRequest { id })
                    .await
                    .map_err(RequestError::Forwarded)?
                    .into_inner();
                response.header = self.current_header();
                Ok(response)
            }
        }
    }

    /// A time-to-live, answered here if this member leads, else by the
    /// leader.
    pub async fn lease_time_to_live(
        &self,
        request: pb::LeaseTimeToLiveRequest,
    ) -> Result<pb::LeaseTimeToLiveResponse, RequestError> {
        match self.route()? {
            Route::Here => self.time_to_live_as_leader(request).await,
            Route::Leader(mut leader) => {
                let mut response = leader
                    .lease_time_to_live(request)
                    .await
                    .map_err(RequestError::Forwarded)?
                    .into_inner();
                response.header = self.current_header();
                Ok(response)
            }
        }
    }

    /// The leader's keep-alive: the lease's TTL from now, or 0 if it does
    /// not exist or has expired (etcd's answer for both). A member that is
    /// not the leader answers "leader changed" and the caller retries.
    pub async fn keep_alive_as_leader(&self, id: i64) -> Result<pb::LeaseKeepAliveResponse, RequestError> {
        self.wait_applied(WAIT_APPLIED_TIMEOUT).await?;
        if !self.lessor_sync() {
            return Err(RequestError::LeaderChanged);
        }
        let lease = self.store.lease(id);
        if let Some(lease) = &lease {
            if self.lessor.must_clear_checkpoint(id, lease.remaining_ttl) {
                // Renewed, the lease has its whole TTL again: its
                // checkpoint is cleared first, through raft, so that a new
                // leader does not start it from the old one (etcd's
                // Renew). Only a lease that may be checkpointed somewhere
                // pays this entry.
                let clear = mvcc::LeaseCheckpoint { id, remaining_ttl: 0 };
                self.propose_lease_checkpoints(vec![clear]).await?;
            }
        }
        let ttl = match lease {
            Some(lease) if self.lessor.renew(id, lease.ttl) => lease.ttl,
            _ => 0,
        };
        Ok(pb::LeaseKeepAliveResponse {
            header: self.current_header(),
            id,
            ttl,
        })
    }

    /// The leader's time-to-live: seconds left (whole, rounded down), the
    /// granted TTL, and the keys if asked; TTL -1 if the lease does not
    /// exist.
    pub async fn time_to_live_as_leader(
        &self,
        request: pb::LeaseTimeToLiveRequest,
    ) -> Result<pb::LeaseTimeToLiveResponse, RequestError> {
        self.wait_applied(WAIT_APPLIED_TIMEOUT).await?;
        if !self.lessor_sync() {
            return Err(RequestError::LeaderChanged);
        }
        let Some(lease) = self.store.lease(request.id) else {
            return Ok(pb::LeaseTimeToLiveResponse {
                header: self.current_header(),
                id: request.id,
                ttl: -1,
                ..Default::default()
            });
        };
        let left = self
            .lessor
            .remaining(request.id)
            .map_or(lease.ttl, |left| left.as_secs() as i64);
        Ok(pb::LeaseTimeToLiveResponse {
            header: self.current_header(),
            id: request.id,
            ttl: left,
            granted_ttl: lease.ttl,
            keys: if request.keys {
                lease.keys.into_iter().map(Vec::from).collect()
            } else {
                Vec::new()
            },
        })
    }

    /// Proposes lease checkpoints, in one entry.
    async fn propose_lease_checkpoints(&self, checkpoints: Vec<mvcc::LeaseCheckpoint>) -> Result<(), RequestError> {
        let request = pb::LeaseCheckpointRequest {
            checkpoints: checkpoints
                .into_iter()
                .map(|checkpoint| pb::LeaseCheckpoint {
                    id: checkpoint.id,
                    remaining_ttl: checkpoint.remaining_ttl,
                })
                .collect(),
        };
        match self.propose(raft_request::Request::LeaseCheckpoint(request)).await? {
            mvcc::WriteResponse::LeaseCheckpoint { .. } => Ok(()),
            other => unreachable!("a lease checkpoint answered {other:?}"),
        }
    }

    /// Every [`LEASE_EXPIRY_CHECK`], on the leader: proposes revoking each
    /// expired lease (at most [`LEASE_REVOKES_PER_CHECK`] per check), and
    /// the lease checkpoints due (at most [`LEASE_CHECKPOINT_BATCH`] per
    /// check, one entry). Runs until the process ends.
    pub async fn revoke_expired_leases(self: Arc<Self>) {
        loop {
            tokio::time::sleep(LEASE_EXPIRY_CHECK).await;
            if !self.lessor_sync() {
                continue;
            }
            let due = self.lessor.take_due_checkpoints(LEASE_CHECKPOINT_BATCH);
            if !due.is_empty() {
                let member = self.clone();
                tokio::spawn(async move {
                    let count = due.len();
                    if let Err(error) = member.propose_lease_checkpoints(due).await {
                        tracing::warn!(count, %error, "failed to checkpoint leases");
                    }
                });
            }
            for id in self.lessor.take_expired(LEASE_REVOKES_PER_CHECK) {
                let member = self.clone();
                tokio::spawn(async move {
                    match member.lease_revoke(id).await {
                        Ok(_) => tracing::debug!(id, "revoked an expired lease"),
                        Err(error) => tracing::debug!(id, %error, "revoking an expired lease failed; will retry"),
                    }
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: the minimum TTL is etcd's: 1.5 election timeouts rounded up
    // to whole seconds (2 s with the default 100 ms / 1000 ms).
    #[test]
    fn min_ttl_follows_the_election_timeout() {
        use clap::Parser as _;
        let mut config = Config::parse_from(["kv-server"]);
        assert_eq!(min_ttl(&config), 2);
        config.election_timeout_ms = 5000;
        assert_eq!(min_ttl(&config), 8);
    }
}
