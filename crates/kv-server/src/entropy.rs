//! The member's randomness, behind a seam: the operating system's in
//! production, a seeded generator where a simulator drives the member.
//!
//! What a member draws: an auth token's random letters and a password
//! hash's salt (`auth`). Everything else a member decides follows from
//! its inputs, its clock (`clock.rs`) and raft's election timeout (fixed
//! by a simulator's seed, `NodeConfig::fixed_election_ticks`).

/// Where a part of the member draws random bits.
pub trait Entropy: Send + Sync {
    fn next_u64(&self) -> u64;
}

/// The operating system's randomness (through `rand`'s thread generator,
/// seeded from it).
#[derive(Debug, Default, Clone, Copy)]
pub struct OsEntropy;

impl Entropy for OsEntropy {
    fn next_u64(&self) -> u64 {
        rand::random()
    }
}
