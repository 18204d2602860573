//! The front end against etcd's own flag sets, kubeadm's command line and
//! etcd's variables and config file.

use std::path::PathBuf;
use std::time::Duration;

use super::etcd_set::{self, Disposition};
use super::go_syntax::Kind;
use super::*;

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// A value etcd would take for `flag`, for the refusal test: its own
/// default where it has one that kv-server can take.
fn sample(flag: &etcd_set::EtcdFlag) -> String {
    match (flag.name, flag.go_kind, flag.default) {
        ("feature-gates", _, _) => "InitialCorruptCheck=true,CompactHashCheck=true".into(),
        ("config-file", _, _) | ("version", _, _) => unreachable!(),
        ("initial-cluster-state", _, _) => "existing".into(),
        ("tls-max-version", _, _) => "TLS1.3".into(),
        ("cipher-suites", _, _) => "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".into(),
        ("auth-token", _, _) => "jwt,pub-key=a.pub,priv-key=a.key,sign-method=RS256".into(),
        ("bcrypt-cost", _, _) => "4".into(),
        (_, "duration", "" | "0s") => "3s".into(),
        (_, _, "") => "/tmp/some-file".into(),
        (_, _, default) => default.into(),
    }
}

// Goal: no flag of etcd 3.5.17's or 3.7.3's flag sets is refused, in
// any of Go's spellings, and each is either honoured or logged; but the
// discovery flags, given a value, are refused with the reason.
#[test]
fn no_etcd_flag_is_refused() {
    let honoured = honoured();
    for flag in etcd_set::all() {
        if matches!(flag.name, "config-file" | "version") {
            continue;
        }
        let spellings = match flag.kind {
            Kind::Bool => vec![
                vec![format!("--{}", flag.name)],
                vec![format!("-{}=false", flag.name)],
                vec![format!("--{}=true", flag.name)],
            ],
            Kind::Value => vec![
                vec![format!("--{}={}", flag.name, sample(&flag))],
                vec![format!("-{}", flag.name), sample(&flag)],
            ],
        };
        if let Disposition::RefusedWhenSet(reason) = etcd_set::disposition(flag.name, &honoured) {
            let (on, off) = match flag.kind {
                Kind::Bool => (format!("--{}", flag.name), format!("--{}=false", flag.name)),
                Kind::Value => (format!("--{}=x", flag.name), format!("--{}=", flag.name)),
            };
            let error = parse(&[on], &[]).expect_err("a value is refused");
            assert_eq!(error.to_string(), format!("--{}: {reason}", flag.name));
            parse(&[off], &[]).unwrap_or_else(|error| panic!("off refused: {error}"));
            continue;
        }
        for args in spellings {
            let parsed = parse(&args, &[]).unwrap_or_else(|error| panic!("{args:?} refused: {error}"));
            let note = match etcd_set::disposition(flag.name, &honoured) {
                Disposition::NoEffect(reason) => Some(format!("flag --{} has no effect here: {reason}", flag.name)),
                Disposition::Unused(reason) => Some(format!("flag --{} is unused here: {reason}", flag.name)),
                _ => None,
            };
            if let Some(note) = note {
                assert!(parsed.notes.contains(&note), "{args:?}: {:?}", parsed.notes);
            }
        }
        let variable = env::variable_of(flag.name);
        let value = if flag.kind == Kind::Bool {
            "true".to_string()
        } else {
            sample(&flag)
        };
        parse(&[], &[(variable.clone(), value)]).unwrap_or_else(|error| panic!("{variable} refused: {error}"));
    }
}

/// kubeadm 1.32's command line for a stacked etcd member, as its
/// static pod manifest writes it (paths and addresses as kubeadm's).
pub const KUBEADM_1_32: &[&str] = &[
    "--advertise-client-urls=https://10.0.0.5:2379",
    "--cert-file=/etc/kubernetes/pki/etcd/server.crt",
    "--client-cert-auth=true",
    "--data-dir=/var/lib/etcd",
    "--experimental-initial-corrupt-check=true",
    "--experimental-watch-progress-notify-interval=5s",
    "--initial-advertise-peer-urls=https://10.0.0.5:2380",
    "--initial-cluster=cp1=https://10.0.0.5:2380",
    "--key-file=/etc/kubernetes/pki/etcd/server.key",
    "--listen-client-urls=https://127.0.0.1:2379,https://10.0.0.5:2379",
    "--listen-metrics-urls=http://127.0.0.1:2381",
    "--listen-peer-urls=https://10.0.0.5:2380",
    "--name=cp1",
    "--peer-cert-file=/etc/kubernetes/pki/etcd/peer.crt",
    "--peer-client-cert-auth=true",
    "--peer-key-file=/etc/kubernetes/pki/etcd/peer.key",
    "--peer-trusted-ca-file=/etc/kubernetes/pki/etcd/ca.crt",
    "--snapshot-count=10000",
    "--trusted-ca-file=/etc/kubernetes/pki/etcd/ca.crt",
];

// Goal: kubeadm's flags, and their etcd 3.6 form, give the settings they
// ask for.
#[test]
fn kubeadm_command_line() {
    let config = parse(&strings(KUBEADM_1_32), &[]).unwrap().config;
    assert_eq!(config.name, "cp1");
    assert_eq!(config.data_dir(), PathBuf::from("/var/lib/etcd"));
    assert!(config.tls.client_cert_auth && config.tls.peer_client_cert_auth);
    assert!(config.experimental_initial_corrupt_check);
    assert_eq!(
        config.experimental_watch_progress_notify_interval,
        Duration::from_secs(5)
    );
    assert_eq!(config.snapshot_count, 10_000);
    assert_eq!(config.listen_metrics_urls, "http://127.0.0.1:2381");

    let v36: Vec<String> = KUBEADM_1_32
        .iter()
        .map(|flag| match *flag {
            "--experimental-initial-corrupt-check=true" => "--feature-gates=InitialCorruptCheck=true".to_string(),
            other => other.replace("--experimental-watch-progress", "--watch-progress"),
        })
        .collect();
    let config = parse(&v36, &[]).unwrap().config;
    assert!(config.experimental_initial_corrupt_check);
    assert_eq!(
        config.experimental_watch_progress_notify_interval,
        Duration::from_secs(5)
    );
    // Single dashes and separate values, as Go takes them.
    let config = parse(
        &strings(&["-name", "x", "-client-cert-auth", "-snapshot-count", "7"]),
        &[],
    )
    .unwrap()
    .config;
    assert_eq!(
        (config.name.as_str(), config.tls.client_cert_auth, config.snapshot_count),
        ("x", true, 7)
    );
}

// Goal: compaction's pacing flags, in both etcds' names, set the pace;
// etcd's 0 means its default.
#[test]
fn compaction_pacing_flags() {
    let config = parse(&[], &[]).unwrap().config;
    assert_eq!(config.experimental_compaction_batch_limit, 1000);
    assert_eq!(config.experimental_compaction_sleep_interval, Duration::from_millis(10));
    let v35 = [
        "--experimental-compaction-batch-limit=200",
        "--experimental-compaction-sleep-interval=50ms",
    ];
    let config = parse(&strings(&v35), &[]).unwrap().config;
    assert_eq!(config.experimental_compaction_batch_limit, 200);
    assert_eq!(config.experimental_compaction_sleep_interval, Duration::from_millis(50));
    let v37 = ["--compaction-batch-limit=300", "--compaction-sleep-interval=0s"];
    let config = parse(&strings(&v37), &[]).unwrap().config;
    assert_eq!(config.experimental_compaction_batch_limit, 300);
    assert_eq!(config.experimental_compaction_sleep_interval, Duration::from_millis(10));
}

// Goal: a name alone makes a cluster of itself, as etcd's default
// cluster follows the name; an explicit cluster is kept.
#[test]
fn initial_cluster_follows_the_name() {
    let config = parse(&strings(&["--name=abc"]), &[]).unwrap().config;
    assert_eq!(config.initial_cluster, "abc=http://localhost:2380");
    let config = parse(
        &strings(&[
            "-name",
            "abc",
            "--initial-advertise-peer-urls=http://127.0.0.1:2380,http://127.0.0.2:2380",
        ]),
        &[],
    )
    .unwrap()
    .config;
    assert_eq!(
        config.initial_cluster,
        "abc=http://127.0.0.1:2380,abc=http://127.0.0.2:2380"
    );
    let config = parse(&strings(&["--name=abc", "--initial-cluster=abc=http://h:1"]), &[])
        .unwrap()
        .config;
    assert_eq!(config.initial_cluster, "abc=http://h:1");
    assert_eq!(
        parse(&[], &[]).unwrap().config.initial_cluster,
        "default=http://localhost:2380"
    );
}

// Goal: bad values get Go's kind of error and exit code, never a default.
#[test]
fn bad_values_are_refused() {
    let error = |list: &[&str]| parse(&strings(list), &[]).unwrap_err();
    let refused = error(&["--snapshot-count=many"]);
    assert_eq!(
        refused.to_string(),
        "invalid value \"many\" for flag -snapshot-count: invalid digit found in string"
    );
    assert_eq!(refused.exit_code(), 2);
    assert_eq!(
        error(&["--experimental-corrupt-check-time=soon"]).to_string(),
        "invalid value \"soon\" for flag -experimental-corrupt-check-time: parse error"
    );
    assert_eq!(
        error(&["--feature-gates=Nope=true"]).to_string(),
        "invalid value \"Nope=true\" for flag -feature-gates: unrecognized feature gate: Nope"
    );
    assert_eq!(error(&["--not-etcd"]).exit_code(), 2);
    assert_eq!(error(&["--name=a", "stray"]).to_string(), "'stray' is not a valid flag");
    assert_eq!(error(&["--name=a", "stray"]).exit_code(), 1);
}

// Goal: variables set flags as in etcd, and conflict with the same flag
// on the command line.
#[test]
fn etcd_variables() {
    let env = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    };
    let parsed = parse(
        &strings(&["--name=a"]),
        &env(&[("ETCD_SNAPSHOT_COUNT", "42"), ("ETCD_PEER_CLIENT_CERT_AUTH", "1")]),
    )
    .unwrap();
    assert_eq!(parsed.config.snapshot_count, 42);
    assert!(parsed.config.tls.peer_client_cert_auth);
    let error = parse(&strings(&["--name=a"]), &env(&[("ETCD_NAME", "b")])).unwrap_err();
    assert_eq!(error.exit_code(), 1);
    assert!(error.to_string().contains("ETCD_NAME"), "{error}");
}

// Goal: a config file's keys take etcd's meanings, and other flags and
// variables are ignored beside it, as etcd ignores them. (The test of
// etcd's own sample file starts a member with it: tests/config_file.rs.)
#[test]
fn config_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("etcd.conf.yml");
    let yaml = "name: n1\nexperimental-watch-progress-notify-interval: 5000000000\n\
                client-transport-security:\n  client-cert-auth: true\n  cert-file: /c.crt\n\
                peer-transport-security:\n  trusted-ca-file: /ca.crt\n\
                log-outputs: [stderr]\nfeature-gates: InitialCorruptCheck=true\n";
    std::fs::write(&path, yaml).unwrap();
    let parsed = parse(
        &strings(&[&format!("--config-file={}", path.display()), "--name=ignored"]),
        &[("ETCD_SNAPSHOT_COUNT".into(), "1".into())],
    )
    .unwrap();
    assert!(parsed.notes.iter().any(|note| note.contains("will be ignored")));
    let config = parsed.config;
    assert_eq!(config.name, "n1");
    assert_eq!(config.snapshot_count, 100_000);
    assert_eq!(
        config.experimental_watch_progress_notify_interval,
        Duration::from_secs(5)
    );
    assert!(config.tls.client_cert_auth);
    assert_eq!(config.tls.cert_file, Some(PathBuf::from("/c.crt")));
    assert_eq!(config.tls.peer_trusted_ca_file, Some(PathBuf::from("/ca.crt")));
    assert!(config.experimental_initial_corrupt_check);
    // ETCD_CONFIG_FILE names it too.
    let config = parse(&[], &[("ETCD_CONFIG_FILE".into(), path.display().to_string())])
        .unwrap()
        .config;
    assert_eq!(config.name, "n1");
    // etcd 3.6's discovery section is refused as its flags are.
    let discovery = dir.path().join("discovery.yml");
    let yaml = "name: n1\ndiscovery-config:\n  client:\n    endpoints: [http://10.0.0.9:2379]\n  token: t\n";
    std::fs::write(&discovery, yaml).unwrap();
    let error = parse(&strings(&[&format!("--config-file={}", discovery.display())]), &[])
        .expect_err("discovery in a config file is refused");
    assert!(
        error
            .to_string()
            .starts_with("--discovery-endpoints: discovery is not served"),
        "{error}"
    );
}

// Goal: docs/etcd-flags.md is the table the code gives.
#[test]
fn flag_table_in_docs_is_current() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/etcd-flags.md");
    let table = etcd_set::markdown(&honoured());
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(&path, &table).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == table,
        "docs/etcd-flags.md is stale: run UPDATE_DOCS=1 cargo test -p kv-server --lib flags"
    );
}
