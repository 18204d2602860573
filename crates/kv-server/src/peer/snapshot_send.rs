//! Sending raft snapshots to peers. The store's contents travel apart
//! from the raft stream, as etcd sends its database file apart from raft
//! messages, because a store can be far larger than any one message.
//!
//! Raft's snapshot message carries only metadata (`raft::log`). The
//! transport hands it to the peer's snapshot sender, which writes the
//! store to a local file (`member/snap-out-<peer>.tmp`; the store's read
//! lock is held only for that local write), then streams the message and
//! the file in [`SNAPSHOT_CHUNK_BYTES`] chunks over `Peer.Snapshot`, and
//! reports the outcome to raft. One transfer per peer at a time.
//!
//! The file may be further along than the message's index: the store has
//! applied more since raft asked. The receiver (`snapshot_receive.rs`)
//! keeps the file's own, higher consistent index and skips the entries in
//! between.

use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use protobuf::Message as _;
use raft::prelude::Message;
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::peer::channels::endpoint;
use crate::proto::kvserverpb::peer_client::PeerClient;
use crate::proto::kvserverpb::SnapshotChunk;
use crate::raft::inbox::NodeSender;
use crate::raft::input::NodeInput;
use crate::storage::layout::DataDir;

/// Bytes of store data per chunk: a quarter of the peer stream's 4 MiB
/// batches, so a transfer interleaves well with other traffic and each
/// chunk is far below the 64 MiB peer message bound.
pub const SNAPSHOT_CHUNK_BYTES: usize = 1 << 20;

/// Chunks read ahead of the network per transfer.
const SNAPSHOT_CHUNKS_AHEAD: usize = 4;

/// How long one transfer may take in all. A full 2 GiB store (etcd's
/// default quota) at a slow 20 MB/s takes under two minutes; ten leave
/// room, and a stuck transfer is then reported failed and raft retries.
pub const SNAPSHOT_SEND_TIMEOUT: Duration = Duration::from_secs(600);

/// What snapshots are made from: the store, dumped to a file in the data
/// directory.
pub struct SnapshotSource {
    pub store: Arc<mvcc::Store>,
    pub dir: DataDir,
}

/// Sends the snapshots raft gives for one peer, one at a time, reporting
/// each outcome to the raft loop.
pub async fn send_loop(
    peer: u64,
    url: String,
    mut snapshots: mpsc::Receiver<Message>,
    source: Arc<SnapshotSource>,
    node: NodeSender,
) {
    while let Some(message) = snapshots.recv().await {
        let index = message.get_snapshot().get_metadata().index;
        let result = tokio::time::timeout(SNAPSHOT_SEND_TIMEOUT, send(peer, &url, message, &source)).await;
        let failed = match result {
            Ok(Ok(bytes)) => {
                tracing::info!(peer = format!("{peer:x}"), index, bytes, "sent a snapshot");
                false
            }
            Ok(Err(error)) => {
                tracing::warn!(peer = format!("{peer:x}"), index, error, "sending a snapshot failed");
                true
            }
            Err(_) => {
                tracing::warn!(peer = format!("{peer:x}"), index, "sending a snapshot timed out");
                true
            }
        };
        // Raft waits for this report before it sends the peer anything but
        // heartbeats, so it must arrive: block (off the runtime) if the
        // loop's queue is full.
        let node = node.clone();
        let _ = tokio::task::spawn_blocking(move || node.send(NodeInput::SnapshotStatus { to: peer, failed })).await;
    }
}

/// One transfer: the store to a local file, then the file to the peer.
/// Returns the bytes of store data sent.
async fn send(peer: u64, url: &str, message: Message, source: &SnapshotSource) -> Result<u64, String> {
    let path = source.dir.outgoing_snapshot(peer);
    let store = source.store.clone();
    let dump_path = path.clone();
    let dumped = tokio::task::spawn_blocking(move || -> Result<u64, String> {
        let file = std::fs::File::create(&dump_path).map_err(|e| format!("{}: {e}", dump_path.display()))?;
        let mut out = std::io::BufWriter::new(file);
        let index = store.snapshot_to(&mut out).map_err(|e| e.to_string())?;
        out.flush().map_err(|e| e.to_string())?;
        Ok(index)
    })
    .await
    .map_err(|e| e.to_string())?;
    let result = match dumped {
        Ok(_) => stream_file(url, &message, &path).await,
        Err(error) => Err(error),
    };
    let _ = tokio::fs::remove_file(&path).await;
    result
}

async fn stream_file(url: &str, message: &Message, path: &Path) -> Result<u64, String> {
    let channel = endpoint(url)
        .map_err(|e| e.to_string())?
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    let mut client = PeerClient::new(channel);
    let mut file = tokio::fs::File::open(path).await.map_err(|e| e.to_string())?;
    let (chunks, stream) = mpsc::channel(SNAPSHOT_CHUNKS_AHEAD);
    let first = SnapshotChunk {
        message: message.write_to_bytes().map_err(|e| e.to_string())?,
        data: Vec::new(),
    };
    let pump = async move {
        let mut sent = 0u64;
        if chunks.send(first).await.is_err() {
            return Ok(sent);
        }
        loop {
            let mut data = vec![0u8; SNAPSHOT_CHUNK_BYTES];
            let mut filled = 0;
            while filled < data.len() {
                match file.read(&mut data[filled..]).await {
                    Ok(0) => break,
                    Ok(n) => filled += n,
                    Err(error) => return Err(error.to_string()),
                }
            }
            if filled == 0 {
                return Ok(sent);
            }
            data.truncate(filled);
            sent += filled as u64;
            if chunks
                .send(SnapshotChunk {
                    message: Vec::new(),
                    data,
                })
                .await
                .is_err()
            {
                return Ok(sent);
            }
        }
    };
    let (sent, answer) = tokio::join!(pump, client.snapshot(ReceiverStream::new(stream)));
    answer.map_err(|status| status.to_string())?;
    sent
}
