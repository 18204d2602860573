//! `kv-server`: one member of an etcd-compatible cluster. With no flags it
//! is a single-member store on 127.0.0.1:2379 (peers on 2380), like etcd.
//! `kv-server snapshot restore FILE` builds a new member's data directory
//! from a saved snapshot (`server::restore`).

use clap::Parser;

fn main() {
    kv_server::allocator::tune();
    // With the `failpoints` feature, FAILPOINTS in the environment arms the
    // WAL's failpoints (fault tests); without it this does nothing.
    let _failpoints = fail::FailScenario::setup();
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.len() > 2 && args[1] == "snapshot" && args[2] == "restore" {
        // `kv-server snapshot restore FILE [etcdutl's flags]`.
        let restore = kv_server::server::restore::RestoreArgs::parse_from(&args[2..]);
        // etcdutl's lines: zap's console form, on standard error.
        kv_server::logging::init_console();
        match kv_server::server::restore::restore(&restore) {
            Ok(dir) => println!("restored snapshot into {}", dir.display()),
            Err(error) => {
                eprintln!("kv-server: {error}");
                std::process::exit(1);
            }
        }
        return;
    }
    let parsed = match kv_server::flags::from_process() {
        Ok(parsed) => parsed,
        Err(kv_server::flags::FlagError::Help) => {
            use clap::CommandFactory;
            // Help piped into `head` must not panic on a closed pipe.
            use std::io::Write;
            let help = kv_server::config::Config::command().render_long_help();
            let _ = writeln!(std::io::stdout(), "{help}");
            return;
        }
        Err(error) => {
            eprintln!("kv-server: {error}");
            std::process::exit(error.exit_code());
        }
    };
    if parsed.print_version {
        println!("kv-server Version: {}", env!("CARGO_PKG_VERSION"));
        println!("etcd API Version: {}", kv_server::ETCD_API_VERSION);
        return;
    }
    let config = parsed.config;
    let log = kv_server::logging::LogFlags {
        logger: &config.logger,
        format: &config.log_format,
        level: &config.log_level,
        outputs: &config.log_outputs,
        rotate: config.enable_log_rotation,
        rotation_config: &config.log_rotation_config_json,
    };
    if let Err(error) = kv_server::logging::init(log) {
        // As etcd's: a log that cannot be set up stops the member before
        // it starts.
        eprintln!("kv-server: {error}");
        std::process::exit(1);
    }
    for note in &parsed.notes {
        tracing::info!("{note}");
    }
    if let Err(error) = kv_server::server::run(config) {
        tracing::error!("{error}");
        eprintln!("kv-server: {error}");
        std::process::exit(1);
    }
}

/// mimalloc instead of the system allocator; why, and its settings, are in
/// `allocator.rs`.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
