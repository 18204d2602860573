//! How often a busy stream sends each watcher a response.
//!
//! A watcher's events merge into one response only while that response
//! waits for the connection, and a connection to a client on loopback
//! almost never makes it wait: the client's flow-control windows grow to
//! megabytes, so the server sends a response per watcher per applied
//! batch however slowly the client works through them, and the client
//! pays its per-message cost on each. etcd batches in that case: once a
//! stream's 128-response buffer is full, its watchers become "victims" and
//! get their events together, retried every 10 ms and sent as its stream
//! drains.
//!
//! This does the same, measured instead of inferred from a buffer. A
//! quiet stream counts in windows of [`WATCH_COALESCE_INTERVAL`]; once it
//! has sent [`WATCH_COALESCE_RESPONSES`] events responses in one, a
//! watcher that was already sent one in it waits for the next window, and
//! its new events join that response meanwhile. The stream is then busy:
//! its windows last [`WATCH_BUSY_INTERVAL`] and hold back repeats from
//! their start, so each watcher gets one response per busy window. It
//! stays busy while its watchers' batches keep arriving at the rate that
//! made it busy (the budget per quiet window, or more) and some watcher
//! was held back; else its next window is a quiet one again.
//!
//! A stream sending fewer responses (a watch-latency client, a Kubernetes
//! API server's watchers of different keys) never waits; a watcher sent
//! nothing yet in the window never waits; and the stream's throughput is
//! never capped, since only watchers that would receive several responses
//! in one window are held back.

use std::collections::VecDeque;
use std::future::Future as _;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use crate::watch::id_hash::IdSet;

/// A quiet stream's window: etcd retries its victim watchers every
/// 10 ms, so a stream starts to batch within the time etcd's does.
pub const WATCH_COALESCE_INTERVAL: Duration = Duration::from_millis(10);

/// A busy stream's window, the longest a held-back watcher's events wait.
/// etcd's victims are sent only as its stream drains: under etcd's watch
/// benchmark (1,000 watchers of one key, 10 streams) etcd 3.5.17 sent
/// each watcher a response per 12.5 events at about 490 puts/s, one per
/// 25 ms (`docs/benchmarks/history.md`, tenth round). So a busy stream
/// here delays an event no more than etcd does under that load, and
/// each response carries what etcd's would.
pub const WATCH_BUSY_INTERVAL: Duration = Duration::from_millis(25);

/// Events responses a stream sends in a window before it holds back
/// watchers' second ones: etcd's per-stream buffer of 128 responses, so a
/// stream starts to batch at the load etcd starts to.
pub const WATCH_COALESCE_RESPONSES: usize = 128;

pub struct Pacing {
    window_end: Instant,
    /// Events responses sent in the window.
    sent: usize,
    /// The window holds back repeat watchers from its start (it is a
    /// busy window).
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

/// How long a busy or a quiet window lasts.
fn window_length(busy: bool) -> Duration {
    if busy {
        WATCH_BUSY_INTERVAL
    } else {
        WATCH_COALESCE_INTERVAL
    }
}

impl Pacing {
    /// Starts a new window if the current one is over; returns the
    /// watchers held back in the last one, to be sent first. `arrivals`
    /// is how many watchers' batches came since the window began (each
    /// would be a response of its own without pacing): the caller counts
    /// them, and starts again from 0 when this returns a window's end.
    pub fn roll(&mut self, now: Instant, arrivals: usize) -> Option<VecDeque<u64>> {
        if now < self.window_end {
            return None;
        }
        let held_back = !self.deferred.is_empty();
        self.busy = held_back && (!self.busy || self.kept_busy(now, arrivals));
        self.window_end = now + window_length(self.busy);
        self.sent = 0;
        self.watchers_sent.clear();
        Some(std::mem::take(&mut self.deferred))
    }

    /// Whether the busy window ending at `now` had `arrivals` batches
    /// arrive at [`WATCH_COALESCE_RESPONSES`] per
    /// [`WATCH_COALESCE_INTERVAL`] or more: the rate at which a quiet
    /// stream becomes busy.
    fn kept_busy(&self, now: Instant, arrivals: usize) -> bool {
        let start = self.window_end - window_length(true);
        let elapsed = now.saturating_duration_since(start);
        let budget = WATCH_COALESCE_RESPONSES as u128 * elapsed.as_nanos() / WATCH_COALESCE_INTERVAL.as_nanos();
        arrivals as u128 >= budget
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
    // not; the next window is busy, sends the held back first, in order,
    // and holds back repeats from its start; a busy window whose batches
    // came slower than the budget's rate is followed by a quiet one, where
    // repeats go until the budget again.
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
        assert_eq!(pacing.roll(start, 0), None, "the window is not over");
        let later = start + WATCH_COALESCE_INTERVAL * 2;
        assert_eq!(pacing.roll(later, 0), Some(VecDeque::from([2, 1])));
        assert!(!pacing.holds_any());
        assert!(!pacing.hold_back(2), "a watcher's first response in a new window");
        assert!(pacing.hold_back(2), "in a busy window, repeats wait from the start");
        assert_eq!(
            pacing.roll(later + WATCH_COALESCE_INTERVAL, 0),
            None,
            "a busy window lasts longer than a quiet one"
        );
        let next = later + WATCH_BUSY_INTERVAL;
        assert_eq!(pacing.roll(next, 0), Some(VecDeque::from([2])));
        assert!(!pacing.hold_back(2));
        assert!(
            !pacing.hold_back(2),
            "after a busy window of few batches, repeats go until the budget"
        );
        let quiet = next + WATCH_COALESCE_INTERVAL;
        assert_eq!(pacing.roll(quiet, 0), Some(VecDeque::new()));
    }

    // Goal: a busy stream stays busy while its batches arrive at the
    // budget's rate or faster, sending each watcher one response per busy
    // window; once they slow down, its next window is quiet.
    #[tokio::test]
    async fn a_stream_stays_busy_while_batches_come_fast() {
        let mut pacing = Pacing::default();
        let start = Instant::now();
        for serial in 0..=WATCH_COALESCE_RESPONSES as u64 {
            pacing.hold_back(serial % 2);
        }
        let mut now = start + WATCH_COALESCE_INTERVAL;
        assert_eq!(pacing.roll(now, 0), Some(VecDeque::from([0])));
        // Busy windows whose batches come at twice the budget's rate.
        let fast = 2 * WATCH_COALESCE_RESPONSES * WATCH_BUSY_INTERVAL.as_millis() as usize
            / WATCH_COALESCE_INTERVAL.as_millis() as usize;
        for _ in 0..3 {
            assert!(!pacing.hold_back(0));
            assert!(pacing.hold_back(0), "repeats wait in a busy window");
            assert_eq!(
                pacing.roll(now + WATCH_COALESCE_INTERVAL, fast),
                None,
                "busy windows are long"
            );
            now += WATCH_BUSY_INTERVAL;
            assert_eq!(pacing.roll(now, fast), Some(VecDeque::from([0])));
        }
        // Batches at half the budget's rate: the next window is quiet.
        assert!(!pacing.hold_back(0));
        assert!(pacing.hold_back(0));
        now += WATCH_BUSY_INTERVAL;
        assert_eq!(pacing.roll(now, fast / 4), Some(VecDeque::from([0])));
        assert!(!pacing.hold_back(0));
        assert!(!pacing.hold_back(0), "a quiet window sends repeats");
        assert_eq!(pacing.roll(now + WATCH_COALESCE_INTERVAL, 0), Some(VecDeque::new()));
    }
}
