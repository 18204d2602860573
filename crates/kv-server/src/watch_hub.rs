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

use std::sync::Arc;

use tokio::sync::broadcast;

/// Applied batches the broadcast keeps for streams that have not read them.
/// A batch holds at most one raft Ready's entries, so this bounds the
/// hub's memory at 1024 such batches; a stream further behind catches up
/// from history, which costs a scan but loses nothing.
pub const WATCH_HUB_BATCHES: usize = 1024;

/// One message of the hub.
#[derive(Debug)]
pub enum Published {
    /// The changes of one applied batch: every event at main revisions
    /// `first..=last`, in revision order. The store has reached `last`
    /// when this is sent.
    Changes {
        first: i64,
        last: i64,
        events: Vec<mvcc::Event>,
    },
    /// The store was replaced by a snapshot: what it holds now is not the
    /// continuation of the batches before.
    Restored,
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
    /// Sends a batch's changes to every open watch stream. Costs nothing
    /// when none is open.
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
