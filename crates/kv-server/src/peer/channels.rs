//! How this member dials a peer, and the channels it keeps for calls it
//! forwards to the leader (lease keep-alives and time-to-live).
//!
//! Every connection to a peer, whatever it carries (the raft stream,
//! snapshots, forwarded calls), is made by [`endpoint`], so they share
//! one set of socket settings.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::error::RequestError;
use crate::membership::SharedMembership;
use crate::proto::kvserverpb::peer_client::PeerClient;
use crate::tls::PeerClientFiles;

/// How long connecting to a peer may take before the attempt fails: a
/// peer on a healthy network answers in milliseconds; a second leaves
/// room for a loaded machine, and is short beside raft's election timeout.
pub const PEER_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// How this member proves itself to peers and checks them on `https://`
/// peer URLs: set once at start from the peer TLS flags, before any peer
/// is dialled. A process-wide value because every dial site (the raft
/// stream, snapshots, forwarded calls, joining) must use the same one.
static PEER_TLS: OnceLock<ClientTlsConfig> = OnceLock::new();

/// The same for the raft stream, which dials with rustls directly
/// (`peer::transport`).
static PEER_RAFT_TLS: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();

/// Sets the TLS every `https://` peer connection uses: `files`' CA as the
/// only trusted root, and its certificate as this member's identity.
pub fn use_peer_tls(files: PeerClientFiles) -> Result<(), crate::error::Error> {
    let _ = PEER_RAFT_TLS.set(files.raft_client_config()?);
    let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(files.trusted_ca));
    if let Some((cert, key)) = files.identity {
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    let _ = PEER_TLS.set(tls);
    Ok(())
}

/// The raft stream's TLS, once [`use_peer_tls`] set it.
pub fn raft_tls() -> Option<Arc<rustls::ClientConfig>> {
    PEER_RAFT_TLS.get().cloned()
}

/// The endpoint of a peer URL, with the settings every peer connection
/// uses: no Nagle delay (raft's messages are small and latency-bound),
/// [`PEER_CONNECT_TIMEOUT`], and for `https://` the peer TLS.
pub fn endpoint(url: &str) -> Result<Endpoint, tonic::transport::Error> {
    let endpoint = Endpoint::from_shared(url.to_string())?
        .tcp_nodelay(true)
        .connect_timeout(PEER_CONNECT_TIMEOUT);
    if !url.starts_with("https://") {
        return Ok(endpoint);
    }
    endpoint.tls_config(PEER_TLS.get().cloned().unwrap_or_default())
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
