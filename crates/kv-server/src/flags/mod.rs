//! kv-server's flags, read exactly as etcd reads its own, so that a
//! command line, an environment or a config file written for etcd 3.5 or
//! 3.7 (kubeadm's static pod, a Helm chart, a systemd unit) starts
//! kv-server unchanged.
//!
//! - [`go_syntax`]: Go's `flag` syntax (`-f v`, `--f=v`, booleans alone).
//! - [`env`]: the `ETCD_*` variables, with etcd's precedence.
//! - [`config_file`]: `--config-file`, etcd's YAML, with etcd's names.
//! - [`etcd_set`]: every flag of etcd 3.5.17 and 3.7.3 (generated), and
//!   what kv-server does with each.
//! - [`feature_gates`]: `--feature-gates`, with etcd 3.7.3's gates.
//! - `loopback` (tests and the simulator): the flags of a member of an
//!   in-process cluster.
//!
//! The front end turns what it read into the canonical `--name=value`
//! form of [`Config`]'s clap definition, which checks and types the
//! values; flags that have no effect here become log lines
//! ([`Parsed::notes`]), one per flag, logged once logging is set up.

pub mod config_file;
pub mod env;
pub mod etcd_set;
pub mod feature_gates;
pub mod go_syntax;
pub(crate) mod loopback;

use clap::{CommandFactory, Parser};

use crate::config::Config;
use etcd_set::Disposition;
use go_syntax::{Kind, Setting};

/// Why the flags could not be read. The texts are etcd's (Go's `flag`
/// package's, for syntax); `main` prints them and exits as etcd does.
#[derive(Debug, thiserror::Error)]
pub enum FlagError {
    /// Go's parse errors; etcd exits with 2 after them (as after a
    /// [`FlagError::Value`], which Go's flag package finds too).
    #[error("{0}")]
    Syntax(String),
    /// An argument after the flags.
    #[error("'{0}' is not a valid flag")]
    Leftover(String),
    /// `-h` or `--help`: etcd prints its usage and exits with 0.
    #[error("help requested")]
    Help,
    /// An `ETCD_*` variable that cannot be used.
    #[error("{0}")]
    Env(String),
    /// `--config-file` could not be read.
    #[error("{0}")]
    ConfigFile(String),
    /// A value of the right syntax that kv-server cannot take.
    #[error("{0}")]
    Value(String),
}

impl FlagError {
    /// The exit code etcd uses for this error: 2 for what Go's flag
    /// package refuses, 0 for help, 1 for the rest.
    pub fn exit_code(&self) -> i32 {
        match self {
            FlagError::Syntax(_) | FlagError::Value(_) => 2,
            FlagError::Help => 0,
            _ => 1,
        }
    }
}

/// What the front end read.
#[derive(Debug)]
pub struct Parsed {
    pub config: Config,
    /// One line per flag or variable worth logging at start.
    pub notes: Vec<String>,
    /// `--version` was given: print the version and exit.
    pub print_version: bool,
}

/// Reads the flags from `args` (without the program name) and `env`.
pub fn parse(args: &[String], env: &[(String, String)]) -> Result<Parsed, FlagError> {
    let flags = etcd_set::all();
    let names: Vec<(&str, Kind)> = flags.iter().map(|flag| (flag.name, flag.kind)).collect();
    let kind_of = |name: &str| names.iter().find(|(known, _)| *known == name).map(|(_, kind)| *kind);
    let mut settings = go_syntax::parse(args, kind_of)?;
    let mut notes = Vec::new();
    let print_version = last(&settings, "version").is_some_and(|value| value == "true");
    if print_version {
        return Ok(Parsed {
            config: Config::parse_from(["kv-server"]),
            notes,
            print_version,
        });
    }
    let file = last(&settings, "config-file")
        .map(str::to_string)
        .or_else(|| env::lookup(env, "ETCD_CONFIG_FILE"));
    match file {
        Some(path) => {
            settings = config_file::read(&path, &flags)?;
            notes.push(format!(
                "loaded server configuration {path}, other configuration command line flags and \
                 environment variables will be ignored if provided"
            ));
        }
        None => notes.extend(env::fold_in(&mut settings, env, &names)?),
    }
    let (canonical, more) = canonical(&settings, &flags)?;
    notes.extend(more);
    let mut config = Config::try_parse_from(std::iter::once("kv-server".to_string()).chain(canonical))
        .map_err(|error| clap_error(&error))?;
    initial_cluster_from_name(&mut config);
    Ok(Parsed {
        config,
        notes,
        print_version,
    })
}

/// Reads the process's own arguments and environment.
pub fn from_process() -> Result<Parsed, FlagError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let env: Vec<(String, String)> = std::env::vars().collect();
    parse(&args, &env)
}

/// etcd's `UpdateDefaultClusterFromName`: a member given a name but no
/// `--initial-cluster` (`etcd --name abc`) is a cluster of itself, under
/// that name, at its advertised peer URLs.
fn initial_cluster_from_name(config: &mut Config) {
    let default = Config::parse_from(["kv-server"]);
    if config.name == default.name || config.initial_cluster != default.initial_cluster {
        return;
    }
    let urls = crate::config::urls(&config.initial_advertise_peer_urls);
    if !urls.is_empty() {
        let name = &config.name;
        config.initial_cluster = urls
            .iter()
            .map(|url| format!("{name}={url}"))
            .collect::<Vec<_>>()
            .join(",");
    }
}

fn last<'a>(settings: &'a [Setting], name: &str) -> Option<&'a str> {
    settings
        .iter()
        .rev()
        .find(|setting| setting.name == name)
        .map(|setting| setting.value.as_str())
}

/// kv-server's own flag names (clap's long names).
pub fn honoured() -> Vec<String> {
    Config::command()
        .get_arguments()
        .filter_map(|arg| arg.get_long().map(str::to_string))
        .collect()
}

/// The settings as `--name=value` arguments for [`Config`], with a note
/// for each flag that has no effect.
fn canonical(settings: &[Setting], flags: &[etcd_set::EtcdFlag]) -> Result<(Vec<String>, Vec<String>), FlagError> {
    let honoured = honoured();
    let mut args = Vec::new();
    let mut notes = Vec::new();
    for setting in settings {
        let Some(flag) = flags.iter().find(|flag| flag.name == setting.name) else {
            continue;
        };
        match etcd_set::disposition(flag.name, &honoured) {
            Disposition::Honoured(name) | Disposition::Renamed(name) => {
                args.push(format!("--{name}={}", honoured_value(name, &setting.value, &mut notes)));
            }
            Disposition::Special if flag.name == "feature-gates" => {
                let gates = feature_gates::parse(&setting.value).map_err(|reason| {
                    FlagError::Value(format!(
                        "invalid value {:?} for flag -feature-gates: {reason}",
                        setting.value
                    ))
                })?;
                for (flag, on) in feature_gates::honoured_flags(&gates) {
                    args.push(format!("--{flag}={on}"));
                }
                let honoured = |gate: &str| feature_gates::HONOURED.iter().any(|(name, _)| *name == gate);
                for (gate, _) in gates.iter().filter(|(gate, _)| !honoured(gate)) {
                    let reason = feature_gates::GATES
                        .iter()
                        .find(|(name, _)| name == gate)
                        .map(|(_, r)| *r);
                    notes.push(format!("feature gate {gate}: {}", reason.unwrap_or_default()));
                }
            }
            Disposition::Special => {}
            Disposition::RefusedWhenSet(_)
                if setting.value.is_empty()
                    || (flag.kind == Kind::Bool && go_syntax::parse_bool(&setting.value) == Some(false)) => {}
            Disposition::RefusedWhenSet(reason) => {
                return Err(FlagError::Value(format!("--{}: {reason}", flag.name)));
            }
            Disposition::Unused(reason) => {
                notes.push(format!("flag --{} is unused here: {reason}", flag.name));
            }
            Disposition::NoEffect(reason) => {
                notes.push(format!("flag --{} has no effect here: {reason}", flag.name));
            }
        }
    }
    Ok((args, notes))
}

/// A value of a flag kv-server honours, with etcd's meanings that its
/// typed definition does not spell: a quota or a progress interval of 0
/// is etcd's default, and a JWT token type serves simple tokens (clients treat tokens as
/// opaque).
fn honoured_value(name: &str, value: &str, notes: &mut Vec<String>) -> String {
    match name {
        "quota-backend-bytes" if value == "0" => crate::config::QUOTA_BACKEND_BYTES_DEFAULT.to_string(),
        // etcd serves its default progress interval for 0.
        "experimental-watch-progress-notify-interval"
            if go_syntax::parse_duration(value).is_ok_and(|d| d.is_zero()) =>
        {
            crate::config::WATCH_PROGRESS_NOTIFY_INTERVAL_DEFAULT.to_string()
        }
        "auth-token" if value.starts_with("jwt") => {
            notes.push("flag --auth-token=jwt has no effect here: kv-server issues simple tokens".to_string());
            "simple".to_string()
        }
        _ => value.to_string(),
    }
}

/// clap's refusal of a value, in Go's words.
fn clap_error(error: &clap::Error) -> FlagError {
    use clap::error::{ContextKind, ContextValue};
    let context = |kind| match error.get(kind) {
        Some(ContextValue::String(text)) => Some(text.clone()),
        _ => None,
    };
    match (context(ContextKind::InvalidArg), context(ContextKind::InvalidValue)) {
        (Some(arg), Some(value)) => {
            let name = arg
                .trim_start_matches('-')
                .split(['=', ' ', '<'])
                .next()
                .unwrap_or_default();
            let reason = error.to_string();
            let reason = reason.lines().next().unwrap_or_default();
            let reason = reason.rsplit(": ").next().unwrap_or(reason);
            FlagError::Value(format!("invalid value {value:?} for flag -{name}: {reason}"))
        }
        _ => FlagError::Value(error.to_string().lines().next().unwrap_or_default().to_string()),
    }
}

#[cfg(test)]
mod tests;
