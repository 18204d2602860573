//! One raft stream's connection to a peer: dialled (TCP, TLS through
//! rustls on `https://` peer URLs, the hello), then written without
//! blocking. What the socket cannot take at once waits here, bounded by
//! [`PEER_PENDING_BYTES_MAX`], for the link thread (`peer::link`) to
//! flush; the connection keeps the clocks that thread needs for etcd's
//! `--raft-write-timeout` and the link heartbeat.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Instant;

use rustls::pki_types::ServerName;
use rustls::ClientConnection;

use crate::peer::channels::{parse_url, raft_tls, PEER_CONNECT_TIMEOUT};
use crate::peer::frames::{self, RAFT_ALPN, REMOVED};
use crate::peer::timeouts::PeerTimeouts;

/// Bytes kept for a peer whose socket is full: at full load a Ready
/// sends a peer some tens of KiB, and loopback or a LAN drains a socket
/// buffer in well under a millisecond, so 16 MiB is hundreds of Readies
/// of slack; past it the peer is not keeping up, and raft's own flow
/// control (probe and resend) serves better than more memory.
pub const PEER_PENDING_BYTES_MAX: usize = 16 << 20;

/// What a peer said on the raft stream.
pub(super) enum Answer {
    Nothing,
    Removed,
    Closed,
}

/// How the bytes travel: as they are, or through TLS, whose own buffer
/// holds what waits.
enum Wire {
    Plain { pending: Vec<u8> },
    Tls(Box<ClientConnection>),
}

/// A raft stream's connection, its socket non-blocking.
pub(super) struct Connection {
    socket: TcpStream,
    wire: Wire,
    /// When the raft loop last handed bytes over: the link sends a
    /// heartbeat once the stream has been quiet a third of the peer's
    /// read timeout.
    last_sent: Instant,
    /// Since when bytes have waited without the socket taking any: past
    /// the write timeout the connection is given up.
    stalled_since: Option<Instant>,
}

fn overflow() -> io::Error {
    io::Error::other("the peer is not keeping up: pending bytes past PEER_PENDING_BYTES_MAX")
}

impl Connection {
    pub(super) fn socket(&self) -> &TcpStream {
        &self.socket
    }

    /// Writes what the socket takes now and keeps the rest.
    pub(super) fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        match &mut self.wire {
            Wire::Plain { pending } => {
                if pending.len() + bytes.len() > PEER_PENDING_BYTES_MAX {
                    return Err(overflow());
                }
                pending.extend_from_slice(bytes);
            }
            Wire::Tls(tls) => {
                // The buffer limit set at dialling bounds what waits.
                if tls.writer().write(bytes)? < bytes.len() {
                    return Err(overflow());
                }
            }
        }
        self.last_sent = Instant::now();
        self.flush()
    }

    /// Writes as much of what waits as the socket takes now.
    pub(super) fn flush(&mut self) -> io::Result<()> {
        let socket = &mut self.socket;
        let progressed = match &mut self.wire {
            Wire::Plain { pending } => {
                let mut written = 0;
                while written < pending.len() {
                    match socket.write(&pending[written..]) {
                        Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                        Ok(n) => written += n,
                        Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                        Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                        Err(error) => return Err(error),
                    }
                }
                pending.drain(..written);
                written > 0
            }
            Wire::Tls(tls) => {
                let mut written = 0;
                while tls.wants_write() {
                    match tls.write_tls(socket) {
                        Ok(n) => written += n,
                        Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                        Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                        Err(error) => return Err(error),
                    }
                }
                written > 0
            }
        };
        self.stalled_since = match (self.has_pending(), progressed) {
            (false, _) => None,
            (true, true) => Some(Instant::now()),
            (true, false) => Some(self.stalled_since.unwrap_or_else(Instant::now)),
        };
        Ok(())
    }

    pub(super) fn has_pending(&self) -> bool {
        match &self.wire {
            Wire::Plain { pending } => !pending.is_empty(),
            Wire::Tls(tls) => tls.wants_write(),
        }
    }

    /// Whether bytes have waited, the socket taking none, for longer
    /// than `timeout`: etcd's `--raft-write-timeout` on a write.
    pub(super) fn stalled_longer_than(&self, timeout: std::time::Duration) -> bool {
        self.stalled_since.is_some_and(|since| since.elapsed() > timeout)
    }

    /// Whether the raft loop has sent nothing for `quiet`.
    pub(super) fn quiet_for(&self, quiet: std::time::Duration) -> bool {
        self.last_sent.elapsed() >= quiet
    }

    /// Reads what the peer sent, without blocking.
    pub(super) fn read_answer(&mut self) -> io::Result<Answer> {
        let mut bytes = [0u8; 64];
        let read = match &mut self.wire {
            Wire::Plain { .. } => self.socket.read(&mut bytes),
            Wire::Tls(tls) => {
                match tls.read_tls(&mut self.socket) {
                    Ok(0) => return Ok(Answer::Closed),
                    Ok(_) => {}
                    Err(error) if error.kind() == io::ErrorKind::WouldBlock => return Ok(Answer::Nothing),
                    Err(error) => return Err(error),
                }
                tls.process_new_packets().map_err(io::Error::other)?;
                tls.reader().read(&mut bytes)
            }
        };
        match read {
            Ok(0) => Ok(Answer::Closed),
            Ok(n) if bytes[..n].contains(&REMOVED) => Ok(Answer::Removed),
            Ok(_) => Ok(Answer::Nothing),
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => Ok(Answer::Nothing),
            Err(error) => Err(error),
        }
    }
}

/// Connects to the peer at `url`, says hello as `local`, and returns the
/// connection made non-blocking. TLS as the peer TLS flags say; the
/// handshake's reads and writes are bounded by `timeouts`.
pub(super) fn dial(url: &str, local: u64, timeouts: PeerTimeouts) -> io::Result<Connection> {
    let (https, host, port) = parse_url(url)?;
    let address = (host.as_str(), port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("{host} has no address")))?;
    let mut socket = TcpStream::connect_timeout(&address, PEER_CONNECT_TIMEOUT)?;
    socket.set_nodelay(true)?;
    socket.set_read_timeout(Some(timeouts.read))?;
    socket.set_write_timeout(Some(timeouts.write))?;
    let hello = frames::hello(local);
    let wire = if https {
        let config = raft_tls().ok_or_else(|| io::Error::other("https:// peer URL without peer TLS"))?;
        let name = ServerName::try_from(host).map_err(io::Error::other)?;
        let mut tls = ClientConnection::new(config, name).map_err(io::Error::other)?;
        while tls.is_handshaking() {
            tls.complete_io(&mut socket)?;
        }
        if tls.alpn_protocol() != Some(RAFT_ALPN) {
            return Err(io::Error::other("the peer does not serve the raft stream"));
        }
        tls.writer().write_all(&hello)?;
        while tls.wants_write() {
            tls.write_tls(&mut socket)?;
        }
        tls.set_buffer_limit(Some(PEER_PENDING_BYTES_MAX));
        Wire::Tls(Box::new(tls))
    } else {
        socket.write_all(&hello)?;
        Wire::Plain { pending: Vec::new() }
    };
    socket.set_nonblocking(true)?;
    Ok(Connection {
        socket,
        wire,
        last_sent: Instant::now(),
        stalled_since: None,
    })
}
