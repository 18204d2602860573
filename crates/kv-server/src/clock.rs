//! The member's clock, behind a seam: the real one in production, a
//! simulated one where a simulator drives the member.
//!
//! Time reaches the raft loop as an argument (`Node::turn` takes `now`);
//! the rest of the member reads a [`Clock`]: the apply stage, which also
//! measures how long its compaction steps take, to pace them; the leader's
//! lease deadlines; and the wall-clock time that seeds lease ids and
//! proposal sequence numbers. Under a simulated clock each of these is
//! simulated, so the pacing, the ids, and with them the whole run, follow
//! from the simulator's seed alone.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Where a part of the member reads the time.
pub trait Clock: Send + Sync {
    /// The monotonic time.
    fn now(&self) -> Instant;
    /// The wall-clock time, since the Unix epoch.
    fn since_epoch(&self) -> Duration;
}

/// The real clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealClock;

impl Clock for RealClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn since_epoch(&self) -> Duration {
        SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default()
    }
}
