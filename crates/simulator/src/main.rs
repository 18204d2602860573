//! `simulate SEEDS [--seed S] [--members 3|5] [--history FILE] [--jobs J]
//! [--break NAME]`: runs seeds S.. S+SEEDS-1, prints each failed seed (with
//! the command that replays it), and ends with one line:
//! `seeds=N violations=V diverged=D lost_writes=L undecided=U
//! simulated_s=T wall_s=W`. Exits 1 when a seed fails.

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use clap::Parser;
use parking_lot::Mutex;

use simulator::report::{self, Summary};
use simulator::seed::{self, SeedSpec};
use simulator::broken;

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
    /// double-apply, skip-term-check.
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
    if let Some(members) = args.members {
        if members != 3 && members != 5 {
            eprintln!("--members must be 3 or 5");
            std::process::exit(2);
        }
    }
    if let Some(name) = &args.broken {
        let Some(broken) = broken::named(name) else {
            eprintln!("no broken build named {name}");
            std::process::exit(2);
        };
        if let Err(why) = broken::arm(broken) {
            eprintln!("{why}");
            std::process::exit(2);
        }
    }
    let root = if args.root.is_dir() { args.root.clone() } else { std::env::temp_dir() };
    let started = Instant::now();
    let next = AtomicU64::new(0);
    let summary = Mutex::new(Summary::default());
    let first_failed: Mutex<Option<u64>> = Mutex::new(None);
    let history: Mutex<Option<(u64, String)>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..args.jobs.max(1) {
            scope.spawn(|| loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= args.seeds || (args.stop_on_failure && first_failed.lock().is_some()) {
                    return;
                }
                let seed = args.seed + index;
                let members = args.members.unwrap_or(if seed % 4 == 3 { 5 } else { 3 });
                let report = seed::run(&SeedSpec {
                    seed,
                    members,
                    root: root.clone(),
                });
                if report.failed() {
                    let mut text = report::failure(&report);
                    if let Some(name) = &args.broken {
                        text = text.replace("--history", &format!("--break {name} --history"));
                    }
                    eprint!("{text}");
                    first_failed.lock().get_or_insert(seed);
                }
                {
                    let mut kept = history.lock();
                    let replace = match &*kept {
                        None => true,
                        Some((kept_seed, _)) => report.failed() && first_failed.lock().is_some_and(|f| f == seed && *kept_seed != seed),
                    };
                    if replace {
                        *kept = Some((seed, serde_json::to_string_pretty(&report.history).unwrap_or_default()));
                    }
                }
                summary.lock().add(&report);
            });
        }
    });
    let summary = summary.into_inner();
    if let (Some(path), Some((_, text))) = (&args.history, history.into_inner()) {
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
