//! Receiving a raft snapshot from the leader. The chunks go to
//! `member/snap-in-<index>.tmp`, which is synced and renamed to the
//! pending snapshot `member/snap-<index>-<term>.db`, and only then is the
//! message handed to raft. The raft loop records the snapshot in the WAL
//! and the apply stage restores the store from the file, records the
//! marker and deletes the file; `storage::pending` says how a crash in
//! between is finished.

use protobuf::Message as _;
use raft::prelude::{Message, MessageType};
use tokio::io::AsyncWriteExt;
use tonic::{Status, Streaming};

use crate::proto::kvserverpb::SnapshotChunk;
use crate::raft::inbox::NodeSender;
use crate::raft::input::NodeInput;
use crate::storage::layout::DataDir;

/// Receives one snapshot: writes it to a pending file, durably, then hands
/// raft the message. The file's name says which snapshot it holds, so the
/// message carries no path.
pub async fn receive(dir: &DataDir, node: &NodeSender, mut chunks: Streaming<SnapshotChunk>) -> Result<(), Status> {
    let first = chunks
        .message()
        .await?
        .ok_or_else(|| Status::invalid_argument("empty snapshot stream"))?;
    let message = Message::parse_from_bytes(&first.message)
        .map_err(|e| Status::invalid_argument(format!("bad raft message: {e}")))?;
    if message.get_msg_type() != MessageType::MsgSnapshot {
        return Err(Status::invalid_argument("the first chunk is not a snapshot message"));
    }
    let (index, term) = {
        let metadata = message.get_snapshot().get_metadata();
        (metadata.index, metadata.term)
    };
    let temporary = dir.incoming_snapshot(index);
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
    let path = dir.pending_snapshot(index, term);
    tokio::fs::rename(&temporary, &path).await.map_err(internal)?;
    tokio::fs::File::open(dir.member())
        .await
        .map_err(internal)?
        .sync_all()
        .await
        .map_err(internal)?;
    tracing::info!(index, term, bytes = received, "received a snapshot");
    node.try_send(NodeInput::Message(Box::new(message)))
        .map_err(|_| Status::unavailable("the raft loop is busy; send the snapshot again"))
}
