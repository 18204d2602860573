//! A watch stream's responses on their way to its connection.
//!
//! The stream task puts responses in; the connection takes them out when
//! it has room to send, through [`Responses`], the response body's stream.
//! Responses of events are not built when their events arrive: each
//! watcher has at most one slot of events waiting, and events that arrive
//! while it waits join it. So a client that reads as fast as events come
//! gets one response per applied batch, and one that falls behind gets
//! fewer, larger responses, as etcd batches the events of watchers whose
//! client is slow; neither makes the stream wait, and the connection's
//! flow control is the only signal of how fast the client reads.
//!
//! A busy stream also holds back a watcher's second response within a
//! few milliseconds, so that its events merge (`pacing.rs`).
//!
//! # Bound
//! `bytes` counts what the waiting responses will put on the wire. The
//! stream task waits for it to fall below [`WATCH_STREAM_PENDING_BYTES_MAX`]
//! before it queues anything else, and stops taking applied batches past
//! it (it catches up from history later), so one stream holds at most
//! that much here, plus one applied batch's events for each of its
//! watchers.
//!
//! # Invariant
//! - every watcher serial in `events` has exactly one `Slot::Events` in
//!   `slots` or is held back by the pacing; a slot whose serial is not in
//!   `events` (a cancelled watcher's) is skipped;
//! - `bytes` is the sum of the messages' wire bytes and every waiting
//!   watcher's (`Waiting::bytes`).
//!
//! The tests assert it after every step.

use std::collections::hash_map::Entry;
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use parking_lot::Mutex;
use prost::Message as _;
use tokio::sync::Notify;
use tonic::Status;

use crate::proto::etcdserverpb as pb;
use crate::proto::watch_wire::{fragments, header_field, EventsResponse};
use crate::watch::id_hash::IdMap;
use crate::watch::pacing::Pacing;

/// Wire bytes one stream may have waiting for its client. A watcher of
/// every key during a 1000-client put run receives about 2 MB/s (18,000
/// events/s of ~100 bytes), so a client may fall two seconds behind before
/// its stream stops taking applied batches and later reads history
/// instead; ten streams whose clients stopped reading hold at most 40 MiB
/// here.
pub const WATCH_STREAM_PENDING_BYTES_MAX: usize = 4 << 20;

/// What one stream whose client stopped reading may make its member hold:
/// twice [`WATCH_STREAM_PENDING_BYTES_MAX`] (the waiting responses' bytes,
/// and the shared buffers they keep alive, at most as much again: see
/// `EventFields::pick`), plus 2 MiB for one merged response and one
/// batch past the bound, HTTP/2's send buffer for the stream (400 KiB)
/// and the encoder's chunk (32 KiB). `tests/watch_memory.rs` holds a
/// member to it.
pub const WATCH_STREAM_STALLED_BYTES_MAX: usize = 2 * WATCH_STREAM_PENDING_BYTES_MAX + (2 << 20);

/// One response as the codec encodes it.
#[derive(Debug)]
pub enum Outgoing {
    Message(pb::WatchResponse),
    Events(EventsResponse),
}

/// Boxed where large, so that a queue of slots costs 16 bytes a slot: a
/// client creating a thousand watchers queues a thousand responses.
enum Slot {
    Message(Box<pb::WatchResponse>),
    /// The waiting events of the watcher with this serial.
    Events(u64),
    /// The stream ends with this error.
    End(Box<Status>),
}

/// Slots, and waiting watchers, an outbox keeps room for once it has
/// emptied; past a burst (a client creating its watchers) the rest is
/// given back, so an idle stream costs little whatever it once queued.
const EMPTY_OUTBOX_ROOM: usize = 32;

/// Event bytes past which a watcher's waiting response takes no more
/// batches: later ones wait in a response of their own. One response then
/// holds at most this plus one batch (under 2 MiB), well below the 4 MiB
/// that gRPC clients take by default.
pub const WATCH_MERGED_RESPONSE_BYTES_MAX: usize = 1 << 20;

/// One watcher's waiting events: responses full at
/// [`WATCH_MERGED_RESPONSE_BYTES_MAX`], oldest first, then the one still
/// taking events.
struct Waiting {
    watch_id: i64,
    fragment: bool,
    full: VecDeque<Chunk>,
    open: Chunk,
}

impl Waiting {
    /// Wire bytes of all its responses: their events, and
    /// `RESPONSE_OVERHEAD_BYTES` for each.
    fn bytes(&self) -> usize {
        let chunks = self.full.iter().chain([&self.open]);
        chunks.map(|chunk| chunk.bytes + RESPONSE_OVERHEAD_BYTES).sum()
    }
}

/// The events of one response to be.
#[derive(Default)]
struct Chunk {
    /// The header revision to send them under: the last batch's.
    revision: i64,
    events: Vec<Bytes>,
    bytes: usize,
}

/// Builds response headers (etcd's header at a revision, with the current
/// term).
pub type Headers = Box<dyn Fn(i64) -> pb::ResponseHeader + Send + Sync>;

#[derive(Default)]
struct State {
    slots: VecDeque<Slot>,
    events: IdMap<u64, Waiting>,
    bytes: usize,
    /// The connection's task, waiting for a response.
    consumer: Option<Waker>,
    /// The stream task has ended: nothing more will come.
    closed: bool,
    /// The connection dropped the responses: the client is gone.
    gone: bool,
    /// Watchers' batches gathered since the pacing's window began, for
    /// its rate (`pacing.rs`).
    arrivals: usize,
}

struct Shared {
    state: Mutex<State>,
    /// Wakes the stream task: room below the bound, or the client gone.
    room: Notify,
}

/// The stream task's side.
pub struct Outbox {
    shared: Arc<Shared>,
}

/// The client is gone.
#[derive(Debug)]
pub struct Gone;

/// A new outbox and the responses it feeds; `headers` builds each
/// response's header, and events responses of watchers that asked for
/// fragments are split at `fragment_limit` bytes.
pub fn outbox(headers: Headers, fragment_limit: usize) -> (Outbox, Responses) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State::default()),
        room: Notify::new(),
    });
    let responses = Responses {
        shared: shared.clone(),
        ready: VecDeque::new(),
        pacing: Pacing::default(),
        headers,
        header_cache: None,
        fragment_limit,
    };
    (Outbox { shared }, responses)
}

impl Outbox {
    /// Waits until what is waiting is below the bound.
    pub async fn room(&self) -> Result<(), Gone> {
        loop {
            let notified = self.shared.room.notified();
            {
                let state = self.shared.state.lock();
                if state.gone {
                    return Err(Gone);
                }
                if state.bytes < WATCH_STREAM_PENDING_BYTES_MAX {
                    return Ok(());
                }
            }
            notified.await;
        }
    }

    /// Wakes when there may be room again, or the client may be gone;
    /// the caller checks which.
    pub async fn changed(&self) {
        self.shared.room.notified().await
    }

    pub fn is_full(&self) -> bool {
        self.shared.state.lock().bytes >= WATCH_STREAM_PENDING_BYTES_MAX
    }

    pub fn is_gone(&self) -> bool {
        self.shared.state.lock().gone
    }

    /// Queues a response built whole, after everything waiting.
    pub fn push(&self, response: pb::WatchResponse) {
        let mut state = self.shared.state.lock();
        state.bytes += response.encoded_len();
        state.slots.push_back(Slot::Message(Box::new(response)));
        wake(&mut state);
    }

    /// Ends the stream with `status` once everything before it is sent.
    pub fn end(&self, status: Status) {
        let mut state = self.shared.state.lock();
        state.slots.push_back(Slot::End(Box::new(status)));
        wake(&mut state);
    }

    /// Adds each watcher's new events, under a header at `revision`,
    /// after any of its events still waiting; a watcher with none waiting
    /// takes the last place.
    pub fn gather(&self, revision: i64, batch: impl IntoIterator<Item = Gathered>) {
        let mut guard = self.shared.state.lock();
        let state = &mut *guard;
        let mut added = false;
        for gathered in batch {
            added = true;
            state.arrivals += 1;
            let waiting = match state.events.entry(gathered.serial) {
                Entry::Occupied(entry) => entry.into_mut(),
                Entry::Vacant(entry) => {
                    state.slots.push_back(Slot::Events(gathered.serial));
                    state.bytes += RESPONSE_OVERHEAD_BYTES;
                    entry.insert(Waiting {
                        watch_id: gathered.watch_id,
                        fragment: gathered.fragment,
                        full: VecDeque::new(),
                        open: Chunk::default(),
                    })
                }
            };
            if waiting.open.bytes >= WATCH_MERGED_RESPONSE_BYTES_MAX {
                waiting.full.push_back(std::mem::take(&mut waiting.open));
                state.bytes += RESPONSE_OVERHEAD_BYTES;
            }
            let bytes: usize = gathered.events.iter().map(Bytes::len).sum();
            waiting.open.revision = revision;
            waiting.open.bytes += bytes;
            if waiting.open.events.is_empty() {
                waiting.open.events = gathered.events;
            } else {
                waiting.open.events.extend(gathered.events);
            }
            state.bytes += bytes;
        }
        if added {
            wake(state);
        }
    }

    /// Drops the waiting events of a cancelled watcher.
    pub fn forget(&self, serial: u64) {
        let mut state = self.shared.state.lock();
        if let Some(waiting) = state.events.remove(&serial) {
            state.bytes -= waiting.bytes();
        }
    }

    /// Whether any watcher's events are waiting.
    pub fn has_events(&self) -> bool {
        !self.shared.state.lock().events.is_empty()
    }

    /// Whether watcher `serial` has events waiting.
    pub fn holds(&self, serial: u64) -> bool {
        self.shared.state.lock().events.contains_key(&serial)
    }

    #[cfg(test)]
    fn check(&self) {
        let state = self.shared.state.lock();
        let slotted: Vec<u64> = state
            .slots
            .iter()
            .filter_map(|slot| match slot {
                Slot::Events(serial) => Some(*serial),
                _ => None,
            })
            .filter(|serial| state.events.contains_key(serial))
            .collect();
        assert_eq!(slotted.len(), state.events.len(), "one slot per waiting watcher");
        let messages: usize = state
            .slots
            .iter()
            .map(|slot| match slot {
                Slot::Message(response) => response.encoded_len(),
                _ => 0,
            })
            .sum();
        let events: usize = state.events.values().map(Waiting::bytes).sum();
        assert_eq!(state.bytes, messages + events);
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        let mut state = self.shared.state.lock();
        state.closed = true;
        wake(&mut state);
    }
}

/// Bytes counted for one events response besides its events: the header
/// field (under 40 bytes), the watch id and the fragment flag.
const RESPONSE_OVERHEAD_BYTES: usize = 56;

/// One watcher's new events from one batch.
pub struct Gathered {
    pub serial: u64,
    pub watch_id: i64,
    pub fragment: bool,
    pub events: Vec<Bytes>,
}

fn wake(state: &mut State) {
    if let Some(waker) = state.consumer.take() {
        waker.wake();
    }
}

/// The responses, as the connection takes them.
pub struct Responses {
    shared: Arc<Shared>,
    /// Built from the slot taken last and not yet taken by the
    /// connection: the fragments of one watcher's events.
    ready: VecDeque<Outgoing>,
    /// Which watchers' responses wait for the next window (`pacing.rs`).
    pacing: Pacing,
    headers: Headers,
    /// The header field last built: revisions repeat from one response to
    /// the next.
    header_cache: Option<(pb::ResponseHeader, Bytes)>,
    fragment_limit: usize,
}

impl Responses {
    fn header(&mut self, revision: i64) -> Bytes {
        let header = (self.headers)(revision);
        match &self.header_cache {
            Some((cached, bytes)) if *cached == header => bytes.clone(),
            _ => {
                let bytes = header_field(&header);
                self.header_cache = Some((header, bytes.clone()));
                bytes
            }
        }
    }

    /// Takes the oldest slot into `ready`; returns whether the stream
    /// has ended.
    fn take(&mut self, state: &mut State) -> Option<Result<(), Status>> {
        loop {
            let slot = state.slots.pop_front()?;
            let taken = match slot {
                Slot::End(status) => return Some(Err(*status)),
                Slot::Message(response) => {
                    state.bytes -= response.encoded_len();
                    self.ready.push_back(Outgoing::Message(*response));
                    true
                }
                Slot::Events(serial) if state.events.contains_key(&serial) && self.pacing.hold_back(serial) => false,
                Slot::Events(serial) => match state.events.get_mut(&serial) {
                    None => false,
                    Some(waiting) => {
                        let (watch_id, fragment) = (waiting.watch_id, waiting.fragment);
                        let chunk = match waiting.full.pop_front() {
                            Some(chunk) => {
                                // The rest waits its turn again.
                                state.bytes -= chunk.bytes + RESPONSE_OVERHEAD_BYTES;
                                state.slots.push_back(Slot::Events(serial));
                                chunk
                            }
                            None => {
                                let waiting = state.events.remove(&serial).expect("just found");
                                state.bytes -= waiting.bytes();
                                waiting.open
                            }
                        };
                        let whole = EventsResponse {
                            header: self.header(chunk.revision),
                            watch_id,
                            fragment: false,
                            events: chunk.events,
                        };
                        if fragment {
                            let limit = self.fragment_limit;
                            self.ready
                                .extend(fragments(whole, limit).into_iter().map(Outgoing::Events));
                        } else {
                            self.ready.push_back(Outgoing::Events(whole));
                        }
                        true
                    }
                },
            };
            if taken {
                return Some(Ok(()));
            }
        }
    }
}

impl tokio_stream::Stream for Responses {
    type Item = Result<Outgoing, Status>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if let Some(ready) = this.ready.pop_front() {
            return Poll::Ready(Some(Ok(ready)));
        }
        let shared = this.shared.clone();
        let mut state = shared.state.lock();
        if let Some(held_back) = this.pacing.roll(tokio::time::Instant::now(), state.arrivals) {
            state.arrivals = 0;
            for serial in held_back.into_iter().rev() {
                state.slots.push_front(Slot::Events(serial));
            }
        }
        let was_full = state.bytes >= WATCH_STREAM_PENDING_BYTES_MAX;
        let taken = this.take(&mut state);
        if was_full && state.bytes < WATCH_STREAM_PENDING_BYTES_MAX {
            shared.room.notify_one();
        }
        match taken {
            Some(Ok(())) => Poll::Ready(this.ready.pop_front().map(Ok)),
            Some(Err(status)) => {
                state.closed = true;
                state.slots.clear();
                Poll::Ready(Some(Err(status)))
            }
            None if state.closed => Poll::Ready(None),
            None => {
                state.consumer = Some(cx.waker().clone());
                if state.slots.capacity() > EMPTY_OUTBOX_ROOM {
                    state.slots.shrink_to(EMPTY_OUTBOX_ROOM);
                }
                if state.events.is_empty() && state.events.capacity() > EMPTY_OUTBOX_ROOM {
                    state.events.shrink_to(EMPTY_OUTBOX_ROOM);
                }
                drop(state);
                if this.pacing.holds_any() && this.pacing.poll_window_end(cx).is_ready() {
                    // The window ended while taking: go again.
                    cx.waker().wake_by_ref();
                }
                Poll::Pending
            }
        }
    }
}

impl Drop for Responses {
    fn drop(&mut self) {
        self.shared.state.lock().gone = true;
        self.shared.room.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::mvccpb;
    use crate::proto::watch_wire::event_field;
    use tokio_stream::StreamExt;

    fn headers() -> Headers {
        Box::new(|revision| pb::ResponseHeader {
            revision,
            ..Default::default()
        })
    }

    fn event(key: &str, value_bytes: usize) -> Bytes {
        event_field(&mvccpb::Event {
            kv: Some(mvccpb::KeyValue {
                key: key.as_bytes().to_vec(),
                value: vec![b'v'; value_bytes],
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    fn gathered(serial: u64, keys: &[&str]) -> Gathered {
        Gathered {
            serial,
            watch_id: serial as i64 * 10,
            fragment: false,
            events: keys.iter().map(|key| event(key, 1)).collect(),
        }
    }

    /// What the connection would send, decoded: (watch id, header
    /// revision, event keys), until nothing is ready.
    async fn sent(responses: &mut Responses) -> Vec<(i64, i64, Vec<String>)> {
        let mut sent = Vec::new();
        while let Ok(Some(item)) = tokio::time::timeout(std::time::Duration::from_millis(20), responses.next()).await {
            let message = match item.expect("no error") {
                Outgoing::Message(message) => message,
                Outgoing::Events(events) => {
                    let mut buf = Vec::new();
                    events.encode(&mut buf);
                    pb::WatchResponse::decode(buf.as_slice()).expect("decodes")
                }
            };
            let keys = message
                .events
                .iter()
                .map(|e| String::from_utf8(e.kv.as_ref().unwrap().key.clone()).unwrap())
                .collect();
            sent.push((message.watch_id, message.header.unwrap().revision, keys));
        }
        sent
    }

    // Goal: events that arrive while a watcher's slot waits join it, under
    // the newest batch's header, and the slot keeps its place among the
    // other watchers' and the messages queued around it.
    #[tokio::test]
    async fn waiting_events_merge_in_place() {
        let (outbox, mut responses) = outbox(headers(), 1 << 20);
        outbox.gather(5, [gathered(1, &["a"]), gathered(2, &["b"])]);
        outbox.push(pb::WatchResponse {
            header: Some(pb::ResponseHeader {
                revision: 5,
                ..Default::default()
            }),
            watch_id: 7,
            created: true,
            ..Default::default()
        });
        outbox.gather(6, [gathered(2, &["c"]), gathered(3, &["d"])]);
        outbox.check();
        assert!(outbox.holds(2) && outbox.has_events());
        assert_eq!(
            sent(&mut responses).await,
            [
                (10, 5, vec!["a".to_string()]),
                (20, 6, vec!["b".to_string(), "c".to_string()]),
                (7, 5, vec![]),
                (30, 6, vec!["d".to_string()]),
            ]
        );
        outbox.check();
        assert!(!outbox.has_events());
        outbox.gather(7, [gathered(1, &["e"])]);
        assert_eq!(sent(&mut responses).await, [(10, 7, vec!["e".to_string()])]);
    }

    // Goal: a waiting response takes no more batches once it holds
    // WATCH_MERGED_RESPONSE_BYTES_MAX; later ones wait in a response of
    // their own, sent after it and after the watchers queued meanwhile.
    #[tokio::test]
    async fn merged_responses_stay_bounded() {
        let (outbox, mut responses) = outbox(headers(), 1 << 30);
        let big = WATCH_MERGED_RESPONSE_BYTES_MAX * 6 / 10;
        let one = |serial, key| Gathered {
            events: vec![event(key, big)],
            ..gathered(serial, &[])
        };
        outbox.gather(1, [one(1, "a")]);
        outbox.gather(2, [one(1, "b"), gathered(2, &["x"])]);
        outbox.gather(3, [one(1, "c")]);
        outbox.check();
        let keys = |list: &[&str]| list.iter().map(|k| k.to_string()).collect::<Vec<_>>();
        assert_eq!(
            sent(&mut responses).await,
            [(10, 2, keys(&["a", "b"])), (20, 2, keys(&["x"])), (10, 3, keys(&["c"]))]
        );
        outbox.check();
        assert!(!outbox.has_events());
    }

    // Goal: a cancelled watcher's waiting events are never sent, even if a
    // new watcher (another serial) takes its id.
    #[tokio::test]
    async fn forgotten_events_are_not_sent() {
        let (outbox, mut responses) = outbox(headers(), 1 << 20);
        outbox.gather(5, [gathered(1, &["a"]), gathered(2, &["b"])]);
        outbox.forget(1);
        outbox.check();
        outbox.gather(
            6,
            [Gathered {
                watch_id: 10,
                ..gathered(4, &["c"])
            }],
        );
        outbox.check();
        assert_eq!(
            sent(&mut responses).await,
            [(20, 5, vec!["b".to_string()]), (10, 6, vec!["c".to_string()])]
        );
    }

    // Goal: past the bound the outbox is full and `room` waits; the
    // connection taking responses wakes it; an ended stream's error comes
    // after what was queued before it, then nothing; dropping the
    // responses makes `room` fail.
    #[tokio::test]
    async fn the_bound_holds_and_room_returns() {
        let (outbox, mut responses) = outbox(headers(), 1 << 20);
        let big = WATCH_STREAM_PENDING_BYTES_MAX / 4;
        for serial in 0..4 {
            outbox.gather(
                1,
                [Gathered {
                    events: vec![event("k", big)],
                    ..gathered(serial, &[])
                }],
            );
        }
        outbox.check();
        assert!(outbox.is_full());
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(50), outbox.room()).await;
        assert!(waiting.is_err(), "room waits while full");
        let first = responses.next().await.expect("a response").expect("no error");
        assert!(matches!(first, Outgoing::Events(_)));
        tokio::time::timeout(std::time::Duration::from_secs(5), outbox.room())
            .await
            .expect("room after a take")
            .expect("client still there");
        outbox.end(Status::unavailable("no leader"));
        for _ in 0..3 {
            assert!(matches!(responses.next().await, Some(Ok(Outgoing::Events(_)))));
        }
        let ended = responses.next().await.expect("the error");
        assert_eq!(ended.expect_err("an error").message(), "no leader");
        assert!(responses.next().await.is_none(), "nothing after the error");
        drop(responses);
        assert!(outbox.is_gone());
        assert!(outbox.room().await.is_err());
    }
}
