//! Every flag of etcd's server, and what kv-server does with each.
//!
//! The lists `etcd-3.5.17.tsv` and `etcd-3.7.3.tsv` beside this file are
//! generated from etcd's own flag sets by
//! `tools/etcd-peers/flagset/generate.sh` (name, kind, default, usage).
//! kv-server accepts the union of both, so a command line written for
//! either etcd starts it. Each flag is one of:
//! - **honoured**: it is a flag of [`Config`](crate::config::Config), under
//!   the same name;
//! - **renamed**: etcd 3.6 renamed 3.5's `--experimental-*` flag; the new
//!   name sets the same setting;
//! - **special**: `--config-file`, `--feature-gates` and `--version`,
//!   handled by the front end itself;
//! - **refused when set**: accepted empty, refused at start with the
//!   reason from [`refused_when_set`] otherwise (etcd's discovery: a
//!   member that ignored it would bootstrap a cluster of its own);
//! - **no effect**: accepted, with one logged line giving the reason
//!   from [`no_effect`].
//!
//! `docs/etcd-flags.md` is this table rendered; a test keeps the two
//! equal, and another fails if a flag of either list is refused.

use super::go_syntax::Kind;

/// etcd v3.5.17's flag set, as generated.
pub const ETCD_3_5: &str = include_str!("etcd-3.5.17.tsv");
/// etcd v3.7.3's flag set, as generated.
pub const ETCD_3_7: &str = include_str!("etcd-3.7.3.tsv");

/// One flag of etcd's sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdFlag {
    pub name: &'static str,
    pub kind: Kind,
    /// Go's kind column: `bool`, `duration` or `value`.
    pub go_kind: &'static str,
    pub default: &'static str,
    pub in_3_5: bool,
    pub in_3_7: bool,
}

/// What kv-server does with one of etcd's flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// A flag of kv-server's own, under this name.
    Honoured(&'static str),
    /// 3.6's name for a 3.5 flag kv-server honours under the old name.
    Renamed(&'static str),
    /// Read by the front end: `config-file`, `feature-gates`, `version`.
    Special,
    /// Accepted empty (or false, for a switch); any other value is
    /// refused at start, with the reason.
    RefusedWhenSet(&'static str),
    /// A setting read only by a feature kv-server refuses (discovery,
    /// tracing, downgrades): accepted and logged, with the reason.
    Unused(&'static str),
    /// Accepted and logged, with the reason.
    NoEffect(&'static str),
}

/// etcd 3.6's names for the `--experimental-*` flags kv-server honours.
pub const RENAMED: &[(&str, &str)] = &[
    ("snapshot-catchup-entries", "experimental-snapshot-catchup-entries"),
    (
        "watch-progress-notify-interval",
        "experimental-watch-progress-notify-interval",
    ),
    ("corrupt-check-time", "experimental-corrupt-check-time"),
    ("compact-hash-check-time", "experimental-compact-hash-check-time"),
    ("compaction-batch-limit", "experimental-compaction-batch-limit"),
    ("compaction-sleep-interval", "experimental-compaction-sleep-interval"),
    ("warning-apply-duration", "experimental-warning-apply-duration"),
    (
        "peer-skip-client-san-verification",
        "experimental-peer-skip-client-san-verification",
    ),
];

/// The flags the front end reads itself.
pub const SPECIAL: &[&str] = &["config-file", "feature-gates", "version"];

/// Every flag in both generated lists, by name, each once.
pub fn all() -> Vec<EtcdFlag> {
    let mut flags: Vec<EtcdFlag> = Vec::new();
    for (list, is_3_5) in [(ETCD_3_5, true), (ETCD_3_7, false)] {
        for line in list.lines().filter(|line| !line.is_empty()) {
            let mut columns = line.split('\t');
            let name = columns.next().unwrap_or_default();
            let go_kind = columns.next().unwrap_or_default();
            let default = columns.next().unwrap_or_default();
            if let Some(known) = flags.iter_mut().find(|flag| flag.name == name) {
                known.in_3_7 |= !is_3_5;
                continue;
            }
            flags.push(EtcdFlag {
                name,
                kind: if go_kind == "bool" { Kind::Bool } else { Kind::Value },
                go_kind,
                default,
                in_3_5: is_3_5,
                in_3_7: !is_3_5,
            });
        }
    }
    flags.sort_by_key(|flag| flag.name);
    flags
}

/// What kv-server does with etcd's flag `name`; `honoured` is the list of
/// kv-server's own flag names.
pub fn disposition(name: &'static str, honoured: &[String]) -> Disposition {
    if SPECIAL.contains(&name) {
        return Disposition::Special;
    }
    if honoured.iter().any(|own| own == name) {
        return Disposition::Honoured(name);
    }
    if let Some((_, target)) = RENAMED.iter().find(|(new, _)| *new == name) {
        return Disposition::Renamed(target);
    }
    if let Some(reason) = refused_when_set(name) {
        return Disposition::RefusedWhenSet(reason);
    }
    if let Some(reason) = unused(name) {
        return Disposition::Unused(reason);
    }
    Disposition::NoEffect(no_effect(name))
}

/// Why a flag of etcd's is refused when given a value, if it is.
pub fn refused_when_set(name: &str) -> Option<&'static str> {
    match name.strip_prefix("experimental-").unwrap_or(name) {
        "discovery" | "discovery-srv" | "discovery-endpoints" => {
            Some("discovery is not served: list the members with --initial-cluster")
        }
        // Decided: refused, not ignored, so an operator who turns tracing
        // on is told at once that no spans will reach the collector.
        "enable-distributed-tracing" => {
            Some("OpenTelemetry tracing is not served: collect latency from the metrics endpoint instead")
        }
        _ => None,
    }
}

/// Why a setting of a feature kv-server refuses goes unused, if it is one.
pub fn unused(name: &str) -> Option<&'static str> {
    let stem = name.strip_prefix("experimental-").unwrap_or(name);
    if stem.starts_with("discovery") {
        return Some(
            "read only by discovery, which is refused at start (--discovery, --discovery-srv, --discovery-endpoints)",
        );
    }
    if stem.starts_with("distributed-tracing") {
        return Some("read only by tracing, which is refused at start (--enable-distributed-tracing)");
    }
    (stem == "downgrade-check-time").then_some(
        "paces the leader's check of a downgrade in flight, and Downgrade's enable is refused (there is no older kv-server to go back to)",
    )
}

/// Why a flag of etcd's has no effect on kv-server.
pub fn no_effect(name: &str) -> &'static str {
    let stem = name.strip_prefix("experimental-").unwrap_or(name);
    match stem {
        // Names etcd keeps only so that old command lines still parse.
        "cluster-active-size"
        | "cluster-remove-delay"
        | "cluster-sync-interval"
        | "config"
        | "force"
        | "max-result-buffer"
        | "max-retry-attempts"
        | "peer-election-timeout"
        | "peer-heartbeat-interval"
        | "retry-interval"
        | "snapshot"
        | "v"
        | "vv" => "etcd itself ignores it (a flag of etcd 0.4, kept so old command lines parse)",
        "test.coverprofile" | "test.outputdir" => "a flag of Go's test binary that etcd's flag set carries",
        "enable-v2" | "enable-v2v3" | "v2-deprecation" => {
            "kv-server serves only the v3 API; the v2 store does not exist here"
        }
        "proxy"
        | "proxy-dial-timeout"
        | "proxy-failure-wait"
        | "proxy-read-timeout"
        | "proxy-refresh-interval"
        | "proxy-write-timeout" => "the v2 proxy mode is not served",
        "enable-pprof" => "there is no Go runtime to profile; use perf on the process",
        "max-snapshots" | "max-wals" => {
            "a setting of etcd's own snap and wal files, which kv-server does not keep: its WAL segments and snapshot dumps are removed once the store holds them"
        }
        "unsafe-no-fsync" => "kv-server never skips an fsync, by design: an acknowledged write is on disk",
        "backend-batch-interval"
        | "backend-batch-limit"
        | "backend-bbolt-freelist-type"
        | "memory-mlock"
        | "txn-mode-write-with-shared-buffer"
        | "bootstrap-defrag-threshold-megabytes" => "a setting of etcd's bbolt backend; the store is on sled",
        "socket-reuse-address" => {
            "listeners always have SO_REUSEADDR, as Go sets it on etcd's own, so the flag changes nothing there either"
        }
        _ => "not served by kv-server",
    }
}

/// `docs/etcd-flags.md`: every flag of both etcds, with what kv-server
/// does with it.
pub fn markdown(honoured: &[String]) -> String {
    let mut text = String::from(
        "# Every flag of etcd 3.5.17 and 3.7.3, and what kv-server does with it\n\n\
         Generated: the flag lists come from etcd's own flag sets\n\
         (`tools/etcd-peers/flagset/generate.sh` writes\n\
         `crates/kv-server/src/flags/etcd-*.tsv`), and the last column from\n\
         `crates/kv-server/src/flags/etcd_set.rs`. A unit test keeps this file equal\n\
         to what they give (`UPDATE_DOCS=1 cargo test -p kv-server --lib flags`\n\
         rewrites it), and another fails if any flag here is refused.\n\n\
         Every flag is accepted, in Go's syntax (`-f v`, `--f=v`, booleans alone)\n\
         or as its `ETCD_*` variable or config-file key. \"no effect\" flags are\n\
         logged once at start with the reason given here, and so are \"unused\"\n\
         ones: settings read only by a feature kv-server refuses.\n\n\
         | flag | kind | etcd default | 3.5.17 | 3.7.3 | kv-server |\n\
         |---|---|---|---|---|---|\n",
    );
    for flag in all() {
        let what = match disposition(flag.name, honoured) {
            Disposition::Honoured(_) => "honoured".to_string(),
            Disposition::Renamed(old) => format!("honoured, as --{old}"),
            Disposition::Special => match flag.name {
                "feature-gates" => {
                    "honoured: InitialCorruptCheck, CompactHashCheck, StopGRPCServiceOnDefrag, LeaseCheckpoint, LeaseCheckpointPersist; other gates are logged as no effect".into()
                }
                "config-file" => "honoured: etcd's YAML; other flags and variables are then ignored".into(),
                _ => "honoured".into(),
            },
            Disposition::RefusedWhenSet(reason) => format!("refused at start when set: {reason}"),
            Disposition::Unused(reason) => format!("unused: {reason}"),
            Disposition::NoEffect(reason) => format!("no effect: {reason}"),
        };
        let tick = |on: bool| if on { "yes" } else { "" };
        let default = if flag.default.is_empty() {
            String::new()
        } else {
            format!("`{}`", flag.default)
        };
        text.push_str(&format!(
            "| `--{}` | {} | {} | {} | {} | {} |\n",
            flag.name,
            flag.go_kind,
            default.replace('|', "\\|"),
            tick(flag.in_3_5),
            tick(flag.in_3_7),
            what
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: the generated lists are read whole, and every flag of them
    // has a reason of its own (none falls through to the catch-all).
    #[test]
    fn every_flag_is_placed() {
        let flags = all();
        assert_eq!(
            flags.iter().filter(|flag| flag.in_3_5).count(),
            ETCD_3_5.lines().count()
        );
        assert_eq!(
            flags.iter().filter(|flag| flag.in_3_7).count(),
            ETCD_3_7.lines().count()
        );
        assert!(flags.len() > 150, "{}", flags.len());
        let honoured = super::super::honoured();
        for flag in &flags {
            if let Disposition::NoEffect(reason) = disposition(flag.name, &honoured) {
                assert_ne!(reason, "not served by kv-server", "{} has no reason", flag.name);
            }
        }
    }
}
