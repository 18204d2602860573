//! Goal: a seed gives the same history (its calls and what its watchers
//! received) byte for byte, run after run, and
//! the same end (simulated time, faults, losses); different seeds give
//! different histories; a seed's history is a real one (calls that
//! returned, and crashes among its faults).
//!
//! Method: three seeds, each run twice in this process through the
//! simulator's own entry (`seed::run`), their histories serialized as
//! `--history` writes them.

use simulator::seed::{self, SeedReport, SeedSpec};

fn run(seed: u64, members: usize) -> SeedReport {
    let root = seed::scratch_root();
    seed::run(&SeedSpec { seed, members, root })
}

fn bytes(report: &SeedReport) -> String {
    report.history_json()
}

#[test]
fn a_seed_replays_byte_for_byte() {
    let mut histories = Vec::new();
    for (seed, members) in [(11, 3), (12, 5), (13, 3)] {
        let first = run(seed, members);
        let second = run(seed, members);
        assert!(!first.failed(), "seed {seed} passes its checks: {first:?}");
        assert!(
            first.history.operations.iter().filter(|o| !o.is_unknown()).count() > 20,
            "seed {seed} made calls that returned"
        );
        assert!(
            first.findings.watch_delivered > 10,
            "seed {seed}'s watchers received events: {}",
            first.findings.watch_delivered
        );
        assert_eq!(bytes(&first), bytes(&second), "seed {seed}'s history is the same twice");
        assert_eq!(
            first.simulated, second.simulated,
            "seed {seed} ran the same simulated time"
        );
        assert_eq!(first.faults, second.faults, "seed {seed} injected the same faults");
        assert_eq!(first.loss, second.loss, "seed {seed}'s crashes lost the same writes");
        histories.push(bytes(&first));
    }
    histories.dedup();
    assert_eq!(histories.len(), 3, "different seeds, different histories");
}
