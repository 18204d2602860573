//! One watch stream: a task that owns its watchers and its place in the
//! watch hub, and answers creates, cancels and progress requests,
//! delivers applied batches, and reads history for watchers behind (see
//! the module docs of `api::watch`). This file holds the stream and its
//! requests; [`delivery`] what it sends its watchers.

mod delivery;

use delivery::*;

use std::collections::hash_map::Entry;
use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::broadcast;
use tokio_stream::StreamExt;
use tonic::Status;

use crate::api::errors::store_status;
use crate::auth::perms::Access;
use crate::config::GRPC_OVERHEAD_BYTES;
use crate::error::RequestError;
use crate::member::core::Member;
use crate::metrics::metrics;
use crate::proto::etcdserverpb as pb;
use crate::proto::watch_wire::{event_field, wire_event, EventFields};
use crate::watch::hub::{Changes, PreviousValue, Published};
use crate::watch::id_hash::IdMap;
use crate::watch::matcher::Matcher;
use crate::watch::outbox::{outbox, Gathered, Gone, Outbox, Responses, WATCH_MERGED_RESPONSE_BYTES_MAX};
use crate::watch::watcher::{Shape, Watcher};

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
/// etcd sends its gRPC error's text as the reason a watcher it may not
/// create is cancelled.
const PERMISSION_DENIED: &str = "rpc error: code = PermissionDenied desc = etcdserver: permission denied";
const INVALID_AUTH_TOKEN: &str = "rpc error: code = Unauthenticated desc = etcdserver: invalid auth token";
const AUTH_OLD_REVISION: &str = "rpc error: code = InvalidArgument desc = etcdserver: revision of auth store is old";
const USER_EMPTY: &str = "rpc error: code = InvalidArgument desc = etcdserver: user name is empty";
const TOO_MANY_WATCHERS: &str = "etcdserver: too many watchers on one stream";

/// What woke the stream task.
enum Wake {
    Request(Option<Result<pb::WatchRequest, Status>>),
    Hub(Result<Arc<Published>, broadcast::error::RecvError>),
    ProgressTick,
    LeaderCheck,
    /// The outbox may have room again, or the client may be gone.
    Outbox,
}

struct WatchStream {
    member: Arc<Member>,
    opener: Opener,
    out: Outbox,
    watchers: BTreeMap<i64, Watcher>,
    /// The next automatic watch id (etcd's `nextID`).
    next_id: i64,
    /// The next watcher's serial: unlike ids, never reused on a stream.
    next_serial: u64,
    /// The watchers by what they watch.
    matcher: Matcher,
    /// Every watcher has been sent every change up to this revision, or
    /// started after it: the last batch matched, or the revision history
    /// was read up to. A watcher's own `next` is only advanced when it is
    /// sent something (see [`WatchStream::next_of`]).
    synced_through: i64,
    /// The highest header revision sent on this stream: progress is never
    /// reported below it, so it never goes back.
    reported: i64,
    /// A progress request waits until every watcher has been sent every
    /// revision up to the store's revision when it came.
    progress_pending: Option<i64>,
}

/// A stream's requests: a gRPC call's, or (in the simulator) a
/// simulated client's.
pub trait Requests: tokio_stream::Stream<Item = Result<pb::WatchRequest, Status>> + Send + Unpin + 'static {}

impl<T> Requests for T where T: tokio_stream::Stream<Item = Result<pb::WatchRequest, Status>> + Send + Unpin + 'static {}

/// Who opened a stream, as its request said: each watcher's creation is
/// checked against it, as etcd checks each create against the stream's
/// context.
pub struct Opener {
    pub metadata: tonic::metadata::MetadataMap,
    pub extensions: tonic::Extensions,
}

/// Starts a stream's task for a client's requests; returns its responses.
pub fn start(member: Arc<Member>, requests: impl Requests, require_leader: bool, opener: Opener) -> Responses {
    let header_source = member.clone();
    let headers = Box::new(move |revision| header_source.header(revision).unwrap_or_default());
    let fragment_limit = member.config().max_request_bytes + GRPC_OVERHEAD_BYTES;
    let (out, responses) = outbox(headers, fragment_limit);
    // Subscribed before any watcher reads the store's revision, so every
    // batch applied after that read comes through the hub.
    let hub = member.subscribe_changes();
    let synced_through = member.current_revision();
    let stream = WatchStream {
        member,
        opener,
        out,
        watchers: BTreeMap::new(),
        next_id: 0,
        next_serial: 0,
        matcher: Matcher::default(),
        synced_through,
        reported: 0,
        progress_pending: None,
    };
    tokio::spawn(stream.run(requests, hub, require_leader));
    responses
}

impl Drop for WatchStream {
    /// The stream's watchers end with it.
    fn drop(&mut self) {
        metrics().mvcc.watcher_total.sub(self.watchers.len() as i64);
    }
}

impl WatchStream {
    async fn run(
        mut self,
        mut requests: impl Requests,
        hub: broadcast::Receiver<Arc<Published>>,
        require_leader: bool,
    ) {
        let interval = self.member.config().experimental_watch_progress_notify_interval;
        let mut progress = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        let election = self.member.config().election_timeout();
        let mut leader_check = tokio::time::interval_at(tokio::time::Instant::now() + election, election);
        let mut no_leader_checks = 0;
        // etcd keeps serving a stream whose client closed its sending side.
        let mut requests_open = true;
        // The stream's place in the hub; let go while the outbox is full.
        let mut hub = Some(hub);
        loop {
            if self.keep_place(&mut hub).await.is_err() {
                return;
            }
            let wake = tokio::select! {
                request = requests.next(), if requests_open => Wake::Request(request),
                published = next_published(&mut hub), if hub.is_some() => Wake::Hub(published),
                _ = self.out.changed() => Wake::Outbox,
                _ = progress.tick() => Wake::ProgressTick,
                _ = leader_check.tick(), if require_leader => Wake::LeaderCheck,
            };
            let step = match wake {
                Wake::Request(Some(Ok(request))) => self.handle(request).await,
                Wake::Request(None) => {
                    requests_open = false;
                    Ok(())
                }
                Wake::Request(Some(Err(_))) => Err(Gone),
                Wake::Outbox if self.out.is_gone() => Err(Gone),
                Wake::Outbox => Ok(()),
                Wake::Hub(Ok(published)) => match hub.as_mut() {
                    Some(receiver) => self.deliver_ready(published, receiver).await,
                    None => Ok(()),
                },
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
                        self.out.end(RequestError::NoLeader.into());
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

    /// While the outbox is full the stream lets go of its place in the
    /// hub, so the batches it has not read are not held for it; once the
    /// client has taken enough to make room, it takes a place again and
    /// reads what it missed from history.
    async fn keep_place(&mut self, hub: &mut Option<broadcast::Receiver<Arc<Published>>>) -> Result<(), Gone> {
        if self.out.is_full() {
            *hub = None;
            return Ok(());
        }
        if hub.is_none() {
            tracing::info!(
                reason = "its client read slowly",
                "a watch stream fell behind the hub; catching up from history"
            );
            // Subscribed before reading the store's revision, as at start.
            *hub = Some(self.member.subscribe_changes());
            self.resync().await?;
        }
        Ok(())
    }

    fn header(&self, revision: i64) -> Option<pb::ResponseHeader> {
        self.member.header(revision)
    }

    fn note_reported(&mut self, response: &pb::WatchResponse) {
        if let Some(header) = &response.header {
            self.reported = self.reported.max(header.revision);
        }
    }

    /// Queues a response once the outbox has room.
    async fn send(&mut self, response: pb::WatchResponse) -> Result<(), Gone> {
        self.out.room().await?;
        self.note_reported(&response);
        self.out.push(response);
        Ok(())
    }

    async fn handle(&mut self, request: pb::WatchRequest) -> Result<(), Gone> {
        use pb::watch_request::RequestUnion;
        match request.request_union {
            Some(RequestUnion::CreateRequest(create)) => self.create(create).await,
            Some(RequestUnion::CancelRequest(cancel)) => {
                // etcd answers only the cancel of a watcher that exists.
                let Some(watcher) = self.watchers.remove(&cancel.watch_id) else {
                    return Ok(());
                };
                metrics().mvcc.watcher_total.dec();
                self.matcher.remove(cancel.watch_id, &watcher.shape);
                // Its waiting events go too.
                self.out.forget(watcher.serial);
                let response = pb::WatchResponse {
                    header: self.header(self.member.current_revision()),
                    watch_id: cancel.watch_id,
                    canceled: true,
                    ..Default::default()
                };
                self.send(response).await
            }
            Some(RequestUnion::ProgressRequest(_)) => {
                self.progress_pending = Some(self.member.current_revision());
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Why etcd would refuse to create this watcher, if it would: first
    /// whether the stream's opener may read what it watches.
    async fn refusal(&self, key: &[u8], range_end: &[u8], watch_id: i64) -> Option<&'static str> {
        let is_range = range_end.len() > 1 || (range_end.len() == 1 && range_end[0] != 0);
        let (metadata, extensions) = (&self.opener.metadata, &self.opener.extensions);
        let read = [(key, range_end, Access::Read)];
        if let Err(error) = self.member.authorize(metadata, extensions, &read).await {
            Some(match error {
                RequestError::InvalidAuthToken => INVALID_AUTH_TOKEN,
                RequestError::AuthOldRevision => AUTH_OLD_REVISION,
                RequestError::UserEmpty => USER_EMPTY,
                _ => PERMISSION_DENIED,
            })
        } else if is_range && key >= range_end {
            Some(EMPTY_RANGE)
        } else if watch_id != 0 && self.watchers.contains_key(&watch_id) {
            Some(DUPLICATE_ID)
        } else if self.watchers.len() >= WATCHERS_PER_STREAM_MAX {
            Some(TOO_MANY_WATCHERS)
        } else {
            None
        }
    }

    async fn create(&mut self, create: pb::WatchCreateRequest) -> Result<(), Gone> {
        let current = self.member.current_revision();
        // etcd's reading of the request: an empty key is the smallest key.
        let key = if create.key.is_empty() { vec![0] } else { create.key };
        let range_end = create.range_end;
        if let Some(reason) = self.refusal(&key, &range_end, create.watch_id).await {
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
            serial: self.next_serial,
            shape: Shape {
                key,
                range_end,
                no_put: filters(pb::watch_create_request::FilterType::Noput),
                no_delete: filters(pb::watch_create_request::FilterType::Nodelete),
                prev_kv: create.prev_kv,
            },
            next: if create.start_revision == 0 {
                current + 1
            } else if create.start_revision <= current && crate::broken::watch_resume_skips() {
                create.start_revision + 1
            } else {
                create.start_revision
            },
            fragment: create.fragment,
            progress_notify: create.progress_notify,
        };
        self.next_serial += 1;
        let starts_in_past = watcher.next <= current;
        self.matcher.add(id, &watcher.shape);
        self.watchers.insert(id, watcher);
        metrics().mvcc.watcher_total.inc();
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
}
