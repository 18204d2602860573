//! `simulate SEEDS [--seed S] [--members 3|5] [--history FILE] [--jobs J]
//! [--break NAME]`: runs seeds S.. S+SEEDS-1, prints each failed seed (with
//! the command that replays it), and ends with one line:
//! `seeds=N violations=V diverged=D lost_writes=L undecided=U
//! simulated_s=T wall_s=W`. Exits 1 when a seed fails.

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use clap::Parser;
use parking_lot::Mutex;

use simulator::broken;
use simulator::report::{self, Summary};
use simulator::seed::{self, SeedSpec};

#[derive(Parser, Debug)]
#[command(about = "Runs seeds of the deterministic cluster simulator")]
struct Args {
    /// How many seeds to run.
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Members per cluster, 3 or 5; without it every fourth seed runs 5.
    #[arg(long)]
    members: Option<usize>,
    /// Writes the first seed's history (the first failed seed's, if one
    /// fails) here, as JSON.
    #[arg(long)]
    history: Option<PathBuf>,
    /// Seeds run at once, each on a thread of its own.
    #[arg(long, default_value_t = 1)]
    jobs: usize,
    /// Where the members' data directories go: a temporary file system.
    #[arg(long, default_value = "/dev/shm")]
    root: PathBuf,
    /// Arms a broken build (`broken.rs`): stale-read, ack-before-fsync,
    /// double-apply, skip-term-check, watch-resume-skips.
    #[arg(long = "break")]
    broken: Option<String>,
    /// Stops at the first failed seed.
    #[arg(long)]
    stop_on_failure: bool,
}

fn main() {
    let args = Args::parse();
    // The members log through tracing; RUST_LOG shows it (a replay's aid).
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    if let Err(why) = check(&args) {
        eprintln!("{why}");
        std::process::exit(2);
    }
    let started = Instant::now();
    let (summary, history) = run_seeds(&args);
    if let (Some(path), Some(text)) = (&args.history, history) {
        if let Err(error) = std::fs::write(path, text) {
            eprintln!("writing {}: {error}", path.display());
        }
    }
    println!("{}", summary.detail());
    println!("{}", summary.line(started.elapsed()));
    let _ = std::io::stdout().flush();
    if summary.failed() {
        std::process::exit(1);
    }
}

/// Checks the arguments, and arms the broken build asked for.
fn check(args: &Args) -> Result<(), String> {
    if args.members.is_some_and(|members| members != 3 && members != 5) {
        return Err("--members must be 3 or 5".into());
    }
    if let Some(name) = &args.broken {
        let broken = broken::named(name).ok_or_else(|| format!("no broken build named {name}"))?;
        broken::arm(broken)?;
    }
    Ok(())
}

/// The history `--history` keeps: the lowest failed seed's, or if none
/// failed the lowest seed's, whatever order the jobs ran them in.
#[derive(Default)]
struct Kept {
    /// (passed, seed): the smallest wins.
    rank: Option<(bool, u64)>,
    history: String,
}

/// Runs the seeds on `--jobs` threads; the summary and the kept history.
fn run_seeds(args: &Args) -> (Summary, Option<String>) {
    let root = if args.root.is_dir() {
        args.root.clone()
    } else {
        std::env::temp_dir()
    };
    let next = AtomicU64::new(0);
    let failed = AtomicBool::new(false);
    let summary = Mutex::new(Summary::default());
    let kept = Mutex::new(Kept::default());
    std::thread::scope(|scope| {
        for _ in 0..args.jobs.max(1) {
            scope.spawn(|| loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= args.seeds || (args.stop_on_failure && failed.load(Ordering::Relaxed)) {
                    return;
                }
                let seed = args.seed + index;
                let members = args.members.unwrap_or_else(|| seed::members_for(seed));
                let report = seed::run(&SeedSpec {
                    seed,
                    members,
                    root: root.clone(),
                });
                if report.failed() {
                    let text = report::failure(&report);
                    match &args.broken {
                        Some(name) => eprint!("{}", text.replace("--history", &format!("--break {name} --history"))),
                        None => eprint!("{text}"),
                    }
                    failed.store(true, Ordering::Relaxed);
                }
                let rank = (!report.failed(), seed);
                let mut kept = kept.lock();
                if args.history.is_some() && kept.rank.is_none_or(|best| rank < best) {
                    kept.rank = Some(rank);
                    kept.history = report.history_json();
                }
                drop(kept);
                summary.lock().add(&report);
            });
        }
    });
    let kept = kept.into_inner();
    (summary.into_inner(), kept.rank.map(|_| kept.history))
}
