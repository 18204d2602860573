//! The peer transport, the raft loop's real [`Outbox`], and the set of
//! peers it sends to: raft messages travel as length-prefixed frames on
//! one TCP connection per peer (`peer::frames`), TLS through rustls on
//! `https://` peer URLs.
//!
//! Written for few thread hand-offs. The raft loop encodes a Ready's
//! messages for each peer into one buffer and writes it to the peer's
//! non-blocking socket itself: no queue, no task, no HTTP/2 framing in
//! between. Only what the socket cannot take at once is kept, up to
//! `PEER_PENDING_BYTES_MAX` (`peer::connection`), and flushed by the
//! peer's link thread (`peer::link`), which also dials, reconnects, and
//! reads the one answer a peer may send (that this member was removed).
//! Past the bound, or on a broken connection, messages are dropped and
//! the peer is reported unreachable, as on any lossy network: raft
//! resends what matters. Snapshots go apart, one at a time per peer
//! (`snapshot_send.rs`). The receiving side is `peer::receive`.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use raft::prelude::{Message, MessageType};
use tokio::sync::mpsc;

use crate::halt::Halt;
use crate::membership::Membership;
use crate::peer::frames;
use crate::peer::link::{Link, LinkShared};
use crate::peer::snapshot_send::{self, SnapshotSource};
use crate::peer::timeouts::PeerTimeouts;
use crate::raft::inbox::NodeSender;
use crate::raft::input::{NodeInput, Outbox};

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
    /// What every link reports to and reads.
    shared: Arc<LinkShared>,
    node: NodeSender,
    runtime: tokio::runtime::Handle,
    snapshots_from: Arc<SnapshotSource>,
    /// Whether links to the peers are started: not for a member whose
    /// raft messages go another way (the in-process cluster tests).
    dials: bool,
}

impl PeerSet {
    pub fn new(
        local: u64,
        node: NodeSender,
        runtime: &tokio::runtime::Handle,
        snapshots_from: &Arc<SnapshotSource>,
        halt: &Halt,
        timeouts: PeerTimeouts,
        dials: bool,
    ) -> Arc<PeerSet> {
        Arc::new(PeerSet {
            local,
            links: Mutex::new(HashMap::new()),
            shared: Arc::new(LinkShared {
                local,
                node: node.clone(),
                halt: halt.clone(),
                timeouts,
                active_since: Mutex::new(HashMap::new()),
            }),
            node,
            runtime: runtime.clone(),
            snapshots_from: snapshots_from.clone(),
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
    fn start_link(&self, peer: u64, url: &str) -> io::Result<Arc<Link>> {
        Link::start(&self.shared, peer, url)
    }

    /// Since when the stream to `peer` has been up, if it is: etcd's
    /// `ActiveSince`, for its strict reconfiguration checks.
    pub fn active_since(&self, peer: u64) -> Option<Instant> {
        self.shared.active_since(peer)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peer::frames::{parse_hello, FrameReader, HELLO_BYTES};
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc as std_mpsc;
    use std::time::Duration;

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
        let message = Message {
            to: 2,
            ..Message::default()
        };
        frames::encode(&message, &mut frame);
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
        let dir = tempfile::tempdir().unwrap();
        let (peers, _inputs) = peer_set(&runtime, dir.path(), PeerTimeouts::default());
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

    /// A peer set on a throwaway store, sending as member 1 with
    /// `timeouts`; the runtime and directory must outlive it.
    fn peer_set(
        runtime: &tokio::runtime::Runtime,
        dir: &std::path::Path,
        timeouts: PeerTimeouts,
    ) -> (Arc<PeerSet>, crate::raft::inbox::NodeReceiver) {
        let (node, node_inputs) = crate::raft::inbox::channel(NODE_QUEUE_FOR_TEST).unwrap();
        let data = crate::storage::layout::DataDir::new(dir.to_path_buf());
        data.create().unwrap();
        let source = Arc::new(SnapshotSource {
            store: Arc::new(mvcc::Store::open(&data.store()).unwrap()),
            dir: data,
        });
        let peers = PeerSet::new(1, node, runtime.handle(), &source, &Halt::default(), timeouts, true);
        (peers, node_inputs)
    }

    /// Test timeouts, far under etcd's least so the test is quick.
    const QUICK: PeerTimeouts = PeerTimeouts {
        read: Duration::from_millis(900),
        write: Duration::from_millis(400),
    };

    // Goal: a stream the raft loop leaves quiet still carries bytes at
    // least every third of the read timeout, so the peer's reader keeps it.
    // Method: a peer that accepts and reads raw bytes; nothing is sent.
    #[test]
    fn a_quiet_stream_carries_heartbeats() {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (peers, _inputs) = peer_set(&runtime, dir.path(), QUICK);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let link = peers
            .start_link(2, &format!("http://{}", listener.local_addr().unwrap()))
            .unwrap();
        let (mut stream, _) = listener.accept().unwrap();
        stream.set_read_timeout(Some(QUICK.read)).unwrap();
        let mut hello = [0u8; HELLO_BYTES];
        stream.read_exact(&mut hello).unwrap();
        for beat in 0..5 {
            let mut frame = [0u8; 4];
            stream
                .read_exact(&mut frame)
                .unwrap_or_else(|error| panic!("heartbeat {beat} did not come within the read timeout: {error}"));
            assert_eq!(frame, frames::HEARTBEAT);
        }
        link.stop();
    }

    // Goal: bytes the peer never takes end the stream after the write
    // timeout, so the peer is reported down and dialled afresh.
    // Method: a peer that accepts and never reads; the link is sent more
    // than the sockets buffer, then left to its thread.
    #[test]
    fn a_peer_that_stops_reading_is_given_up_after_the_write_timeout() {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (peers, _inputs) = peer_set(&runtime, dir.path(), QUICK);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let link = peers
            .start_link(2, &format!("http://{}", listener.local_addr().unwrap()))
            .unwrap();
        let (stream, _) = listener.accept().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while peers.active_since(2).is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(peers.active_since(2).is_some(), "the stream came up");
        // 12 MiB in 1 MiB sends: more than loopback's socket buffers hold,
        // less than PEER_PENDING_BYTES_MAX.
        let chunk = vec![0u8; 1 << 20];
        let filled = Instant::now();
        for _ in 0..12 {
            assert!(link.send(&chunk), "the bytes wait, within the bound");
        }
        // Looked at often: once down, the link dials again in 100 ms.
        let deadline = filled + QUICK.write + Duration::from_secs(5);
        let mut given_up = None;
        while given_up.is_none() && Instant::now() < deadline {
            if peers.active_since(2).is_none() {
                given_up = Some(filled.elapsed());
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let given_up = given_up.expect("the stalled stream was kept");
        assert!(
            given_up >= QUICK.write,
            "given up before the write timeout: {given_up:?}"
        );
        drop(stream);
        link.stop();
    }

    /// Room for the sender's unreachable reports in the test.
    const NODE_QUEUE_FOR_TEST: usize = 1024;
}
