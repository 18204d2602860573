//! The client and peer ports' listeners, with a bound on open
//! connections and, for `https://` and `unixs://` URLs, TLS. Each
//! accepted connection holds a permit until it closes; at the bound, new
//! connections wait in the kernel's accept backlog instead of taking more
//! memory. TLS handshakes run each in its own task, so a slow client never
//! holds up the accept loop, and each ends within
//! [`TLS_HANDSHAKE_TIMEOUT`] (on the peer port, within etcd's
//! `--raft-read-timeout`, which also bounds how long a plain peer
//! connection may take to say what it carries); a finished handshake then passes the
//! listener's admission checks (revocation, the peer SAN check:
//! `tls::admission`).
//!
//! A client URL may be a Unix socket (`unix://`, `unixs://`): as etcd
//! does, a file left at its path is replaced when binding, and the socket
//! file is removed when the listener closes.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::metrics::metrics;
use crate::peer::frames::{RAFT_ALPN, RAFT_MAGIC};
use crate::peer::receive::RaftInbound;
use crate::tls::admission::Admission;
use crate::tls::ClientIdentity;

/// Open connections per peer listener: each peer keeps a raft stream, a
/// channel for forwarded calls and, now and then, a snapshot stream, so a
/// cluster of seven needs about 20; 256 leaves room for reconnects still
/// closing and for a joining member's calls.
pub const PEER_CONNECTIONS_MAX: usize = 256;

/// Open client connections per listener. etcd's benchmark drives 1000
/// clients over 100 connections and a Kubernetes API server keeps a few
/// per member, so 2048 leaves 20× headroom over the heaviest documented
/// load. Streams per connection are etcd's `--max-concurrent-streams`
/// (no bound by default, as etcd's); what writes and linearizable reads
/// hold while they wait is bounded where they queue, by the raft loop's
/// input queue (`raft::input::NODE_INPUT_CAPACITY`), which refuses past
/// its bound, not per connection.
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
    /// A Unix socket's file, removed when the listener closes.
    _socket_file: Option<SocketFile>,
}

/// What a listener listens on.
pub enum Listen {
    Tcp(TcpListener),
    Unix(UnixListener, PathBuf),
}

impl Listen {
    /// A Unix socket at `path`, replacing whatever file is there (a
    /// socket left by a member killed before it could remove it).
    pub fn unix(path: PathBuf) -> io::Result<Listen> {
        match std::fs::remove_file(&path) {
            Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(error),
            _ => {}
        }
        Ok(Listen::Unix(UnixListener::bind(&path)?, path))
    }

    async fn accept(&self) -> io::Result<(Socket, SocketAddr, Option<SocketAddr>)> {
        match self {
            Listen::Tcp(listener) => {
                let (stream, address) = listener.accept().await?;
                let _ = stream.set_nodelay(true);
                Ok((Socket::Tcp(stream), address, Some(address)))
            }
            Listen::Unix(listener, _) => {
                let (stream, _) = listener.accept().await?;
                Ok((Socket::Unix(stream), UNIX_PEER, None))
            }
        }
    }
}

/// The address a Unix socket's connections are given where an address
/// is expected: they have none.
const UNIX_PEER: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0));

/// Removes a Unix socket's file when dropped.
struct SocketFile(PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A listener's TLS: the server config, and what a connection is checked
/// for after its handshake.
#[derive(Clone)]
pub struct ListenerTls {
    pub config: Arc<rustls::ServerConfig>,
    pub admission: Admission,
}

impl BoundedListener {
    /// Accepts on `listen`, at most `connections_max` open at once,
    /// with TLS when `tls` is given.
    pub fn new(listen: Listen, connections_max: usize, tls: Option<ListenerTls>) -> io::Result<BoundedListener> {
        BoundedListener::with_raft(listen, connections_max, tls, None)
    }

    /// The same for the peer port: with `raft` given, connections that
    /// open a raft stream (`peer::frames`) go to it instead of the
    /// gRPC server.
    pub fn with_raft(
        listen: Listen,
        connections_max: usize,
        tls: Option<ListenerTls>,
        raft: Option<Arc<RaftInbound>>,
    ) -> io::Result<BoundedListener> {
        let (local, socket_file) = match &listen {
            Listen::Tcp(listener) => (listener.local_addr()?, None),
            Listen::Unix(_, path) => (UNIX_PEER, Some(SocketFile(path.clone()))),
        };
        let (sender, established) = mpsc::channel(ESTABLISHED_QUEUE);
        let permits = Arc::new(Semaphore::new(connections_max));
        tokio::spawn(accept_loop(listen, permits, tls, raft, sender));
        Ok(BoundedListener {
            established,
            local,
            _socket_file: socket_file,
        })
    }
}

/// Whether a plain connection opens with the raft stream's magic: it
/// peeks (consuming nothing) until the first bytes tell, at most
/// `within`; None if the connection ended or stalled.
async fn opens_raft_stream(stream: &TcpStream, within: Duration) -> Option<bool> {
    let deadline = tokio::time::Instant::now() + within;
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
    // A peer says what it carries within the read timeout, as etcd's
    // peer listener reads each request within it.
    match opens_raft_stream(&stream, raft.timeouts.read).await {
        Some(true) => raft.serve_plain(stream, permit),
        Some(false) => {
            let connection = Connection {
                stream: Stream::Plain(Socket::Tcp(stream)),
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
    listen: Listen,
    permits: Arc<Semaphore>,
    tls: Option<ListenerTls>,
    raft: Option<Arc<RaftInbound>>,
    sender: mpsc::Sender<(Connection, SocketAddr)>,
) {
    loop {
        let permit = permits
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let (socket, address, remote) = match listen.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "accepting a client connection failed");
                tokio::time::sleep(ACCEPT_RETRY_PAUSE).await;
                continue;
            }
        };
        let Some(tls) = tls.clone() else {
            match (socket, &raft) {
                (Socket::Tcp(stream), Some(raft)) => {
                    tokio::spawn(route_plain(stream, address, permit, raft.clone(), sender.clone()));
                }
                (socket, _) => {
                    let connection = Connection {
                        stream: Stream::Plain(socket),
                        client: true,
                        identity: ClientIdentity::default(),
                        _permit: permit,
                    };
                    if sender.send((connection, address)).await.is_err() {
                        return;
                    }
                }
            }
            continue;
        };
        let accepted = Accepted {
            address,
            remote,
            permit,
        };
        tokio::spawn(handshake(socket, accepted, tls, raft.clone(), sender.clone()));
    }
}

/// A connection just accepted: its address (a placeholder for a Unix
/// socket), the address it comes from (none for a Unix socket), and its
/// permit.
struct Accepted {
    address: SocketAddr,
    remote: Option<SocketAddr>,
    permit: OwnedSemaphorePermit,
}

/// A TLS connection's handshake and admission checks, logged as etcd logs
/// a refusal; then the raft stream (on the peer port) or the server.
async fn handshake(
    socket: Socket,
    accepted: Accepted,
    tls: ListenerTls,
    raft: Option<Arc<RaftInbound>>,
    sender: mpsc::Sender<(Connection, SocketAddr)>,
) {
    let Accepted {
        address,
        remote,
        permit,
    } = accepted;
    let acceptor = TlsAcceptor::from(tls.config.clone());
    // On the peer port, etcd's `--raft-read-timeout` bounds it instead.
    let within = raft.as_ref().map_or(TLS_HANDSHAKE_TIMEOUT, |raft| raft.timeouts.read);
    let stream = match tokio::time::timeout(within, acceptor.accept(socket)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => {
            return tracing::warn!(
                "remote-addr" = remote.map_or_else(String::new, |a| a.to_string()),
                "server-name" = "",
                error = %error,
                "rejected connection on {} endpoint",
                tls.admission.endpoint
            )
        }
        Err(_) => return tracing::debug!(%address, "TLS handshake timed out"),
    };
    let session = stream.get_ref().1;
    let chain = session.peer_certificates().map(<[_]>::to_vec).unwrap_or_default();
    let sni = session.server_name().map(str::to_string);
    if !tls.admission.admit(&chain, sni.as_deref(), remote).await {
        return;
    }
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
    Plain(Socket),
    Tls(Box<TlsStream<Socket>>),
}

/// A connection's socket: TCP, or a Unix socket.
enum Socket {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// Calls `$method` on whichever socket it is.
macro_rules! on_socket {
    ($self:ident, $method:ident($($arg:expr),*)) => {
        match $self.get_mut() {
            Socket::Tcp(stream) => Pin::new(stream).$method($($arg),*),
            Socket::Unix(stream) => Pin::new(stream).$method($($arg),*),
        }
    };
}

impl AsyncRead for Socket {
    fn poll_read(self: Pin<&mut Self>, context: &mut Context<'_>, buffer: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        on_socket!(self, poll_read(context, buffer))
    }
}

impl AsyncWrite for Socket {
    fn poll_write(self: Pin<&mut Self>, context: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        on_socket!(self, poll_write(context, bytes))
    }

    fn poll_flush(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        on_socket!(self, poll_flush(context))
    }

    fn poll_shutdown(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        on_socket!(self, poll_shutdown(context))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffers: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        on_socket!(self, poll_write_vectored(context, buffers))
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Socket::Tcp(stream) => stream.is_write_vectored(),
            Socket::Unix(stream) => stream.is_write_vectored(),
        }
    }
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
        let mut bounded = BoundedListener::new(Listen::Tcp(listener), 1, None).unwrap();
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
