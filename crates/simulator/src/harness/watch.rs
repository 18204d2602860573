//! A simulated client's watch streams: each is the real stream task
//! (`kv_server`'s `watch::stream`), fed the client's requests, its responses
//! decoded from the bytes the wire would carry. A member's crash ends its
//! streams: the cluster drops their responses, as a killed process's
//! connections close, and the stream tasks let go of the member.

use std::future::poll_fn;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::Poll;

use parking_lot::Mutex;
use prost::Message;
use tokio::sync::{mpsc, Notify};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::Status;

use super::clients::{CallError, Clients};
use kv_server::driver::{start_watch_stream, Opener, Outgoing, Responses};
use kv_server::proto::etcdserverpb as pb;
use pb::watch_request::RequestUnion;

/// Requests a simulated client may have queued on one stream: it sends a
/// create and now and then a progress request, so a few are plenty; one
/// that finds the queue full is not sent, as a client would block.
const WATCH_REQUESTS_QUEUED: usize = 8;

/// A stream's responses, shared with the cluster (which holds them weakly,
/// `clients::Slot`) so that a crash can end them (`None` once ended).
pub(super) type StreamResponses = Mutex<Option<Responses>>;

/// Ends the streams in `streams`: what a member's crash does to them.
pub(super) fn end_streams(streams: &mut Vec<Weak<StreamResponses>>) {
    for stream in streams.drain(..) {
        if let Some(responses) = stream.upgrade() {
            let ended = responses.lock().take();
            drop(ended);
        }
    }
}

/// One watch stream of a simulated client on one member.
pub struct SimWatch {
    requests: mpsc::Sender<Result<pb::WatchRequest, Status>>,
    responses: Arc<StreamResponses>,
    crashed: Arc<Notify>,
}

impl Clients {
    /// Opens a watch stream on member `member` with one watcher, `create`.
    pub fn watch(&self, member: usize, create: pb::WatchCreateRequest) -> Result<SimWatch, CallError> {
        let mut slots = self.slots.lock();
        let slot = &mut slots[member];
        let core = slot.member.clone().ok_or(CallError::Down)?;
        let (requests, receiver) = mpsc::channel(WATCH_REQUESTS_QUEUED);
        let create = pb::WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(create)),
        };
        requests.try_send(Ok(create)).expect("a new queue has room");
        let opener = Opener {
            metadata: Default::default(),
            extensions: Default::default(),
        };
        let responses = start_watch_stream(core, ReceiverStream::new(receiver), false, opener);
        let responses = Arc::new(Mutex::new(Some(responses)));
        slot.streams.retain(|stream| stream.strong_count() > 0);
        slot.streams.push(Arc::downgrade(&responses));
        Ok(SimWatch {
            requests,
            responses,
            crashed: slot.crashed.clone(),
        })
    }
}

impl SimWatch {
    /// Asks for a progress notification; false if the stream has ended
    /// or its queue is full.
    pub fn request_progress(&self) -> bool {
        let request = pb::WatchRequest {
            request_union: Some(RequestUnion::ProgressRequest(pb::WatchProgressRequest {})),
        };
        self.requests.try_send(Ok(request)).is_ok()
    }

    /// The next response; `None` once the stream has ended (its member
    /// crashed), an error if the member ended it with one.
    pub async fn next(&mut self) -> Option<Result<pb::WatchResponse, String>> {
        let notified = self.crashed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let responses = self.responses.clone();
        let next = poll_fn(move |cx| match responses.lock().as_mut() {
            None => Poll::Ready(None),
            Some(responses) => Pin::new(responses).poll_next(cx),
        });
        tokio::select! {
            biased;
            _ = &mut notified => None,
            item = next => item.map(|item| item.map(decode).map_err(|status| status.message().to_string())),
        }
    }
}

/// A response as the client decodes it off the wire.
fn decode(outgoing: Outgoing) -> pb::WatchResponse {
    match outgoing {
        Outgoing::Message(response) => response,
        Outgoing::Events(events) => {
            let mut bytes = Vec::with_capacity(events.encoded_len());
            events.encode(&mut bytes);
            pb::WatchResponse::decode(&bytes[..]).expect("an events response the member encoded decodes")
        }
    }
}
