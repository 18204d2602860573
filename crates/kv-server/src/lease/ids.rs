//! Lease ids as etcd makes them: the member id's low 16 bits, then the
//! start time in milliseconds (40 bits) and a counter (8 bits) that
//! together count up, with the sign bit cleared. Ids from different
//! members differ in their top bits; one member's never repeat unless its
//! clock goes back across a restart, when a grant may find the id taken and
//! answer "lease already exists".

use std::sync::atomic::{AtomicU64, Ordering};

pub struct LeaseIds {
    prefix: u64,
    suffix: AtomicU64,
}

impl LeaseIds {
    /// Ids of `member_id`, counting up from the wall-clock time `now`
    /// (since the Unix epoch).
    pub fn new(member_id: u64, now: std::time::Duration) -> LeaseIds {
        let millis = now.as_millis() as u64;
        LeaseIds {
            prefix: (member_id & 0xffff) << 48,
            suffix: AtomicU64::new((millis & ((1 << 40) - 1)) << 8),
        }
    }

    pub fn next(&self) -> i64 {
        loop {
            let suffix = self.suffix.fetch_add(1, Ordering::Relaxed) + 1;
            let id = (self.prefix | (suffix & ((1 << 48) - 1))) & (i64::MAX as u64);
            if id != 0 {
                return id as i64;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: ids carry the member's low 16 bits on top, count up, and are
    // positive, as etcd's are.
    #[test]
    fn lease_ids_are_etcd_shaped() {
        let ids = LeaseIds::new(0x8e9e_05c5_2164_694d, std::time::Duration::from_secs(1_700_000_000));
        let first = ids.next();
        let second = ids.next();
        assert!(first > 0 && second == first + 1);
        assert_eq!((first as u64) >> 48, 0x694d & 0x7fff);
    }
}
