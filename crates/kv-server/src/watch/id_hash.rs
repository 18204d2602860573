//! Hashing for the maps and sets keyed by a watcher's serial or a group's
//! index, touched once per watcher per response. std's default hasher
//! (SipHash, made to resist chosen keys) costs more than the rest of such
//! a lookup; these keys are small integers this process chose, so one
//! multiplication spreads them enough.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// Fibonacci hashing: multiplying by 2^64 / φ sends consecutive integers
/// to hashes whose top bits (hashbrown's tag) and low bits (its bucket)
/// both differ.
#[derive(Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(self.0 ^ u64::from(byte));
        }
    }

    fn write_u64(&mut self, id: u64) {
        self.0 = id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn write_usize(&mut self, id: usize) {
        self.write_u64(id as u64);
    }
}

pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;
pub type IdSet<K> = HashSet<K, BuildHasherDefault<IdHasher>>;
