//! `loadgen`: a load generator for any etcd-API endpoints (real etcd or
//! this project), compatible with etcd's benchmark tool in flags, keys and
//! report, so the two can be compared figure for figure.
//!
//! # Module map
//! - [`cli`]: etcd's benchmark flags (global ones in either position).
//! - [`keys`]: keys exactly as etcd's tool makes them.
//! - [`workload`]: the requests of a put, range or txn-put run, in order.
//! - [`dial`]: TCP or TLS (`--cacert`, `--cert`, `--key`), and the login
//!   of `--user` whose token every request carries.
//! - [`connection`]: one HTTP/2 connection, used without a buffer task.
//! - [`cork`]: batches a connection's writes, as grpc-go's writer does.
//! - [`engine`]: connections, clients, rate limit, per-client histograms.
//! - [`gateway`]: requests as etcd's gRPC-JSON gateway takes them
//!   (`--gateway`).
//! - [`iterations`]: warm-up and repeated runs, and their means.
//! - [`report`]: etcd's report layout and arithmetic, plus p99.99 and max.
//! - [`matrix`]: etcd's documented put/range matrix, beside its figures.
//! - [`matrix_v2`]: etcd's v2.2.0-rc benchmark page, replayed over v3.
//! - [`sweep`]: a grid of put runs with the members' disk and peer
//!   latencies beside each; [`scrape`] reads their `/metrics`.
//! - [`tls`]: the rustls client config from `--cacert`, `--cert` and
//!   `--key` (for `https://` metrics URLs).
//! - [`compare`]: two matrix runs side by side: table and SVG chart.
//! - [`watch_bench`]: etcd's tool's `watch` and `watch-latency`.
//! - [`watchers`]: watchers held open, idle or not read, for the watch
//!   benchmarks.

mod cli;
mod compare;
mod connection;
mod cork;
mod dial;
mod engine;
mod gateway;
mod iterations;
mod keys;
mod matrix;
mod matrix_v2;
mod report;
mod scrape;
mod sweep;
mod tls;
mod watch_bench;
mod watchers;
mod workload;

use std::path::Path;

use clap::Parser;
use serde::Serialize;

use cli::{Cli, Command, CompareArgs, Global, PutArgs, RangeArgs, TxnPutArgs};
use engine::Target;
use workload::{PutSpec, RangeSpec, TxnPutSpec, Workload};

#[derive(Serialize)]
struct RunJson<'a> {
    workload: &'a str,
    endpoints: &'a [String],
    conns: usize,
    clients: usize,
    target_leader: bool,
    rate: u64,
    report: &'a report::Report,
}

#[derive(Serialize)]
struct IteratedJson<'a> {
    workload: &'a str,
    endpoints: &'a [String],
    conns: usize,
    clients: usize,
    target_leader: bool,
    rate: u64,
    runs: &'a iterations::Iterated,
}

fn write_json(path: &Path, value: &impl Serialize) -> Result<(), String> {
    let text = serde_json::to_string_pretty(value).map_err(|e| e.to_string())?;
    std::fs::write(path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))
}

fn read_matrix(path: &Path) -> Result<matrix::MatrixResult, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

async fn run(cli: Cli) -> Result<(), String> {
    let global = cli.global;
    report::set_precise(global.precise);
    connect(&global, &cli.command).await?;
    let not_iterated = match &cli.command {
        Command::Sweep(_) => Some("sweep"),
        Command::Matrix(_) => Some("matrix"),
        Command::Watch(_) => Some("watch"),
        Command::WatchLatency(_) => Some("watch-latency"),
        Command::Watchers(_) => Some("watchers"),
        Command::Put(_) | Command::Range(_) | Command::TxnPut(_) | Command::Compare(_) => None,
    };
    if let Some(command) = not_iterated {
        global.check_not_iterated(command)?;
    }
    if let Command::Sweep(args) = &cli.command {
        return sweep(&global, args).await;
    }
    global.check_single()?;
    let (endpoints, conns, clients) = (&global.endpoints, global.conns(), global.clients());
    let (workload, rate) = match cli.command {
        Command::Put(args) => put_workload(args),
        Command::Range(args) => range_workload(args)?,
        Command::TxnPut(args) => txn_put_workload(args),
        Command::Matrix(args) => return run_matrix(&global, &args).await,
        Command::Compare(args) => return compare_files(&args),
        Command::Sweep(_) => unreachable!("handled above"),
        Command::Watch(args) => {
            print!("{}", watch_bench::watch(endpoints, conns, clients, &args).await?);
            return Ok(());
        }
        Command::WatchLatency(args) => {
            print!(
                "{}",
                watch_bench::watch_latency(endpoints, conns, clients, &args).await?
            );
            return Ok(());
        }
        Command::Watchers(args) => return watchers::run(endpoints, conns, &args).await,
    };
    let target = Target {
        endpoints: global.endpoints.clone(),
        conns: global.conns(),
        clients: global.clients(),
        target_leader: global.target_leader,
        gateway: global.gateway,
    };
    if global.warmup > 0 || global.iterations != 1 {
        return run_iterated(&global, &target, &workload, rate).await;
    }
    let report = engine::run(&target, &workload, rate).await?;
    print!("{}", report.render());
    if let Some(path) = &global.json {
        write_json(
            path,
            &RunJson {
                workload: workload.name(),
                endpoints: &global.endpoints,
                conns: global.conns(),
                clients: global.clients(),
                target_leader: global.target_leader,
                rate,
                report: &report,
            },
        )?;
    }
    Ok(())
}

/// TLS and auth for every command that sends requests (`dial.rs`).
async fn connect(global: &Global, command: &Command) -> Result<(), String> {
    dial::init(&global.tls, &global.auth)?;
    if !matches!(command, Command::Compare(_)) {
        dial::login(&global.endpoints).await?;
    }
    Ok(())
}

/// `loadgen matrix`: the documented matrix asked for, printed beside the
/// document's figures.
async fn run_matrix(global: &cli::Global, args: &cli::MatrixArgs) -> Result<(), String> {
    if args.doc == "v2.2.0-rc" {
        let result = matrix_v2::run(&global.endpoints, args.scale, &args.label).await?;
        println!("\n{}", matrix_v2::markdown(&result));
        if let Some(path) = &global.json {
            write_json(path, &result)?;
        }
        return Ok(());
    }
    let result = matrix::run(&global.endpoints, args.scale, &args.rss_pids, &args.label).await?;
    println!("\n{}", matrix::markdown(&result));
    if let Some(path) = &global.json {
        write_json(path, &result)?;
    }
    Ok(())
}

/// `--warmup`/`--iterations`: the runs, their mean, and their JSON.
async fn run_iterated(global: &cli::Global, target: &Target, workload: &Workload, rate: u64) -> Result<(), String> {
    let iterated = iterations::run(target, workload, rate, global.warmup, global.iterations).await?;
    if let Some(path) = &global.json {
        write_json(
            path,
            &IteratedJson {
                workload: workload.name(),
                endpoints: &global.endpoints,
                conns: global.conns(),
                clients: global.clients(),
                target_leader: global.target_leader,
                rate,
                runs: &iterated,
            },
        )?;
    }
    Ok(())
}

/// `loadgen sweep`: the grid, its table, and its JSON and chart.
async fn sweep(global: &cli::Global, args: &cli::SweepArgs) -> Result<(), String> {
    let grid = sweep::Grid {
        val_sizes: args.val_sizes.clone(),
        clients: global.clients.clone(),
        conns: global.conns.clone(),
        total: args.total,
        target_leader: global.target_leader,
        scraper: scrape::Scraper::new(&args.metrics_urls, &global.tls)?,
    };
    let rows = sweep::run(&global.endpoints, &grid).await?;
    println!("\n{}", sweep::markdown(&rows));
    if let Some(path) = &global.json {
        write_json(path, &rows)?;
    }
    if let Some(path) = &args.svg {
        sweep::chart(&rows, path)?;
    }
    Ok(())
}

/// A put run and its rate.
fn put_workload(args: PutArgs) -> (Workload, u64) {
    let spec = PutSpec {
        total: args.total,
        key_size: args.key_size,
        val_size: args.val_size,
        sequential_keys: args.sequential_keys,
        key_space_size: args.key_space_size,
    };
    (Workload::Put(spec), args.rate)
}

/// A range run and its rate; prints etcd's tool's first line.
fn range_workload(args: RangeArgs) -> Result<(Workload, u64), String> {
    let serializable = match args.consistency.as_str() {
        "l" => false,
        "s" => true,
        other => return Err(format!("--consistency must be l or s, not {other:?}")),
    };
    println!(
        "bench with {} range",
        if serializable { "serializable" } else { "linearizable" }
    );
    let (key, end) = if args.from_key {
        // etcd's clients: from an empty key means from the first.
        let key = if args.key.is_empty() {
            vec![0]
        } else {
            args.key.into_bytes()
        };
        (key, vec![0])
    } else {
        (args.key.into_bytes(), args.end.unwrap_or_default().into_bytes())
    };
    let spec = RangeSpec {
        total: args.total,
        key,
        end,
        serializable,
        limit: args.limit,
        count_only: args.count_only,
        expect_count: args.expect_count,
    };
    Ok((Workload::Range(spec), args.rate))
}

/// A txn-put run and its rate.
fn txn_put_workload(args: TxnPutArgs) -> (Workload, u64) {
    let spec = TxnPutSpec {
        total: args.total,
        key_size: args.key_size,
        val_size: args.val_size,
        txn_ops: args.txn_ops,
        key_space_size: args.key_space_size,
    };
    (Workload::TxnPut(spec), args.rate)
}

/// `loadgen compare`: two matrix results side by side, and a chart.
fn compare_files(args: &CompareArgs) -> Result<(), String> {
    let baseline = read_matrix(&args.baseline)?;
    let candidate = read_matrix(&args.candidate)?;
    compare::check(&baseline, &candidate)?;
    print!("{}", compare::markdown(&baseline, &candidate));
    if let Some(path) = &args.svg {
        compare::chart(&baseline, &candidate, path)?;
    }
    Ok(())
}

/// mimalloc: the engine allocates per request (messages, HTTP/2 frames),
/// and glibc's malloc was a tenth of its profile at 1000 clients.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("loadgen: {error}");
            std::process::exit(1);
        }
    };
    if let Err(error) = runtime.block_on(run(cli)) {
        eprintln!("loadgen: {error}");
        std::process::exit(1);
    }
}
