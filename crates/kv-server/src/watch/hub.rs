//! What the apply stage tells the watch streams: after each applied batch,
//! the changes it made, in revision order; after a snapshot install, that
//! the store jumped.
//!
//! The hub is a bounded broadcast. The apply stage never waits on a
//! watcher: a stream that falls more than [`WATCH_HUB_BATCHES`] batches
//! behind loses its place in the broadcast (tokio reports it as lagged) and
//! reads what it missed from the store's history instead, as etcd moves a
//! slow watcher to its unsynced group. So a slow client costs the store a
//! history scan, never memory without bound nor apply throughput.

use std::sync::{Arc, OnceLock};

use tokio::sync::broadcast;

use crate::proto::watch_wire::{wire_event, EventFields};

/// Applied batches the broadcast keeps for streams that have not read them.
/// A stream further behind catches up from history, which costs a scan
/// but loses nothing. With [`WATCH_HUB_BATCH_BYTES_MAX`] this bounds the
/// hub's memory at 256 MiB however large the writes; typical batches
/// (Kubernetes objects of a few KiB) keep it to a few MiB.
pub const WATCH_HUB_BATCHES: usize = 1024;

/// Key and value bytes of one batch's events above which the hub carries
/// only the batch's revisions, and streams read its events from history:
/// one large write then costs a store read per stream instead of holding
/// its values in the hub.
pub const WATCH_HUB_BATCH_BYTES_MAX: usize = 256 << 10;

/// One message of the hub.
#[derive(Debug)]
pub enum Published {
    /// The changes of one applied batch. The store has reached its last
    /// revision when this is sent.
    Changes(Changes),
    /// The store was replaced by a snapshot: what it holds now is not the
    /// continuation of the batches before.
    Restored,
}

/// Reads the value an event's key had before it.
pub type PreviousValue<'a> = dyn Fn(&mvcc::Event) -> Option<mvcc::KeyValue> + 'a;

/// Every event at main revisions `first..=last` of one applied batch, in
/// revision order, and their encodings for the wire, made once by the
/// first stream that needs them and shared by every watcher and stream
/// that sends them.
#[derive(Debug)]
pub struct Changes {
    pub first: i64,
    pub last: i64,
    /// `None` when the events were too large to carry (streams read them
    /// from history).
    pub events: Option<Vec<mvcc::Event>>,
    wire: OnceLock<EventFields>,
    wire_with_previous: OnceLock<EventFields>,
}

impl Changes {
    pub fn new(first: i64, last: i64, events: Option<Vec<mvcc::Event>>) -> Changes {
        Changes {
            first,
            last,
            events,
            wire: OnceLock::new(),
            wire_with_previous: OnceLock::new(),
        }
    }

    /// The events as the wire carries them, in the order of `events`;
    /// with `previous`, each with the value its key had before (as
    /// `previous` reads it from the store).
    pub fn wire(&self, previous: Option<&PreviousValue<'_>>) -> &EventFields {
        let events = self.events.as_deref().unwrap_or_default();
        match previous {
            None => self
                .wire
                .get_or_init(|| EventFields::encode(events.iter().map(|e| wire_event(e.clone(), None)))),
            Some(previous) => self
                .wire_with_previous
                .get_or_init(|| EventFields::encode(events.iter().map(|e| wire_event(e.clone(), previous(e))))),
        }
    }
}

pub struct WatchHub {
    sender: broadcast::Sender<Arc<Published>>,
}

impl Default for WatchHub {
    fn default() -> WatchHub {
        WatchHub {
            sender: broadcast::channel(WATCH_HUB_BATCHES).0,
        }
    }
}

impl WatchHub {
    /// Sends a batch's changes (main revisions `first..=last`) to every
    /// open watch stream. Costs nothing when none is open.
    pub fn publish_changes(&self, first: i64, last: i64, events: Vec<mvcc::Event>) {
        if self.sender.receiver_count() == 0 {
            return;
        }
        let bytes: usize = events.iter().map(|e| e.kv.key.len() + e.kv.value.len()).sum();
        let events = (bytes <= WATCH_HUB_BATCH_BYTES_MAX).then_some(events);
        self.publish(Published::Changes(Changes::new(first, last, events)));
    }

    /// Sends a message to every open watch stream.
    pub fn publish(&self, message: Published) {
        if self.sender.receiver_count() > 0 {
            // An error only means every stream closed since the count.
            let _ = self.sender.send(Arc::new(message));
        }
    }

    /// A new stream's place in the broadcast: it receives every message
    /// sent from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Published>> {
        self.sender.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(key: &str, value_bytes: usize, revision: i64) -> mvcc::Event {
        mvcc::Event {
            kind: mvcc::EventKind::Put,
            kv: mvcc::KeyValue {
                key: key.as_bytes().to_vec(),
                value: vec![b'v'; value_bytes],
                mod_revision: revision,
                ..Default::default()
            },
        }
    }

    // Goal: a stream receives every batch published after it subscribed,
    // with its events up to the byte bound and without them above it; a
    // stream that does not read loses its place after WATCH_HUB_BATCHES
    // batches and is told how many it missed.
    #[tokio::test]
    async fn batches_reach_subscribers_within_bounds() {
        let hub = WatchHub::default();
        hub.publish_changes(2, 2, vec![put("before", 1, 2)]);
        let mut stream = hub.subscribe();
        hub.publish_changes(3, 3, vec![put("a", 10, 3)]);
        hub.publish_changes(4, 5, vec![put("b", WATCH_HUB_BATCH_BYTES_MAX, 4), put("c", 1, 5)]);
        match &*stream.recv().await.expect("first") {
            Published::Changes(Changes {
                first: 3,
                last: 3,
                events: Some(events),
                ..
            }) => assert_eq!(events[0].kv.key, b"a"),
            other => panic!("{other:?}"),
        }
        match &*stream.recv().await.expect("second") {
            Published::Changes(Changes {
                first: 4,
                last: 5,
                events: None,
                ..
            }) => {}
            other => panic!("{other:?}"),
        }
        for revision in 0..WATCH_HUB_BATCHES as i64 + 5 {
            hub.publish_changes(revision, revision, Vec::new());
        }
        match stream.recv().await {
            Err(broadcast::error::RecvError::Lagged(missed)) => assert_eq!(missed, 5),
            other => panic!("{other:?}"),
        }
    }
}
