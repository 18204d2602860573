//! The member's clock, behind a seam: the real one in production, a
//! simulated one where a simulator drives the member.
//!
//! Time reaches the raft loop as an argument (`Node::turn` takes `now`);
//! the apply stage reads a [`Clock`], because it also measures how long
//! its compaction steps take, to pace them. Under a simulated clock that
//! measure is simulated time, so the pacing, and with it the whole run,
//! follows from the simulator's seed alone.

use std::time::Instant;

/// Where a part of the member reads the time.
pub trait Clock: Send + Sync {
    fn now(&self) -> Instant;
}

/// The real clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealClock;

impl Clock for RealClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}
