//! Lease expiry, which only the leader tracks (etcd's "primary lessor").
//!
//! Which leases exist, with their TTLs and keys, is in the store and moves
//! through raft. When each expires is not replicated: the leader keeps a
//! deadline per lease in memory, renews it on keep-alives, and revokes an
//! expired lease by proposing a revocation like any write. Followers keep
//! no deadlines, so they never expire anything.
//!
//! When a member becomes leader (for a new term) it restarts every
//! lease's clock at its TTL plus one election timeout; when it loses
//! leadership it drops its deadlines. Without lease checkpoints (off by
//! default in etcd) that TTL is the full one: a new leader cannot know
//! what its predecessor had seen, so a leader change renews every lease.
//!
//! With checkpoints (`--experimental-enable-lease-checkpoint`, etcd's
//! design), the leader records through raft how long each lease has
//! left, every [`LEASE_CHECKPOINT_INTERVAL`] for each lease whose TTL left
//! is longer than that, and a new leader starts each clock at the
//! checkpointed TTL instead. A keep-alive of a checkpointed lease first
//! clears its checkpoint through raft, so a lease takes at most two
//! entries per interval; so does the first keep-alive of each lease under
//! a new leader, before a checkpoint of its own has applied, since the
//! members' in-memory checkpoints may differ after restarts. Whether
//! members also store the checkpoints is their own setting
//! (`--experimental-enable-lease-checkpoint-persist`,
//! `mvcc::Store::persist_lease_checkpoints`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::clock::Clock;

/// After the leader proposes revoking an expired lease, it waits this long
/// before proposing again, in case the revocation was lost to a leader
/// change (etcd's `expiredLeaseRetryInterval`).
pub const EXPIRED_RETRY: Duration = Duration::from_secs(3);

/// How long after a lease is granted, checkpointed or its leader elected
/// its next checkpoint is due: etcd's `defaultLeaseCheckpointInterval`.
/// Leases with no more than this left are not checkpointed.
pub const LEASE_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(5 * 60);

/// The environment variable that shortens [`LEASE_CHECKPOINT_INTERVAL`] (a
/// Go duration), for tests that cannot wait five minutes; etcd sets the
/// same interval only from its own tests.
pub const LEASE_CHECKPOINT_INTERVAL_VARIABLE: &str = "KV_SERVER_LEASE_CHECKPOINT_INTERVAL";

/// Checkpoints in one raft entry at most: etcd's
/// `maxLeaseCheckpointBatchSize`.
pub const LEASE_CHECKPOINT_BATCH: usize = 1000;

/// The checkpoint interval this process uses: [`LEASE_CHECKPOINT_INTERVAL`]
/// unless [`LEASE_CHECKPOINT_INTERVAL_VARIABLE`] sets a shorter one, in
/// whole seconds (checkpoints count whole seconds), at least one.
pub fn lease_checkpoint_interval() -> Duration {
    std::env::var(LEASE_CHECKPOINT_INTERVAL_VARIABLE)
        .ok()
        .and_then(|text| crate::flags::go_syntax::parse_duration(&text).ok())
        .map(|every| Duration::from_secs(every.as_secs().max(1)))
        .filter(|every| *every < LEASE_CHECKPOINT_INTERVAL)
        .unwrap_or(LEASE_CHECKPOINT_INTERVAL)
}

struct Deadline {
    at: Instant,
    /// The granted TTL, in seconds.
    ttl: i64,
    /// When an expired lease's revocation may be proposed again.
    retry_at: Option<Instant>,
    /// When its next checkpoint is due, if one is scheduled (the same
    /// instant is in `Deadlines::checkpoints`).
    checkpoint_at: Option<Instant>,
    /// Whether every member holds the same checkpoint of this lease as
    /// this one: true once a checkpoint or clear this leader proposed has
    /// applied, or for a lease granted under it. Until then a member may
    /// hold an older checkpoint this one lacks: without persistence, each
    /// member replays from its own last flush after a restart.
    agreed: bool,
}

impl Deadline {
    fn after(now: Instant, ttl: i64, left: Duration) -> Deadline {
        Deadline {
            at: now + left,
            ttl,
            retry_at: None,
            checkpoint_at: None,
            agreed: false,
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
    /// Scheduled checkpoints by due time: at most one per lease, so its
    /// size is bounded by the leases'.
    checkpoints: BTreeSet<(Instant, i64)>,
}

impl Deadlines {
    /// Schedules lease `id`'s next checkpoint `interval` from `now`,
    /// replacing any scheduled, if `left_secs` (its TTL left as the
    /// lessor last knew it) is longer than the interval.
    fn schedule(&mut self, id: i64, left_secs: i64, now: Instant, interval: Duration) {
        let Some(deadline) = self.deadlines.get_mut(&id) else {
            return;
        };
        if left_secs <= interval.as_secs() as i64 {
            return;
        }
        if let Some(previous) = deadline.checkpoint_at.replace(now + interval) {
            self.checkpoints.remove(&(previous, id));
        }
        self.checkpoints.insert((now + interval, id));
    }

    fn forget(&mut self, id: i64) {
        if let Some(deadline) = self.deadlines.remove(&id) {
            if let Some(at) = deadline.checkpoint_at {
                self.checkpoints.remove(&(at, id));
            }
        }
    }
}

pub struct Lessor {
    inner: Mutex<Deadlines>,
    clock: Arc<dyn Clock>,
    /// The checkpoint interval, when checkpoints are on.
    checkpoint_interval: Option<Duration>,
}

fn seconds(ttl: i64) -> Duration {
    Duration::from_secs(ttl.max(0) as u64)
}

impl Lessor {
    /// A lessor reading `clock`, checkpointing every `checkpoint_interval`
    /// when that is given.
    pub fn new(clock: Arc<dyn Clock>, checkpoint_interval: Option<Duration>) -> Lessor {
        Lessor {
            inner: Mutex::default(),
            clock,
            checkpoint_interval,
        }
    }

    /// Follows this member's role: on becoming leader of a new term, gives
    /// every lease in `leases` (read only then) a fresh deadline, its TTL
    /// left plus `extend`: the checkpointed TTL if one is set, else the
    /// granted one (etcd's `Promote`); on losing leadership, forgets them.
    /// Returns whether this member tracks deadlines now.
    pub fn sync(
        &self,
        leading: bool,
        term: u64,
        extend: Duration,
        leases: impl FnOnce() -> Vec<mvcc::LeaseTtl>,
    ) -> bool {
        let mut inner = self.inner.lock();
        match (leading, inner.primary_term) {
            (true, Some(primary)) if primary == term => true,
            (true, _) => {
                // Read under the lock: a grant or revocation applied now
                // waits for it, and then sees the new deadlines.
                let now = self.clock.now();
                inner.checkpoints.clear();
                inner.deadlines.clear();
                for lease in leases() {
                    let left = if lease.remaining_ttl > 0 {
                        lease.remaining_ttl
                    } else {
                        lease.ttl
                    };
                    let deadline = Deadline::after(now, lease.ttl, seconds(left) + extend);
                    inner.deadlines.insert(lease.id, deadline);
                    if let Some(interval) = self.checkpoint_interval {
                        inner.schedule(lease.id, left, now, interval);
                    }
                }
                inner.primary_term = Some(term);
                tracing::info!(term, leases = inner.deadlines.len(), "tracking lease expiry as leader");
                true
            }
            (false, Some(_)) => {
                inner.primary_term = None;
                inner.deadlines.clear();
                inner.checkpoints.clear();
                false
            }
            (false, None) => false,
        }
    }

    /// A grant was applied.
    pub fn granted(&self, id: i64, ttl: i64) {
        let mut inner = self.inner.lock();
        if inner.primary_term.is_some() {
            let now = self.clock.now();
            let deadline = Deadline {
                agreed: true,
                ..Deadline::after(now, ttl, seconds(ttl))
            };
            inner.deadlines.insert(id, deadline);
            if let Some(interval) = self.checkpoint_interval {
                inner.schedule(id, ttl, now, interval);
            }
        }
    }

    /// A revocation was applied.
    pub fn revoked(&self, id: i64) {
        self.inner.lock().forget(id);
    }

    /// Checkpoints were applied: on the leader, each lease's next one is
    /// scheduled from now (etcd's `Checkpoint`).
    pub fn checkpointed(&self, checkpoints: &[mvcc::LeaseCheckpoint]) {
        let Some(interval) = self.checkpoint_interval else {
            return;
        };
        let mut inner = self.inner.lock();
        if inner.primary_term.is_none() {
            return;
        }
        let now = self.clock.now();
        for checkpoint in checkpoints {
            let Some(deadline) = inner.deadlines.get_mut(&checkpoint.id) else {
                continue;
            };
            deadline.agreed = true;
            let ttl = deadline.ttl;
            let left = if checkpoint.remaining_ttl > 0 {
                checkpoint.remaining_ttl
            } else {
                ttl
            };
            inner.schedule(checkpoint.id, left, now, interval);
        }
    }

    /// Up to `max` checkpoints now due, each lease's TTL left in whole
    /// seconds rounded up (etcd's `findDueScheduledCheckpoints`). A lease
    /// already expired, or with its whole TTL left (renewed within the
    /// second), is skipped; each is taken once, and scheduled again when
    /// its checkpoint applies.
    pub fn take_due_checkpoints(&self, max: usize) -> Vec<mvcc::LeaseCheckpoint> {
        let mut inner = self.inner.lock();
        if inner.primary_term.is_none() {
            return Vec::new();
        }
        let now = self.clock.now();
        let mut due = Vec::new();
        while due.len() < max {
            let Some(&(at, id)) = inner.checkpoints.first() else {
                break;
            };
            if at > now {
                break;
            }
            inner.checkpoints.pop_first();
            let Some(deadline) = inner.deadlines.get_mut(&id) else {
                continue;
            };
            deadline.checkpoint_at = None;
            if deadline.at <= now {
                continue;
            }
            let left = deadline.at - now;
            let remaining_ttl = left.as_secs() as i64 + i64::from(left.subsec_nanos() > 0);
            if remaining_ttl >= deadline.ttl {
                continue;
            }
            due.push(mvcc::LeaseCheckpoint { id, remaining_ttl });
        }
        due
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
        match inner.deadlines.get_mut(&id) {
            Some(deadline) if deadline.at <= now => false,
            Some(deadline) => {
                deadline.at = now + seconds(ttl);
                true
            }
            None => {
                inner.deadlines.insert(id, Deadline::after(now, ttl, seconds(ttl)));
                true
            }
        }
    }

    /// Whether a keep-alive of lease `id` must clear its checkpoint first:
    /// checkpoints are on, and the store here holds one (etcd's `Renew`),
    /// or this leader has not yet seen one of its own apply for the lease,
    /// so another member may still hold an older one. The second case
    /// costs at most one entry per lease per term; without it, a leader
    /// whose restart lost an in-memory checkpoint would leave a follower
    /// holding it, and a renewed lease would restart from it under the
    /// next leader.
    pub fn must_clear_checkpoint(&self, id: i64, stored_remaining_ttl: i64) -> bool {
        if self.checkpoint_interval.is_none() {
            return false;
        }
        let inner = self.inner.lock();
        stored_remaining_ttl > 0 || inner.deadlines.get(&id).is_some_and(|deadline| !deadline.agreed)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A clock the test moves by hand.
    struct HandClock(Mutex<Instant>);

    impl Clock for HandClock {
        fn now(&self) -> Instant {
            *self.0.lock()
        }
        fn since_epoch(&self) -> Duration {
            Duration::ZERO
        }
    }

    fn lease(id: i64, ttl: i64, remaining_ttl: i64) -> mvcc::LeaseTtl {
        mvcc::LeaseTtl { id, ttl, remaining_ttl }
    }

    // Goal: etcd's checkpoint schedule: a lease whose TTL left exceeds the
    // interval is due one interval after promotion, with its TTL left
    // rounded up; a short lease never is; an applied checkpoint schedules
    // the next; a promotion starts each clock at the checkpointed TTL.
    #[test]
    fn checkpoints_follow_etcds_schedule() {
        let start = Instant::now();
        let clock = Arc::new(HandClock(Mutex::new(start)));
        let interval = Duration::from_secs(10);
        let lessor = Lessor::new(clock.clone(), Some(interval));
        let leases = vec![lease(1, 60, 0), lease(2, 5, 0), lease(3, 60, 30)];
        assert!(lessor.sync(true, 1, Duration::ZERO, || leases));
        assert_eq!(lessor.remaining(3), Some(Duration::from_secs(30)));
        assert!(
            lessor.take_due_checkpoints(10).is_empty(),
            "nothing due before the interval"
        );
        *clock.0.lock() = start + Duration::from_millis(10_500);
        let due = lessor.take_due_checkpoints(10);
        let expected = vec![
            mvcc::LeaseCheckpoint {
                id: 1,
                remaining_ttl: 50,
            },
            mvcc::LeaseCheckpoint {
                id: 3,
                remaining_ttl: 20,
            },
        ];
        assert_eq!(due, expected, "lease 2 is shorter than the interval");
        assert!(lessor.take_due_checkpoints(10).is_empty(), "each is taken once");
        lessor.checkpointed(&due);
        *clock.0.lock() = start + Duration::from_millis(20_500);
        let due = lessor.take_due_checkpoints(1);
        assert_eq!(
            due,
            vec![mvcc::LeaseCheckpoint {
                id: 1,
                remaining_ttl: 40
            }]
        );
        // A lease renewed within the second has its whole TTL left: not
        // checkpointed.
        assert!(lessor.renew(3, 60));
        assert!(lessor.take_due_checkpoints(10).is_empty());
        // A new leader goes on from the checkpoint.
        assert!(!lessor.sync(false, 1, Duration::ZERO, Vec::new));
        assert!(lessor.take_due_checkpoints(10).is_empty(), "a follower takes none");
        assert!(lessor.sync(true, 2, Duration::from_secs(1), || vec![lease(1, 60, 40)]));
        assert_eq!(lessor.remaining(1), Some(Duration::from_secs(41)));
    }

    // Goal: a keep-alive clears a checkpoint held here, and under a new
    // leader also one only another member may hold, until a checkpoint or
    // clear of this leader's has applied; a lease granted under this
    // leader is known everywhere.
    #[test]
    fn a_new_leader_clears_checkpoints_it_may_not_know() {
        let clock = Arc::new(HandClock(Mutex::new(Instant::now())));
        let lessor = Lessor::new(clock, Some(Duration::from_secs(10)));
        assert!(lessor.sync(true, 1, Duration::ZERO, || vec![lease(1, 60, 0), lease(2, 60, 0)]));
        assert!(lessor.must_clear_checkpoint(1, 0), "another member may hold one");
        lessor.checkpointed(&[mvcc::LeaseCheckpoint {
            id: 1,
            remaining_ttl: 0,
        }]);
        assert!(!lessor.must_clear_checkpoint(1, 0), "cleared everywhere");
        assert!(lessor.must_clear_checkpoint(1, 30), "held here");
        lessor.granted(3, 60);
        assert!(!lessor.must_clear_checkpoint(3, 0));
        assert!(lessor.must_clear_checkpoint(2, 0));
        let off = Lessor::new(Arc::new(HandClock(Mutex::new(Instant::now()))), None);
        assert!(off.sync(true, 1, Duration::ZERO, || vec![lease(1, 60, 30)]));
        assert!(!off.must_clear_checkpoint(1, 30), "checkpoints off");
    }

    // Goal: without checkpoints nothing is scheduled, and a promotion
    // still honours a stored checkpoint (etcd's Promote reads it whether or
    // not its own member checkpoints).
    #[test]
    fn without_checkpoints_nothing_is_due() {
        let start = Instant::now();
        let clock = Arc::new(HandClock(Mutex::new(start)));
        let lessor = Lessor::new(clock.clone(), None);
        assert!(lessor.sync(true, 1, Duration::ZERO, || vec![lease(1, 600, 100)]));
        assert_eq!(lessor.remaining(1), Some(Duration::from_secs(100)));
        *clock.0.lock() = start + Duration::from_secs(400);
        assert!(lessor.take_due_checkpoints(10).is_empty());
    }
}
