//! How the raft loop waits: on its input queue, and on the peers' raft
//! streams, which it reads itself.
//!
//! A peer's batch used to be read by a task on the peer runtime and
//! queued for the loop: two threads woken per batch, on every member,
//! about a fifth of one put's context switches and a quarter of the
//! members' CPU at one client (`docs/benchmarks/history.md`, seventh
//! round). Now the loop waits in `poll(2)` on the streams and on a
//! doorbell, and reads what arrives on its own thread.
//!
//! - The queue is a bounded channel whose senders ([`NodeSender`]) ring
//!   the doorbell, a socket pair, only when the loop has said it is
//!   about to sleep: a busy loop is never written to. The loop says so,
//!   then looks at the queue once more before it sleeps, and each side
//!   puts a `SeqCst` fence between its write and its read, so that a
//!   sender either sees the loop asleep and rings, or the loop sees the
//!   input.
//! - A stream ([`PeerStream`]) reaches the loop through its sender once
//!   its hello is read (`peer::receive`), and leaves it when it ends,
//!   fails, stays quiet past the read timeout, or names a removed member.
//!   TLS streams stay with the peer runtime's task, which queues what it
//!   reads.
//!
//! The simulator drives `Node::turn` with inputs of its own and never
//! waits here: only [`Node::run`](crate::raft::node::Node::run) does.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SendError, SyncSender, TryIter, TryRecvError, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::error::Error;
use crate::raft::input::NodeInput;

/// Reads of one stream per turn of the loop: at 64 KiB each, up to a few
/// MiB of a peer's batch per turn, so a peer streaming its log to a
/// follower far behind still leaves the loop's ticks on time; what is
/// left is read on the next turn.
pub const STREAM_READS_PER_TURN_MAX: usize = 64;

/// Peers' raft streams the loop reads at once. The peer port's connection
/// bound already limits them; this one keeps the loop's `poll` set small
/// even if a peer reconnects in a loop faster than its old streams time
/// out. A stream past it is closed, and its peer dials again.
pub const PEER_STREAMS_MAX: usize = 64;

/// A peer's raft stream, read by the loop (implemented in
/// `peer::receive`).
pub trait PeerStream: Send {
    /// The socket to wait on; non-blocking.
    fn fd(&self) -> RawFd;
    /// Reads what the socket has without blocking (at most
    /// [`STREAM_READS_PER_TURN_MAX`] reads), adding its whole messages to
    /// `turn`. False once the stream is over: closed, failed, or its peer
    /// removed from the cluster.
    fn read(&mut self, now: Instant, turn: &mut Vec<NodeInput>) -> bool;
    /// Whether nothing came for longer than the read timeout by `now`.
    fn expired(&self, now: Instant) -> bool;
}

/// What the senders share with the loop.
struct Doorbell {
    /// Set by the loop just before it sleeps, cleared when it wakes.
    asleep: AtomicBool,
    /// The end senders write a byte to.
    ring: UnixStream,
    /// The end the loop waits on.
    hear: UnixStream,
    /// Streams handed over and not yet taken by the loop.
    streams: Mutex<Vec<Box<dyn PeerStream>>>,
}

impl Doorbell {
    /// Wakes the loop if it sleeps. A full socket buffer means the loop
    /// has bytes to wake on already.
    fn ring(&self) {
        fence(Ordering::SeqCst);
        if self.asleep.swap(false, Ordering::SeqCst) {
            let _ = (&self.ring).write(&[1]);
        }
    }
}

/// The raft loop's input queue and its doorbell, for the loop.
pub struct NodeReceiver {
    queue: Receiver<NodeInput>,
    bell: Arc<Doorbell>,
}

impl NodeReceiver {
    /// The queued inputs, without waiting (the simulator's way in).
    pub fn try_iter(&self) -> TryIter<'_, NodeInput> {
        self.queue.try_iter()
    }
}

/// A sender of the raft loop's inputs: the queue's sender, which wakes
/// the loop if it sleeps.
#[derive(Clone)]
pub struct NodeSender {
    queue: SyncSender<NodeInput>,
    bell: Arc<Doorbell>,
}

impl NodeSender {
    /// Queues `input` unless the queue is full.
    pub fn try_send(&self, input: NodeInput) -> Result<(), TrySendError<NodeInput>> {
        self.queue.try_send(input)?;
        self.bell.ring();
        Ok(())
    }

    /// Queues `input`, waiting for room.
    pub fn send(&self, input: NodeInput) -> Result<(), SendError<NodeInput>> {
        self.queue.send(input)?;
        self.bell.ring();
        Ok(())
    }

    /// Hands a peer's raft stream to the loop, which reads it from now on.
    pub fn add_stream(&self, stream: Box<dyn PeerStream>) {
        self.bell.streams.lock().push(stream);
        self.bell.ring();
    }
}

/// The loop's queue of `capacity` inputs: its senders and its end.
/// Fails only if the doorbell's socket pair cannot be made.
pub fn channel(capacity: usize) -> Result<(NodeSender, NodeReceiver), Error> {
    let (ring, hear) = UnixStream::pair()
        .and_then(|(ring, hear)| {
            ring.set_nonblocking(true)?;
            hear.set_nonblocking(true)?;
            Ok((ring, hear))
        })
        .map_err(|source| Error::Spawn {
            what: "the raft loop's doorbell",
            source,
        })?;
    let bell = Arc::new(Doorbell {
        asleep: AtomicBool::new(false),
        ring,
        hear,
        streams: Mutex::new(Vec::new()),
    });
    let (queue, receiver) = sync_channel(capacity);
    Ok((
        NodeSender {
            queue,
            bell: bell.clone(),
        },
        NodeReceiver { queue: receiver, bell },
    ))
}

/// The loop's side while it runs: its queue and the streams it reads.
pub struct Inbox {
    receiver: NodeReceiver,
    streams: Vec<Box<dyn PeerStream>>,
    /// The `poll` set, rebuilt each wait: the doorbell, then each stream.
    fds: Vec<libc::pollfd>,
}

/// Why a wait ended.
pub enum Waited {
    /// Inputs came, or the wait ran out; `turn` holds what came.
    Turn,
    /// Every sender is gone: the loop ends.
    Closed,
}

impl Inbox {
    pub fn new(receiver: NodeReceiver) -> Inbox {
        Inbox {
            receiver,
            streams: Vec::new(),
            fds: Vec::new(),
        }
    }

    /// Fills `turn` with the next turn's inputs, waiting at most `wait`
    /// for the first: queued inputs and what the streams have. Once
    /// something came, it yields the CPU once, so that whoever else is
    /// runnable on this core (client handlers proposing) runs first and
    /// the turn takes their inputs too; on an idle core that returns at
    /// once. Not for a peer's batch alone on a member that does not
    /// lead (`leads`): a follower's turn gathers nothing by waiting, and
    /// on a shared core the yield is a context switch.
    pub fn gather(&mut self, wait: Duration, turn: &mut Vec<NodeInput>, max: usize, leads: bool) -> Waited {
        self.adopt_streams();
        let queued = match self.receiver.queue.try_recv() {
            Ok(input) => {
                turn.push(input);
                self.poll_streams();
                true
            }
            Err(TryRecvError::Disconnected) => return Waited::Closed,
            // Sleeping leaves the streams' readiness in `fds`.
            Err(TryRecvError::Empty) => match self.sleep(wait, turn) {
                Some(came) => came,
                None => return Waited::Closed,
            },
        };
        let now = Instant::now();
        let read = self.read_ready(now, turn);
        if queued || (read && leads) {
            std::thread::yield_now();
            let room = max.saturating_sub(turn.len());
            turn.extend(self.receiver.queue.try_iter().take(room));
            self.poll_streams();
            self.read_ready(now, turn);
        }
        self.close_expired(now);
        Waited::Turn
    }

    /// Streams handed over since the last wait join the set, up to
    /// [`PEER_STREAMS_MAX`].
    fn adopt_streams(&mut self) {
        let mut handed = self.receiver.bell.streams.lock();
        for stream in handed.drain(..) {
            if self.streams.len() < PEER_STREAMS_MAX {
                self.streams.push(stream);
            } else {
                tracing::warn!(max = PEER_STREAMS_MAX, "too many raft streams from peers; closing one");
            }
        }
    }

    /// Sleeps until an input is queued, a stream is readable, or `wait`
    /// runs out, and leaves the streams' readiness in `fds` (a poll that
    /// does not wait, if an input was already there). Some(true) if an
    /// input came (pushed to `turn`), None if every sender is gone.
    fn sleep(&mut self, wait: Duration, turn: &mut Vec<NodeInput>) -> Option<bool> {
        self.receiver.bell.asleep.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        // The last look before sleeping: a sender that queued before the
        // flag was up did not ring.
        let queued = match self.receiver.queue.try_recv() {
            Ok(input) => {
                turn.push(input);
                true
            }
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) => false,
        };
        self.poll(if queued { Duration::ZERO } else { wait }, true);
        let bell = &self.receiver.bell;
        bell.asleep.store(false, Ordering::SeqCst);
        if self.fds[0].revents != 0 {
            let mut drained = [0u8; 64];
            while matches!((&bell.hear).read(&mut drained), Ok(n) if n > 0) {}
        }
        if queued {
            return Some(true);
        }
        match self.receiver.queue.try_recv() {
            Ok(input) => {
                turn.push(input);
                Some(true)
            }
            Err(TryRecvError::Disconnected) => None,
            Err(TryRecvError::Empty) => Some(false),
        }
    }

    /// The streams' readiness now, in `fds`, without waiting (none to
    /// look at when there are no streams).
    fn poll_streams(&mut self) {
        match self.streams.is_empty() {
            true => self.fds.clear(),
            false => self.poll(Duration::ZERO, false),
        }
    }

    /// `poll(2)` on the streams (and the doorbell if `with_bell`) for at
    /// most `wait`; the results are in `self.fds`, the doorbell first.
    fn poll(&mut self, wait: Duration, with_bell: bool) {
        self.fds.clear();
        let bell = if with_bell {
            self.receiver.bell.hear.as_raw_fd()
        } else {
            -1
        };
        self.fds.push(libc::pollfd {
            fd: bell,
            events: libc::POLLIN,
            revents: 0,
        });
        for stream in &self.streams {
            self.fds.push(libc::pollfd {
                fd: stream.fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        // Rounded up, so the loop never wakes just before its deadline.
        let millis = wait.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
        // SAFETY: `fds` is a valid, initialised array of `len` pollfds
        // that lives across the call; a negative fd is ignored by poll.
        let ready = unsafe { libc::poll(self.fds.as_mut_ptr(), self.fds.len() as libc::nfds_t, millis) };
        if ready < 0 {
            // EINTR: the caller looks again at once. Clear what a
            // failed call may have left.
            for fd in &mut self.fds {
                fd.revents = 0;
            }
        }
    }

    /// Reads the streams the last poll found readable, adding their
    /// messages to `turn`; drops those that ended. True if any input came.
    fn read_ready(&mut self, now: Instant, turn: &mut Vec<NodeInput>) -> bool {
        let before = turn.len();
        // The streams' results follow the doorbell's slot, in order.
        let mut results = self.fds.iter().skip(1);
        self.streams.retain_mut(|stream| {
            let readable = results.next().is_some_and(|fd| fd.revents != 0);
            !readable || stream.read(now, turn)
        });
        turn.len() > before
    }

    /// Drops the streams quiet past the read timeout: a live peer's link
    /// sends heartbeat frames well within it (`peer::link`).
    fn close_expired(&mut self, now: Instant) {
        self.streams.retain(|stream| {
            let expired = stream.expired(now);
            if expired {
                tracing::debug!("raft stream from a peer timed out");
            }
            !expired
        });
    }
}
