//! Lease expiry, which only the leader tracks (etcd's "primary lessor").
//!
//! Which leases exist, with their TTLs and keys, is in the store and moves
//! through raft. When each expires is not replicated: the leader keeps a
//! deadline per lease in memory, renews it on keep-alives, and revokes an
//! expired lease by proposing a revocation like any write. Followers keep
//! no deadlines, so they never expire anything.
//!
//! When a member becomes leader (for a new term) it restarts every
//! lease's clock at its full TTL plus one election timeout, since it cannot
//! know what its predecessor had seen; when it loses leadership it drops
//! its deadlines. This is etcd's behaviour without lease checkpoints (off
//! by default in etcd 3.5): a leader change renews every lease.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::clock::Clock;

/// After the leader proposes revoking an expired lease, it waits this long
/// before proposing again, in case the revocation was lost to a leader
/// change (etcd's `expiredLeaseRetryInterval`).
pub const EXPIRED_RETRY: Duration = Duration::from_secs(3);

struct Deadline {
    at: Instant,
    /// When an expired lease's revocation may be proposed again.
    retry_at: Option<Instant>,
}

impl Deadline {
    fn after(now: Instant, ttl: Duration) -> Deadline {
        Deadline {
            at: now + ttl,
            retry_at: None,
        }
    }
}

#[derive(Default)]
struct Deadlines {
    /// The term this member leads, while it tracks deadlines.
    primary_term: Option<u64>,
    /// Ordered by id, so that expired leases are taken in the same order
    /// in every run.
    deadlines: BTreeMap<i64, Deadline>,
}

pub struct Lessor {
    inner: Mutex<Deadlines>,
    clock: Arc<dyn Clock>,
}

fn seconds(ttl: i64) -> Duration {
    Duration::from_secs(ttl.max(0) as u64)
}

impl Lessor {
    /// A lessor reading `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Lessor {
        Lessor {
            inner: Mutex::default(),
            clock,
        }
    }

    /// Follows this member's role: on becoming leader of a new term, gives
    /// every lease in `leases` (id and TTL, read only then) a fresh
    /// deadline, its TTL plus `extend`; on losing leadership, forgets them.
    /// Returns whether this member tracks deadlines now.
    pub fn sync(&self, leading: bool, term: u64, extend: Duration, leases: impl FnOnce() -> Vec<(i64, i64)>) -> bool {
        let mut inner = self.inner.lock();
        match (leading, inner.primary_term) {
            (true, Some(primary)) if primary == term => true,
            (true, _) => {
                // Read under the lock: a grant or revocation applied now
                // waits for it, and then sees the new deadlines.
                let now = self.clock.now();
                inner.deadlines = leases()
                    .into_iter()
                    .map(|(id, ttl)| (id, Deadline::after(now, seconds(ttl) + extend)))
                    .collect();
                inner.primary_term = Some(term);
                tracing::info!(term, leases = inner.deadlines.len(), "tracking lease expiry as leader");
                true
            }
            (false, Some(_)) => {
                inner.primary_term = None;
                inner.deadlines.clear();
                false
            }
            (false, None) => false,
        }
    }

    /// A grant was applied.
    pub fn granted(&self, id: i64, ttl: i64) {
        let mut inner = self.inner.lock();
        if inner.primary_term.is_some() {
            inner
                .deadlines
                .insert(id, Deadline::after(self.clock.now(), seconds(ttl)));
        }
    }

    /// A revocation was applied.
    pub fn revoked(&self, id: i64) {
        self.inner.lock().deadlines.remove(&id);
    }

    /// A keep-alive on the leader: the lease lives `ttl` seconds from now.
    /// Returns false, changing nothing, when the lease has already expired
    /// (its revocation is on its way) or this member is not tracking.
    pub fn renew(&self, id: i64, ttl: i64) -> bool {
        let mut inner = self.inner.lock();
        if inner.primary_term.is_none() {
            return false;
        }
        let now = self.clock.now();
        match inner.deadlines.get(&id) {
            Some(deadline) if deadline.at <= now => false,
            _ => {
                inner.deadlines.insert(id, Deadline::after(now, seconds(ttl)));
                true
            }
        }
    }

    /// Time left before the lease expires, if this member tracks it.
    pub fn remaining(&self, id: i64) -> Option<Duration> {
        let now = self.clock.now();
        let inner = self.inner.lock();
        inner
            .deadlines
            .get(&id)
            .map(|deadline| deadline.at.saturating_duration_since(now))
    }

    /// Up to `max` leases past their deadline. An expired lease stays
    /// expired (keep-alives cannot revive it) and is returned again only
    /// after [`EXPIRED_RETRY`], so the caller proposes each revocation once
    /// per retry interval until it applies.
    pub fn take_expired(&self, max: usize) -> Vec<i64> {
        let mut inner = self.inner.lock();
        if inner.primary_term.is_none() {
            return Vec::new();
        }
        let now = self.clock.now();
        let mut expired = Vec::new();
        for (id, deadline) in inner.deadlines.iter_mut() {
            if expired.len() == max {
                break;
            }
            if deadline.at <= now && deadline.retry_at.is_none_or(|retry| retry <= now) {
                deadline.retry_at = Some(now + EXPIRED_RETRY);
                expired.push(*id);
            }
        }
        expired
    }
}
