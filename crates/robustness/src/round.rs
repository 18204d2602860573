//! One round: a fresh key prefix, a compaction of earlier rounds, the
//! workload with two watchers, one fault in the middle, final reads once
//! it is over, and then every check:
//!
//! - each key's history is linearizable (`linearize.rs`);
//! - the round's event history, read by a fresh watch, holds every
//!   acknowledged write at its revision and nothing else (lost writes);
//! - each watcher kept etcd's guarantees (`watch_check.rs`);
//! - every member converges to the same HashKV at the same revision;
//! - no member died on its own, and none logged a panic.
//!
//! A round that fails writes its history, each failing key's shrunk
//! sub-history and its timeline under the output directory.

use std::path::Path;
use std::time::{Duration, Instant};

use etcd_proto::etcdserverpb as pb;
use etcd_proto::etcdserverpb::kv_client::KvClient;
use etcd_proto::etcdserverpb::maintenance_client::MaintenanceClient;
use rand::rngs::StdRng;
use rand::SeedableRng;
use tokio::sync::watch;

use crate::cluster::Cluster;
use crate::faults::{self, Fault};
use crate::history::{History, Operation};
use crate::linearize::{self, Verdict};
use crate::timeline;
use crate::watch::watcher;
use crate::watch_check::{check_truth, check_watcher, Received, WatchEvent};
use crate::workload::{self, channel, Clock, WorkloadSpec};

/// Keys per round: few, so clients collide on them.
pub const KEYS_PER_ROUND: usize = 10;
/// When in the round the fault starts.
pub const FAULT_AFTER: Duration = Duration::from_secs(1);
/// How long the cluster may take to agree on HashKV after a round.
pub const CONVERGE_WITHIN: Duration = Duration::from_secs(20);

#[derive(Debug, Clone, Default)]
pub struct RoundOutcome {
    pub operations: usize,
    pub unknown: usize,
    pub watch_events: usize,
    pub fault: String,
    pub violations: usize,
    pub undecided: usize,
    pub watch_violations: usize,
    pub lost_writes: usize,
    pub nonconverged: bool,
    pub crashed: usize,
    /// Seconds spent: workload (with the fault), recovery and final reads,
    /// watchers and the event history, checks.
    pub phases: [f64; 4],
    pub details: Vec<String>,
    /// Each failing key's shrunk sub-history.
    pub failing: Vec<(String, Vec<Operation>)>,
}

impl RoundOutcome {
    pub fn failed(&self) -> bool {
        self.violations + self.watch_violations + self.lost_writes + self.crashed > 0 || self.nonconverged
    }
}

/// What a round is run with.
pub struct RoundSpec<'a> {
    pub round: u64,
    pub seed: u64,
    pub fault: Fault,
    pub clients: usize,
    pub rate: u32,
    pub duration: Duration,
    pub failpoints: bool,
    pub out: &'a Path,
}

/// The store's current revision, from whichever member answers.
async fn current_revision(cluster: &Cluster) -> Option<i64> {
    for member in &cluster.members {
        let mut kv = KvClient::new(channel(&member.endpoint()));
        let request = pb::RangeRequest {
            key: b"\0".to_vec(),
            count_only: true,
            ..Default::default()
        };
        if let Ok(response) = kv.range(request).await {
            return response.into_inner().header.map(|h| h.revision);
        }
    }
    None
}

pub async fn run(cluster: &mut Cluster, spec: &RoundSpec<'_>) -> RoundOutcome {
    let prefix = format!("r{}/", spec.round);
    let keys: Vec<String> = (0..KEYS_PER_ROUND).map(|i| format!("{prefix}k{i}")).collect();
    let start = current_revision(cluster).await.unwrap_or(1) + 1;
    faults::compact(cluster, start - 1).await;
    // A stream of its own: the fault kind was drawn from the seed itself.
    let mut random = StdRng::seed_from_u64(spec.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(1));
    let (until, until_receiver) = watch::channel(None);
    let endpoints = cluster.endpoints();
    let watchers: Vec<_> = (0..2)
        .map(|first| {
            let task = watcher(
                endpoints.clone(),
                first,
                prefix.clone(),
                start,
                true,
                until_receiver.clone(),
            );
            tokio::spawn(task)
        })
        .collect();
    let clock = Clock(Instant::now());
    let workload = WorkloadSpec {
        clients: spec.clients,
        keys: keys.clone(),
        rate: spec.rate,
        duration: spec.duration,
        seed: spec.seed,
        lease_base: spec.round as i64 * 1_000_000,
    };
    let clients = tokio::spawn({
        let endpoints = endpoints.clone();
        async move { workload::run(&endpoints, &workload, clock).await }
    });
    tokio::time::sleep(FAULT_AFTER).await;
    let fault = match faults::inject(cluster, spec.fault, &mut random, spec.failpoints, start).await {
        Ok(done) => done,
        Err(error) => format!("{:?} failed: {error}", spec.fault),
    };
    let mut outcome = RoundOutcome {
        fault,
        ..RoundOutcome::default()
    };
    let mut operations = clients.await.expect("the workload panicked");
    let mut phase = Instant::now();
    outcome.phases[0] = clock.0.elapsed().as_secs_f64();
    recover(cluster, &mut outcome).await;
    operations.extend(workload::final_reads(&endpoints, &keys, clock, spec.clients).await);
    let history = History { operations };
    let last = current_revision(cluster).await.unwrap_or(start);
    until.send_replace(Some(last));
    outcome.phases[1] = phase.elapsed().as_secs_f64();
    phase = Instant::now();
    let mut logs = Vec::new();
    for handle in watchers {
        logs.push(handle.await.expect("a watcher panicked"));
    }
    let truth = read_truth(endpoints, prefix, start, last).await;
    outcome.phases[2] = phase.elapsed().as_secs_f64();
    phase = Instant::now();
    check(cluster, &history, &logs, &truth, &mut outcome).await;
    outcome.phases[3] = phase.elapsed().as_secs_f64();
    if outcome.failed() {
        save(spec, &history, &outcome);
    }
    outcome
}

/// Every member serving again; a member that died on its own counts as a
/// crash and is restarted.
async fn recover(cluster: &mut Cluster, outcome: &mut RoundOutcome) {
    for i in 0..cluster.members.len() {
        if let Some(status) = cluster.exited(i) {
            outcome.crashed += 1;
            outcome.details.push(format!("member {i} exited on its own: {status}"));
            let _ = cluster.spawn(i, &[]);
        }
    }
    for i in 0..cluster.members.len() {
        if let Err(error) = cluster.wait_healthy(i).await {
            outcome.details.push(error.to_string());
        }
    }
}

/// The round's event history, as a fresh watcher reads it.
async fn read_truth(endpoints: Vec<String>, prefix: String, start: i64, last: i64) -> Vec<WatchEvent> {
    let (_until, until_receiver) = watch::channel(Some(last));
    let log = watcher(endpoints, 0, prefix, start, false, until_receiver).await;
    let mut events: Vec<WatchEvent> = log
        .sessions
        .iter()
        .flat_map(|s| &s.received)
        .flat_map(|received| match received {
            Received::Events(events) => events.clone(),
            Received::Progress(_) => Vec::new(),
        })
        .collect();
    events.sort_by_key(|e| (e.revision, e.key.clone()));
    events.dedup();
    events
}

async fn check(
    cluster: &Cluster,
    history: &History,
    logs: &[crate::watch_check::WatcherLog],
    truth: &[WatchEvent],
    outcome: &mut RoundOutcome,
) {
    outcome.operations = history.operations.len();
    outcome.unknown = history.operations.iter().filter(|o| o.is_unknown()).count();
    outcome.watch_events = truth.len();
    for (key, verdict) in linearize::check(history) {
        match verdict {
            Verdict::Linearizable => {}
            Verdict::Undecided => outcome.undecided += 1,
            Verdict::Violation(kept) => {
                outcome.violations += 1;
                outcome
                    .details
                    .push(format!("{key}: not linearizable ({} operations shrunk)", kept.len()));
                outcome.failing.push((key, kept));
            }
        }
    }
    let (lost, phantom) = check_truth(truth, history);
    outcome.lost_writes = lost.len();
    outcome.watch_violations += phantom.len();
    outcome.details.extend(lost.into_iter().chain(phantom).take(20));
    for (i, log) in logs.iter().enumerate() {
        let found = check_watcher(log, truth);
        outcome.watch_violations += found.len();
        outcome
            .details
            .extend(found.into_iter().take(10).map(|v| format!("watcher {i}: {v}")));
    }
    if !converged(cluster).await {
        outcome.nonconverged = true;
        outcome.details.push("members did not converge to one HashKV".into());
    }
    outcome.crashed += panicked(cluster);
}

/// Whether every member reports the same HashKV at the same revision,
/// within [`CONVERGE_WITHIN`].
async fn converged(cluster: &Cluster) -> bool {
    let deadline = Instant::now() + CONVERGE_WITHIN;
    while Instant::now() < deadline {
        let mut answers = Vec::new();
        for member in &cluster.members {
            let mut client = MaintenanceClient::new(channel(&member.endpoint()));
            if let Ok(response) = client.hash_kv(pb::HashKvRequest { revision: 0 }).await {
                let response = response.into_inner();
                answers.push((response.header.map_or(0, |h| h.revision), response.hash));
            }
        }
        if answers.len() == cluster.members.len() && answers.windows(2).all(|pair| pair[0] == pair[1]) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    false
}

/// Panics in the members' logs (each log is checked whole, every round,
/// so one panic fails every round after it too).
fn panicked(cluster: &Cluster) -> usize {
    cluster
        .members
        .iter()
        .filter(|m| {
            std::fs::read_to_string(cluster.dir.join(format!("{}.log", m.name)))
                .is_ok_and(|log| log.contains("panicked at"))
        })
        .count()
}

fn save(spec: &RoundSpec<'_>, history: &History, outcome: &RoundOutcome) {
    let dir = spec.out.join(format!("round-{}", spec.round));
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    let _ = std::fs::write(
        dir.join("history.json"),
        serde_json::to_string_pretty(history).unwrap_or_default(),
    );
    let _ = std::fs::write(dir.join("outcome.txt"), format!("{:#?}\n", outcome.details));
    for (key, kept) in &outcome.failing {
        let name = key.replace('/', "_");
        let _ = std::fs::write(dir.join(format!("{name}.svg")), timeline::svg(key, kept));
        let _ = std::fs::write(
            dir.join(format!("{name}.json")),
            serde_json::to_string_pretty(kept).unwrap_or_default(),
        );
    }
}
