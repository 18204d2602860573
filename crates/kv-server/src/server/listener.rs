//! The client port's listener, with a bound on open connections and,
//! for `https://` URLs, TLS. Each accepted connection holds a permit until
//! it closes; at the bound, new connections wait in the kernel's accept
//! backlog instead of taking more memory. TLS handshakes run each in its
//! own task, so a slow client never holds up the accept loop, and each
//! ends within [`TLS_HANDSHAKE_TIMEOUT`].

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::metrics::metrics;
use crate::peer::frames::{RAFT_ALPN, RAFT_MAGIC};
use crate::peer::receive::RaftInbound;
use crate::tls::ClientIdentity;

/// Open connections per peer listener: each peer keeps a raft stream, a
/// channel for forwarded calls and, now and then, a snapshot stream, so a
/// cluster of seven needs about 20; 256 leaves room for reconnects still
/// closing and for a joining member's calls.
pub const PEER_CONNECTIONS_MAX: usize = 256;

/// Open client connections per listener. etcd's benchmark drives 1000
/// clients over 100 connections and a Kubernetes API server keeps a few
/// per member; each HTTP/2 connection can buffer up to a few hundred KiB,
/// so 2048 connections bound that memory to the order of 500 MiB at worst
/// while leaving 20× headroom over the heaviest documented load.
pub const CLIENT_CONNECTIONS_MAX: usize = 2048;

/// How long a client may take over its TLS handshake: a handshake is two
/// round trips and some signing, milliseconds on any network; ten seconds
/// (Go's `http.Client` default) only cuts off clients that stall.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Established connections waiting for the server to take them. The
/// server takes them as fast as they come; the bound only keeps a burst
/// of finished handshakes from piling up (permits bound them anyway).
const ESTABLISHED_QUEUE: usize = 64;

/// Pause after a failed accept (out of file descriptors, say) before
/// trying again, so a persistent failure does not spin.
const ACCEPT_RETRY_PAUSE: Duration = Duration::from_millis(10);

pub struct BoundedListener {
    established: mpsc::Receiver<(Connection, SocketAddr)>,
    local: SocketAddr,
}

impl BoundedListener {
    /// Accepts on `listener`, at most `connections_max` open at once,
    /// with TLS when `tls` is given.
    pub fn new(
        listener: TcpListener,
        connections_max: usize,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> io::Result<BoundedListener> {
        BoundedListener::with_raft(listener, connections_max, tls, None)
    }

    /// The same for the peer port: with `raft` given, connections that
    /// open a raft stream (`peer::frames`) go to it instead of the
    /// gRPC server.
    pub fn with_raft(
        listener: TcpListener,
        connections_max: usize,
        tls: Option<Arc<rustls::ServerConfig>>,
        raft: Option<Arc<RaftInbound>>,
    ) -> io::Result<BoundedListener> {
        let local = listener.local_addr()?;
        let (sender, established) = mpsc::channel(ESTABLISHED_QUEUE);
        let permits = Arc::new(Semaphore::new(connections_max));
        let tls = tls.map(TlsAcceptor::from);
        tokio::spawn(accept_loop(listener, permits, tls, raft, sender));
        Ok(BoundedListener { established, local })
    }
}

/// Whether a plain connection opens with the raft stream's magic: it
/// peeks (consuming nothing) until the first bytes tell, at most
/// [`TLS_HANDSHAKE_TIMEOUT`]; None if the connection ended or stalled.
async fn opens_raft_stream(stream: &TcpStream) -> Option<bool> {
    let deadline = tokio::time::Instant::now() + TLS_HANDSHAKE_TIMEOUT;
    let mut first = [0u8; RAFT_MAGIC.len()];
    loop {
        let peeked = tokio::time::timeout_at(deadline, stream.peek(&mut first))
            .await
            .ok()?
            .ok()?;
        if peeked == 0 {
            return None;
        }
        if first[..peeked] != RAFT_MAGIC[..peeked] {
            return Some(false);
        }
        if peeked == RAFT_MAGIC.len() {
            return Some(true);
        }
        // Part of the magic is in: wait for the rest.
        tokio::time::sleep(PEEK_PAUSE).await;
    }
}

/// Pause between peeks at a connection that sent part of the magic.
const PEEK_PAUSE: Duration = Duration::from_millis(1);

/// Takes a plain connection on the peer port: a raft stream goes to
/// `raft`, anything else to the gRPC server.
async fn route_plain(
    stream: TcpStream,
    address: SocketAddr,
    permit: OwnedSemaphorePermit,
    raft: Arc<RaftInbound>,
    sender: mpsc::Sender<(Connection, SocketAddr)>,
) {
    match opens_raft_stream(&stream).await {
        Some(true) => raft.serve(stream, permit),
        Some(false) => {
            let connection = Connection {
                stream: Stream::Plain(stream),
                client: true,
                identity: ClientIdentity::default(),
                _permit: permit,
            };
            let _ = sender.send((connection, address)).await;
        }
        None => tracing::debug!(%address, "peer connection closed before it said what it carries"),
    }
}

async fn accept_loop(
    listener: TcpListener,
    permits: Arc<Semaphore>,
    tls: Option<TlsAcceptor>,
    raft: Option<Arc<RaftInbound>>,
    sender: mpsc::Sender<(Connection, SocketAddr)>,
) {
    loop {
        let permit = permits
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let (stream, address) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "accepting a client connection failed");
                tokio::time::sleep(ACCEPT_RETRY_PAUSE).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        if let (None, Some(raft)) = (&tls, &raft) {
            tokio::spawn(route_plain(stream, address, permit, raft.clone(), sender.clone()));
            continue;
        }
        let Some(acceptor) = tls.clone() else {
            let connection = Connection {
                stream: Stream::Plain(stream),
                client: true,
                identity: ClientIdentity::default(),
                _permit: permit,
            };
            if sender.send((connection, address)).await.is_err() {
                return;
            }
            continue;
        };
        let (sender, raft) = (sender.clone(), raft.clone());
        tokio::spawn(async move {
            let handshake = tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await;
            let stream = match handshake {
                Ok(Ok(stream)) => stream,
                Ok(Err(error)) => return tracing::debug!(%error, %address, "TLS handshake refused"),
                Err(_) => return tracing::debug!(%address, "TLS handshake timed out"),
            };
            if let Some(raft) = raft.filter(|_| stream.get_ref().1.alpn_protocol() == Some(RAFT_ALPN)) {
                return raft.serve(stream, permit);
            }
            let identity = ClientIdentity::of(stream.get_ref().1);
            let connection = Connection {
                stream: Stream::Tls(Box::new(stream)),
                client: true,
                identity,
                _permit: permit,
            };
            let _ = sender.send((connection, address)).await;
        });
    }
}

/// A client connection, who it proved to be, and the permit it holds
/// while open.
pub struct Connection {
    stream: Stream,
    /// Whether its bytes count as client gRPC bytes (not on the peer port).
    client: bool,
    identity: ClientIdentity,
    _permit: OwnedSemaphorePermit,
}

enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl axum::serve::Listener for BoundedListener {
    type Io = Connection;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Connection, SocketAddr) {
        match self.established.recv().await {
            Some(accepted) => accepted,
            // The accept loop only ends when this receiver is gone.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }
}

impl BoundedListener {
    /// The connections as tonic's server takes them (the peer port).
    pub fn into_incoming(self) -> impl tokio_stream::Stream<Item = io::Result<Connection>> {
        use tokio_stream::StreamExt as _;
        tokio_stream::wrappers::ReceiverStream::new(self.established).map(|(mut connection, _)| {
            connection.client = false;
            Ok(connection)
        })
    }
}

impl Connection {
    /// Who the connection proved to be.
    pub fn identity(&self) -> &ClientIdentity {
        &self.identity
    }
}

impl tonic::transport::server::Connected for Connection {
    type ConnectInfo = ClientIdentity;

    fn connect_info(&self) -> ClientIdentity {
        self.identity.clone()
    }
}

/// Each request's `ConnectInfo<ClientIdentity>`: who its connection is.
impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, BoundedListener>> for ClientIdentity {
    fn connect_info(stream: axum::serve::IncomingStream<'_, BoundedListener>) -> ClientIdentity {
        stream.io().identity.clone()
    }
}

/// Calls `$method` on whichever stream the connection holds.
macro_rules! on_stream {
    ($self:ident, $method:ident($($arg:expr),*)) => {
        match &mut $self.stream {
            Stream::Plain(stream) => Pin::new(stream).$method($($arg),*),
            Stream::Tls(stream) => Pin::new(stream.as_mut()).$method($($arg),*),
        }
    };
}

/// Counts what a write sent in `etcd_network_client_grpc_sent_bytes_total`.
fn count_sent(client: bool, polled: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
    if let (true, Poll::Ready(Ok(sent))) = (client, &polled) {
        metrics().network.client_sent_bytes.inc_by(*sent as u64);
    }
    polled
}

impl AsyncRead for Connection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffer: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buffer.filled().len();
        let polled = on_stream!(self, poll_read(context, buffer));
        let read = buffer.filled().len() - before;
        if read > 0 && self.client {
            metrics().network.client_received_bytes.inc_by(read as u64);
        }
        polled
    }
}

impl AsyncWrite for Connection {
    fn poll_write(mut self: Pin<&mut Self>, context: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        let client = self.client;
        count_sent(client, on_stream!(self, poll_write(context, bytes)))
    }

    fn poll_flush(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        on_stream!(self, poll_flush(context))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        on_stream!(self, poll_shutdown(context))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffers: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let client = self.client;
        count_sent(client, on_stream!(self, poll_write_vectored(context, buffers)))
    }

    fn is_write_vectored(&self) -> bool {
        match &self.stream {
            Stream::Plain(stream) => stream.is_write_vectored(),
            Stream::Tls(stream) => stream.is_write_vectored(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::serve::Listener as _;

    // Goal: at the bound, a further connection is not accepted until one
    // closes. Method: a bound of 1 on a real loopback listener.
    #[tokio::test]
    async fn connections_beyond_the_bound_wait() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let mut bounded = BoundedListener::new(listener, 1, None).unwrap();
        let _first_client = TcpStream::connect(address).await.unwrap();
        let (first, _) = bounded.accept().await;
        let _second_client = TcpStream::connect(address).await.unwrap();
        let waiting = tokio::time::timeout(Duration::from_millis(200), bounded.accept()).await;
        assert!(waiting.is_err(), "a second connection was accepted past the bound");
        drop(first);
        let accepted = tokio::time::timeout(Duration::from_secs(2), bounded.accept()).await;
        assert!(
            accepted.is_ok(),
            "the second connection was not accepted after the first closed"
        );
    }
}
