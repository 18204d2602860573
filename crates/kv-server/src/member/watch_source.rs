//! What a watch stream reads of the core: the changes the apply stage
//! publishes, the store's revisions, and history for a watcher that is
//! behind (`watch/stream/`).

use std::sync::Arc;

use tokio::sync::broadcast;

use crate::member::core::Member;
use crate::watch::hub::Published;

impl Member {
    /// The changes the apply stage publishes from now on (see
    /// `watch_hub`).
    pub fn subscribe_changes(&self) -> broadcast::Receiver<Arc<Published>> {
        self.watch_hub.subscribe()
    }

    /// The store's revision now: that of the last change applied here.
    pub fn current_revision(&self) -> i64 {
        self.store.current_revision()
    }

    /// The revision the store was last compacted at.
    pub fn compact_revision(&self) -> i64 {
        self.store.compact_revision()
    }

    /// The changes to `key..range_end` at revisions `from..=to`, each with
    /// the key's previous value when `prev_kv` (mvcc's `Store::changes`):
    /// what a watcher behind the store still has to see. Fails with
    /// `mvcc::Error::Compacted` below the compact revision.
    pub fn changes(
        &self,
        key: &[u8],
        range_end: &[u8],
        from: i64,
        to: i64,
        prev_kv: bool,
    ) -> mvcc::Result<Vec<(mvcc::Event, Option<mvcc::KeyValue>)>> {
        self.store.changes(key, range_end, from, to, prev_kv)
    }

    /// `key`'s value before `revision`, for a watcher's `prev_kv`.
    pub fn value_before(&self, key: &[u8], revision: i64) -> mvcc::Result<Option<mvcc::KeyValue>> {
        self.store.value_before(key, revision)
    }
}
