//! How this member dials a peer, and the channels it keeps for calls it
//! forwards to the leader (lease keep-alives and time-to-live).
//!
//! Every connection to a peer, whatever it carries (the raft stream,
//! snapshots, forwarded calls), is made by [`endpoint`], so they share
//! one set of socket settings.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite};
use tonic::transport::{Channel, Endpoint, Uri};

use crate::error::RequestError;
use crate::membership::SharedMembership;
use crate::proto::kvserverpb::peer_client::PeerClient;
use crate::tls::PeerDial;

/// How long connecting to a peer may take before the attempt fails: a
/// peer on a healthy network answers in milliseconds; a second leaves
/// room for a loaded machine, and is short beside raft's election timeout.
pub const PEER_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// How this member proves itself to peers and checks them on `https://`
/// peer URLs: set once at start from the peer TLS flags, before any peer
/// is dialled. A process-wide value because every dial site (the raft
/// stream, snapshots, forwarded calls, joining) must use the same one.
static PEER_TLS: OnceLock<PeerDial> = OnceLock::new();

/// Sets the TLS every `https://` peer connection uses (`tls::PeerDial`).
pub fn use_peer_tls(dial: PeerDial) {
    let _ = PEER_TLS.set(dial);
}

/// The raft stream's TLS, once [`use_peer_tls`] set it.
pub fn raft_tls() -> Option<Arc<rustls::ClientConfig>> {
    PEER_TLS.get().map(|dial| dial.raft.clone())
}

/// A peer URL's endpoint, and the connector that dials it.
pub struct PeerEndpoint {
    endpoint: Endpoint,
    connector: PeerConnector,
}

/// Dials one peer: TCP with no Nagle delay (raft's messages are small and
/// latency-bound), then for `https://` the peer TLS, done here rather
/// than by tonic so that every peer connection verifies peers alike
/// (`tls::verify`).
#[derive(Clone)]
struct PeerConnector {
    host: String,
    port: u16,
    tls: bool,
}

/// A connection to a peer, plain or TLS.
trait PeerIo: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> PeerIo for T {}

impl PeerConnector {
    async fn dial(self) -> io::Result<TokioIo<Box<dyn PeerIo>>> {
        let socket = tokio::net::TcpStream::connect((self.host.as_str(), self.port)).await?;
        socket.set_nodelay(true)?;
        if !self.tls {
            return Ok(TokioIo::new(Box::new(socket)));
        }
        let config = PEER_TLS
            .get()
            .map(|dial| dial.grpc.clone())
            .ok_or_else(|| io::Error::other("https:// peer URL without peer TLS"))?;
        let name = rustls::pki_types::ServerName::try_from(self.host.clone()).map_err(io::Error::other)?;
        let stream = tokio_rustls::TlsConnector::from(config).connect(name, socket).await?;
        Ok(TokioIo::new(Box::new(stream)))
    }
}

/// The endpoint of a peer URL, with the settings every peer connection
/// uses: [`PEER_CONNECT_TIMEOUT`], and for `https://` the peer TLS.
pub fn endpoint(url: &str) -> Result<PeerEndpoint, String> {
    let (tls, host, port) = parse_url(url).map_err(|e| e.to_string())?;
    // tonic does no TLS of its own on an http:// endpoint: the connector does it.
    let authority = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let endpoint = Endpoint::from_shared(format!("http://{authority}"))
        .map_err(|e| e.to_string())?
        .connect_timeout(PEER_CONNECT_TIMEOUT);
    Ok(PeerEndpoint {
        endpoint,
        connector: PeerConnector { host, port, tls },
    })
}

impl PeerEndpoint {
    /// Each call on the channel bounded by `timeout`.
    pub fn timeout(mut self, timeout: Duration) -> PeerEndpoint {
        self.endpoint = self.endpoint.timeout(timeout);
        self
    }

    /// A channel that connects on first use, and again after a break.
    pub fn connect_lazy(self) -> Channel {
        let connector = self.connector;
        self.endpoint
            .connect_with_connector_lazy(tower::service_fn(move |_: Uri| connector.clone().dial()))
    }

    /// A channel connected now.
    pub async fn connect(self) -> Result<Channel, tonic::transport::Error> {
        let connector = self.connector;
        self.endpoint
            .connect_with_connector(tower::service_fn(move |_: Uri| connector.clone().dial()))
            .await
    }
}

/// `host` and `port` of a peer URL (`http://host:port`, `https://…`,
/// IPv6 hosts in brackets), and whether it is `https://`.
pub fn parse_url(url: &str) -> io::Result<(bool, String, u16)> {
    let invalid = || io::Error::new(io::ErrorKind::InvalidInput, format!("bad peer URL {url:?}"));
    let (https, rest) = match url.split_once("://") {
        Some(("https", rest)) => (true, rest),
        Some(("http", rest)) => (false, rest),
        _ => return Err(invalid()),
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let (host, port) = authority.rsplit_once(':').ok_or_else(invalid)?;
    let port = port.parse().map_err(|_| invalid())?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Ok((https, host.to_string(), port))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_urls_parse() {
        assert_eq!(
            parse_url("http://127.0.0.1:2380").unwrap(),
            (false, "127.0.0.1".to_string(), 2380)
        );
        assert_eq!(
            parse_url("https://[::1]:12380/").unwrap(),
            (true, "::1".to_string(), 12380)
        );
        assert!(parse_url("unix://x").is_err());
        assert!(parse_url("http://host").is_err());
    }
}
