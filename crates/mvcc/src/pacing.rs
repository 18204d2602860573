//! Pacing of background work (a defragmentation's copy, compaction's
//! steps) to a share of one core, so that on a loaded member it takes
//! longer rather than taking CPU from the applies and the clients.

use std::time::Duration;

/// The pause after a piece of work that took `took`, so that such pieces
/// take at most `percent` of the time (1 to 100).
pub fn pause_after(took: Duration, percent: u32) -> Duration {
    let percent = percent.clamp(1, 100);
    took * (100 - percent) / percent
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: work and pause together give the work its share of the time.
    #[test]
    fn a_pause_leaves_the_work_its_share() {
        let took = Duration::from_millis(3);
        assert_eq!(pause_after(took, 50), took);
        assert_eq!(pause_after(took, 25), 3 * took);
        assert_eq!(pause_after(took, 100), Duration::ZERO);
        assert_eq!(pause_after(took, 0), 99 * took, "a share of 0 is taken as 1 %");
    }
}
