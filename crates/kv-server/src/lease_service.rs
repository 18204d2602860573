//! etcd's `Lease` service: LeaseGrant, LeaseRevoke, LeaseKeepAlive (a
//! stream), LeaseTimeToLive and LeaseLeases; and the leader's side of the
//! keep-alive and time-to-live calls followers forward over the peer
//! service.
//!
//! Grants and revocations go through raft (see `mvcc::lease` for what the
//! store keeps). Keep-alives and time-to-live need the leader's deadlines
//! (`lessor.rs`), so any other member forwards them to the leader, as
//! etcd's do. The leader revokes expired leases every
//! [`LEASE_EXPIRY_CHECK`] by proposing their revocation.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::{Request, Response, Status, Streaming};

use crate::errors;
use crate::kv_service::{KvService, REQUEST_TIMEOUT};
use crate::membership::Membership;
use crate::proto::etcdserverpb as pb;
use crate::proto::etcdserverpb::lease_server::Lease;
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

/// Keep-alive answers queued per client stream. A client sends one
/// keep-alive per lease every third of its TTL; 16 answers is slack enough
/// for a burst, and a client that stops reading holds back its own stream
/// only.
pub const KEEP_ALIVE_QUEUE: usize = 16;

/// How long a keep-alive or time-to-live waits for this member to apply
/// what was committed when it arrived (so a lease granted just before is
/// known): etcd's one-second apply timeout for the same wait.
pub const WAIT_APPLIED_TIMEOUT: Duration = Duration::from_secs(1);

/// Lease ids as etcd makes them: the member id's low 16 bits, then the
/// start time in milliseconds (40 bits) and a counter (8 bits) that
/// together count up, with the sign bit cleared. Ids from different
/// members differ in their top bits; one member's never repeat unless its
/// clock goes back across a restart, when a grant may find the id taken and
/// answer "lease already exists".
pub struct LeaseIds {
    prefix: u64,
    suffix: AtomicU64,
}

impl LeaseIds {
    pub fn new(member_id: u64) -> LeaseIds {
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        LeaseIds {
            prefix: (member_id & 0xffff) << 48,
            suffix: AtomicU64::new((millis & ((1 << 40) - 1)) << 8),
        }
    }

    pub fn next(&self) -> i64 {
        loop {
            let suffix = self.suffix.fetch_add(1, Ordering::Relaxed) + 1;
            let id = (self.prefix | (suffix & ((1 << 48) - 1))) & (i64::MAX as u64);
            if id != 0 {
                return id as i64;
            }
        }
    }
}

/// The shortest TTL granted, in seconds: etcd's one and a half election
/// timeouts, rounded up, so a lease cannot expire during a leader change.
pub fn min_ttl(config: &crate::config::Config) -> i64 {
    let millis = (3 * config.election_ticks() as u64 / 2) * config.heartbeat_interval.max(1);
    millis.div_ceil(1000) as i64
}

/// gRPC channels to peers' peer URLs, made on first use.
pub struct PeerChannels {
    urls: HashMap<u64, String>,
    channels: Mutex<HashMap<u64, Channel>>,
}

impl PeerChannels {
    pub fn new(membership: &Membership) -> PeerChannels {
        PeerChannels {
            urls: membership.peers().map(|m| (m.id, m.peer_urls[0].clone())).collect(),
            channels: Mutex::new(HashMap::new()),
        }
    }

    fn client(&self, id: u64) -> Result<PeerClient<Channel>, Status> {
        let mut channels = self.channels.lock();
        if let Some(channel) = channels.get(&id) {
            return Ok(PeerClient::new(channel.clone()));
        }
        let url = self.urls.get(&id).ok_or_else(errors::no_leader)?;
        let channel = tonic::transport::Endpoint::from_shared(url.clone())
            .map_err(|e| Status::internal(format!("bad peer URL {url}: {e}")))?
            .tcp_nodelay(true)
            .connect_timeout(Duration::from_secs(1))
            .timeout(REQUEST_TIMEOUT)
            .connect_lazy();
        channels.insert(id, channel.clone());
        Ok(PeerClient::new(channel))
    }
}

#[derive(Clone)]
pub struct LeaseService {
    pub kv: KvService,
    pub peers: Arc<PeerChannels>,
    pub ids: Arc<LeaseIds>,
}

/// Where a keep-alive or time-to-live is answered.
enum Route {
    Here,
    Leader(PeerClient<Channel>),
}

impl LeaseService {
    fn header(&self) -> Option<pb::ResponseHeader> {
        self.kv.header(self.kv.state.store.current_revision())
    }

    fn route(&self) -> Result<Route, Status> {
        let state = &self.kv.state;
        if state.lessor.sync(state) {
            return Ok(Route::Here);
        }
        match state.leader() {
            0 => Err(errors::no_leader()),
            leader => Ok(Route::Leader(self.peers.client(leader)?)),
        }
    }

    /// Waits until this member has applied what was committed on entry.
    async fn wait_applied(&self) -> Result<(), Status> {
        let state = &self.kv.state;
        let committed = state.committed_index.load(Ordering::Acquire);
        let deadline = tokio::time::Instant::now() + WAIT_APPLIED_TIMEOUT;
        loop {
            // Registered before the check, so an apply between the check
            // and the wait still wakes it.
            let applied = state.applied.notified();
            tokio::pin!(applied);
            applied.as_mut().enable();
            if state.applied_index.load(Ordering::Acquire) >= committed {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, applied).await.is_err() {
                return Err(errors::timed_out());
            }
        }
    }

    /// The leader's keep-alive: the lease's TTL from now, or 0 if it does
    /// not exist or has expired (etcd's answer for both). A member that is
    /// not the leader answers "leader changed" and the caller retries.
    pub async fn keep_alive_as_leader(&self, id: i64) -> Result<pb::LeaseKeepAliveResponse, Status> {
        self.wait_applied().await?;
        let state = &self.kv.state;
        if !state.lessor.sync(state) {
            return Err(errors::leader_changed());
        }
        let ttl = match state.store.lease(id) {
            Some(lease) if state.lessor.renew(id, lease.ttl) => lease.ttl,
            _ => 0,
        };
        Ok(pb::LeaseKeepAliveResponse {
            header: self.header(),
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
    ) -> Result<pb::LeaseTimeToLiveResponse, Status> {
        self.wait_applied().await?;
        let state = &self.kv.state;
        if !state.lessor.sync(state) {
            return Err(errors::leader_changed());
        }
        let Some(lease) = state.store.lease(request.id) else {
            return Ok(pb::LeaseTimeToLiveResponse {
                header: self.header(),
                id: request.id,
                ttl: -1,
                ..Default::default()
            });
        };
        let left = state
            .lessor
            .remaining(request.id)
            .map_or(lease.ttl, |left| left.as_secs() as i64);
        Ok(pb::LeaseTimeToLiveResponse {
            header: self.header(),
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

    async fn keep_alive(&self, id: i64) -> Result<pb::LeaseKeepAliveResponse, Status> {
        match self.route()? {
            Route::Here => self.keep_alive_as_leader(id).await,
            Route::Leader(mut leader) => {
                let mut response = leader
                    .lease_keep_alive(pb::LeaseKeepAliveRequest { id })
                    .await?
                    .into_inner();
                response.header = self.header();
                Ok(response)
            }
        }
    }

    /// Every `LEASE_EXPIRY_CHECK`, on the leader: proposes revoking each
    /// expired lease (at most `LEASE_REVOKES_PER_CHECK` per check). Runs
    /// until the process ends.
    pub async fn revoke_expired(self) {
        loop {
            tokio::time::sleep(LEASE_EXPIRY_CHECK).await;
            let state = &self.kv.state;
            if !state.lessor.sync(state) {
                continue;
            }
            for id in state.lessor.take_expired(LEASE_REVOKES_PER_CHECK) {
                let kv = self.kv.clone();
                tokio::spawn(async move {
                    let revoke = raft_request::Request::LeaseRevoke(pb::LeaseRevokeRequest { id });
                    match kv.propose(revoke).await {
                        Ok(_) => tracing::debug!(id, "revoked an expired lease"),
                        Err(status) => tracing::debug!(id, %status, "revoking an expired lease failed; will retry"),
                    }
                });
            }
        }
    }
}

#[tonic::async_trait]
impl Lease for LeaseService {
    async fn lease_grant(
        &self,
        request: Request<pb::LeaseGrantRequest>,
    ) -> Result<Response<pb::LeaseGrantResponse>, Status> {
        let request = request.into_inner();
        self.kv.check_quota(LEASE_GRANT_BYTES)?;
        let grant = pb::LeaseGrantRequest {
            ttl: request.ttl.max(min_ttl(&self.kv.state.config)),
            id: if request.id == 0 { self.ids.next() } else { request.id },
        };
        match self.kv.propose(raft_request::Request::LeaseGrant(grant)).await? {
            mvcc::WriteResponse::LeaseGrant(granted) => Ok(Response::new(pb::LeaseGrantResponse {
                header: self.kv.header(granted.revision),
                id: granted.id,
                ttl: granted.ttl,
                error: String::new(),
            })),
            other => unreachable!("a lease grant answered {other:?}"),
        }
    }

    async fn lease_revoke(
        &self,
        request: Request<pb::LeaseRevokeRequest>,
    ) -> Result<Response<pb::LeaseRevokeResponse>, Status> {
        let revoke = raft_request::Request::LeaseRevoke(request.into_inner());
        match self.kv.propose(revoke).await? {
            mvcc::WriteResponse::LeaseRevoke(revoked) => Ok(Response::new(pb::LeaseRevokeResponse {
                header: self.kv.header(revoked.revision),
            })),
            other => unreachable!("a lease revoke answered {other:?}"),
        }
    }

    type LeaseKeepAliveStream = ReceiverStream<Result<pb::LeaseKeepAliveResponse, Status>>;

    async fn lease_keep_alive(
        &self,
        request: Request<Streaming<pb::LeaseKeepAliveRequest>>,
    ) -> Result<Response<Self::LeaseKeepAliveStream>, Status> {
        let mut requests = request.into_inner();
        let (answers, stream) = mpsc::channel(KEEP_ALIVE_QUEUE);
        let service = self.clone();
        tokio::spawn(async move {
            loop {
                let request = match requests.message().await {
                    Ok(Some(request)) => request,
                    Ok(None) => return,
                    Err(status) => {
                        tracing::debug!(%status, "keep-alive stream broke");
                        return;
                    }
                };
                let answer = service.keep_alive(request.id).await;
                let failed = answer.is_err();
                if answers.send(answer).await.is_err() || failed {
                    return;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(stream)))
    }

    async fn lease_time_to_live(
        &self,
        request: Request<pb::LeaseTimeToLiveRequest>,
    ) -> Result<Response<pb::LeaseTimeToLiveResponse>, Status> {
        let request = request.into_inner();
        let response = match self.route()? {
            Route::Here => self.time_to_live_as_leader(request).await?,
            Route::Leader(mut leader) => {
                let mut response = leader.lease_time_to_live(request).await?.into_inner();
                response.header = self.header();
                response
            }
        };
        Ok(Response::new(response))
    }

    async fn lease_leases(
        &self,
        _request: Request<pb::LeaseLeasesRequest>,
    ) -> Result<Response<pb::LeaseLeasesResponse>, Status> {
        let leases = self
            .kv
            .state
            .store
            .leases()
            .into_iter()
            .map(|(id, _)| pb::LeaseStatus { id })
            .collect();
        Ok(Response::new(pb::LeaseLeasesResponse {
            header: self.header(),
            leases,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: ids carry the member's low 16 bits on top, count up, and are
    // positive, as etcd's are.
    #[test]
    fn lease_ids_are_etcd_shaped() {
        let ids = LeaseIds::new(0x8e9e_05c5_2164_694d);
        let first = ids.next();
        let second = ids.next();
        assert!(first > 0 && second == first + 1);
        assert_eq!((first as u64) >> 48, 0x694d & 0x7fff);
    }

    // Goal: the minimum TTL is etcd's: 1.5 election timeouts rounded up
    // to whole seconds (2 s with the default 100 ms / 1000 ms).
    #[test]
    fn min_ttl_follows_the_election_timeout() {
        use clap::Parser as _;
        let mut config = crate::config::Config::parse_from(["kv-server"]);
        assert_eq!(min_ttl(&config), 2);
        config.election_timeout = 5000;
        assert_eq!(min_ttl(&config), 8);
    }
}
