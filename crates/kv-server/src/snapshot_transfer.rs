//! Raft snapshots between members: the store's contents travel apart from
//! the raft stream, as etcd sends its database file apart from raft
//! messages, because a store can be far larger than any one message.
//!
//! # Sending (leader)
//! Raft's snapshot message carries only metadata (`log_store.rs`). The
//! transport hands it to the peer's snapshot sender, which writes the
//! store to a local file (`member/snap-out-<peer>.tmp`; the store's read
//! lock is held only for that local write), then streams the message and
//! the file in [`SNAPSHOT_CHUNK_BYTES`] chunks over `Peer.Snapshot`, and
//! reports the outcome to raft. One transfer per peer at a time.
//!
//! The file may be further along than the message's index: the store has
//! applied more since raft asked. The receiver keeps the file's own,
//! higher consistent index and skips the entries in between.
//!
//! # Receiving (follower)
//! The chunks go to `member/snap-in-<index>.tmp`, which is synced and
//! renamed to the pending snapshot `member/snap-<index>-<term>.db`
//! ([`pending_name`]), and only then is the message handed to raft, with
//! the file's path as the snapshot's data. The raft loop records the
//! snapshot in the WAL and the apply stage restores the store from the
//! file, records the marker and deletes the file.
//!
//! # Crash safety
//! A pending file outlives a crash anywhere between its rename and the
//! marker. On start (`raft_storage.rs`) a pending snapshot newer than the
//! marker is used if the WAL holds its record: the store is restored from
//! it (again, if a restore was cut short) and the marker written. If the
//! WAL does not hold it, raft never took it, and the file is deleted.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::mpsc::SyncSender;
use std::sync::Arc;
use std::time::Duration;

use protobuf::Message as _;
use raft::prelude::{Message, MessageType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use crate::node::NodeInput;
use crate::proto::kvserverpb::peer_client::PeerClient;
use crate::proto::kvserverpb::SnapshotChunk;
use crate::state::MemberState;

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

/// The pending snapshot file for raft index `index` at `term`.
pub fn pending_name(index: u64, term: u64) -> String {
    format!("snap-{index:016x}-{term:016x}.db")
}

/// Pending snapshot files in `data_dir/member`: (index, term, path), in
/// index order.
pub fn pending(data_dir: &Path) -> Vec<(u64, u64, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(data_dir.join("member")) else {
        return Vec::new();
    };
    let mut found: Vec<(u64, u64, PathBuf)> = entries
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let rest = name.strip_prefix("snap-")?.strip_suffix(".db")?;
            let (index, term) = rest.split_once('-')?;
            let index = u64::from_str_radix(index, 16).ok()?;
            let term = u64::from_str_radix(term, 16).ok()?;
            Some((index, term, entry.path()))
        })
        .collect();
    found.sort();
    found
}

/// Deletes pending snapshot files at or below `index`.
pub fn remove_pending_through(data_dir: &Path, index: u64) {
    for (at, _, path) in pending(data_dir) {
        if at <= index {
            if let Err(error) = std::fs::remove_file(&path) {
                tracing::warn!(%error, path = %path.display(), "could not delete a used snapshot file");
            }
        }
    }
}

/// Sends the snapshots raft gives for one peer, one at a time, reporting
/// each outcome to the raft loop.
pub async fn send_loop(
    peer: u64,
    url: String,
    mut snapshots: mpsc::Receiver<Message>,
    state: Arc<MemberState>,
    node: SyncSender<NodeInput>,
) {
    while let Some(message) = snapshots.recv().await {
        let index = message.get_snapshot().get_metadata().index;
        let result = tokio::time::timeout(SNAPSHOT_SEND_TIMEOUT, send(peer, &url, message, &state)).await;
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
async fn send(peer: u64, url: &str, message: Message, state: &Arc<MemberState>) -> Result<u64, String> {
    let path = state.config.data_dir().join(format!("member/snap-out-{peer:x}.tmp"));
    let store = state.store.clone();
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
    let channel = tonic::transport::Endpoint::from_shared(url.to_string())
        .map_err(|e| e.to_string())?
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(1))
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

/// Receives one snapshot: writes it to a pending file, durably, then hands
/// raft the message with the file's path as its data.
pub async fn receive(
    data_dir: &Path,
    node: &SyncSender<NodeInput>,
    mut chunks: Streaming<SnapshotChunk>,
) -> Result<(), Status> {
    let first = chunks
        .message()
        .await?
        .ok_or_else(|| Status::invalid_argument("empty snapshot stream"))?;
    let mut message = Message::parse_from_bytes(&first.message)
        .map_err(|e| Status::invalid_argument(format!("bad raft message: {e}")))?;
    if message.get_msg_type() != MessageType::MsgSnapshot {
        return Err(Status::invalid_argument("the first chunk is not a snapshot message"));
    }
    let (index, term) = {
        let metadata = message.get_snapshot().get_metadata();
        (metadata.index, metadata.term)
    };
    let member_dir = data_dir.join("member");
    let temporary = member_dir.join(format!("snap-in-{index:016x}.tmp"));
    let internal = |e: std::io::Error| Status::internal(format!("writing a received snapshot: {e}"));
    let mut file = tokio::fs::File::create(&temporary).await.map_err(internal)?;
    let mut received = first.data.len() as u64;
    file.write_all(&first.data).await.map_err(internal)?;
    while let Some(chunk) = chunks.message().await? {
        received += chunk.data.len() as u64;
        file.write_all(&chunk.data).await.map_err(internal)?;
    }
    file.sync_all().await.map_err(internal)?;
    drop(file);
    let path = member_dir.join(pending_name(index, term));
    tokio::fs::rename(&temporary, &path).await.map_err(internal)?;
    tokio::fs::File::open(&member_dir)
        .await
        .map_err(internal)?
        .sync_all()
        .await
        .map_err(internal)?;
    tracing::info!(index, term, bytes = received, "received a snapshot");
    message.mut_snapshot().data = path.to_string_lossy().into_owned().into_bytes().into();
    node.try_send(NodeInput::Message(Box::new(message)))
        .map_err(|_| Status::unavailable("the raft loop is busy; send the snapshot again"))
}
