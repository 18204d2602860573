//! One watch stream: a task that owns its watchers and its place in the
//! watch hub, and answers creates, cancels and progress requests,
//! delivers applied batches, and reads history for watchers behind (see
//! the module docs of `api::watch`).

use std::collections::BTreeMap;
use std::sync::Arc;

use prost::Message as _;
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::{Status, Streaming};

use crate::api::errors::store_status;
use crate::api::watch::fragments::{fragments, wire_event};
use crate::api::watch::queue::{Gathered, GatheredQueue};
use crate::api::watch::watcher::Watcher;
use crate::config::GRPC_OVERHEAD_BYTES;
use crate::error::RequestError;
use crate::member::core::Member;
use crate::member::watch_hub::Published;
use crate::proto::etcdserverpb as pb;
use crate::proto::mvccpb;

/// Responses queued for one stream's client. etcd buffers 128 per stream;
/// while this queue is full, the stream gathers each watcher's new events
/// into one response (see `queue.rs`).
pub const WATCH_STREAM_QUEUE: usize = 128;

/// Watchers one stream may hold. A Kubernetes API server opens about one
/// per resource type on a stream; this leaves two orders of magnitude of
/// room while bounding what one client can make every applied batch cost.
pub const WATCHERS_PER_STREAM_MAX: usize = 10_000;

/// Revisions read from history per response while a watcher catches up:
/// etcd's `watchBatchMaxRevs`, so a long catch-up arrives in bounded pieces.
pub const WATCH_BATCH_REVISIONS: i64 = 1000;

/// Consecutive election timeouts without a leader after which a stream that
/// asked for a leader ends with "no leader" (etcd's `maxNoLeaderCnt`).
pub const NO_LEADER_CHECKS: u32 = 3;

/// The watch id of responses that belong to no one watcher.
const INVALID_WATCH_ID: i64 = -1;

/// etcd's create errors, sent as a cancel reason.
const EMPTY_RANGE: &str = "mvcc: watcher range is empty";
const DUPLICATE_ID: &str = "mvcc: duplicate watch ID provided on the WatchStream";
/// This project's own bound (see [`WATCHERS_PER_STREAM_MAX`]); etcd has none.
const TOO_MANY_WATCHERS: &str = "etcdserver: too many watchers on one stream";

/// What woke the stream task.
enum Wake<'a> {
    Request(Option<Result<pb::WatchRequest, Status>>),
    Hub(Result<Arc<Published>, broadcast::error::RecvError>),
    ProgressTick,
    LeaderCheck,
    ClientGone,
    /// The client's queue has room for the oldest gathered response.
    Room(Result<mpsc::Permit<'a, Result<pb::WatchResponse, Status>>, mpsc::error::SendError<()>>),
}

struct WatchStream {
    member: Arc<Member>,
    out: mpsc::Sender<Result<pb::WatchResponse, Status>>,
    watchers: BTreeMap<i64, Watcher>,
    /// The next automatic watch id (etcd's `nextID`).
    next_id: i64,
    /// The highest header revision sent on this stream: progress is never
    /// reported below it, so it never goes back.
    reported: i64,
    /// A progress request waits until every watcher has been sent every
    /// revision up to the store's revision when it came.
    progress_pending: Option<i64>,
    /// Events gathered per watcher and not yet queued for the client.
    gathered: GatheredQueue,
}

/// Starts a stream's task for a client's requests; returns its responses.
pub fn start(
    member: Arc<Member>,
    requests: Streaming<pb::WatchRequest>,
    require_leader: bool,
) -> ReceiverStream<Result<pb::WatchResponse, Status>> {
    let (out, responses) = mpsc::channel(WATCH_STREAM_QUEUE);
    // Subscribed before any watcher reads the store's revision, so every
    // batch applied after that read comes through the hub.
    let hub = member.watch_hub.subscribe();
    let stream = WatchStream {
        member,
        out,
        watchers: BTreeMap::new(),
        next_id: 0,
        reported: 0,
        progress_pending: None,
        gathered: GatheredQueue::default(),
    };
    tokio::spawn(stream.run(requests, hub, require_leader));
    ReceiverStream::new(responses)
}

/// The stream's client is gone: stop.
struct Gone;

impl WatchStream {
    async fn run(
        mut self,
        mut requests: Streaming<pb::WatchRequest>,
        mut hub: broadcast::Receiver<Arc<Published>>,
        require_leader: bool,
    ) {
        let interval = self.member.config.experimental_watch_progress_notify_interval;
        let mut progress = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        let election = self.member.config.election_timeout();
        let mut leader_check = tokio::time::interval_at(tokio::time::Instant::now() + election, election);
        let mut no_leader_checks = 0;
        // etcd keeps serving a stream whose client closed its sending side.
        let mut requests_open = true;
        let out = self.out.clone();
        loop {
            let wake = tokio::select! {
                request = requests.next(), if requests_open => Wake::Request(request),
                published = hub.recv(), if self.gathered.accepts_more() => Wake::Hub(published),
                permit = out.reserve(), if !self.gathered.is_empty() => Wake::Room(permit),
                _ = progress.tick() => Wake::ProgressTick,
                _ = leader_check.tick(), if require_leader => Wake::LeaderCheck,
                _ = out.closed() => Wake::ClientGone,
            };
            let step = match wake {
                Wake::Request(Some(Ok(request))) => self.handle(request).await,
                Wake::Request(None) => {
                    requests_open = false;
                    Ok(())
                }
                Wake::Request(Some(Err(_))) | Wake::ClientGone | Wake::Room(Err(_)) => Err(Gone),
                Wake::Room(Ok(permit)) => self.send_oldest_pending(permit).await,
                Wake::Hub(Ok(published)) => self.deliver_ready(published, &mut hub).await,
                Wake::Hub(Err(broadcast::error::RecvError::Lagged(missed))) => self.fell_behind(missed).await,
                Wake::Hub(Err(broadcast::error::RecvError::Closed)) => Err(Gone),
                Wake::ProgressTick => self.notify_progress().await,
                Wake::LeaderCheck => {
                    no_leader_checks = if self.member.leader() == 0 {
                        no_leader_checks + 1
                    } else {
                        0
                    };
                    if no_leader_checks >= NO_LEADER_CHECKS {
                        let _ = self.out.send(Err(RequestError::NoLeader.into())).await;
                        Err(Gone)
                    } else {
                        Ok(())
                    }
                }
            };
            if step.is_err() {
                return;
            }
            if self.send_progress_if_synced().await.is_err() {
                return;
            }
        }
    }

    fn header(&self, revision: i64) -> Option<pb::ResponseHeader> {
        self.member.header(revision)
    }

    fn note_reported(&mut self, response: &pb::WatchResponse) {
        if let Some(header) = &response.header {
            self.reported = self.reported.max(header.revision);
        }
    }

    async fn send(&mut self, response: pb::WatchResponse) -> Result<(), Gone> {
        self.note_reported(&response);
        self.out.send(Ok(response)).await.map_err(|_| Gone)
    }

    async fn handle(&mut self, request: pb::WatchRequest) -> Result<(), Gone> {
        use pb::watch_request::RequestUnion;
        match request.request_union {
            Some(RequestUnion::CreateRequest(create)) => self.create(create).await,
            Some(RequestUnion::CancelRequest(cancel)) => {
                // etcd answers only the cancel of a watcher that exists.
                if self.watchers.remove(&cancel.watch_id).is_none() {
                    return Ok(());
                }
                // Its gathered events go too: a later watcher may reuse the id.
                self.gathered.remove(cancel.watch_id);
                let response = pb::WatchResponse {
                    header: self.header(self.member.store.current_revision()),
                    watch_id: cancel.watch_id,
                    canceled: true,
                    ..Default::default()
                };
                self.send(response).await
            }
            Some(RequestUnion::ProgressRequest(_)) => {
                self.progress_pending = Some(self.member.store.current_revision());
                Ok(())
            }
            None => Ok(()),
        }
    }

    async fn create(&mut self, create: pb::WatchCreateRequest) -> Result<(), Gone> {
        let current = self.member.store.current_revision();
        // etcd's reading of the request: an empty key is the smallest key.
        let key = if create.key.is_empty() { vec![0] } else { create.key };
        let range_end = create.range_end;
        let refused = if range_end.len() > 1 || (range_end.len() == 1 && range_end[0] != 0) {
            (key >= range_end).then_some(EMPTY_RANGE)
        } else {
            None
        };
        let refused = refused.or_else(|| {
            if create.watch_id != 0 && self.watchers.contains_key(&create.watch_id) {
                Some(DUPLICATE_ID)
            } else if self.watchers.len() >= WATCHERS_PER_STREAM_MAX {
                Some(TOO_MANY_WATCHERS)
            } else {
                None
            }
        });
        if let Some(reason) = refused {
            let response = pb::WatchResponse {
                header: self.header(current),
                watch_id: INVALID_WATCH_ID,
                created: true,
                canceled: true,
                cancel_reason: reason.to_string(),
                ..Default::default()
            };
            return self.send(response).await;
        }
        let id = if create.watch_id == 0 {
            while self.watchers.contains_key(&self.next_id) {
                self.next_id += 1;
            }
            self.next_id += 1;
            self.next_id - 1
        } else {
            create.watch_id
        };
        let filters = |wanted: pb::watch_create_request::FilterType| create.filters.contains(&(wanted as i32));
        let watcher = Watcher {
            key,
            range_end,
            next: if create.start_revision == 0 {
                current + 1
            } else {
                create.start_revision
            },
            prev_kv: create.prev_kv,
            no_put: filters(pb::watch_create_request::FilterType::Noput),
            no_delete: filters(pb::watch_create_request::FilterType::Nodelete),
            fragment: create.fragment,
            progress_notify: create.progress_notify,
        };
        let starts_in_past = watcher.next <= current;
        self.watchers.insert(id, watcher);
        let response = pb::WatchResponse {
            header: self.header(current),
            watch_id: id,
            created: true,
            ..Default::default()
        };
        self.send(response).await?;
        if starts_in_past {
            self.catch_up(id, current).await?;
        }
        Ok(())
    }

    /// The hub's message `published` and those already waiting behind it,
    /// gathered per watcher, then queued for the client as far as its
    /// queue has room (the rest stay gathered).
    async fn deliver_ready(
        &mut self,
        published: Arc<Published>,
        hub: &mut broadcast::Receiver<Arc<Published>>,
    ) -> Result<(), Gone> {
        self.deliver(&published).await?;
        let mut lagged = None;
        while self.gathered.accepts_more() {
            match hub.try_recv() {
                Ok(published) => self.deliver(&published).await?,
                Err(broadcast::error::TryRecvError::Lagged(missed)) => {
                    lagged = Some(missed);
                    break;
                }
                Err(_) => break,
            }
        }
        self.flush_pending()?;
        if let Some(missed) = lagged {
            self.fell_behind(missed).await?;
        }
        Ok(())
    }

    /// The hub moved on past `missed` messages this stream had not read.
    async fn fell_behind(&mut self, missed: u64) -> Result<(), Gone> {
        tracing::info!(missed, "a watch stream fell behind the hub; catching up from history");
        self.resync().await
    }

    fn events_response(&self, id: i64, revision: i64, events: Vec<mvccpb::Event>) -> pb::WatchResponse {
        pb::WatchResponse {
            header: self.header(revision),
            watch_id: id,
            events,
            ..Default::default()
        }
    }

    /// Queues gathered responses, oldest first, while the client's queue
    /// has room; stops at the first that does not fit.
    fn flush_pending(&mut self) -> Result<(), Gone> {
        let out = self.out.clone();
        while let Some((id, waiting)) = self.gathered.front() {
            if self.watchers[&id].fragment && self.may_need_fragments(&waiting.events) {
                // Fragments need several slots: left to the path that
                // waits for room.
                break;
            }
            let permit = match out.try_reserve() {
                Ok(permit) => permit,
                Err(mpsc::error::TrySendError::Full(())) => break,
                Err(mpsc::error::TrySendError::Closed(())) => return Err(Gone),
            };
            let (id, waiting) = self.gathered.pop_front().expect("the front exists");
            self.send_through(permit, id, waiting);
        }
        Ok(())
    }

    /// Sends the oldest gathered response through `permit`, then queues
    /// what else fits.
    async fn send_oldest_pending(
        &mut self,
        permit: mpsc::Permit<'_, Result<pb::WatchResponse, Status>>,
    ) -> Result<(), Gone> {
        let Some((id, waiting)) = self.gathered.pop_front() else {
            return Ok(());
        };
        if self.watchers[&id].fragment {
            drop(permit);
            self.send_events(id, waiting.revision, waiting.events).await?;
        } else {
            self.send_through(permit, id, waiting);
        }
        self.flush_pending()
    }

    /// Queues one response of events in a slot already reserved.
    fn send_through(
        &mut self,
        permit: mpsc::Permit<'_, Result<pb::WatchResponse, Status>>,
        id: i64,
        waiting: Gathered,
    ) {
        let response = self.events_response(id, waiting.revision, waiting.events);
        self.note_reported(&response);
        permit.send(Ok(response));
    }

    /// Sends everything gathered, waiting for room as needed.
    async fn drain_pending(&mut self) -> Result<(), Gone> {
        while let Some((id, waiting)) = self.gathered.pop_front() {
            self.send_events(id, waiting.revision, waiting.events).await?;
        }
        Ok(())
    }

    /// One applied batch: its events are gathered per watcher, to be sent
    /// by [`Self::flush_pending`]; a watcher that must read history first
    /// is sent what was gathered for it, then its history.
    async fn deliver(&mut self, published: &Published) -> Result<(), Gone> {
        let (first, last, events) = match published {
            Published::Changes { first, last, events } => (*first, *last, events),
            Published::Restored => return self.resync().await,
        };
        let ids: Vec<i64> = self.watchers.keys().copied().collect();
        for id in ids {
            let Some(watcher) = self.watchers.get_mut(&id) else {
                continue;
            };
            if watcher.next > last {
                continue;
            }
            let Some(events) = events.as_ref().filter(|_| watcher.next >= first) else {
                // It missed revisions before this batch (it started in
                // the past, or the stream lagged), or the batch was too
                // large to carry: history has them all.
                if let Some(waiting) = self.gathered.remove(id) {
                    self.send_events(id, waiting.revision, waiting.events).await?;
                }
                self.catch_up(id, last).await?;
                continue;
            };
            let from = watcher.next;
            watcher.next = last + 1;
            let watcher = &self.watchers[&id];
            let mut out = Vec::new();
            for event in events.iter() {
                if event.kv.mod_revision >= from && watcher.wants(event) {
                    let previous = if watcher.prev_kv {
                        self.member
                            .store
                            .value_before(&event.kv.key, event.kv.mod_revision)
                            .unwrap_or_default()
                    } else {
                        None
                    };
                    out.push(wire_event(event.clone(), previous));
                }
            }
            if !out.is_empty() {
                self.gathered.gather(id, last, out);
            }
        }
        self.gathered.end_batch();
        Ok(())
    }

    /// After the stream lost its place in the hub, or the store was
    /// replaced by a snapshot: every watcher reads what it missed from
    /// history, up to the store's revision now.
    async fn resync(&mut self) -> Result<(), Gone> {
        self.drain_pending().await?;
        let current = self.member.store.current_revision();
        let ids: Vec<i64> = self.watchers.keys().copied().collect();
        for id in ids {
            self.catch_up(id, current).await?;
        }
        Ok(())
    }

    /// Sends watcher `id` every change from its next revision up to `to`,
    /// from the store's history, in pieces of [`WATCH_BATCH_REVISIONS`];
    /// cancels it as etcd does if its next revision was compacted away.
    async fn catch_up(&mut self, id: i64, to: i64) -> Result<(), Gone> {
        loop {
            let Some(watcher) = self.watchers.get(&id) else {
                return Ok(());
            };
            if watcher.next > to {
                return Ok(());
            }
            let end = to.min(watcher.next.saturating_add(WATCH_BATCH_REVISIONS - 1));
            let changes =
                self.member
                    .store
                    .changes(&watcher.key, &watcher.range_end, watcher.next, end, watcher.prev_kv);
            let changes = match changes {
                Ok(changes) => changes,
                Err(mvcc::Error::Compacted) => {
                    self.watchers.remove(&id);
                    self.gathered.remove(id);
                    // etcd's compacted response carries no revision.
                    let response = pb::WatchResponse {
                        header: self.header(0),
                        watch_id: id,
                        compact_revision: self.member.store.compact_revision(),
                        canceled: true,
                        ..Default::default()
                    };
                    return self.send(response).await;
                }
                Err(error) => {
                    tracing::error!(%error, "watch: could not read history");
                    let _ = self.out.send(Err(store_status(&error))).await;
                    return Err(Gone);
                }
            };
            let events: Vec<mvccpb::Event> = changes
                .into_iter()
                .filter(|(event, _)| watcher.wants(event))
                .map(|(event, previous)| wire_event(event, previous))
                .collect();
            if let Some(watcher) = self.watchers.get_mut(&id) {
                watcher.next = end + 1;
            }
            if !events.is_empty() {
                self.send_events(id, to, events).await?;
            }
        }
    }

    /// Sends events to watcher `id` under a header at `revision`, split in
    /// fragments if the watcher asked. etcd's limit for a fragment is the
    /// largest message its server takes: the request limit plus gRPC's
    /// overhead allowance.
    async fn send_events(&mut self, id: i64, revision: i64, events: Vec<mvccpb::Event>) -> Result<(), Gone> {
        let fragment = self.watchers.get(&id).is_some_and(|w| w.fragment);
        let whole = self.events_response(id, revision, events);
        let limit = self.fragment_limit();
        if !fragment {
            return self.send(whole).await;
        }
        for piece in fragments(whole, limit) {
            self.send(piece).await?;
        }
        Ok(())
    }

    fn fragment_limit(&self) -> usize {
        self.member.config.max_request_bytes + GRPC_OVERHEAD_BYTES
    }

    /// Whether a response with `events` could reach the fragment limit:
    /// the events' bytes, each one's tag and length (at most 6 bytes), and
    /// a header (under 64 bytes).
    fn may_need_fragments(&self, events: &[mvccpb::Event]) -> bool {
        let bytes: usize = events.iter().map(|e| e.encoded_len() + 6).sum();
        bytes + 64 >= self.fragment_limit()
    }

    /// The revision every watcher has been sent everything up to.
    fn synced_revision(&self) -> i64 {
        self.watchers
            .values()
            .map(|watcher| watcher.next - 1)
            .min()
            .unwrap_or_else(|| self.member.store.current_revision())
    }

    /// Answers a pending progress request once every watcher has been
    /// sent everything up to the revision it waits for.
    async fn send_progress_if_synced(&mut self) -> Result<(), Gone> {
        let Some(target) = self.progress_pending else {
            return Ok(());
        };
        if !self.gathered.is_empty() {
            return Ok(());
        }
        let synced = self.synced_revision().min(self.member.store.current_revision());
        if synced < target.max(self.reported) {
            return Ok(());
        }
        self.progress_pending = None;
        let response = pb::WatchResponse {
            header: self.header(synced),
            watch_id: INVALID_WATCH_ID,
            ..Default::default()
        };
        self.send(response).await
    }

    /// The periodic progress of watchers created with `progress_notify`:
    /// each hears the revision it has been sent everything up to, unless
    /// that is below a header this stream already sent (progress never
    /// goes back).
    async fn notify_progress(&mut self) -> Result<(), Gone> {
        let current = self.member.store.current_revision();
        let reported = self.reported;
        let due: Vec<(i64, i64)> = self
            .watchers
            .iter()
            .filter(|(id, watcher)| watcher.progress_notify && !self.gathered.contains(**id))
            .map(|(id, watcher)| (*id, (watcher.next - 1).min(current)))
            .filter(|(_, revision)| *revision >= reported)
            .collect();
        for (id, revision) in due {
            let response = pb::WatchResponse {
                header: self.header(revision),
                watch_id: id,
                ..Default::default()
            };
            self.send(response).await?;
        }
        Ok(())
    }
}
