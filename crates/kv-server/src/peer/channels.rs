//! How this member dials a peer, and the channels it keeps for calls it
//! forwards to the leader (lease keep-alives and time-to-live).
//!
//! Every connection to a peer, whatever it carries (the raft stream,
//! snapshots, forwarded calls), is made by [`endpoint`], so they share
//! one set of socket settings.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tonic::transport::{Channel, Endpoint};

use crate::error::RequestError;
use crate::membership::SharedMembership;
use crate::proto::kvserverpb::peer_client::PeerClient;

/// How long connecting to a peer may take before the attempt fails: a
/// peer on a healthy network answers in milliseconds; a second leaves
/// room for a loaded machine, and is short beside raft's election timeout.
pub const PEER_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// The endpoint of a peer URL, with the settings every peer connection
/// uses: no Nagle delay (raft's messages are small and latency-bound) and
/// [`PEER_CONNECT_TIMEOUT`].
pub fn endpoint(url: &str) -> Result<Endpoint, tonic::transport::Error> {
    Ok(Endpoint::from_shared(url.to_string())?
        .tcp_nodelay(true)
        .connect_timeout(PEER_CONNECT_TIMEOUT))
}

/// Channels to peers' peer URLs, made on first use; each reconnects by
/// itself when its connection breaks.
pub struct PeerChannels {
    membership: Arc<SharedMembership>,
    call_timeout: Duration,
    /// By peer URL, so a member whose URLs changed gets a new channel.
    channels: Mutex<HashMap<String, Channel>>,
}

impl PeerChannels {
    /// Channels to the members of `membership` as it stands at each call,
    /// each call on them bounded by `call_timeout`.
    pub fn new(membership: Arc<SharedMembership>, call_timeout: Duration) -> PeerChannels {
        PeerChannels {
            membership,
            call_timeout,
            channels: Mutex::new(HashMap::new()),
        }
    }

    /// A client for member `id`'s peer service.
    pub fn client(&self, id: u64) -> Result<PeerClient<Channel>, RequestError> {
        let url = {
            let membership = self.membership.get();
            let member = membership.get(id).ok_or(RequestError::NoLeader)?;
            member.peer_urls.first().cloned().ok_or(RequestError::NoLeader)?
        };
        let mut channels = self.channels.lock();
        if let Some(channel) = channels.get(&url) {
            return Ok(PeerClient::new(channel.clone()));
        }
        let channel = endpoint(&url)
            .map_err(|e| RequestError::Forwarded(tonic::Status::internal(format!("bad peer URL {url}: {e}"))))?
            .timeout(self.call_timeout)
            .connect_lazy();
        channels.insert(url, channel.clone());
        Ok(PeerClient::new(channel))
    }
}
