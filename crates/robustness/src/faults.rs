//! The faults a round injects, one per round, picked at random from the
//! round's seed unless one is asked for. Each returns once the fault is
//! over and every member it touched is serving again.
//!
//! - kill -9 of the leader or of a follower, then a restart;
//! - SIGSTOP, then SIGCONT, of a random member;
//! - a partition of the leader's or a follower's peer traffic, both ways,
//!   through the proxy, then healed;
//! - added latency on every peer connection, or every connection broken
//!   every [`DROP_EVERY`];
//! - a torn WAL tail: the member is restarted with the WAL failpoint that
//!   writes half of a save and aborts the process, then restarted clean;
//! - a crash at a failpoint around the WAL save, the apply, a compaction or
//!   a snapshot install, the same way;
//! - a defragmentation of a random member (the leader half the time)
//!   under the workload, and with failpoints, half the time a crash in
//!   it: once its copy is complete, or once it switched to the copy.
//!
//! The last two need kv-server built with its `failpoints` feature. Real
//! etcd (the control) has no such failpoints: there they are kill -9.

use std::time::Duration;

use etcd_proto::etcdserverpb as pb;
use etcd_proto::etcdserverpb::kv_client::KvClient;
use etcd_proto::etcdserverpb::maintenance_client::MaintenanceClient;
use rand::rngs::StdRng;
use rand::Rng;

use crate::cluster::{Cluster, MEMBERS};
use crate::proxy::NetworkFaults;
use crate::workload::channel;

/// How long a fault lasts before it is healed or the member restarted.
pub const FAULT_FOR: Duration = Duration::from_millis(1500);
/// Latency added to every peer chunk in the latency fault.
pub const ADDED_LATENCY: Duration = Duration::from_millis(50);
/// How often every peer connection is broken in the drop fault.
pub const DROP_EVERY: Duration = Duration::from_millis(200);
/// How long a member restarted at a crash point may run before the fault
/// gives up waiting for the crash (too few writes reached the point) and
/// kills it.
pub const CRASH_WITHIN: Duration = Duration::from_secs(8);

/// kv-server's crash points (`fail` failpoints that abort the process).
pub const CRASH_POINTS: &[&str] = &[
    "wal::crash_before_fdatasync",
    "wal::crash_after_fdatasync",
    "kv::crash_before_apply",
    "kv::crash_after_apply",
    "kv::crash_after_compact",
    "kv::restore",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Fault {
    KillLeader,
    KillFollower,
    Pause,
    PartitionLeader,
    PartitionFollower,
    Latency,
    Drops,
    TornWal,
    Crash,
    Defrag,
    Compact,
}

pub const ALL: [Fault; 11] = [
    Fault::KillLeader,
    Fault::KillFollower,
    Fault::Pause,
    Fault::PartitionLeader,
    Fault::PartitionFollower,
    Fault::Latency,
    Fault::Drops,
    Fault::TornWal,
    Fault::Crash,
    Fault::Defrag,
    Fault::Compact,
];

/// kv-server's crash points in a defragmentation (`mvcc::defrag_*`): the
/// value files reclaimed, sled's copy complete, and the switch to it made.
pub const DEFRAG_CRASH_POINTS: &[&str] = &["mvcc::defrag_reclaimed", "mvcc::defrag_copied", "mvcc::defrag_switched"];

/// Armed on every member built with failpoints: each defragmentation
/// copies sled. A round's store is far too small for sled to be bloated,
/// when kv-server would skip the copy, and the copy is what must keep
/// every write made while it runs.
pub const DEFRAG_COPY_SLED: &str = "mvcc::defrag_copy_sled=return";

/// The batch limit a member is restarted with for the compaction fault
/// (`--experimental-compaction-batch-limit`): a round's store is small,
/// and steps of 10 keys or revisions make its compaction many steps long
/// under the workload.
pub const COMPACT_FAULT_BATCH_LIMIT: usize = 10;

/// The compaction fault's crash point: after a step of compaction.
pub const COMPACT_CRASH_POINT: &str = "mvcc::compaction_step";

/// How long a defragmentation may take; a member's store in a round is
/// small, so this is generous.
pub const DEFRAG_WITHIN: Duration = Duration::from_secs(30);

/// The index of the member that leads, if one is known.
pub async fn leader(cluster: &Cluster) -> Option<usize> {
    for member in &cluster.members {
        let mut client = MaintenanceClient::new(channel(&member.endpoint()));
        let Ok(status) = client.status(pb::StatusRequest {}).await else {
            continue;
        };
        let status = status.into_inner();
        if status.leader == 0 {
            continue;
        }
        for (i, other) in cluster.members.iter().enumerate() {
            let mut client = MaintenanceClient::new(channel(&other.endpoint()));
            if let Ok(other_status) = client.status(pb::StatusRequest {}).await {
                if other_status
                    .into_inner()
                    .header
                    .is_some_and(|h| h.member_id == status.leader)
                {
                    return Some(i);
                }
            }
        }
    }
    None
}

/// A member other than the leader (any, if the leader is unknown).
async fn follower(cluster: &Cluster, random: &mut StdRng) -> usize {
    let leader = leader(cluster).await;
    loop {
        let pick = random.random_range(0..MEMBERS);
        if Some(pick) != leader {
            return pick;
        }
    }
}

/// Injects `fault` and returns, once it is over, what was done.
pub async fn inject(
    cluster: &mut Cluster,
    fault: Fault,
    random: &mut StdRng,
    failpoints: bool,
    compact_at: i64,
) -> Result<String, String> {
    let leader_or_any = |leader: Option<usize>, random: &mut StdRng| leader.unwrap_or(random.random_range(0..MEMBERS));
    match fault {
        Fault::KillLeader => {
            let target = leader_or_any(leader(cluster).await, random);
            kill_and_restart(cluster, target, FAULT_FOR).await
        }
        Fault::KillFollower => {
            let target = follower(cluster, random).await;
            kill_and_restart(cluster, target, FAULT_FOR).await
        }
        Fault::Pause => {
            let target = random.random_range(0..MEMBERS);
            cluster.signal(target, libc::SIGSTOP);
            tokio::time::sleep(FAULT_FOR).await;
            cluster.signal(target, libc::SIGCONT);
            healthy(cluster, target, format!("paused member {target}")).await
        }
        Fault::PartitionLeader | Fault::PartitionFollower | Fault::Latency | Fault::Drops => {
            network_fault(cluster, fault, random).await
        }
        Fault::TornWal | Fault::Crash if !failpoints => {
            let target = random.random_range(0..MEMBERS);
            kill_and_restart(cluster, target, FAULT_FOR)
                .await
                .map(|done| format!("{done} (no failpoints)"))
        }
        Fault::TornWal => crash_at(cluster, random, "wal::torn_write", compact_at).await,
        Fault::Defrag => defrag(cluster, random, failpoints).await,
        Fault::Compact => compaction(cluster, random, failpoints, compact_at).await,
        Fault::Crash => {
            let point = CRASH_POINTS[random.random_range(0..CRASH_POINTS.len())];
            crash_at(cluster, random, point, compact_at).await
        }
    }
}

/// The faults made through the peer proxy.
async fn network_fault(cluster: &Cluster, fault: Fault, random: &mut StdRng) -> Result<String, String> {
    let (faults, done) = match fault {
        Fault::Latency => (
            NetworkFaults {
                latency: ADDED_LATENCY,
                ..NetworkFaults::default()
            },
            format!("{ADDED_LATENCY:?} added to peer traffic"),
        ),
        Fault::Drops => (
            NetworkFaults {
                drop_every: Some(DROP_EVERY),
                ..NetworkFaults::default()
            },
            format!("peer connections broken every {DROP_EVERY:?}"),
        ),
        _ => {
            let target = match (fault, leader(cluster).await) {
                (Fault::PartitionLeader, Some(leader)) => leader,
                _ => follower(cluster, random).await,
            };
            let faults = NetworkFaults {
                partitioned: [target].into(),
                ..NetworkFaults::default()
            };
            (faults, format!("partitioned member {target}"))
        }
    };
    network(cluster, faults).await;
    Ok(done)
}

async fn network(cluster: &Cluster, faults: NetworkFaults) {
    cluster.network.set(faults);
    tokio::time::sleep(FAULT_FOR).await;
    cluster.network.heal();
}

async fn healthy(cluster: &Cluster, target: usize, done: String) -> Result<String, String> {
    cluster.wait_healthy(target).await.map_err(|e| e.to_string())?;
    Ok(done)
}

async fn kill_and_restart(cluster: &mut Cluster, target: usize, away: Duration) -> Result<String, String> {
    cluster.kill(target);
    tokio::time::sleep(away).await;
    cluster.spawn(target, &[]).map_err(|e| e.to_string())?;
    healthy(cluster, target, format!("killed member {target}")).await
}

/// Kills a member, restarts it with `point` armed to fire after a random
/// number of hits, waits for the crash (or kills it after
/// [`CRASH_WITHIN`]), then restarts it clean.
async fn crash_at(cluster: &mut Cluster, random: &mut StdRng, point: &str, compact_at: i64) -> Result<String, String> {
    let target = random.random_range(0..MEMBERS);
    let skip = match point {
        "kv::crash_after_compact" | "kv::restore" => 0,
        _ => random.random_range(1..40),
    };
    cluster.kill(target);
    // Away long enough that the others move on; for the install crash
    // point, long enough that it needs a snapshot to catch up (more than
    // the 1,000 entries the leader keeps for followers behind).
    let away = if point == "kv::restore" {
        FAULT_FOR * 3
    } else {
        FAULT_FOR
    };
    tokio::time::sleep(away).await;
    let armed = vec![("FAILPOINTS".to_string(), format!("{point}={skip}*off->return"))];
    cluster.spawn(target, &armed).map_err(|e| e.to_string())?;
    if point == "kv::crash_after_compact" {
        compact(cluster, compact_at).await;
    }
    restart_after_crash(cluster, target, &format!("{point} after {skip} hits")).await
}

/// Waits for `target`, armed at a crash point, to crash (or kills it
/// after [`CRASH_WITHIN`]), then restarts it clean; says which, at
/// `where_`.
async fn restart_after_crash(cluster: &mut Cluster, target: usize, where_: &str) -> Result<String, String> {
    let crashed = cluster.wait_exit(target, CRASH_WITHIN).await.is_some();
    if !crashed {
        cluster.kill(target);
    }
    cluster.spawn(target, &[]).map_err(|e| e.to_string())?;
    let what = if crashed { "crashed" } else { "ran past" };
    healthy(cluster, target, format!("member {target} {what} {where_}")).await
}

/// Defragments a member under the workload: the leader or a random
/// member. With failpoints, half the time the member is restarted armed
/// to abort at a crash point of the defragmentation first, then
/// restarted clean after it crashed.
async fn defrag(cluster: &mut Cluster, random: &mut StdRng, failpoints: bool) -> Result<String, String> {
    let target = match random.random_bool(0.5) {
        true => leader(cluster).await.unwrap_or(random.random_range(0..MEMBERS)),
        false => random.random_range(0..MEMBERS),
    };
    let point = (failpoints && random.random_bool(0.5))
        .then(|| DEFRAG_CRASH_POINTS[random.random_range(0..DEFRAG_CRASH_POINTS.len())]);
    if let Some(point) = point {
        cluster.kill(target);
        let armed = vec![("FAILPOINTS".to_string(), format!("{DEFRAG_COPY_SLED};{point}=return"))];
        cluster.spawn(target, &armed).map_err(|e| e.to_string())?;
        cluster.wait_healthy(target).await.map_err(|e| e.to_string())?;
    }
    let mut client = MaintenanceClient::new(channel(&cluster.members[target].endpoint()));
    let answer = tokio::time::timeout(DEFRAG_WITHIN, client.defragment(pb::DefragmentRequest {})).await;
    let Some(point) = point else {
        return match answer {
            Ok(Ok(_)) => healthy(cluster, target, format!("defragmented member {target}")).await,
            Ok(Err(status)) => Err(format!("defragment: {status}")),
            Err(_) => Err(format!("defragment took over {DEFRAG_WITHIN:?}")),
        };
    };
    restart_after_crash(cluster, target, &format!("{point} in a defrag")).await
}

/// A compaction in small steps under the workload, on a random member
/// restarted with a batch limit of [`COMPACT_FAULT_BATCH_LIMIT`], killed
/// in it: with failpoints, at [`COMPACT_CRASH_POINT`] after a random
/// number of steps half the time; otherwise by kill -9 after
/// [`FAULT_FOR`]. Then restarted clean, to finish the compaction from
/// what storage holds.
async fn compaction(
    cluster: &mut Cluster,
    random: &mut StdRng,
    failpoints: bool,
    compact_at: i64,
) -> Result<String, String> {
    let target = random.random_range(0..MEMBERS);
    let limit = COMPACT_FAULT_BATCH_LIMIT.to_string();
    let mut env = vec![("ETCD_EXPERIMENTAL_COMPACTION_BATCH_LIMIT".to_string(), limit)];
    let skip = random.random_range(0..20);
    let armed = failpoints && random.random_bool(0.5);
    if armed {
        let point = format!("{COMPACT_CRASH_POINT}={skip}*off->return");
        env.push(("FAILPOINTS".to_string(), point));
    }
    cluster.kill(target);
    cluster.spawn(target, &env).map_err(|e| e.to_string())?;
    cluster.wait_healthy(target).await.map_err(|e| e.to_string())?;
    compact(cluster, compact_at).await;
    if armed {
        return restart_after_crash(cluster, target, &format!("{COMPACT_CRASH_POINT} after {skip} steps")).await;
    }
    tokio::time::sleep(FAULT_FOR).await;
    kill_and_restart(cluster, target, Duration::ZERO)
        .await
        .map(|_| format!("member {target} killed compacting in steps of {COMPACT_FAULT_BATCH_LIMIT}"))
}

/// Compacts at `revision`, through every member until one takes it.
pub async fn compact(cluster: &Cluster, revision: i64) {
    if revision < 1 {
        return;
    }
    for member in &cluster.members {
        let mut kv = KvClient::new(channel(&member.endpoint()));
        let request = pb::CompactionRequest {
            revision,
            physical: true,
        };
        if kv.compact(request).await.is_ok() {
            return;
        }
    }
}
