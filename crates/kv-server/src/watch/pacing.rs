//! How often a busy stream sends each watcher a response.
//!
//! A watcher's events merge into one response only while that response
//! waits for the connection, and a connection to a client on loopback
//! almost never makes it wait: the client's flow-control windows grow to
//! megabytes, so the server sends a response per watcher per applied
//! batch however slowly the client works through them, and the client
//! pays its per-message cost on each. etcd batches in that case: once a
//! stream's 128-response buffer is full, its watchers become "victims" and
//! get their events together, every 10 ms.
//!
//! This does the same, measured instead of inferred from a buffer: time
//! runs in windows of [`WATCH_COALESCE_INTERVAL`]; once a stream has sent
//! [`WATCH_COALESCE_RESPONSES`] events responses in the current window, a
//! watcher that was already sent one in it waits for the next window, and
//! its new events join that response meanwhile; a window after one that
//! held a watcher back holds back repeats from its start, so a stream that
//! stays busy sends each watcher one response per window. A stream sending fewer
//! responses (a watch-latency client, a Kubernetes API server's watchers
//! of different keys) never waits; a watcher sent nothing yet in the
//! window never waits; and the stream's throughput is never capped, since
//! only watchers that would receive several responses in one window are
//! held back.

use std::collections::VecDeque;
use std::future::Future as _;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use crate::watch::id_hash::IdSet;

/// The window: etcd retries its victim watchers every 10 ms, so this
/// delays no event more than etcd does under the same load.
pub const WATCH_COALESCE_INTERVAL: Duration = Duration::from_millis(10);

/// Events responses a stream sends in a window before it holds back
/// watchers' second ones: etcd's per-stream buffer of 128 responses, so a
/// stream starts to batch at the load etcd starts to.
pub const WATCH_COALESCE_RESPONSES: usize = 128;

pub struct Pacing {
    window_end: Instant,
    /// Events responses sent in the window.
    sent: usize,
    /// The window before held a watcher back: this one holds back repeat
    /// watchers from its start, so a stream that stays busy sends each
    /// watcher one response per window.
    busy: bool,
    /// The watchers (by serial) sent one in the window.
    watchers_sent: IdSet<u64>,
    /// The watchers held back to the next window, in the order their
    /// responses came up.
    deferred: VecDeque<u64>,
    timer: Pin<Box<Sleep>>,
}

impl Default for Pacing {
    fn default() -> Pacing {
        let now = Instant::now();
        Pacing {
            window_end: now + WATCH_COALESCE_INTERVAL,
            sent: 0,
            busy: false,
            watchers_sent: IdSet::default(),
            deferred: VecDeque::new(),
            timer: Box::pin(tokio::time::sleep_until(now)),
        }
    }
}

impl Pacing {
    /// Starts a new window if the current one is over; returns the
    /// watchers held back in the last one, to be sent first.
    pub fn roll(&mut self, now: Instant) -> Option<VecDeque<u64>> {
        if now < self.window_end {
            return None;
        }
        self.window_end = now + WATCH_COALESCE_INTERVAL;
        self.busy = !self.deferred.is_empty();
        self.sent = 0;
        self.watchers_sent.clear();
        Some(std::mem::take(&mut self.deferred))
    }

    /// Whether watcher `serial`'s response waits for the next window (it
    /// is then held back here); otherwise it counts as sent.
    pub fn hold_back(&mut self, serial: u64) -> bool {
        let busy = self.busy || self.sent >= WATCH_COALESCE_RESPONSES;
        if busy && self.watchers_sent.contains(&serial) {
            self.deferred.push_back(serial);
            return true;
        }
        self.sent += 1;
        self.watchers_sent.insert(serial);
        false
    }

    /// Whether any watcher waits for the next window.
    pub fn holds_any(&self) -> bool {
        !self.deferred.is_empty()
    }

    /// Ready when the window is over.
    pub fn poll_window_end(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.timer.deadline() != self.window_end {
            self.timer.as_mut().reset(self.window_end);
        }
        self.timer.as_mut().poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: no watcher waits until the stream has sent the budget in a
    // window; past it, a watcher already sent one waits and a new one does
    // not; the next window sends the held back first, in order; after a
    // busy window repeats wait from the start, after a quiet one they do
    // not.
    #[tokio::test]
    async fn only_repeat_watchers_of_a_busy_window_wait() {
        let mut pacing = Pacing::default();
        let start = Instant::now();
        for serial in 0..WATCH_COALESCE_RESPONSES as u64 {
            assert!(!pacing.hold_back(serial % 4), "under the budget nothing waits");
        }
        assert!(pacing.hold_back(2));
        assert!(pacing.hold_back(1));
        assert!(!pacing.hold_back(99), "a watcher's first response in the window");
        assert!(pacing.holds_any());
        assert_eq!(pacing.roll(start), None, "the window is not over");
        let later = start + WATCH_COALESCE_INTERVAL * 2;
        assert_eq!(pacing.roll(later), Some(VecDeque::from([2, 1])));
        assert!(!pacing.holds_any());
        assert!(!pacing.hold_back(2), "a watcher's first response in a new window");
        assert!(pacing.hold_back(2), "after a busy window, repeats wait from the start");
        let next = later + WATCH_COALESCE_INTERVAL * 2;
        assert_eq!(pacing.roll(next), Some(VecDeque::from([2])));
        let quiet = next + WATCH_COALESCE_INTERVAL * 2;
        assert_eq!(pacing.roll(quiet), Some(VecDeque::new()));
        assert!(!pacing.hold_back(2));
        assert!(
            !pacing.hold_back(2),
            "after a window that held none back, repeats go until the budget"
        );
    }
}
