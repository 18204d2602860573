//! Watchers over the round's keys, as a client resumes them: a stream that
//! breaks (its member killed, paused, cut off) is opened again on the next
//! member from the last revision it got plus one. Each asks for progress
//! every [`PROGRESS_EVERY`], so bookmarks are checked too. What each gets
//! is recorded for `watch_check.rs`.

use std::time::{Duration, Instant};

use etcd_proto::etcdserverpb as pb;
use etcd_proto::etcdserverpb::watch_client::WatchClient;
use pb::watch_request::RequestUnion;
use tokio::sync::{mpsc, watch};

use crate::watch_check::{Received, Session, WatchEvent, WatcherLog};
use crate::workload::channel;

/// How often a watcher asks for a progress notification.
pub const PROGRESS_EVERY: Duration = Duration::from_millis(500);
/// How long a watcher waits for the round's last revision once the round
/// says what it is; past it, the watcher stops with what it has (and the
/// reliability check reports any gap).
pub const CATCH_UP_WITHIN: Duration = Duration::from_secs(20);

/// The end of the range of every key starting with `prefix`.
pub fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    *end.last_mut().expect("a non-empty prefix") += 1;
    end
}

fn event(event: &etcd_proto::mvccpb::Event) -> Option<WatchEvent> {
    let kv = event.kv.as_ref()?;
    let is_put = event.r#type == etcd_proto::mvccpb::event::EventType::Put as i32;
    Some(WatchEvent {
        revision: kv.mod_revision,
        key: String::from_utf8_lossy(&kv.key).into_owned(),
        value: is_put.then(|| String::from_utf8_lossy(&kv.value).into_owned()),
    })
}

/// Records `response` in `session`: its events, or a progress
/// notification, with `reached` moved to the revision it reaches. False
/// when the response ends the session (its watcher was cancelled).
pub fn record(response: &pb::WatchResponse, session: &mut Session, reached: &mut i64) -> bool {
    if response.canceled {
        return false;
    }
    let header = response.header.as_ref().map_or(0, |h| h.revision);
    if !response.events.is_empty() {
        let events: Vec<WatchEvent> = response.events.iter().filter_map(event).collect();
        *reached = (*reached).max(events.iter().map(|e| e.revision).max().unwrap_or(*reached));
        session.received.push(Received::Events(events));
    } else if !response.created && response.watch_id == -1 {
        *reached = (*reached).max(header);
        session.received.push(Received::Progress(header));
    }
    true
}

/// One session on `endpoint` from revision `start`; its responses, until
/// the stream breaks or the watcher has reached `until` (once known).
async fn session(
    endpoint: &str,
    prefix: &str,
    start: i64,
    progress: bool,
    until: &mut watch::Receiver<Option<i64>>,
) -> Session {
    let mut session = Session {
        start,
        received: Vec::new(),
    };
    let (requests, stream) = mpsc::channel(4);
    let create = pb::WatchCreateRequest {
        key: prefix.as_bytes().to_vec(),
        range_end: prefix_end(prefix),
        start_revision: start,
        ..Default::default()
    };
    let _ = requests
        .send(pb::WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(create)),
        })
        .await;
    let mut client = WatchClient::new(channel(endpoint));
    let Ok(response) = client.watch(tokio_stream::wrappers::ReceiverStream::new(stream)).await else {
        return session;
    };
    let mut responses = response.into_inner();
    let mut reached = start - 1;
    let mut ticker = tokio::time::interval(PROGRESS_EVERY);
    loop {
        if until.borrow().is_some_and(|last| reached >= last) {
            return session;
        }
        tokio::select! {
            message = responses.message() => {
                let Ok(Some(response)) = message else { return session };
                if !record(&response, &mut session, &mut reached) {
                    return session;
                }
            }
            _ = ticker.tick(), if progress => {
                let request = pb::WatchRequest {
                    request_union: Some(RequestUnion::ProgressRequest(pb::WatchProgressRequest {})),
                };
                if requests.send(request).await.is_err() {
                    return session;
                }
            }
            _ = until.changed() => {}
        }
    }
}

/// The revision a session reached: its last event or progress revision.
pub fn reached(session: &Session) -> i64 {
    session
        .received
        .iter()
        .map(|received| match received {
            Received::Events(events) => events.iter().map(|e| e.revision).max().unwrap_or(0),
            Received::Progress(revision) => *revision,
        })
        .max()
        .unwrap_or(session.start - 1)
        .max(session.start - 1)
}

/// Watches every key starting with `prefix` from `start`, resuming on the
/// next member after a break, until `until` names a revision it has
/// reached (or [`CATCH_UP_WITHIN`] after it is named).
pub async fn watcher(
    endpoints: Vec<String>,
    first: usize,
    prefix: String,
    start: i64,
    progress: bool,
    mut until: watch::Receiver<Option<i64>>,
) -> WatcherLog {
    let mut log = WatcherLog::default();
    let mut next = start;
    let mut at = first;
    let mut deadline: Option<Instant> = None;
    loop {
        let target = *until.borrow();
        if let Some(last) = target {
            if next > last || deadline.is_some_and(|d| Instant::now() >= d) {
                return log;
            }
            deadline.get_or_insert_with(|| Instant::now() + CATCH_UP_WITHIN);
        }
        let session = session(&endpoints[at % endpoints.len()], &prefix, next, progress, &mut until).await;
        next = reached(&session) + 1;
        if !session.received.is_empty() || log.sessions.is_empty() {
            log.sessions.push(session);
        }
        at += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
