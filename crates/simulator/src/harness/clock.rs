//! The simulated clock: tokio's, paused. The simulator runs on a
//! current-thread runtime started with time paused and moves that clock
//! itself (`tokio::time::advance`), so the member's own timeouts (tokio's
//! sleeps), its raft loop's and apply stage's `now`, and its wall-clock
//! readings are one simulated time.

use std::time::{Duration, Instant};

use kv_server::driver::Clock;

/// The wall-clock time a simulated run starts at: 2026-01-01T00:00:00Z.
/// Fixed, so that what derives from the wall clock (lease ids, proposal
/// sequences) is the same in every run of a seed.
pub const EPOCH_AT_START: Duration = Duration::from_secs(1_767_225_600);

/// Reads tokio's (paused) clock. Must be read inside the simulator's
/// runtime.
#[derive(Debug, Clone, Copy)]
pub struct SimClock {
    start: Instant,
}

impl SimClock {
    /// The clock, starting now (in the runtime's paused time).
    pub fn start() -> SimClock {
        SimClock {
            start: tokio::time::Instant::now().into_std(),
        }
    }

    /// Simulated time since the start.
    pub fn elapsed(&self) -> Duration {
        self.now().saturating_duration_since(self.start)
    }
}

impl Clock for SimClock {
    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }

    fn since_epoch(&self) -> Duration {
        EPOCH_AT_START + self.elapsed()
    }
}
