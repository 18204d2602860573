//! One seed, run: a cluster on a fresh current-thread runtime with
//! tokio's clock paused, its clients, its faults, then the end: faults
//! healed, every member that can start restarted, the clients' last calls
//! finished, the members let converge, the watchers let reach the last
//! revision, and the checks (`check.rs`).
//!
//! Everything the run does is drawn from the seed, in this order: the
//! cluster's generator (elections, the network, crashes' losses), then
//! one per client, one per watcher, then the faults'. The history, sorted by invocation,
//! is the run's output: the same seed gives it byte for byte.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::harness::{Failure, Rng, SimCluster, SimSpec};
use robustness::history::History;

use crate::check::{self, Findings};
use crate::faults::{FaultLog, Faults};
use crate::watchers::{self, Watching};
use crate::workload::{self, Recorded};
use robustness::watch_check::WatcherLog;

/// Simulated time the clients call for, with faults.
const LOAD_SPAN: Duration = Duration::from_millis(1500);

/// How long the end waits for the first leader, the clients' last calls
/// and the members' convergence, each.
const SETTLE_WITHIN: Duration = Duration::from_secs(10);

/// The range `--snapshot-count` is drawn from: a run applies a few hundred
/// entries, so it takes several snapshots.
const SNAPSHOT_COUNT: (u64, u64) = (20, 200);

/// The range `--experimental-snapshot-catchup-entries` is drawn from.
const CATCH_UP_ENTRIES: (u64, u64) = (5, 50);

/// The stretch the end runs between looks.
const SETTLE_STEP: Duration = Duration::from_millis(50);

/// How a seed is run.
#[derive(Debug, Clone)]
pub struct SeedSpec {
    pub seed: u64,
    pub members: usize,
    pub root: PathBuf,
}

/// What one seed did and what its checks found.
#[derive(Debug)]
pub struct SeedReport {
    pub seed: u64,
    pub members: usize,
    pub history: History,
    /// Each watcher's logs.
    pub watchers: Vec<Vec<WatcherLog>>,
    pub findings: Findings,
    /// A member stopped on a fault the run did not inject, or the run
    /// could not be set up.
    pub failure: Option<String>,
    pub faults: FaultLog,
    /// What the crashes did to unsynced writes.
    pub loss: crate::harness::CrashLoss,
    /// What the network carried.
    pub net: crate::harness::NetStats,
    /// Applied entries crashes took from the stores, replayed from WALs.
    pub entries_replayed: u64,
    pub simulated: Duration,
    pub wall: Duration,
}

impl SeedReport {
    /// What `--history` writes: the calls in invocation order (a
    /// `History`, as the robustness suite's checkers read it) and each
    /// watcher's logs.
    pub fn history_json(&self) -> String {
        #[derive(serde::Serialize)]
        struct Written<'a> {
            operations: &'a [robustness::history::Operation],
            watchers: &'a [Vec<WatcherLog>],
        }
        let written = Written {
            operations: &self.history.operations,
            watchers: &self.watchers,
        };
        serde_json::to_string_pretty(&written).expect("a history serializes")
    }

    pub fn failed(&self) -> bool {
        self.failure.is_some() || self.findings.failed() || self.faults.problems().next().is_some()
    }
}

/// How many members seed `seed` runs when the caller does not say: five
/// for every fourth seed, three for the others.
pub fn members_for(seed: u64) -> usize {
    if seed % 4 == 3 {
        5
    } else {
        3
    }
}

/// Where members' directories go: `/dev/shm` where there is one (a seed
/// writes and removes a few megabytes), else the temporary directory.
pub fn scratch_root() -> PathBuf {
    match std::path::Path::new("/dev/shm").is_dir() {
        true => "/dev/shm".into(),
        false => std::env::temp_dir(),
    }
}

/// The runtime a simulated cluster runs on: one thread, tokio's clock
/// paused (the simulator moves it).
pub fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime")
}

/// Runs one seed.
pub fn run(spec: &SeedSpec) -> SeedReport {
    let started = Instant::now();
    let runtime = paused_runtime();
    let mut report = SeedReport {
        seed: spec.seed,
        members: spec.members,
        history: History::default(),
        watchers: Vec::new(),
        findings: Findings::default(),
        failure: None,
        faults: FaultLog::default(),
        loss: Default::default(),
        net: Default::default(),
        entries_replayed: 0,
        simulated: Duration::ZERO,
        wall: Duration::ZERO,
    };
    runtime.block_on(async {
        if let Err(failure) = simulate(spec, &mut report).await {
            report.failure = Some(failure.to_string());
        }
    });
    // The members' tasks end with the runtime, before the directories go.
    drop(runtime);
    report.wall = started.elapsed();
    report
}

async fn simulate(spec: &SeedSpec, report: &mut SeedReport) -> Result<(), Failure> {
    let mut seeds = Rng::new(spec.seed ^ 0x5eed_c11e_0000_0000);
    let mut cluster = new_cluster(spec, &mut seeds)?;
    let mut faults = Faults::new(Rng::new(spec.seed ^ 0xfa01_7500_0000_0000));
    settle(&mut cluster, &mut faults, |c, _| {
        (0..c.size()).any(|m| c.leader(m) != 0)
    })
    .await?;
    let recorded = Recorded::default();
    let clients = cluster.clients();
    let until = clients.now_nanos() + LOAD_SPAN.as_nanos() as u64;
    let count = 2 + seeds.below(4) as usize;
    let mut tasks: Vec<_> = (0..count)
        .map(|id| {
            let task = workload::run_client(id, clients.clone(), spec.members, seeds.fork(), until, recorded.clone());
            tokio::spawn(task)
        })
        .collect();
    let reader = workload::run_leader_reader(count, clients.clone(), spec.members, until, recorded.clone());
    tasks.push(tokio::spawn(reader));
    let watching = Watching::start(&clients, spec.members, &mut seeds);
    let outcome = faults.run(&mut cluster, LOAD_SPAN).await;
    faults.end(&mut cluster);
    report.faults = faults.log.clone();
    outcome?;
    // A replacement under way goes on to its end, as an operator's would.
    let done = |_: &SimCluster, f: &Faults| tasks.iter().all(|t| t.is_finished()) && !f.replacing();
    settle(&mut cluster, &mut faults, done).await?;
    report.findings.diverged = final_agreement(&mut cluster, &mut faults).await?;
    let mut history = History {
        operations: recorded.lock().clone(),
    };
    history.operations.sort_by_key(|o| (o.invoked, o.client));
    // The watchers follow up to the last revision, then stop.
    let last = (0..cluster.size())
        .filter_map(|m| cluster.current_revision(m))
        .max()
        .unwrap_or(1);
    watching.stop_at(last);
    settle(&mut cluster, &mut faults, |_, _| watching.finished()).await?;
    for watcher in watching.running() {
        report.findings.watch_violations.push(format!(
            "watcher {watcher} did not reach revision {last} within {SETTLE_WITHIN:?}"
        ));
    }
    report.watchers = watching.logs();
    check::linearizability(&history, &mut report.findings);
    check::lost_writes(&history, &cluster, &mut report.findings);
    let prefix = watchers::PREFIX;
    check::watches(&cluster, &history, &report.watchers, last, prefix, &mut report.findings);
    report.findings.members = check::member_states(&cluster);
    report.history = history;
    report.faults = faults.log.clone();
    report.simulated = cluster.elapsed();
    report.loss = cluster.stats().loss;
    report.entries_replayed = cluster.stats().entries_replayed;
    report.net = cluster.net_stats();
    Ok(())
}

/// Settles the cluster until every member that can run does and the
/// members agree; `None` if they came to, else what still differs. A
/// member a failed sync stopped just before the end is restarted by the
/// settle's next step: an agreement without it would leave the checks
/// after it reading a member still catching up (seed 44588 read "lost"
/// writes from one so).
async fn final_agreement(cluster: &mut SimCluster, faults: &mut Faults) -> Result<Option<String>, Failure> {
    let everyone_up = |c: &SimCluster, f: &Faults| {
        let lost = f.lost_members();
        (0..c.size()).all(|m| c.is_running(m) || lost.contains(&m))
    };
    let agreed = settle(cluster, faults, |c, f| everyone_up(c, f) && check::agreement(c).is_ok()).await?;
    Ok((!agreed).then(|| match check::agreement(cluster) {
        Err(why) => why,
        Ok(_) => "a member that can run is still down".into(),
    }))
}

/// The seed's cluster, its settings drawn from `seeds`: snapshots often,
/// and a short raft log kept for followers behind, so that members
/// restarted or cut off catch up by snapshot.
fn new_cluster(spec: &SeedSpec, seeds: &mut Rng) -> Result<SimCluster, Failure> {
    let snapshot_count = seeds.between(SNAPSHOT_COUNT.0, SNAPSHOT_COUNT.1);
    let catch_up_entries = seeds.between(CATCH_UP_ENTRIES.0, CATCH_UP_ENTRIES.1);
    SimCluster::new(SimSpec {
        members: spec.members,
        seed: spec.seed,
        root: spec.root.clone(),
        heartbeat: Duration::from_millis(10),
        election_ticks: 10,
        snapshot_count,
        catch_up_entries,
    })
}

/// Runs the cluster until `done` holds, for at most [`SETTLE_WITHIN`],
/// restarting members whose time down is over; whether it came to hold.
async fn settle(
    cluster: &mut SimCluster,
    faults: &mut Faults,
    done: impl Fn(&SimCluster, &Faults) -> bool,
) -> Result<bool, Failure> {
    let mut waited = Duration::ZERO;
    while !done(cluster, faults) {
        if waited >= SETTLE_WITHIN {
            return Ok(false);
        }
        cluster.run_for(SETTLE_STEP).await?;
        faults.restart_due(cluster);
        waited += SETTLE_STEP;
    }
    Ok(true)
}
