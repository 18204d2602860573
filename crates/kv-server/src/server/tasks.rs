//! A member's background tasks, each a loop on the runtime: the gRPC
//! health status, the store's size for the quota, publishing this
//! member's client URLs, and (on the leader) revoking expired leases.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use crate::config;
use crate::member::core::Member;
use crate::proto::kvserverpb::{raft_request, MemberAttributes};

/// How often the gRPC health status follows whether a leader is known.
const HEALTH_POLL: Duration = Duration::from_millis(100);
/// How often the store's size on disk is sampled for the quota. sled
/// lists its blob directory to answer, too costly per write; a write can
/// overshoot the quota by what 100 ms of writes add, as etcd's can by what
/// its backend buffers between commits.
const DISK_SIZE_SAMPLE: Duration = Duration::from_millis(100);
/// The least time between two counts of the bytes the store holds, for
/// Status's `dbSizeInUse`, while it changes: fresh to within a second or
/// so on a store of modest size.
const DB_SIZE_IN_USE_GAP_MIN: Duration = Duration::from_secs(1);
/// Counting reads every item (about a second per GiB), so the next count
/// waits this many times as long as the last one took: counting takes at
/// most 2% of one thread, whatever the store's size (a 100 MB store is
/// counted about every 5 s). A store
/// that does not change is not counted again; a compaction (the one thing
/// that frees space in use) is counted at the next size sample whatever
/// the gap, and a defragmentation at once.
const DB_SIZE_IN_USE_COST_FACTOR: u32 = 50;
/// Pause between attempts to publish this member's client URLs.
const PUBLISH_RETRY: Duration = Duration::from_millis(500);

/// Starts every background task.
/// How often expired auth tokens are forgotten, as etcd's token keeper
/// sweeps: a token is refused the moment it expires either way; this
/// only frees the memory.
const TOKEN_SWEEP_EVERY: Duration = Duration::from_secs(1);

async fn sweep_tokens(member: Arc<Member>) {
    let mut every = tokio::time::interval(TOKEN_SWEEP_EVERY);
    loop {
        every.tick().await;
        member.auth.tokens.sweep();
    }
}

pub fn spawn(member: Arc<Member>, health: HealthReporter) {
    tokio::spawn(follow_health(member.clone(), health));
    tokio::spawn(sample_disk_size(member.clone()));
    tokio::spawn(publish_attributes(member.clone()));
    tokio::spawn(member.clone().revoke_expired_leases());
    tokio::spawn(sweep_tokens(member.clone()));
    let prober = member.clone();
    tokio::spawn(async move { prober.probe_peers().await });
    if member.config.experimental_initial_corrupt_check {
        let checker = member.clone();
        tokio::spawn(async move { checker.initial_corrupt_check().await });
    }
    let interval = member.config.experimental_corrupt_check_time;
    if !interval.is_zero() {
        tokio::spawn(async move { member.periodic_corrupt_checks(interval).await });
    }
}

/// The gRPC health status: serving while a leader is known.
async fn follow_health(member: Arc<Member>, health: HealthReporter) {
    let mut serving = false;
    loop {
        let now = member.leader() != 0;
        if now != serving {
            let status = if now {
                ServingStatus::Serving
            } else {
                ServingStatus::NotServing
            };
            health.set_service_status("", status).await;
            serving = now;
        }
        tokio::time::sleep(HEALTH_POLL).await;
    }
}

/// Samples the store's size on disk every [`DISK_SIZE_SAMPLE`], and the
/// bytes it holds as [`DB_SIZE_IN_USE_COST_FACTOR`] paces it (on a
/// blocking thread: it reads every item).
async fn sample_disk_size(member: Arc<Member>) {
    // (revision, compact revision, compaction work queued) counted last,
    // when, and the wait after. A compaction is counted when it applies
    // and again once its queued removals are done.
    let mut counted: Option<(i64, i64, bool)> = None;
    let mut last_count = Instant::now();
    let mut gap = Duration::ZERO;
    loop {
        let store = &member.store;
        let now = (
            store.current_revision(),
            store.compact_revision(),
            store.compaction_pending(),
        );
        let live = match counted {
            None => true,
            Some((revision, compacted, queued)) => {
                compacted != now.1 || (queued && !now.2) || (revision != now.0 && last_count.elapsed() >= gap)
            }
        };
        let sampler = member.clone();
        let started = Instant::now();
        let sampled = tokio::task::spawn_blocking(move || sampler.sample_sizes(live)).await;
        if let Ok(Err(error)) = sampled {
            tracing::warn!(%error, "could not read the store's size");
        }
        if live {
            counted = Some(now);
            last_count = Instant::now();
            gap = (started.elapsed() * DB_SIZE_IN_USE_COST_FACTOR).max(DB_SIZE_IN_USE_GAP_MIN);
        }
        tokio::time::sleep(DISK_SIZE_SAMPLE).await;
    }
}

/// Proposes this member's client URLs until it is applied once.
async fn publish_attributes(member: Arc<Member>) {
    let attributes = MemberAttributes {
        id: member.member_id(),
        name: member.config.name.clone(),
        client_urls: config::urls(&member.config.advertise_client_urls),
    };
    loop {
        match member
            .propose(raft_request::Request::Attributes(attributes.clone()))
            .await
        {
            Err(error) => {
                tracing::debug!(%error, "publishing client URLs; will retry");
                tokio::time::sleep(PUBLISH_RETRY).await;
            }
            Ok(_) => {
                tracing::info!("published client URLs");
                return;
            }
        }
    }
}
