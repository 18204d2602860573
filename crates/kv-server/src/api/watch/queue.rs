//! A watch stream's gathered events: what a slow client has not yet been
//! sent.
//!
//! While the client's queue is full, each watcher's new events are
//! gathered here and later sent as one response per watcher, oldest
//! watcher first, as etcd batches the events of its "victim" watchers. So
//! a slow client gets fewer, larger responses, and the stream never waits
//! on it while the hub moves on.
//!
//! # Invariant
//! - `order` holds exactly the watchers in `by_watcher`, each once, in the
//!   order they were first gathered since last sent;
//! - `batches` counts the hub messages gathered since the queue was last
//!   empty: 0 when empty, never above [`WATCH_MERGE_BATCHES`] (the stream
//!   stops reading the hub once [`GatheredQueue::accepts_more`] says no,
//!   falls behind it, and later reads what it missed from history).
//!
//! Every method keeps it; the tests assert it after every step.

use std::collections::{HashMap, VecDeque};

use crate::proto::mvccpb;

/// Applied batches whose events a stream may gather per watcher while its
/// client's queue is full: bounds one response to what 64 batches made
/// (the same order as etcd's batches for watchers that fell behind). Past
/// it the stream stops reading the hub and later catches up from history.
pub const WATCH_MERGE_BATCHES: usize = 64;

/// One watcher's gathered events and the header revision to send them
/// under (the last batch's).
#[derive(Debug, Default, PartialEq)]
pub struct Gathered {
    pub revision: i64,
    pub events: Vec<mvccpb::Event>,
}

#[derive(Debug, Default)]
pub struct GatheredQueue {
    by_watcher: HashMap<i64, Gathered>,
    order: VecDeque<i64>,
    batches: usize,
}

impl GatheredQueue {
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Whether watcher `id` has events waiting.
    pub fn contains(&self, id: i64) -> bool {
        self.by_watcher.contains_key(&id)
    }

    /// Whether the stream may gather another hub message.
    pub fn accepts_more(&self) -> bool {
        self.batches < WATCH_MERGE_BATCHES
    }

    /// Adds watcher `id`'s events from a batch whose last revision is
    /// `revision`, after any it already has.
    pub fn gather(&mut self, id: i64, revision: i64, events: Vec<mvccpb::Event>) {
        let gathered = self.by_watcher.entry(id).or_insert_with(|| {
            self.order.push_back(id);
            Gathered::default()
        });
        gathered.revision = revision;
        gathered.events.extend(events);
    }

    /// One hub message has been gathered: it counts toward the bound if
    /// anything is waiting.
    pub fn end_batch(&mut self) {
        if !self.is_empty() {
            self.batches = (self.batches + 1).min(WATCH_MERGE_BATCHES);
        }
    }

    /// The oldest watcher's events, without taking them.
    pub fn front(&self) -> Option<(i64, &Gathered)> {
        let id = *self.order.front()?;
        Some((id, &self.by_watcher[&id]))
    }

    /// Takes the oldest watcher's events.
    pub fn pop_front(&mut self) -> Option<(i64, Gathered)> {
        let id = self.order.pop_front()?;
        let gathered = self.by_watcher.remove(&id).expect("order follows by_watcher");
        self.reset_if_empty();
        Some((id, gathered))
    }

    /// Takes watcher `id`'s events, wherever it is in the order: it is
    /// being cancelled, or must be sent at once.
    pub fn remove(&mut self, id: i64) -> Option<Gathered> {
        let gathered = self.by_watcher.remove(&id)?;
        self.order.retain(|waiting| *waiting != id);
        self.reset_if_empty();
        Some(gathered)
    }

    fn reset_if_empty(&mut self) {
        if self.order.is_empty() {
            self.batches = 0;
        }
    }

    /// Asserts the invariant in the module docs.
    #[cfg(test)]
    pub fn check(&self) {
        assert_eq!(self.order.len(), self.by_watcher.len(), "each waiting watcher once");
        assert!(self.order.iter().all(|id| self.by_watcher.contains_key(id)));
        assert!(self.batches <= WATCH_MERGE_BATCHES);
        assert!(
            !self.is_empty() || self.batches == 0,
            "an empty queue counts no batches"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(keys: &[&str]) -> Vec<mvccpb::Event> {
        keys.iter()
            .map(|key| mvccpb::Event {
                kv: Some(mvccpb::KeyValue {
                    key: key.as_bytes().to_vec(),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .collect()
    }

    // Goal: watchers come out oldest first, each with all its events in
    // order under the last batch's revision, once.
    #[test]
    fn watchers_come_out_oldest_first_with_their_events_merged() {
        let mut queue = GatheredQueue::default();
        queue.gather(5, 10, events(&["a"]));
        queue.gather(2, 10, events(&["b"]));
        queue.end_batch();
        queue.gather(5, 12, events(&["c", "d"]));
        queue.end_batch();
        queue.check();
        assert_eq!(queue.front().map(|(id, _)| id), Some(5));
        let (id, first) = queue.pop_front().unwrap();
        assert_eq!((id, first.revision), (5, 12));
        assert_eq!(first.events, events(&["a", "c", "d"]));
        let (id, second) = queue.pop_front().unwrap();
        assert_eq!((id, second.revision, second.events), (2, 10, events(&["b"])));
        assert!(queue.pop_front().is_none());
        queue.check();
    }

    // Goal: the batch count bounds gathering and resets once the queue
    // empties, however it empties; an empty queue counts nothing.
    #[test]
    fn the_batch_bound_holds_and_resets() {
        let mut queue = GatheredQueue::default();
        queue.end_batch();
        assert!(queue.accepts_more());
        queue.check();
        for batch in 0..WATCH_MERGE_BATCHES + 3 {
            queue.gather(1, batch as i64, events(&["k"]));
            queue.end_batch();
            queue.check();
        }
        assert!(!queue.accepts_more(), "full after WATCH_MERGE_BATCHES batches");
        queue.gather(3, 99, events(&["x"]));
        assert_eq!(queue.remove(1).map(|g| g.events.len()), Some(WATCH_MERGE_BATCHES + 3));
        assert!(!queue.accepts_more(), "still holds watcher 3's events");
        assert!(queue.remove(3).is_some());
        assert!(queue.accepts_more(), "emptied by removal");
        queue.check();
    }

    // Goal: removing a watcher in the middle keeps the others in order,
    // and removing one with nothing waiting changes nothing.
    #[test]
    fn removal_keeps_the_order() {
        let mut queue = GatheredQueue::default();
        for id in [4, 8, 6] {
            queue.gather(id, 1, events(&["k"]));
        }
        assert!(queue.remove(7).is_none());
        assert!(queue.remove(8).is_some());
        assert!(!queue.contains(8));
        queue.check();
        let order: Vec<i64> = std::iter::from_fn(|| queue.pop_front().map(|(id, _)| id)).collect();
        assert_eq!(order, [4, 6]);
    }
}
