//! Goal: a member logs as etcd 3.5.17 does, for the pipelines and alerts
//! that parse etcd's logs: every line one JSON object with `level`, `ts`,
//! `caller` and `msg`; the lines operators alert on, with etcd's message
//! and fields ("apply request took too long" with `took` and
//! `expected-duration` once `--experimental-warning-apply-duration` is
//! passed; "slow fdatasync" for a stalled WAL sync); and
//! `--log-outputs=FILE` writing there.
//!
//! Method: a single member of real etcd and of kv-server, each with
//! `--log-outputs` naming a file and the apply warning at 1ns; etcdctl
//! puts, compacts and defragments; each file is read line by line. The
//! stalled sync is kv-server's WAL failpoint sleeping 1.1 s (builds with
//! the `failpoints` feature, as the test command makes).

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

/// Every line of `file`, parsed; fails on a line that is not a JSON
/// object with etcd's four keys.
fn lines(file: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .map(|line| {
            let value: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            for key in ["level", "ts", "caller", "msg"] {
                assert!(value.get(key).is_some_and(|v| v.is_string()), "no {key}: {line}");
            }
            value
        })
        .collect()
}

/// The first line of `file` whose message is `message`, waited for.
fn line_with(file: &Path, message: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(line) = lines(file).into_iter().find(|line| line["msg"] == message) {
            return line;
        }
        assert!(Instant::now() < deadline, "no {message:?} in {}", file.display());
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn lines_are_etcds_json_and_say_what_etcd_says() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, binary, base) in [
        ("etcd", common::etcd_tool("ETCD_BIN", "etcd"), 18479),
        ("kv-server", common::kv_server(), 18579),
    ] {
        let log = dir.path().join(format!("{name}.log"));
        let outputs = format!("--log-outputs={}", log.display());
        let flags = [outputs.as_str(), "--experimental-warning-apply-duration=1ns"];
        let cluster = common::Cluster::start_members(&binary, &dir.path().join(name), base, 1, &flags);
        let endpoint = cluster.members[0].endpoint();
        for args in [&["put", "logged", "v"][..], &["compaction", "1"], &["defrag"]] {
            let output = common::etcdctl(&endpoint, args);
            assert!(output.status.success(), "{name} {args:?}: {}", common::text(&output));
        }
        let slow = line_with(&log, "apply request took too long");
        assert_eq!(slow["level"], "warn", "{name}: {slow}");
        assert_eq!(slow["expected-duration"], "1ns", "{name}: {slow}");
        assert!(
            slow["took"].as_str().is_some_and(|took| took.ends_with('s')),
            "{name}: {slow}"
        );
        for message in [
            "ready to serve client requests",
            "serving client traffic insecurely; this is strongly discouraged!",
            "finished scheduled compaction",
            "finished defragmenting directory",
        ] {
            line_with(&log, message);
        }
        let compacted = line_with(&log, "finished scheduled compaction");
        assert_eq!(compacted["compact-revision"], 1, "{name}: {compacted}");
        assert!(lines(&log).len() > 5, "{name}: the whole log went to the file");
    }
}

#[test]
fn a_stalled_fdatasync_is_logged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("kv-server.log");
    let outputs = format!("--log-outputs={}", log.display());
    let mut cluster = common::Cluster::new(
        &common::kv_server_with_failpoints(),
        &dir.path().join("data"),
        18679,
        1,
        &[&outputs],
    );
    cluster.members[0].env = vec![("FAILPOINTS".into(), "wal::fdatasync=20*off->1*sleep(1100)->off".into())];
    cluster.start_all();
    for i in 0..30 {
        let put = common::etcdctl(&cluster.members[0].endpoint(), &["put", &format!("k{i}"), "v"]);
        assert!(put.status.success(), "{}", common::text(&put));
    }
    let slow = line_with(&log, "slow fdatasync");
    assert_eq!(slow["level"], "warn");
    assert_eq!(slow["expected-duration"], "1s");
    assert!(
        slow["took"].as_str().is_some_and(|took| took.starts_with('1')),
        "{slow}"
    );
}

/// The names in `dir`, sorted.
fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Puts sent per round while the log fills. etcd samples repeated
/// messages (the first 100 a second, then one in 100), so a round adds
/// about 140 of its lines, about 700 KiB with 1000-byte keys.
const PUTS_PER_ROUND: &str = "4000";

/// The key size: the apply warning prints the key, so its lines are
/// about 5 KiB and a few rounds fill 1 MiB.
const KEY_SIZE: &str = "--key-size=1000";

/// Rounds of puts at most before the rotation is called missing.
const ROUNDS_AT_MOST: usize = 12;

#[test]
fn a_full_log_file_rotates_as_etcds_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, binary, base) in [
        ("etcd", common::etcd_tool("ETCD_BIN", "etcd"), 18779),
        ("kv-server", common::kv_server(), 18879),
    ] {
        let logs = dir.path().join(format!("{name}-logs"));
        let outputs = format!("--log-outputs={}", logs.join("member.log").display());
        let flags = [
            outputs.as_str(),
            "--enable-log-rotation",
            r#"--log-rotation-config-json={"maxsize": 1, "maxbackups": 1, "compress": true}"#,
            "--experimental-warning-apply-duration=1ns",
        ];
        let cluster = common::Cluster::start_members(&binary, &dir.path().join(name), base, 1, &flags);
        let endpoint = cluster.members[0].endpoint();
        // Until two backups have been seen: then only the newest is left,
        // gzipped.
        let backups = |names: &[String]| -> Vec<String> {
            names.iter().filter(|file| file.ends_with(".log.gz")).cloned().collect()
        };
        let mut seen: Vec<String> = Vec::new();
        let mut rounds = 0;
        let mut names = names_in(&logs);
        while rounds < ROUNDS_AT_MOST && !(seen.len() >= 2 && backups(&names).len() == 1) {
            common::etcd_benchmark(&[
                "--endpoints",
                &endpoint,
                "--clients=8",
                "--conns=2",
                "put",
                KEY_SIZE,
                "--val-size=16",
                "--total",
                PUTS_PER_ROUND,
            ]);
            rounds += 1;
            std::thread::sleep(Duration::from_millis(500));
            names = names_in(&logs);
            for backup in backups(&names) {
                if !seen.contains(&backup) {
                    seen.push(backup);
                }
            }
        }
        assert!(seen.len() >= 2, "{name}: backups {seen:?} after {rounds} rounds");
        // The pruning and compression run in the background: bounded wait
        // for them to settle.
        for _ in 0..50 {
            if names.len() == 2 && names[0].ends_with(".gz") {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
            names = names_in(&logs);
        }
        assert_eq!(names.len(), 2, "{name}: one backup is kept: {names:?}");
        assert_eq!(names[1], "member.log", "{name}: {names:?}");
        let backup = &names[0];
        let stamp = backup
            .strip_prefix("member-")
            .and_then(|rest| rest.strip_suffix(".log.gz"))
            .unwrap_or_else(|| panic!("{name}: backup named {backup}"));
        assert!(
            stamp.len() == 23 && &stamp[10..11] == "T" && &stamp[19..20] == ".",
            "{name}: stamp {stamp}"
        );
        let mut text = String::new();
        std::io::Read::read_to_string(
            &mut flate2::read::GzDecoder::new(std::fs::File::open(logs.join(backup)).expect("open backup")),
            &mut text,
        )
        .expect("a gzipped backup");
        let megabyte = 1024 * 1024;
        assert!(
            text.len() <= megabyte && text.len() > megabyte - 8192,
            "{name}: the backup is one full file: {} bytes",
            text.len()
        );
        for line in text.lines() {
            let value: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{name}: a line cut at rotation ({e}): {line}"));
            assert!(value.get("msg").is_some(), "{name}: {line}");
        }
        let current = std::fs::metadata(logs.join("member.log")).expect("current file").len();
        assert!(current <= megabyte as u64, "{name}: {current} bytes");
        lines(&logs.join("member.log"));
    }
}

#[test]
fn rotation_without_one_file_or_with_a_bad_config_is_refused_as_etcd_refuses_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = format!("--log-outputs={}", dir.path().join("x.log").display());
    for (flags, words) in [
        (
            vec!["--log-outputs=stderr"],
            "--log-outputs requires a single file path when --log-rotate-config-json is defined",
        ),
        (
            vec![file.as_str(), r#"--log-rotation-config-json={"maxsize": true}"#],
            "invalid log rotation config: json: cannot unmarshal bool into Go struct field logRotationConfig.Logger.maxsize of type int",
        ),
        (
            vec![file.as_str(), r#"--log-rotation-config-json={"maxsize": 1"#],
            "improperly formatted log rotation config: unexpected end of JSON input",
        ),
    ] {
        for (name, binary) in [
            ("etcd", common::etcd_tool("ETCD_BIN", "etcd")),
            ("kv-server", common::kv_server()),
        ] {
            let data = dir.path().join(format!("{name}-data"));
            let output = common::run_within(
                &binary,
                &[&["--data-dir", data.to_str().expect("path"), "--enable-log-rotation"], flags.as_slice()].concat(),
                Duration::from_secs(20),
            );
            let said = common::text(&output);
            assert!(!output.status.success(), "{name} {flags:?} started: {said}");
            assert!(said.contains(words), "{name} {flags:?}: {said}");
            assert!(!data.exists(), "{name} {flags:?}: the data dir was made");
        }
    }
}
