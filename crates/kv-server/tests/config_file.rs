//! Goal: `--config-file` takes etcd's own sample configuration file
//! (`etcd.conf.yml.sample`, as etcd v3.5.17 ships it), so a member
//! configured for etcd starts kv-server unchanged.
//!
//! Method: the sample from Go's module cache (building etcd's tools with
//! `tools/etcd-peers/build.sh` puts it there), with its loopback ports
//! moved off etcd's defaults so the test shares the machine safely, is
//! given to a kv-server member started in an empty directory. The member
//! must serve etcdctl, say that other flags are ignored, and log each
//! setting of the sample that has no effect here.

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CLIENT_PORT: u16 = 26_779;
const PEER_PORT: u16 = 26_780;
const STARTED_WITHIN: Duration = Duration::from_secs(30);

/// etcd v3.5.17's sample config file, from Go's module cache.
fn etcd_sample() -> String {
    let cache = Command::new("go").args(["env", "GOMODCACHE"]).output().expect("go env");
    let cache = String::from_utf8_lossy(&cache.stdout).trim().to_string();
    let path = PathBuf::from(cache).join("go.etcd.io/etcd/v3@v3.5.17/etcd.conf.yml.sample");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e} (run tools/etcd-peers/build.sh)", path.display()))
}

#[test]
fn etcd_sample_config_file_starts_a_member() {
    let sample = etcd_sample()
        .replace("localhost:2379", &format!("127.0.0.1:{CLIENT_PORT}"))
        .replace("localhost:2380", &format!("127.0.0.1:{PEER_PORT}"));
    assert!(sample.contains("client-transport-security:"), "not etcd's sample");
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("etcd.conf.yml"), &sample).expect("write config");
    let log_path = dir.path().join("member.log");
    let mut member = Command::new(common::kv_server())
        .args(["--config-file", "etcd.conf.yml"])
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).expect("log"))
        .spawn()
        .expect("start member");
    let deadline = Instant::now() + STARTED_WITHIN;
    while !common::healthy(CLIENT_PORT) {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        assert!(
            Instant::now() < deadline && member.try_wait().unwrap().is_none(),
            "never healthy:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let endpoint = format!("127.0.0.1:{CLIENT_PORT}");
    let put = common::etcdctl(&endpoint, &["put", "sample", "config"]);
    assert!(put.status.success(), "{}", common::text(&put));
    let get = common::etcdctl(&endpoint, &["get", "sample", "--print-value-only"]);
    assert!(get.status.success(), "{}", common::text(&get));
    assert_eq!(String::from_utf8_lossy(&get.stdout).trim(), "config");
    let _ = member.kill();
    let _ = member.wait();
    let log = std::fs::read_to_string(&log_path).expect("log");
    assert!(log.contains("other configuration command line flags and environment variables will be ignored"));
    for setting in ["enable-v2", "enable-pprof", "max-snapshots", "proxy"] {
        assert!(
            log.contains(&format!("flag --{setting} has no effect here")),
            "{setting} not logged:\n{log}"
        );
    }
    // The sample's data-dir is empty: etcd's default, NAME.etcd.
    assert!(dir.path().join("default.etcd").is_dir());
}
