//! The peer transport, the raft loop's real [`Outbox`]: raft messages
//! travel as length-prefixed frames on one TCP connection per peer
//! (`peer::frames`), TLS through rustls on `https://` peer URLs.
//!
//! Written for few thread hand-offs. The raft loop encodes a Ready's
//! messages for each peer into one buffer and writes it to the peer's
//! non-blocking socket itself: no queue, no task, no HTTP/2 framing in
//! between. Only what the socket cannot take at once is kept, up to
//! [`PEER_PENDING_BYTES_MAX`], and flushed by the peer's link thread,
//! which also dials, reconnects, and reads the one answer a peer may
//! send (that this member was removed). Past the bound, or on a broken
//! connection, messages are dropped and the peer is reported unreachable,
//! as on any lossy network: raft resends what matters. Snapshots go
//! apart, one at a time per peer (`snapshot_send.rs`). The receiving
//! side is `peer::receive`.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use raft::prelude::{Message, MessageType};
use rustls::pki_types::ServerName;
use rustls::ClientConnection;
use tokio::sync::mpsc;

use crate::halt::{Fatal, Halt};
use crate::membership::Membership;
use crate::metrics::handles::Counter;
use crate::peer::channels::{parse_url, raft_tls, PEER_CONNECT_TIMEOUT};
use crate::peer::frames::{self, RAFT_ALPN, REMOVED};
use crate::peer::snapshot_send::{self, SnapshotSource};
use crate::raft::input::{NodeInput, Outbox};

/// Bytes kept for a peer whose socket is full: at full load a Ready
/// sends a peer some tens of KiB, and loopback or a LAN drains a socket
/// buffer in well under a millisecond, so 16 MiB is hundreds of Readies
/// of slack; past it the peer is not keeping up, and raft's own flow
/// control (probe and resend) serves better than more memory.
pub const PEER_PENDING_BYTES_MAX: usize = 16 << 20;

pub use crate::peer::frames::PEER_MESSAGE_BYTES_MAX;

/// Pause before reconnecting to a peer that could not be reached.
const RECONNECT_PAUSE: Duration = Duration::from_millis(100);

/// How long a link thread waits for its socket before looking again
/// whether it should stop: it is woken at once for anything else.
const LINK_POLL: Duration = Duration::from_millis(100);

/// Why a peer refuses this member's messages: etcd's words for a member
/// that was removed. The sender stops the member on hearing it.
pub const REMOVED_MESSAGE: &str = "the member has been permanently removed from the cluster";

/// One peer's link: the raft stream's connection, and the snapshot
/// sender's slot.
struct PeerLink {
    url: String,
    link: Arc<Link>,
    /// Holds one snapshot while another is under way.
    snapshots: mpsc::Sender<Message>,
}

/// The peers this member sends to, changed as the membership changes (by
/// the apply stage) and used by the raft loop through [`PeerTransport`].
pub struct PeerSet {
    local: u64,
    links: Mutex<HashMap<u64, PeerLink>>,
    /// Since when each peer's stream has been up; absent while it is down.
    active_since: Mutex<HashMap<u64, Instant>>,
    node: SyncSender<NodeInput>,
    runtime: tokio::runtime::Handle,
    snapshots_from: Arc<SnapshotSource>,
    /// Raised when a peer says this member was removed.
    halt: Halt,
    /// Whether links to the peers are started: not for a member whose
    /// raft messages go another way (the in-process cluster tests).
    dials: bool,
}

impl PeerSet {
    pub fn new(
        local: u64,
        node: SyncSender<NodeInput>,
        runtime: &tokio::runtime::Handle,
        snapshots_from: &Arc<SnapshotSource>,
        halt: &Halt,
        dials: bool,
    ) -> Arc<PeerSet> {
        Arc::new(PeerSet {
            local,
            links: Mutex::new(HashMap::new()),
            active_since: Mutex::new(HashMap::new()),
            node,
            runtime: runtime.clone(),
            snapshots_from: snapshots_from.clone(),
            halt: halt.clone(),
            dials,
        })
    }

    /// Sends to exactly the peers of `membership`: starts a link for each
    /// new peer (or one whose URL changed), and stops those of peers gone.
    pub fn update(self: &Arc<Self>, membership: &Membership) {
        if !self.dials {
            return;
        }
        let mut links = self.links.lock();
        links.retain(|id, link| {
            let keep = membership
                .get(*id)
                .is_some_and(|m| m.id != self.local && m.peer_urls.first() == Some(&link.url));
            if !keep {
                link.link.stop();
            }
            keep
        });
        for peer in membership.peers() {
            let Some(url) = peer.peer_urls.first() else { continue };
            if links.contains_key(&peer.id) {
                continue;
            }
            let link = match self.start_link(peer.id, url) {
                Ok(link) => link,
                Err(error) => {
                    tracing::error!(%error, peer = peer.id, "could not start a peer link");
                    continue;
                }
            };
            let (snapshots, snapshot_receiver) = mpsc::channel(1);
            self.runtime.spawn(snapshot_send::send_loop(
                peer.id,
                url.clone(),
                snapshot_receiver,
                self.snapshots_from.clone(),
                self.node.clone(),
            ));
            links.insert(
                peer.id,
                PeerLink {
                    url: url.clone(),
                    link,
                    snapshots,
                },
            );
        }
    }

    /// A link to `peer` at `url`, with its thread started.
    fn start_link(self: &Arc<Self>, peer: u64, url: &str) -> io::Result<Arc<Link>> {
        let (waker, woken) = UnixStream::pair()?;
        waker.set_nonblocking(true)?;
        woken.set_nonblocking(true)?;
        let link = Arc::new(Link {
            peer,
            slot: Mutex::new(None),
            stopped: AtomicBool::new(false),
            waker,
            sent_bytes: crate::metrics::metrics()
                .network
                .peer_sent_bytes
                .with_label_values(&[&format!("{peer:x}")]),
        });
        let (peers, thread_link, url) = (self.clone(), link.clone(), url.to_string());
        std::thread::Builder::new()
            .name(format!("raft-link-{peer:x}"))
            .spawn(move || run_link(&peers, &thread_link, &url, &woken))?;
        Ok(link)
    }

    /// Since when the stream to `peer` has been up, if it is: etcd's
    /// `ActiveSince`, for its strict reconfiguration checks.
    pub fn active_since(&self, peer: u64) -> Option<Instant> {
        self.active_since.lock().get(&peer).copied()
    }

    fn set_active(&self, peer: u64, active: bool) {
        let mut since = self.active_since.lock();
        if active {
            since.entry(peer).or_insert_with(Instant::now);
        } else {
            since.remove(&peer);
        }
    }
}

/// The raft loop's outbox over the peer set.
pub struct PeerTransport {
    pub peers: Arc<PeerSet>,
    /// Each peer's frames of the current Ready; kept between Readies so
    /// their buffers are reused.
    scratch: Vec<(u64, Vec<u8>)>,
}

impl PeerTransport {
    pub fn new(peers: Arc<PeerSet>) -> PeerTransport {
        PeerTransport {
            peers,
            scratch: Vec::new(),
        }
    }

    /// Queues a snapshot for its peer's sender. If one is already queued
    /// behind a transfer, raft is told this one failed, and asks again
    /// later if the peer still needs it.
    fn send_snapshot(&self, links: &HashMap<u64, PeerLink>, message: Message) {
        let to = message.to;
        let queued = links
            .get(&to)
            .is_some_and(|link| link.snapshots.try_send(message).is_ok());
        if !queued {
            let _ = self.peers.node.try_send(NodeInput::SnapshotStatus { to, failed: true });
        }
    }

    /// The buffer collecting `to`'s frames this Ready.
    fn buffer_for(&mut self, to: u64) -> &mut Vec<u8> {
        let at = match self.scratch.iter().position(|(peer, _)| *peer == to) {
            Some(at) => at,
            None => {
                self.scratch.push((to, Vec::new()));
                self.scratch.len() - 1
            }
        };
        &mut self.scratch[at].1
    }
}

impl Outbox for PeerTransport {
    fn send(&mut self, messages: Vec<Message>) {
        if messages.is_empty() {
            return;
        }
        crate::metrics::metrics()
            .network
            .peer_raft_messages_sent
            .inc_by(messages.len() as u64);
        let peers = self.peers.clone();
        let links = peers.links.lock();
        for message in messages {
            if message.get_msg_type() == MessageType::MsgSnapshot {
                self.send_snapshot(&links, message);
                continue;
            }
            frames::encode(&message, self.buffer_for(message.to));
        }
        for (to, bytes) in &mut self.scratch {
            if bytes.is_empty() {
                continue;
            }
            let sent = match links.get(to) {
                Some(link) => link.link.send(bytes),
                None => {
                    tracing::debug!(to, "message for an unknown member dropped");
                    true
                }
            };
            if !sent {
                let _ = peers.node.try_send(NodeInput::Unreachable(*to));
            }
            bytes.clear();
        }
    }
}

/// One peer's raft stream: the connection, shared by the raft loop
/// (which writes) and the link thread (which dials, flushes and reads).
struct Link {
    peer: u64,
    slot: Mutex<Option<Connection>>,
    stopped: AtomicBool,
    /// A byte written here wakes the link thread's poll.
    waker: UnixStream,
    sent_bytes: Counter,
}

impl Link {
    /// Writes `bytes` (whole frames) or keeps what the socket cannot take
    /// yet; false when they were dropped: no connection, or it broke.
    fn send(&self, bytes: &[u8]) -> bool {
        let mut slot = self.slot.lock();
        let Some(connection) = slot.as_mut() else {
            return false;
        };
        match connection.send(bytes) {
            Ok(()) => {
                self.sent_bytes.inc_by(bytes.len() as u64);
                if connection.has_pending() {
                    self.wake();
                }
                true
            }
            Err(error) => {
                tracing::debug!(peer = self.peer, %error, "raft stream broke");
                *slot = None;
                self.wake();
                false
            }
        }
    }

    fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        self.wake();
    }

    fn stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    fn wake(&self) {
        // Full means a wake-up is already pending.
        let _ = (&self.waker).write(&[1]);
    }
}

/// The link thread: dials the peer, hands the connection to the raft
/// loop, tends it until it breaks, and dials again, until stopped.
fn run_link(peers: &PeerSet, link: &Link, url: &str, woken: &UnixStream) {
    while !link.stopped() {
        match dial(url, peers.local) {
            Ok(connection) => match connection.socket().try_clone() {
                Ok(watch) => {
                    *link.slot.lock() = Some(connection);
                    peers.set_active(link.peer, true);
                    tend(peers, link, &watch, woken);
                    *link.slot.lock() = None;
                }
                Err(error) => tracing::debug!(peer = link.peer, %error, "peer socket unusable"),
            },
            Err(error) => tracing::debug!(peer = link.peer, %error, "peer unreachable"),
        }
        peers.set_active(link.peer, false);
        let _ = peers.node.try_send(NodeInput::Unreachable(link.peer));
        let _ = poll(woken, None, RECONNECT_PAUSE);
        drain(woken);
    }
}

/// Flushes what the raft loop could not write and watches for the peer's
/// answer or the connection's end. Returns when the connection is gone
/// or the link stopped.
fn tend(peers: &PeerSet, link: &Link, watch: &TcpStream, woken: &UnixStream) {
    loop {
        if link.stopped() {
            return;
        }
        let pending = match link.slot.lock().as_ref() {
            Some(connection) => connection.has_pending(),
            None => return,
        };
        let events = match poll(woken, Some((watch, pending)), LINK_POLL) {
            Ok(events) => events,
            Err(error) => {
                tracing::warn!(%error, "polling a peer socket failed");
                return;
            }
        };
        drain(woken);
        let mut slot = link.slot.lock();
        let Some(connection) = slot.as_mut() else { return };
        if events.readable {
            match connection.read_answer() {
                Ok(Answer::Removed) => {
                    // The member stops; so does this link.
                    peers
                        .halt
                        .raise(Fatal::new("a peer refused this member", &REMOVED_MESSAGE));
                    link.stop();
                    return;
                }
                Ok(Answer::Nothing) => {}
                Ok(Answer::Closed) => return,
                Err(error) => return tracing::debug!(peer = link.peer, %error, "raft stream broke"),
            }
        }
        if connection.has_pending() {
            if let Err(error) = connection.flush() {
                tracing::debug!(peer = link.peer, %error, "raft stream broke");
                return;
            }
        }
    }
}

/// What `poll` saw on the peer socket.
struct Events {
    readable: bool,
}

/// Waits until `woken` has a byte, or the socket (if given) is readable
/// or closed, or, when asked, writable; at most `timeout`.
fn poll(woken: &UnixStream, socket: Option<(&TcpStream, bool)>, timeout: Duration) -> io::Result<Events> {
    let mut fds = [
        libc::pollfd {
            fd: woken.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: -1,
            events: 0,
            revents: 0,
        },
    ];
    if let Some((socket, writable)) = socket {
        fds[1].fd = socket.as_raw_fd();
        fds[1].events = libc::POLLIN | if writable { libc::POLLOUT } else { 0 };
    }
    let millis = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: `fds` is a valid array of two pollfd for the call's length;
    // the descriptors belong to streams borrowed for the call.
    let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, millis) };
    if ready < 0 {
        let error = io::Error::last_os_error();
        if error.kind() == io::ErrorKind::Interrupted {
            return Ok(Events { readable: false });
        }
        return Err(error);
    }
    let closed = libc::POLLIN | libc::POLLHUP | libc::POLLERR;
    Ok(Events {
        readable: fds[1].revents & closed != 0,
    })
}

/// Empties the wake-up socket.
fn drain(woken: &UnixStream) {
    let mut bytes = [0u8; 64];
    while matches!((&*woken).read(&mut bytes), Ok(n) if n > 0) {}
}

/// What a peer said on the raft stream.
enum Answer {
    Nothing,
    Removed,
    Closed,
}

/// A raft stream's connection, its socket non-blocking.
enum Connection {
    Plain {
        socket: TcpStream,
        pending: Vec<u8>,
    },
    Tls {
        socket: TcpStream,
        tls: Box<ClientConnection>,
    },
}

fn overflow() -> io::Error {
    io::Error::other("the peer is not keeping up: pending bytes past PEER_PENDING_BYTES_MAX")
}

impl Connection {
    fn socket(&self) -> &TcpStream {
        match self {
            Connection::Plain { socket, .. } | Connection::Tls { socket, .. } => socket,
        }
    }

    /// Writes what the socket takes now and keeps the rest.
    fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Connection::Plain { pending, .. } => {
                if pending.len() + bytes.len() > PEER_PENDING_BYTES_MAX {
                    return Err(overflow());
                }
                pending.extend_from_slice(bytes);
            }
            Connection::Tls { tls, .. } => {
                // The buffer limit set at dialling bounds what waits.
                if tls.writer().write(bytes)? < bytes.len() {
                    return Err(overflow());
                }
            }
        }
        self.flush()
    }

    /// Writes as much of what waits as the socket takes now.
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Connection::Plain { socket, pending } => {
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
                Ok(())
            }
            Connection::Tls { socket, tls } => {
                while tls.wants_write() {
                    match tls.write_tls(socket) {
                        Ok(_) => {}
                        Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                        Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                        Err(error) => return Err(error),
                    }
                }
                Ok(())
            }
        }
    }

    fn has_pending(&self) -> bool {
        match self {
            Connection::Plain { pending, .. } => !pending.is_empty(),
            Connection::Tls { tls, .. } => tls.wants_write(),
        }
    }

    /// Reads what the peer sent, without blocking.
    fn read_answer(&mut self) -> io::Result<Answer> {
        let mut bytes = [0u8; 64];
        let read = match self {
            Connection::Plain { socket, .. } => socket.read(&mut bytes),
            Connection::Tls { socket, tls } => {
                match tls.read_tls(socket) {
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
/// connection made non-blocking. TLS as the peer TLS flags say.
fn dial(url: &str, local: u64) -> io::Result<Connection> {
    let (https, host, port) = parse_url(url)?;
    let address = (host.as_str(), port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("{host} has no address")))?;
    let mut socket = TcpStream::connect_timeout(&address, PEER_CONNECT_TIMEOUT)?;
    socket.set_nodelay(true)?;
    socket.set_read_timeout(Some(PEER_CONNECT_TIMEOUT))?;
    socket.set_write_timeout(Some(PEER_CONNECT_TIMEOUT))?;
    let hello = frames::hello(local);
    let connection = if https {
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
        Connection::Tls {
            socket,
            tls: Box::new(tls),
        }
    } else {
        socket.write_all(&hello)?;
        Connection::Plain {
            socket,
            pending: Vec::new(),
        }
    };
    connection.socket().set_nonblocking(true)?;
    Ok(connection)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peer::frames::{parse_hello, FrameReader, HELLO_BYTES};
    use std::net::TcpListener;
    use std::sync::mpsc as std_mpsc;

    /// How long the fake peer runs at most, whatever the test does.
    const PEER_LIFETIME_MAX: Duration = Duration::from_secs(60);

    /// A peer on a real loopback socket that reads raft streams as a
    /// member does (hello, then frames) and reports each read's message
    /// count; stopping it closes its listener and every connection.
    struct FakePeer {
        stop: Arc<AtomicBool>,
        accepted: Arc<Mutex<Vec<TcpStream>>>,
        thread: Option<std::thread::JoinHandle<()>>,
    }

    impl FakePeer {
        fn start(listener: TcpListener, counts: std_mpsc::Sender<usize>) -> FakePeer {
            listener.set_nonblocking(true).unwrap();
            let stop = Arc::new(AtomicBool::new(false));
            let accepted = Arc::new(Mutex::new(Vec::new()));
            let (thread_stop, thread_accepted) = (stop.clone(), accepted.clone());
            let thread = std::thread::spawn(move || {
                let started = Instant::now();
                while !thread_stop.load(Ordering::Acquire) && started.elapsed() < PEER_LIFETIME_MAX {
                    let Ok((stream, _)) = listener.accept() else {
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    };
                    stream.set_nonblocking(false).unwrap();
                    thread_accepted.lock().push(stream.try_clone().unwrap());
                    let counts = counts.clone();
                    std::thread::spawn(move || read_stream(stream, &counts));
                }
            });
            FakePeer {
                stop,
                accepted,
                thread: Some(thread),
            }
        }

        fn stop(mut self) {
            self.stop.store(true, Ordering::Release);
            self.thread.take().unwrap().join().unwrap();
            for stream in self.accepted.lock().drain(..) {
                let _ = stream.shutdown(std::net::Shutdown::Both);
            }
        }
    }

    fn read_stream(mut stream: TcpStream, counts: &std_mpsc::Sender<usize>) {
        let mut hello = [0u8; HELLO_BYTES];
        if stream.read_exact(&mut hello).is_err() {
            return;
        }
        assert_eq!(parse_hello(&hello), Some(1), "the dialler names itself");
        let mut reader = FrameReader::default();
        while let Ok(Some(messages)) = reader.read(&mut stream, &mut 0) {
            if !messages.is_empty() && counts.send(messages.len()).is_err() {
                return;
            }
        }
    }

    /// Sends one message every 20 ms until the peer counts one (at most
    /// `within`); whether it did.
    fn reaches(link: &Link, counts: &std_mpsc::Receiver<usize>, within: Duration) -> bool {
        let mut frame = Vec::new();
        frames::encode(&Message::default(), &mut frame);
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            link.send(&frame);
            if counts.recv_timeout(Duration::from_millis(20)).is_ok() {
                return true;
            }
        }
        false
    }

    // Goal: after the peer goes away and comes back on the same address,
    // messages reach it again, and meanwhile the raft loop's sends fail
    // fast instead of blocking.
    // Method: a fake peer that reads the real wire format on a loopback
    // socket, stopped (listener and connections closed) and started
    // again on the same address; five rounds.
    #[test]
    fn a_peer_that_comes_back_is_reached_again() {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let (count_sender, counts) = std_mpsc::channel();
        let mut peer = FakePeer::start(listener, count_sender.clone());
        let (node, _node_inputs) = std::sync::mpsc::sync_channel(NODE_QUEUE_FOR_TEST);
        let dir = tempfile::tempdir().unwrap();
        let data = crate::storage::layout::DataDir::new(dir.path().to_path_buf());
        data.create().unwrap();
        let source = Arc::new(SnapshotSource {
            store: Arc::new(mvcc::Store::open(&data.store()).unwrap()),
            dir: data,
        });
        let peers = PeerSet::new(1, node, runtime.handle(), &source, &Halt::default(), true);
        let link = peers.start_link(2, &format!("http://{address}")).unwrap();
        assert!(reaches(&link, &counts, Duration::from_secs(5)), "first contact");
        for round in 0..5 {
            peer.stop();
            // Sends while the peer is away: the stream breaks under them.
            for _ in 0..10 {
                let started = Instant::now();
                link.send(&[0u8; 8]);
                assert!(started.elapsed() < Duration::from_secs(1), "a send blocked");
                std::thread::sleep(Duration::from_millis(10));
            }
            while counts.try_recv().is_ok() {}
            peer = FakePeer::start(TcpListener::bind(address).unwrap(), count_sender.clone());
            assert!(
                reaches(&link, &counts, Duration::from_secs(5)),
                "round {round}: the peer came back but was not reached"
            );
        }
        assert!(peers.active_since(2).is_some(), "the peer's stream counts as up");
        link.stop();
        peer.stop();
    }

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

    /// Room for the sender's unreachable reports in the test.
    const NODE_QUEUE_FOR_TEST: usize = 1024;
}
