//! Leases as the store keeps them: each lease's granted TTL and the keys
//! attached to it. Expiry is not here: time belongs to the server, which
//! revokes an expired lease through raft like any other write, so every
//! member applies the same revocations in the same order.
//!
//! Invariants:
//! - a key is attached to at most one lease, the lease of its live value;
//! - every attached key is live, and its lease exists;
//! - a lease's TTL is what was granted, stored as `'l' + id -> ttl` (both
//!   i64 big-endian), and the attachments are rebuilt on open from the
//!   live values (each value records its lease);
//! - a lease's remaining TTL is 0 (unset) until a checkpoint sets it
//!   (etcd's lease checkpoints: the leader records, through raft, how
//!   long each long lease has left, so that a new leader does not restart
//!   its clock at the full TTL). A member that persists checkpoints
//!   stores a set one after the TTL: `'l' + id -> ttl, remaining`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The largest TTL a lease may be granted, in seconds: etcd's bound, about
/// 285 years, beyond which its clients' deadlines overflow.
pub const MAX_LEASE_TTL: i64 = 9_000_000_000;

/// The lease id meaning "no lease".
pub const NO_LEASE: i64 = 0;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lease {
    /// The granted TTL, in seconds.
    pub ttl: i64,
    /// The TTL left at the last checkpoint, in seconds; 0 when unset.
    pub remaining_ttl: i64,
    pub keys: BTreeSet<Box<[u8]>>,
}

/// One lease's TTLs, as a new leader reads them to start its clocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTtl {
    pub id: i64,
    /// The granted TTL, in seconds.
    pub ttl: i64,
    /// The TTL left at the last checkpoint, 0 when unset.
    pub remaining_ttl: i64,
}

/// Every lease, and which lease holds each key.
#[derive(Debug, Default)]
pub struct LeaseTable {
    leases: BTreeMap<i64, Lease>,
    holder: HashMap<Box<[u8]>, i64>,
}

impl LeaseTable {
    pub fn contains(&self, id: i64) -> bool {
        self.leases.contains_key(&id)
    }

    pub fn get(&self, id: i64) -> Option<&Lease> {
        self.leases.get(&id)
    }

    /// Every lease id with its granted TTL, in id order.
    pub fn list(&self) -> Vec<(i64, i64)> {
        self.leases.iter().map(|(&id, lease)| (id, lease.ttl)).collect()
    }

    /// Every lease's TTLs, in id order.
    pub fn ttls(&self) -> Vec<LeaseTtl> {
        self.leases
            .iter()
            .map(|(&id, lease)| LeaseTtl {
                id,
                ttl: lease.ttl,
                remaining_ttl: lease.remaining_ttl,
            })
            .collect()
    }

    pub fn len(&self) -> usize {
        self.leases.len()
    }

    pub fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }

    /// Adds a lease with no keys. The caller has checked it is new.
    pub fn grant(&mut self, id: i64, ttl: i64) {
        let previous = self.leases.insert(
            id,
            Lease {
                ttl,
                remaining_ttl: 0,
                keys: BTreeSet::new(),
            },
        );
        debug_assert!(previous.is_none(), "lease {id} granted twice");
    }

    /// Records a checkpoint of lease `id`'s remaining TTL (0 clears it).
    /// Returns false, changing nothing, if the lease does not exist (it
    /// was revoked after the checkpoint was proposed).
    pub fn checkpoint(&mut self, id: i64, remaining_ttl: i64) -> bool {
        match self.leases.get_mut(&id) {
            Some(lease) => {
                lease.remaining_ttl = remaining_ttl;
                true
            }
            None => false,
        }
    }

    /// Removes a lease and returns it, with its keys, which are no longer
    /// attached to anything (the caller deletes them).
    pub fn revoke(&mut self, id: i64) -> Option<Lease> {
        let lease = self.leases.remove(&id)?;
        for key in &lease.keys {
            self.holder.remove(key);
        }
        Some(lease)
    }

    /// Records that `key`'s live value now has lease `id` ([`NO_LEASE`]
    /// for none), moving it off any lease it had. A lease that does not
    /// exist holds nothing: on open, a value may name a lease revoked
    /// later, whose revocation deleted the key at a later revision.
    pub fn attach(&mut self, key: &[u8], id: i64) {
        if self.holder.get(key) == Some(&id) {
            return;
        }
        self.detach(key);
        if let Some(lease) = self.leases.get_mut(&id) {
            lease.keys.insert(key.into());
            self.holder.insert(key.into(), id);
        }
    }

    /// Records that `key` has no live value any more.
    pub fn detach(&mut self, key: &[u8]) {
        // Most stores hold no key on a lease: a store opening reads every
        // revision through here, and an empty table needs no hash of each.
        if self.holder.is_empty() {
            return;
        }
        if let Some(id) = self.holder.remove(key) {
            if let Some(lease) = self.leases.get_mut(&id) {
                lease.keys.remove(key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: attaching moves a key between leases and revoking frees it.
    #[test]
    fn keys_follow_their_latest_lease() {
        let mut table = LeaseTable::default();
        table.grant(1, 10);
        table.grant(2, 20);
        table.attach(b"a", 1);
        table.attach(b"b", 1);
        table.attach(b"a", 2);
        assert_eq!(table.get(1).unwrap().keys.len(), 1);
        assert!(table.get(2).unwrap().keys.contains(&b"a"[..]));
        table.attach(b"a", NO_LEASE);
        assert!(table.get(2).unwrap().keys.is_empty());
        table.attach(b"c", 7);
        let revoked = table.revoke(1).unwrap();
        assert_eq!(revoked.keys.into_iter().collect::<Vec<_>>(), vec![b"b".to_vec().into()]);
        // The freed key attaches anew.
        table.attach(b"b", 2);
        assert_eq!(table.list(), vec![(2, 20)]);
        assert!(table.get(2).unwrap().keys.contains(&b"b"[..]));
        table.detach(b"b");
        assert!(table.get(2).unwrap().keys.is_empty());
    }
}
