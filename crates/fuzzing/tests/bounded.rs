//! Goal: each fuzz target holds on a bounded run, in the test command:
//! every saved regression input (`regressions/<target>/`, inputs that once
//! failed), then `FUZZ_INPUTS` seeded random inputs per target (2,000 by
//! default; the long, coverage-guided runs are in docs/robustness.md).
//!
//! Method: random inputs of 0 to 4 KiB from a seeded generator, so a
//! failure names the seed and input number that reproduce it.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Largest random input: enough for a segment of dozens of records or a
/// few nested txns.
const INPUT_BYTES_MAX: usize = 4096;

fn inputs() -> usize {
    std::env::var("FUZZ_INPUTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000)
}

#[test]
fn every_target_holds_on_a_bounded_run() {
    let regressions = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions");
    for &(name, target) in fuzzing::TARGETS {
        let saved = std::fs::read_dir(regressions.join(name))
            .into_iter()
            .flatten()
            .flatten();
        for entry in saved {
            let input = std::fs::read(entry.path()).expect("a saved input");
            target(&input);
        }
        let mut random = StdRng::seed_from_u64(0x5eed);
        for number in 0..inputs() {
            let length = random.random_range(0..=INPUT_BYTES_MAX);
            let mut input = vec![0u8; length];
            random.fill(&mut input[..]);
            let outcome = std::panic::catch_unwind(|| target(&input));
            assert!(outcome.is_ok(), "{name}: input {number} of seed 0x5eed failed");
        }
    }
}
