//! A member's background tasks, each a loop on the runtime: the gRPC
//! health status, the store's size for the quota, publishing this
//! member's client URLs, and (on the leader) revoking expired leases.

use std::sync::Arc;
use std::time::Duration;

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
        member.sweep_tokens();
    }
}

pub fn spawn(member: Arc<Member>, health: HealthReporter) {
    tokio::spawn(follow_health(member.clone(), health));
    tokio::spawn(sample_disk_size(member.clone()));
    tokio::spawn(publish_attributes(member.clone()));
    tokio::spawn(member.clone().revoke_expired_leases());
    tokio::spawn(sweep_tokens(member.clone()));
    let advancer = member.clone();
    tokio::spawn(async move { advancer.advance_election_ticks().await });
    let prober = member.clone();
    tokio::spawn(async move { prober.probe_peers().await });
    let config = member.config();
    let retention =
        crate::server::compactor::retention(&config.auto_compaction_mode, &config.auto_compaction_retention);
    // The flags were checked at start; nothing is refused here.
    crate::server::compactor::spawn(
        member.clone(),
        retention.unwrap_or(crate::server::compactor::Retention::Off),
    );
    if member.config().experimental_initial_corrupt_check {
        let checker = member.clone();
        tokio::spawn(async move { checker.initial_corrupt_check().await });
    }
    if member.config().experimental_compact_hash_check_enabled {
        let checker = member.clone();
        let every = member.config().experimental_compact_hash_check_time;
        tokio::spawn(async move { checker.compact_hash_checks(every).await });
    }
    let interval = member.config().experimental_corrupt_check_time;
    if !interval.is_zero() {
        tokio::spawn(async move { member.periodic_corrupt_checks(interval).await });
    }
}

/// The gRPC health status: serving while a leader is known and, with
/// --experimental-stop-grpc-service-on-defrag, no defragmentation runs.
/// Each change is logged with etcd's line.
async fn follow_health(member: Arc<Member>, health: HealthReporter) {
    let stop_on_defrag = member.config().experimental_stop_grpc_service_on_defrag;
    let mut defragmenting = member.defragmenting();
    let mut serving = false;
    loop {
        let defrags = *defragmenting.borrow_and_update();
        let defrag_active = stop_on_defrag && defrags.active > 0;
        let leader_known = member.leader() != 0;
        let now = leader_known && !defrag_active;
        if now != serving {
            if now {
                tracing::info!(service = "", status = "SERVING", "grpc service status changed");
                health.set_service_status("", ServingStatus::Serving).await;
            } else {
                let reason = if defrag_active { "defrag is active" } else { "no leader" };
                tracing::warn!(
                    service = "",
                    status = "NOT_SERVING",
                    reason,
                    "grpc service status changed"
                );
                health.set_service_status("", ServingStatus::NotServing).await;
            }
            serving = now;
        }
        if defrag_active {
            member.report_defrag(defrags.started);
        }
        tokio::select! {
            changed = defragmenting.changed() => {
                if changed.is_err() {
                    tokio::time::sleep(HEALTH_POLL).await;
                }
            }
            () = tokio::time::sleep(HEALTH_POLL) => {}
        }
    }
}

/// Samples the store's size on disk and the bytes it holds every
/// [`DISK_SIZE_SAMPLE`] (on a blocking thread: sled's size reads its
/// files' metadata).
async fn sample_disk_size(member: Arc<Member>) {
    loop {
        let sampler = member.clone();
        let sampled = tokio::task::spawn_blocking(move || sampler.sample_sizes()).await;
        if let Ok(Err(error)) = sampled {
            tracing::warn!(%error, "could not read the store's size");
        }
        tokio::time::sleep(DISK_SIZE_SAMPLE).await;
    }
}

/// Proposes this member's client URLs until it is applied once.
async fn publish_attributes(member: Arc<Member>) {
    let attributes = MemberAttributes {
        id: member.member_id(),
        name: member.config().name.clone(),
        client_urls: config::urls(&member.config().advertise_client_urls),
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
