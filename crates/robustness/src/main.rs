//! `robustness`: runs rounds of the robustness suite against a 3-member
//! cluster of the given binary, one line per round, and a last line
//! `histories=N violations=V nonconverged=C lost_writes=L watch_violations=W`.
//! Exits with status 1 if any round failed, or if more histories than
//! `linearize::UNDECIDED_HISTORIES_PERCENT_MAX` allows left a key
//! undecided. `scripts/robustness.sh` runs it.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use rand::{Rng, SeedableRng};

use robustness::cluster::Cluster;
use robustness::faults::{Fault, ALL};
use robustness::linearize;
use robustness::round::{self, RoundSpec};

#[derive(Parser)]
#[command(about = "Randomized fault-injection rounds, each history checked for linearizability and watch guarantees")]
struct Args {
    /// The member binary: kv-server, or etcd for the control.
    #[arg(long)]
    binary: PathBuf,
    #[arg(long, default_value_t = 3)]
    rounds: u64,
    /// Round r uses seed + r: a failing round is repeated with its seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// One fault for every round, instead of one at random per round.
    #[arg(long, value_enum)]
    fault: Option<Fault>,
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Operations per second per client.
    #[arg(long, default_value_t = 100)]
    rate: u32,
    /// How long each round's workload runs, in milliseconds.
    #[arg(long, default_value_t = 4000)]
    duration_ms: u64,
    /// The first of the cluster's ports (see cluster.rs for the rest).
    #[arg(long, default_value_t = 24379)]
    base_port: u16,
    /// Where members' data and logs, and failing rounds, go.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The binary has kv-server's failpoints (torn WAL and crash faults).
    #[arg(long)]
    failpoints: bool,
    /// FAILPOINTS for every member at every start (a broken build on
    /// purpose, such as `kv::stale_read=return`).
    #[arg(long)]
    member_failpoints: Option<String>,
    /// Stop after the first round that fails.
    #[arg(long)]
    stop_on_failure: bool,
}

/// Sums over the rounds run.
#[derive(Default)]
struct Totals {
    rounds: u64,
    failed_rounds: u64,
    violations: usize,
    nonconverged: usize,
    lost_writes: usize,
    watch_violations: usize,
    crashed: usize,
    undecided: usize,
    /// Histories with at least one undecided key (see
    /// `linearize::too_many_undecided`).
    undecided_histories: u64,
    operations: usize,
}

/// Runs the rounds, printing a line each; stops after the first failed
/// round with `--stop-on-failure`.
async fn run_rounds(args: &Args, cluster: &mut Cluster, dir: &std::path::Path) -> Totals {
    let mut totals = Totals::default();
    for round in 0..args.rounds {
        let seed = args.seed + round;
        let fault = args
            .fault
            .unwrap_or_else(|| ALL[rand::rngs::StdRng::seed_from_u64(seed).random_range(0..ALL.len())]);
        let spec = RoundSpec {
            round,
            seed,
            fault,
            clients: args.clients,
            rate: args.rate,
            duration: Duration::from_millis(args.duration_ms),
            failpoints: args.failpoints,
            out: dir,
        };
        let outcome = round::run(cluster, &spec).await;
        println!(
            "round {round} seed={seed} fault={:?} ({}) ops={} unknown={} events={} violations={} undecided={} lost_writes={} watch_violations={} nonconverged={} crashed={} seconds={:.1}/{:.1}/{:.1}/{:.1}",
            fault,
            outcome.fault,
            outcome.operations,
            outcome.unknown,
            outcome.watch_events,
            outcome.violations,
            outcome.undecided,
            outcome.lost_writes,
            outcome.watch_violations,
            outcome.nonconverged,
            outcome.crashed,
            outcome.phases[0],
            outcome.phases[1],
            outcome.phases[2],
            outcome.phases[3]
        );
        for detail in outcome.details.iter().take(10) {
            println!("    {detail}");
        }
        totals.rounds += 1;
        totals.violations += outcome.violations;
        totals.watch_violations += outcome.watch_violations;
        totals.lost_writes += outcome.lost_writes;
        totals.crashed += outcome.crashed;
        totals.undecided += outcome.undecided;
        totals.undecided_histories += u64::from(outcome.undecided > 0);
        totals.nonconverged += usize::from(outcome.nonconverged);
        totals.operations += outcome.operations;
        if outcome.failed() {
            totals.failed_rounds += 1;
            println!(
                "    history and timelines in {}",
                dir.join(format!("round-{round}")).display()
            );
            if args.stop_on_failure {
                break;
            }
        }
    }
    totals
}

/// A directory of this run's own: the process id alone can name a
/// directory an earlier run on the machine left behind.
fn default_dir() -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    std::env::temp_dir().join(format!("robustness-{}-{nanos}", std::process::id()))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = Args::parse();
    let dir = args.dir.clone().unwrap_or_else(default_dir);
    std::fs::create_dir_all(&dir).expect("the output directory");
    let armed: Vec<&str> = args
        .failpoints
        .then_some(robustness::faults::DEFRAG_COPY_SLED)
        .into_iter()
        .chain(args.member_failpoints.as_deref())
        .collect();
    let env: Vec<(String, String)> = match armed.is_empty() {
        true => Vec::new(),
        false => vec![("FAILPOINTS".to_string(), armed.join(";"))],
    };
    let mut cluster = match Cluster::start(&args.binary, &dir, args.base_port, env).await {
        Ok(cluster) => cluster,
        Err(error) => {
            eprintln!("robustness: starting the cluster: {error}");
            std::process::exit(1);
        }
    };
    let started = Instant::now();
    let totals = run_rounds(&args, &mut cluster, &dir).await;
    println!(
        "histories={} violations={} nonconverged={} lost_writes={} watch_violations={} crashed={} undecided={} operations={} seconds={}",
        totals.rounds,
        totals.violations,
        totals.nonconverged,
        totals.lost_writes,
        totals.watch_violations,
        totals.crashed,
        totals.undecided,
        totals.operations,
        started.elapsed().as_secs()
    );
    cluster.stop();
    let undecided = linearize::too_many_undecided(totals.undecided_histories, totals.rounds);
    if undecided {
        println!(
            "{} of {} histories left a key undecided: more than {} %",
            totals.undecided_histories,
            totals.rounds,
            linearize::UNDECIDED_HISTORIES_PERCENT_MAX
        );
    }
    std::process::exit(if totals.failed_rounds > 0 || undecided { 1 } else { 0 });
}
