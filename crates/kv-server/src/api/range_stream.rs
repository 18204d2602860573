//! etcd 3.7's `KV.RangeStream`: a range answered in chunks, so that
//! neither member nor client holds a big answer whole.
//!
//! The contract, as etcd 3.7.3 keeps it:
//! - Merging the chunks (kvs appended, the rest from the last chunk) gives
//!   exactly Range's answer. Only the last chunk has the header, `more`
//!   and `count`; every other chunk has key-values only, and at least one.
//! - One ReadIndex round first unless serializable; auth is checked once,
//!   for reading the whole range, and again after the last chunk (a
//!   changed auth revision ends the stream with etcd's error).
//! - Chunks are read at one revision: the request's, or the store's at the
//!   first chunk. A compaction past it ends the stream with "compacted"
//!   after what was sent.
//! - Custom sort orders and revision filters are refused (Unimplemented).
//!   A sort target with no order is accepted; its answer is Range's,
//!   computed whole and then cut into chunks (etcd sorts each chunk, which
//!   differs from Range past the first).
//!
//! Chunks start at [`FIRST_CHUNK_KEYS`] keys and double while their
//! encoding stays under half of `--max-request-bytes`, halving above
//! twice it, as etcd sizes them. Each chunk is a separate read of the
//! store, so its lock is held for one chunk, and at most
//! [`CHUNKS_AHEAD`] chunks wait for a slow client.

use std::pin::Pin;
use std::sync::Arc;

use prost::Message as _;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::api::errors::store_status;
use crate::auth::perms::Access;
use crate::auth::Caller;
use crate::member::core::Member;
use crate::proto::convert;
use crate::proto::etcdserverpb as pb;

/// Keys in the first chunk: etcd's `initialStreamChunkLimit`, so a small
/// range is answered in one chunk as quickly as by Range.
pub const FIRST_CHUNK_KEYS: i64 = 10;

/// Chunks read ahead of what the client has taken: one being sent, one
/// ready. With chunks near `--max-request-bytes` (1.5 MiB by default)
/// this bounds a stream's memory to a few MiB however big its range.
pub const CHUNKS_AHEAD: usize = 2;

pub type RangeStream = Pin<Box<dyn Stream<Item = Result<pb::RangeStreamResponse, Status>> + Send>>;

/// The RPC: checks, then a task that reads and sends the chunks.
pub async fn range_stream(
    member: &Arc<Member>,
    request: Request<pb::RangeRequest>,
) -> Result<Response<RangeStream>, Status> {
    let caller = {
        let range = request.get_ref();
        let touch = (&range.key[..], &range.range_end[..], Access::Read);
        member
            .authorize(request.metadata(), request.extensions(), &[touch])
            .await?
    };
    let request = request.into_inner();
    check(&request)?;
    if !request.serializable {
        member.linearize().await?;
    }
    crate::metrics::metrics().mvcc.range_total.inc();
    let (out, chunks) = mpsc::channel(CHUNKS_AHEAD);
    tokio::spawn(send(member.clone(), caller, request, out));
    Ok(Response::new(Box::pin(ReceiverStream::new(chunks))))
}

/// etcd 3.7's checks of a RangeStream request, in its order.
fn check(request: &pb::RangeRequest) -> Result<(), Status> {
    use pb::range_request::{SortOrder, SortTarget};
    if request.key.is_empty() {
        return Err(store_status(&mvcc::Error::EmptyKey));
    }
    let (Ok(order), Ok(target)) = (
        SortOrder::try_from(request.sort_order),
        SortTarget::try_from(request.sort_target),
    ) else {
        return Err(Status::invalid_argument("etcdserver: invalid sort option"));
    };
    if !(order == SortOrder::None || (order == SortOrder::Ascend && target == SortTarget::Key)) {
        return Err(Status::unimplemented("RangeStream does not support custom sort orders"));
    }
    if request.min_mod_revision != 0
        || request.max_mod_revision != 0
        || request.min_create_revision != 0
        || request.max_create_revision != 0
    {
        return Err(Status::unimplemented("RangeStream does not support revision filters"));
    }
    Ok(())
}

type Out = mpsc::Sender<Result<pb::RangeStreamResponse, Status>>;

async fn send(member: Arc<Member>, caller: Caller, request: pb::RangeRequest, out: Out) {
    let sent = if request.count_only || request.limit < 0 || request.sort_target != 0 {
        send_whole(&member, &request, &out).await
    } else {
        send_chunks(&member, &request, &out).await
    };
    let end = match sent {
        Ok(true) => member.still_authorized(&caller).map_err(Status::from),
        Ok(false) => return,
        Err(status) => Err(status),
    };
    if let Err(status) = end {
        let _ = out.send(Err(status)).await;
    }
}

fn chunk(response: pb::RangeResponse) -> Result<pb::RangeStreamResponse, Status> {
    Ok(pb::RangeStreamResponse {
        range_response: Some(response),
    })
}

/// Range's answer computed whole, then cut: for count-only (one chunk), a
/// negative limit (no limit, one chunk, as etcd) and a sort target with
/// no order. Ok(false) when the client went away.
async fn send_whole(member: &Member, request: &pb::RangeRequest, out: &Out) -> Result<bool, Status> {
    let whole = member.read_range(&convert::range_request(request.clone()))?;
    let header = member.header(whole.revision);
    let mut response = convert::range_response(whole, header);
    let mut kvs = std::mem::take(&mut response.kvs).into_iter().peekable();
    let mut size = FIRST_CHUNK_KEYS as usize;
    loop {
        let part: Vec<_> = kvs.by_ref().take(size).collect();
        if kvs.peek().is_none() {
            response.kvs = part;
            return Ok(out.send(chunk(response)).await.is_ok());
        }
        let part = pb::RangeResponse {
            kvs: part,
            ..pb::RangeResponse::default()
        };
        size = next_chunk_keys(size as i64, part.encoded_len(), member.config().max_request_bytes) as usize;
        if out.send(chunk(part)).await.is_err() {
            return Ok(false);
        }
    }
}

/// Reads the range chunk by chunk at one revision, each chunk after the
/// last key of the one before. Ok(false) when the client went away.
async fn send_chunks(member: &Member, request: &pb::RangeRequest, out: &Out) -> Result<bool, Status> {
    let total_limit = if request.limit == 0 { i64::MAX } else { request.limit };
    let mut read = convert::range_request(request.clone());
    read.limit = FIRST_CHUNK_KEYS.min(total_limit);
    let mut streamed: i64 = 0;
    let mut header_revision = 0;
    loop {
        let part = member.read_range(&read)?;
        if header_revision == 0 {
            header_revision = part.revision;
            if read.revision == 0 {
                read.revision = header_revision;
            }
        }
        let keys = part.kvs.len() as i64;
        let done = !part.more || streamed + keys == total_limit;
        let next_key = part.kvs.last().map(|kv| {
            let mut key = kv.key.clone();
            key.push(0);
            key
        });
        // `count` is every key from this chunk's start on.
        let (more, count) = (part.more, streamed + part.count);
        let mut response = convert::range_response(part, None);
        if done {
            response.header = member.header(header_revision);
            response.more = more;
            response.count = count;
            return Ok(out.send(chunk(response)).await.is_ok());
        }
        response.more = false;
        response.count = 0;
        let size = response.encoded_len();
        if out.send(chunk(response)).await.is_err() {
            return Ok(false);
        }
        streamed += keys;
        read.key = next_key.expect("a chunk with more after it has keys");
        read.limit = next_chunk_keys(read.limit, size, member.config().max_request_bytes).min(total_limit - streamed);
    }
}

/// etcd's `adjustChunkLimit`: double while a chunk's encoding is under
/// half the target, halve above twice it, never below one key.
fn next_chunk_keys(keys: i64, encoded: usize, target: usize) -> i64 {
    if encoded < target / 2 {
        keys.saturating_mul(2)
    } else if encoded > target.saturating_mul(2) {
        (keys / 2).max(1)
    } else {
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_grow_and_shrink_toward_the_target() {
        assert_eq!(next_chunk_keys(10, 100, 1000), 20);
        assert_eq!(next_chunk_keys(10, 700, 1000), 10);
        assert_eq!(next_chunk_keys(10, 2500, 1000), 5);
        assert_eq!(next_chunk_keys(1, 2500, 1000), 1);
    }

    #[test]
    fn refuses_what_etcd_refuses() {
        let request = |f: fn(&mut pb::RangeRequest)| {
            let mut request = pb::RangeRequest {
                key: b"a".to_vec(),
                ..pb::RangeRequest::default()
            };
            f(&mut request);
            check(&request)
                .err()
                .map(|status| (status.code(), status.message().to_string()))
        };
        assert_eq!(request(|_| {}), None);
        assert_eq!(request(|r| r.sort_target = 2), None, "a target with no order");
        assert_eq!(
            request(|r| r.sort_order = 1),
            None,
            "ascending by key is the stream's order"
        );
        assert_eq!(
            request(|r| r.key.clear()),
            Some((tonic::Code::InvalidArgument, "etcdserver: key is not provided".into()))
        );
        assert_eq!(
            request(|r| r.sort_order = 7),
            Some((tonic::Code::InvalidArgument, "etcdserver: invalid sort option".into()))
        );
        assert_eq!(
            request(|r| r.sort_order = 2),
            Some((
                tonic::Code::Unimplemented,
                "RangeStream does not support custom sort orders".into()
            ))
        );
        assert_eq!(
            request(|r| r.max_create_revision = 3),
            Some((
                tonic::Code::Unimplemented,
                "RangeStream does not support revision filters".into()
            ))
        );
    }
}
