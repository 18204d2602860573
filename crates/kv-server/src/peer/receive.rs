//! The receiving end of peers' raft streams (`peer::frames`). A plain
//! TCP stream is read by the raft loop itself once its hello is read
//! here ([`LoopStream`], waited on by `raft::inbox`): a batch wakes one
//! thread, the loop, instead of a runtime worker that then wakes the
//! loop. A TLS stream is read by a task on the peer runtime, and every
//! read's whole frames go to the loop as one input. (A thread per
//! connection, reading and queueing, measured about twice the context
//! switches per write, pinned: `docs/benchmarks/history.md`.)
//!
//! The listener (`server::listener`) hands a connection here once it has
//! told it from a gRPC one.

use std::io::{self, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::OwnedSemaphorePermit;

use crate::membership::SharedMembership;
use crate::metrics::handles::Counter;
use crate::peer::frames::{self, FrameReader, HELLO_BYTES, REMOVED};
use crate::peer::timeouts::PeerTimeouts;
use crate::raft::inbox::{NodeSender, PeerStream, STREAM_READS_PER_TURN_MAX};
use crate::raft::input::NodeInput;

/// Where received raft messages go, and who may send them.
pub struct RaftInbound {
    pub node: NodeSender,
    pub membership: Arc<SharedMembership>,
    /// The hello, and then each read, must come within `timeouts.read`
    /// (etcd's `--raft-read-timeout`): a live peer's sender keeps its
    /// stream from going quiet that long with heartbeats (`peer::link`),
    /// so a stream that does is a dead peer's, and its task is freed.
    pub timeouts: PeerTimeouts,
}

impl RaftInbound {
    /// Reads the hello of a plain `stream` in a task, then hands the
    /// stream, with `permit` (the listener's connection bound), to the
    /// raft loop, which reads it from then on.
    pub fn serve_plain(self: &Arc<Self>, stream: tokio::net::TcpStream, permit: OwnedSemaphorePermit) {
        let inbound = self.clone();
        tokio::spawn(async move {
            let mut stream = stream;
            let from = match inbound.hello(&mut stream).await {
                Ok(from) => from,
                Err(error) => return tracing::debug!(%error, "raft stream from a peer ended"),
            };
            let socket = match stream.into_std() {
                Ok(socket) => socket,
                Err(error) => return tracing::debug!(%error, "raft stream from a peer ended"),
            };
            inbound.node.add_stream(Box::new(LoopStream {
                socket,
                from,
                reader: FrameReader::default(),
                received: received_from(from),
                last_read: Instant::now(),
                read_timeout: inbound.timeouts.read,
                membership: inbound.membership.clone(),
                _permit: permit,
            }));
        });
    }

    /// Reads the stream's hello within the read timeout: the sending
    /// member's id.
    async fn hello(&self, stream: &mut (impl AsyncRead + Unpin)) -> io::Result<u64> {
        let mut hello = [0u8; HELLO_BYTES];
        tokio::time::timeout(self.timeouts.read, stream.read_exact(&mut hello))
            .await
            .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))??;
        frames::parse_hello(&hello).ok_or_else(|| io::Error::other("not a raft stream"))
    }

    /// Reads `stream` (a TLS one: the raft loop reads plain sockets only)
    /// in a task of its own, which holds `permit` (the listener's
    /// connection bound) until the stream ends.
    pub fn serve<S>(self: &Arc<Self>, stream: S, permit: OwnedSemaphorePermit)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let inbound = self.clone();
        tokio::spawn(async move {
            let _permit = permit;
            if let Err(error) = inbound.receive(stream).await {
                tracing::debug!(%error, "raft stream from a peer ended");
            }
        });
    }

    async fn receive(&self, mut stream: impl AsyncRead + AsyncWrite + Unpin) -> io::Result<()> {
        let timed_out = |_| io::Error::from(io::ErrorKind::TimedOut);
        let from = self.hello(&mut stream).await?;
        let received = received_from(from);
        let mut reader = FrameReader::default();
        loop {
            let mut bytes = 0;
            let read = reader.read_async(&mut stream, &mut bytes);
            let Some(messages) = tokio::time::timeout(self.timeouts.read, read)
                .await
                .map_err(timed_out)??
            else {
                return Ok(());
            };
            received.inc_by(bytes);
            let removed = self.membership.get().removed.contains(&from);
            // A full queue drops the batch, as a lossy network would. A
            // removed member's last batch still goes to raft: a leader
            // that removed itself hands leadership over in it.
            if !messages.is_empty() {
                let _ = self.node.try_send(NodeInput::Messages(messages));
            }
            if removed {
                stream.write_all(&[REMOVED]).await?;
                return stream.flush().await;
            }
        }
    }
}

/// The count of bytes received from `from`, etcd's
/// `etcd_network_peer_received_bytes_total`.
fn received_from(from: u64) -> Counter {
    crate::metrics::metrics()
        .network
        .peer_received_bytes
        .with_label_values(&[&format!("{from:x}")])
}

/// A peer's plain raft stream, read by the raft loop (`raft::inbox`).
struct LoopStream {
    /// Non-blocking: tokio's socket, taken out of its runtime.
    socket: std::net::TcpStream,
    from: u64,
    reader: FrameReader,
    received: Counter,
    /// When bytes last came (or the stream was handed over).
    last_read: Instant,
    /// etcd's `--raft-read-timeout`: a stream quiet for longer is a dead
    /// peer's (its link sends heartbeats well within it).
    read_timeout: Duration,
    membership: Arc<SharedMembership>,
    _permit: OwnedSemaphorePermit,
}

impl PeerStream for LoopStream {
    fn fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }

    fn read(&mut self, now: Instant, turn: &mut Vec<NodeInput>) -> bool {
        let mut bytes = 0;
        let mut open = true;
        for _ in 0..STREAM_READS_PER_TURN_MAX {
            match self.reader.read(&mut self.socket, &mut bytes) {
                Ok(Some(messages)) if messages.is_empty() => {}
                Ok(Some(messages)) => turn.push(NodeInput::Messages(messages)),
                Ok(None) => {
                    open = false;
                    break;
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => {
                    tracing::debug!(%error, "raft stream from a peer ended");
                    open = false;
                    break;
                }
            }
        }
        if bytes > 0 {
            self.received.inc_by(bytes);
            self.last_read = now;
        }
        // A removed member's last batch still goes to raft (pushed above):
        // a leader that removed itself hands leadership over in it.
        if open && self.membership.get().removed.contains(&self.from) {
            let _ = self.socket.write_all(&[REMOVED]);
            return false;
        }
        open
    }

    fn expired(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.last_read) > self.read_timeout
    }
}
