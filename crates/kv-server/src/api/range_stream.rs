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
//! twice it, as etcd sizes them. The store is read a window of several
//! chunks at a time (see [`next_window_keys`]), each window a separate
//! read, so the store's lock is held for one window, as long as a Range
//! of its size holds it. The window is cut into chunks, and at most
//! [`CHUNKS_AHEAD`] chunks wait for a slow client, beside the window
//! being sent and the one read after it. Windows are read uncounted; the
//! last chunk's `count` is the keys sent, or, when the limit cut the
//! stream short, one count-only read at the stream's revision.
//!
//! Memory: a window is sized, as etcd sizes a chunk, from the keys before
//! it, so a stream holds about two windows and two chunks (some 30 MiB at
//! the default `--max-request-bytes`). Like etcd's chunks, a window holds
//! more when its values are much larger than those before it, at most
//! [`WINDOW_CHUNKS`] of etcd's chunks.

use std::collections::VecDeque;
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
use crate::error::RequestError;
use crate::member::core::Member;
use crate::proto::convert;
use crate::proto::etcdserverpb as pb;
use crate::proto::mvccpb;

/// Keys in the first chunk: etcd's `initialStreamChunkLimit`, so a small
/// range is answered in one chunk as quickly as by Range.
pub const FIRST_CHUNK_KEYS: i64 = 10;

/// Chunks cut ahead of what the client has taken: one being sent, one
/// ready. With chunks near `--max-request-bytes` (1.5 MiB by default)
/// they are a few MiB of a stream's memory, the windows the rest.
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
///
/// A negative limit's one message is bounded as etcd's stream bounds it:
/// an answer over the send limit is refused with the text of grpc's
/// stream send. A sort target with no order is read whole without the
/// bound, as before it: etcd reads and sends it in chunks, none near the
/// limit.
async fn send_whole(member: &Member, request: &pb::RangeRequest, out: &Out) -> Result<bool, Status> {
    let mut read = convert::range_request(request.clone());
    let whole = match request.limit < 0 {
        true => member.read_range_bounded(read),
        false => {
            read.answer_bytes_max = mvcc::AnswerBytesMax(u64::MAX);
            member.read_range(&read)
        }
    }
    .map_err(stream_refusal)?;
    let header = member.header(whole.revision);
    let mut response = convert::range_response(whole, header);
    let mut cutter = Cutter::new(member.config().max_request_bytes);
    cutter.push(std::mem::take(&mut response.kvs));
    while let Some(part) = cutter.next_chunk(false) {
        if out.send(chunk(part)).await.is_err() {
            return Ok(false);
        }
    }
    response.kvs = cutter.rest();
    Ok(out.send(chunk(response)).await.is_ok())
}

/// `error` as the stream ends with it: an answer over the send limit as
/// grpc's stream send refuses a message (its text has no "grpc: "; the
/// size is the answer's framed in a RangeStreamResponse).
fn stream_refusal(error: RequestError) -> Status {
    match error {
        RequestError::Store(mvcc::Error::AnswerTooLarge { bytes, max }) => Status::resource_exhausted(format!(
            "trying to send message larger than max ({} vs. {max})",
            mvcc::wire::framed_len(bytes)
        )),
        other => other.into(),
    }
}

/// One window of a stream: its key-values in key order, and whether
/// keys follow it.
struct Window {
    kvs: Vec<mvccpb::KeyValue>,
    /// The range has keys past this window (the store's `more`).
    more: bool,
    /// The stream ends with this window: no `more`, or the limit reached.
    last: bool,
}

/// Reads the range window by window at one revision, each window after
/// the last key of the one before, and sends it cut into chunks. Ok(false)
/// when the client went away.
///
/// A window is one sorted pass over the stored blocks (as Range reads),
/// so it is several chunks ([`WINDOW_CHUNKS`]) rather than one: the
/// revisions of a key range are spread over the whole store, and each
/// pass pays for a walk of the blocks between them whatever the number
/// of keys it finds. The first window is the first chunk alone, read
/// here, so a small range is answered as quickly as by Range; the next
/// window is read on a blocking thread while this one's chunks are sent.
async fn send_chunks(member: &Arc<Member>, request: &pb::RangeRequest, out: &Out) -> Result<bool, Status> {
    let total_limit = if request.limit == 0 { i64::MAX } else { request.limit };
    let mut read = convert::range_request(request.clone());
    read.limit = FIRST_CHUNK_KEYS.min(total_limit);
    read.uncounted = true;
    // A window is cut into chunks, never sent whole: not bounded as an
    // answer (the windows' sizes bound it).
    read.answer_bytes_max = mvcc::AnswerBytesMax(u64::MAX);
    // Ascending by key is the order windows come in; asked for, it would
    // make each window load the rest of the range to sort it.
    read.sort_order = mvcc::SortOrder::None;
    let first = member.read_range(&read)?;
    let header_revision = first.revision;
    if read.revision <= 0 {
        read.revision = header_revision;
    }
    // Keys read by the windows so far.
    let mut read_keys: i64 = 0;
    let mut window = window_of(first, &mut read, &mut read_keys, total_limit);
    let mut cutter = Cutter::new(member.config().max_request_bytes);
    loop {
        let next = (!window.last).then(|| {
            read.limit = next_window_keys(&window.kvs, cutter.chunk_keys, cutter.target).min(total_limit - read_keys);
            let (member, read) = (member.clone(), read.clone());
            tokio::task::spawn_blocking(move || member.read_range(&read))
        });
        cutter.push(window.kvs);
        while let Some(part) = cutter.next_chunk(!window.last) {
            if out.send(chunk(part)).await.is_err() {
                return Ok(false);
            }
        }
        let Some(next) = next else {
            // Without `more`, the stream read every key of the range.
            let count = if window.more {
                count_range(member, request, read.revision)?
            } else {
                read_keys
            };
            let response = pb::RangeResponse {
                header: member.header(header_revision),
                kvs: cutter.rest(),
                more: window.more,
                count,
            };
            return Ok(out.send(chunk(response)).await.is_ok());
        };
        let read_window = next
            .await
            .map_err(|error| Status::internal(format!("reading a stream's window: {error}")))??;
        window = window_of(read_window, &mut read, &mut read_keys, total_limit);
    }
}

/// A window read from the store, and `read` moved past it.
fn window_of(
    window: mvcc::RangeResponse,
    read: &mut mvcc::RangeRequest,
    read_keys: &mut i64,
    total_limit: i64,
) -> Window {
    *read_keys += window.kvs.len() as i64;
    let last = !window.more || *read_keys == total_limit;
    if let Some(kv) = window.kvs.last() {
        read.key.clone_from(&kv.key);
        read.key.push(0);
    }
    Window {
        more: window.more,
        last,
        kvs: window.kvs.into_iter().map(convert::key_value).collect(),
    }
}

/// Key-values read and not yet sent, cut into chunks as etcd sizes them:
/// [`FIRST_CHUNK_KEYS`], then as [`next_chunk_keys`] adjusts toward the
/// target (`--max-request-bytes`).
struct Cutter {
    pending: VecDeque<mvccpb::KeyValue>,
    chunk_keys: usize,
    target: usize,
}

impl Cutter {
    fn new(target: usize) -> Cutter {
        Cutter {
            pending: VecDeque::new(),
            chunk_keys: FIRST_CHUNK_KEYS as usize,
            target,
        }
    }

    fn push(&mut self, kvs: Vec<mvccpb::KeyValue>) {
        self.pending.extend(kvs);
    }

    /// The next chunk before the last: while more than a chunk is
    /// pending, or a whole chunk when more windows follow (so the last
    /// chunk, which carries the header, is never empty of what it could
    /// hold).
    fn next_chunk(&mut self, more_windows: bool) -> Option<pb::RangeResponse> {
        let pending = self.pending.len();
        if pending < self.chunk_keys || (pending == self.chunk_keys && !more_windows) {
            return None;
        }
        let part = pb::RangeResponse {
            kvs: self.pending.drain(..self.chunk_keys).collect(),
            ..pb::RangeResponse::default()
        };
        self.chunk_keys = next_chunk_keys(self.chunk_keys as i64, part.encoded_len(), self.target) as usize;
        Some(part)
    }

    /// The last chunk's key-values.
    fn rest(self) -> Vec<mvccpb::KeyValue> {
        self.pending.into()
    }
}

/// Every key of the request's range at `revision`, as the last chunk of
/// a stream its limit cut short has it: one count-only read, as etcd 3.7
/// counts once after its chunks (which it reads uncounted).
fn count_range(member: &Member, request: &pb::RangeRequest, revision: i64) -> Result<i64, Status> {
    let count = mvcc::RangeRequest {
        key: request.key.clone(),
        range_end: request.range_end.clone(),
        revision,
        count_only: true,
        ..mvcc::RangeRequest::default()
    };
    Ok(member.read_range(&count)?.count)
}

/// Chunks a window reads at most, in keys and in bytes: enough that its
/// pass over the stored blocks finds many of its keys in each block it
/// walks.
pub const WINDOW_CHUNKS: usize = 8;

/// The most bytes of key-values a window is sized for, whatever the chunk
/// target: two windows are held at once (one sent, one read), so a
/// stream's memory stays under half the 64 MiB a member may grow by
/// while serving one, even under a large `--max-request-bytes`.
pub const WINDOW_BYTES_MAX: usize = 16 << 20;

/// The next window's keys, estimated from `kvs` (the window before) as
/// etcd estimates a chunk's from the chunk before: [`WINDOW_CHUNKS`]
/// chunk targets of bytes (at most [`WINDOW_BYTES_MAX`]) at their size,
/// and at most [`WINDOW_CHUNKS`] chunks of the current chunk's keys, so
/// windows grow only as fast as etcd's chunks do; at least one chunk.
fn next_window_keys(kvs: &[mvccpb::KeyValue], chunk_keys: usize, target: usize) -> i64 {
    // A key-value's encoding in a chunk: its own, a tag and a length.
    let bytes: usize = kvs.iter().map(|kv| kv.encoded_len() + 2).sum();
    let per_key = bytes.checked_div(kvs.len()).unwrap_or(1).max(1);
    let window = target.saturating_mul(WINDOW_CHUNKS).min(WINDOW_BYTES_MAX);
    (window / per_key)
        .min(chunk_keys.saturating_mul(WINDOW_CHUNKS))
        .max(chunk_keys) as i64
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

    fn kv(n: usize) -> mvccpb::KeyValue {
        mvccpb::KeyValue {
            key: format!("k{n:06}").into_bytes(),
            value: vec![b'v'; 100],
            ..mvccpb::KeyValue::default()
        }
    }

    /// Cuts windows of these sizes (the last one ends the stream) and
    /// returns each chunk's keys, the last chunk's after the others.
    fn cut(windows: &[usize], target: usize) -> Vec<Vec<mvccpb::KeyValue>> {
        let mut cutter = Cutter::new(target);
        let (mut chunks, mut n) = (Vec::new(), 0);
        for (i, &size) in windows.iter().enumerate() {
            let more_windows = i + 1 < windows.len();
            cutter.push((n..n + size).map(kv).collect());
            n += size;
            while let Some(part) = cutter.next_chunk(more_windows) {
                chunks.push(part.kvs);
            }
        }
        chunks.push(cutter.rest());
        chunks
    }

    // Goal: however the windows fall, the chunks carry every key once, in
    // order; no chunk but a lone last one is empty; chunks are sized as
    // etcd sizes them, whatever the window boundaries.
    #[test]
    fn windows_are_cut_into_etcds_chunks() {
        let one_window = cut(&[1000], 4000);
        for windows in [
            vec![1000],
            vec![10, 990],
            vec![10, 7, 500, 1, 482],
            vec![10, 20, 40, 930],
        ] {
            let chunks = cut(&windows, 4000);
            let keys: Vec<_> = chunks.iter().flatten().cloned().collect();
            assert_eq!(keys, (0..1000).map(kv).collect::<Vec<_>>(), "windows {windows:?}");
            assert!(chunks.iter().all(|chunk| !chunk.is_empty()), "windows {windows:?}");
            let sizes: Vec<_> = chunks.iter().map(Vec::len).collect();
            let expected: Vec<_> = one_window.iter().map(Vec::len).collect();
            assert_eq!(sizes, expected, "windows {windows:?}");
        }
        // ~113-byte key-values against a 4000-byte target: 10 (1.1 KB,
        // under half the target, so doubled), then 20 (2.3 KB, kept).
        assert_eq!(
            one_window.iter().map(Vec::len).take(4).collect::<Vec<_>>(),
            [10, 20, 20, 20]
        );
        assert_eq!(
            cut(&[0], 4000),
            vec![Vec::new()],
            "an empty range is one empty last chunk"
        );
        assert_eq!(cut(&[10, 0], 4000).iter().map(Vec::len).collect::<Vec<_>>(), [10, 0]);
    }

    // Goal: a window holds several chunks' bytes, at most the bound; it
    // grows no faster than the chunks (so keys much larger than those it
    // was sized from cost at most WINDOW_CHUNKS of etcd's chunks), and
    // is never less than the next chunk.
    #[test]
    fn windows_hold_several_chunks() {
        let kvs: Vec<_> = (0..10).map(kv).collect();
        let per_key = kvs[0].encoded_len() + 2;
        assert_eq!(
            next_window_keys(&kvs, 100, 4000),
            (4000 * WINDOW_CHUNKS / per_key) as i64
        );
        assert_eq!(
            next_window_keys(&kvs, 1 << 15, 1 << 30),
            (WINDOW_BYTES_MAX / per_key) as i64
        );
        assert_eq!(next_window_keys(&kvs, 10, 1 << 30), (10 * WINDOW_CHUNKS) as i64);
        assert_eq!(next_window_keys(&kvs, 1000, 100), 1000);
        assert_eq!(next_window_keys(&[], 10_000, 4000), (4000 * WINDOW_CHUNKS) as i64);
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
