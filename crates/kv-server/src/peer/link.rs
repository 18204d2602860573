//! A peer's link: the raft stream's connection (`peer::connection`),
//! shared by the raft loop, which writes to it, and the link's own
//! thread, which dials, flushes what the socket could not take, reads
//! the peer's one possible answer, and keeps the stream alive.
//!
//! The thread also applies etcd's two peer timeouts
//! ([`PeerTimeouts`](crate::peer::PeerTimeouts)): a stream the raft loop leaves quiet for a third
//! of `--raft-read-timeout` gets a heartbeat frame, so the peer's reader
//! (which closes a stream quiet for the whole read timeout) keeps it, as
//! etcd's stream writer sends its link heartbeat; and bytes that wait
//! `--raft-write-timeout` without the socket taking any end the
//! connection, as a write past etcd's deadline does.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::halt::{Fatal, Halt};
use crate::metrics::handles::Counter;
use crate::peer::connection::{dial, Answer, Connection};
use crate::peer::frames;
use crate::peer::frames::REMOVED_MESSAGE;
use crate::peer::timeouts::PeerTimeouts;
use crate::raft::inbox::NodeSender;
use crate::raft::input::NodeInput;

/// Pause before reconnecting to a peer that could not be reached.
const RECONNECT_PAUSE: Duration = Duration::from_millis(100);

/// How long a link thread waits for its socket before looking again
/// whether it should stop or owes a heartbeat: it is woken at once for
/// anything else. Well under a third of the smallest read timeout (5 s).
const LINK_POLL: Duration = Duration::from_millis(100);

/// What every link of a member shares: who dials, where it reports, its
/// timeouts, and which peers' streams are up.
pub(super) struct LinkShared {
    pub(super) local: u64,
    pub(super) node: NodeSender,
    /// Raised when a peer says this member was removed.
    pub(super) halt: Halt,
    /// etcd's `--raft-read-timeout` and `--raft-write-timeout`.
    pub(super) timeouts: PeerTimeouts,
    /// Since when each peer's stream has been up; absent while it is down.
    pub(super) active_since: Mutex<HashMap<u64, Instant>>,
}

impl LinkShared {
    pub(super) fn active_since(&self, peer: u64) -> Option<Instant> {
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

/// One peer's raft stream: the connection, shared by the raft loop
/// (which writes) and the link thread (which dials, flushes and reads).
pub(super) struct Link {
    peer: u64,
    slot: Mutex<Option<Connection>>,
    stopped: AtomicBool,
    /// A byte written here wakes the link thread's poll.
    waker: UnixStream,
    sent_bytes: Counter,
}

impl Link {
    /// A link to `peer` at `url`, with its thread started.
    pub(super) fn start(peers: &Arc<LinkShared>, peer: u64, url: &str) -> io::Result<Arc<Link>> {
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
        let (peers, thread_link, url) = (peers.clone(), link.clone(), url.to_string());
        std::thread::Builder::new()
            .name(format!("raft-link-{peer:x}"))
            .spawn(move || run_link(&peers, &thread_link, &url, &woken))?;
        Ok(link)
    }

    /// Writes `bytes` (whole frames) or keeps what the socket cannot take
    /// yet; false when they were dropped: no connection, or it broke.
    pub(super) fn send(&self, bytes: &[u8]) -> bool {
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

    pub(super) fn stop(&self) {
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
fn run_link(peers: &LinkShared, link: &Link, url: &str, woken: &UnixStream) {
    while !link.stopped() {
        match dial(url, peers.local, peers.timeouts) {
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
fn tend(peers: &LinkShared, link: &Link, watch: &TcpStream, woken: &UnixStream) {
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
        let timeouts = peers.timeouts;
        if connection.stalled_longer_than(timeouts.write) {
            tracing::debug!(peer = link.peer, "raft stream write timed out");
            return;
        }
        let quiet = connection.quiet_for(timeouts.heartbeat_interval());
        drop(slot);
        if quiet && !link.send(&frames::HEARTBEAT) {
            return;
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
