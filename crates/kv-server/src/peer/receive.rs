//! The receiving end of peers' raft streams (`peer::frames`): each
//! connection is read by a task on the member's runtime, and every
//! read's whole frames go to the raft loop as one input. The task runs
//! on the workers that also serve clients, so on a busy member one
//! wake-up of a worker reads peers and clients alike; a thread per
//! connection measured more context switches per write (pinned, about
//! twice as many: `docs/benchmarks/history.md`).
//!
//! The listener (`server::listener`) hands a connection here once it has
//! told it from a gRPC one.

use std::io;
use std::sync::mpsc::SyncSender;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::OwnedSemaphorePermit;

use crate::membership::SharedMembership;
use crate::peer::frames::{self, FrameReader, HELLO_BYTES, REMOVED};
use crate::peer::timeouts::PeerTimeouts;
use crate::raft::input::NodeInput;

/// Where received raft messages go, and who may send them.
pub struct RaftInbound {
    pub node: SyncSender<NodeInput>,
    pub membership: Arc<SharedMembership>,
    /// The hello, and then each read, must come within `timeouts.read`
    /// (etcd's `--raft-read-timeout`): a live peer's sender keeps its
    /// stream from going quiet that long with heartbeats (`peer::link`),
    /// so a stream that does is a dead peer's, and its task is freed.
    pub timeouts: PeerTimeouts,
}

impl RaftInbound {
    /// Reads `stream` in a task of its own, which holds `permit` (the
    /// listener's connection bound) until the stream ends.
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
        let mut hello = [0u8; HELLO_BYTES];
        tokio::time::timeout(self.timeouts.read, stream.read_exact(&mut hello))
            .await
            .map_err(timed_out)??;
        let from = frames::parse_hello(&hello).ok_or_else(|| io::Error::other("not a raft stream"))?;
        let received = crate::metrics::metrics()
            .network
            .peer_received_bytes
            .with_label_values(&[&format!("{from:x}")]);
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
