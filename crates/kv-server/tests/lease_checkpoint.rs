//! Goal: lease checkpoints as etcd 3.5.17 has them
//! (`--experimental-enable-lease-checkpoint` and `-persist`):
//! - with checkpoints, a new leader goes on from the TTL the old one had
//!   checkpointed, instead of restarting every lease at its full TTL;
//! - persisted, the same holds after the whole cluster is killed and
//!   restarted;
//! - a keep-alive clears the checkpoint: the renewed lease has its full
//!   TTL under the next leader too;
//! - without the flag, a leader change renews every lease, as before;
//! - `-persist` without checkpoints is refused at start with etcd's
//!   message, and checkpoints without persistence warn as etcd does.
//!
//! Method: 3-member clusters of real processes and real etcdctl. The
//! five-minute checkpoint interval is shortened to 3 s through
//! `KV_SERVER_LEASE_CHECKPOINT_INTERVAL`, which etcd has no flag for; the
//! side-by-side run against etcd at the real interval takes six minutes,
//! so it is ignored in CI and run by hand
//! (`cargo test --release -p kv-server --test lease_checkpoint -- --ignored`).

mod common;

use std::time::Duration;

/// The lease's TTL in the short runs, in seconds.
const TTL: i64 = 60;
/// The shortened checkpoint interval.
const INTERVAL: &str = "3s";
/// Long enough for three checkpoints at [`INTERVAL`].
const AFTER_CHECKPOINTS: Duration = Duration::from_secs(10);
/// A TTL a new leader reports at most when it went on from a checkpoint:
/// [`AFTER_CHECKPOINTS`] took at least 9 s off the TTL, the election adds
/// one election timeout; what is left is room for a slow machine.
const CHECKPOINTED_AT_MOST: i64 = TTL - 4;
/// A TTL a new leader reports at least when it restarted the lease at
/// its full TTL (plus an election timeout, minus rounding down).
const RENEWED_AT_LEAST: i64 = TTL - 1;

const CHECKPOINT: &str = "--experimental-enable-lease-checkpoint";
const PERSIST: &str = "--experimental-enable-lease-checkpoint-persist";

/// etcdctl's answer as JSON, which must have succeeded.
fn etcdctl_json(endpoints: &str, args: &[&str]) -> serde_json::Value {
    let mut args = args.to_vec();
    args.extend(["-w", "json"]);
    let output = common::etcdctl(endpoints, &args);
    assert!(output.status.success(), "etcdctl {args:?}: {}", common::text(&output));
    serde_json::from_slice(&output.stdout).expect("etcdctl's JSON")
}

/// Grants a lease of `ttl` seconds; its id in etcdctl's hex form.
fn grant(endpoints: &str, ttl: i64) -> String {
    let granted = etcdctl_json(endpoints, &["lease", "grant", &ttl.to_string()]);
    format!("{:x}", granted["ID"].as_i64().expect("lease id"))
}

/// The TTL left of lease `id`, as the leader answers it.
fn time_to_live(endpoints: &str, id: &str) -> i64 {
    etcdctl_json(endpoints, &["lease", "timetolive", id])["ttl"]
        .as_i64()
        .expect("ttl")
}

/// Kills the leader with SIGKILL, waits for the others to elect one and
/// asks it for lease `id`'s TTL; then restarts the killed member.
fn ttl_after_leader_killed(cluster: &mut common::Cluster, id: &str) -> i64 {
    let killed = common::leader_index(cluster);
    cluster.kill(killed);
    let alive: Vec<usize> = (0..3).filter(|&i| i != killed).collect();
    cluster.wait_healthy(&alive);
    let survivors: Vec<String> = alive.iter().map(|&i| cluster.members[i].endpoint()).collect();
    let ttl = time_to_live(&survivors.join(","), id);
    cluster.spawn(killed);
    cluster.wait_healthy(&[0, 1, 2]);
    ttl
}

/// One cluster's run: the TTLs a new leader reports after checkpoints,
/// after a restart of the whole cluster, and after a keep-alive.
struct Run {
    after_leader_change: i64,
    after_full_restart: i64,
    after_keep_alive: i64,
}

fn run(name: &str, base: u16, flags: &[&str]) -> Run {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cluster = common::Cluster::new(&common::kv_server(), dir.path(), base, 3, flags);
    for member in &mut cluster.members {
        member.env = vec![("KV_SERVER_LEASE_CHECKPOINT_INTERVAL".into(), INTERVAL.into())];
    }
    cluster.start_all();
    let id = grant(&cluster.endpoints(), TTL);
    std::thread::sleep(AFTER_CHECKPOINTS);
    let after_leader_change = ttl_after_leader_killed(&mut cluster, &id);
    for i in 0..3 {
        cluster.kill(i);
    }
    cluster.start_all();
    let after_full_restart = time_to_live(&cluster.endpoints(), &id);
    let kept = common::etcdctl(&cluster.endpoints(), &["lease", "keep-alive", "--once", &id]);
    assert!(kept.status.success(), "keep-alive: {}", common::text(&kept));
    let after_keep_alive = ttl_after_leader_killed(&mut cluster, &id);
    eprintln!(
        "{name}: TTL {after_leader_change} after a leader change, {after_full_restart} after a full restart, \
         {after_keep_alive} after a keep-alive and a leader change"
    );
    Run {
        after_leader_change,
        after_full_restart,
        after_keep_alive,
    }
}

#[test]
fn a_new_leader_goes_on_from_the_checkpointed_ttl() {
    let persisted = run("checkpointed and persisted", 28179, &[CHECKPOINT, PERSIST]);
    assert!(
        persisted.after_leader_change <= CHECKPOINTED_AT_MOST,
        "{}",
        persisted.after_leader_change
    );
    assert!(
        persisted.after_full_restart <= CHECKPOINTED_AT_MOST,
        "{}",
        persisted.after_full_restart
    );
    assert!(
        persisted.after_keep_alive >= RENEWED_AT_LEAST,
        "{}",
        persisted.after_keep_alive
    );

    // In memory only, the checkpoint still carries across a leader change
    // (a full restart may or may not replay it from the WAL, as in etcd).
    let in_memory = run("checkpointed", 28279, &[CHECKPOINT]);
    assert!(
        in_memory.after_leader_change <= CHECKPOINTED_AT_MOST,
        "{}",
        in_memory.after_leader_change
    );
    assert!(
        in_memory.after_keep_alive >= RENEWED_AT_LEAST,
        "{}",
        in_memory.after_keep_alive
    );

    // Off, as by default: a leader change renews the lease.
    let off = run("without checkpoints", 28379, &[]);
    assert!(
        off.after_leader_change >= RENEWED_AT_LEAST,
        "{}",
        off.after_leader_change
    );
    assert!(off.after_full_restart >= RENEWED_AT_LEAST, "{}", off.after_full_restart);
}

/// Runs `binary` with `args` on a fresh data directory until it exits or
/// a few seconds pass; its output, whether it failed, and whether the
/// data directory was made.
fn start_briefly(binary: &std::path::Path, base: u16, args: &[&str]) -> (String, bool, bool) {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let client = format!("http://127.0.0.1:{base}");
    let peer = format!("http://127.0.0.1:{}", base + 1);
    let cluster = format!("default={peer}");
    let mut all = vec![
        "--data-dir",
        data.to_str().expect("a UTF-8 path"),
        "--listen-client-urls",
        &client,
        "--advertise-client-urls",
        &client,
        "--listen-peer-urls",
        &peer,
        "--initial-advertise-peer-urls",
        &peer,
        "--initial-cluster",
        &cluster,
    ];
    all.extend(args);
    let output = common::run_within(binary, &all, Duration::from_secs(3));
    (common::text(&output), !output.status.success(), data.exists())
}

#[test]
fn the_flags_are_checked_and_warned_about_as_etcd_does() {
    for (name, binary) in [
        ("etcd", common::etcd_tool("ETCD_BIN", "etcd")),
        ("kv-server", common::kv_server()),
    ] {
        let (said, failed, made) = start_briefly(&binary, 28679, &[PERSIST]);
        assert!(failed, "{name}: {said}");
        assert!(
            said.contains(
                "setting experimental-enable-lease-checkpoint-persist requires experimental-enable-lease-checkpoint"
            ),
            "{name}: {said}"
        );
        assert!(!made, "{name} made its data directory");
        let (said, _, _) = start_briefly(&binary, 28679, &[CHECKPOINT]);
        assert!(
            said.contains(
                "Detected that checkpointing is enabled without persistence. Consider enabling \
                 experimental-enable-lease-checkpoint-persist"
            ),
            "{name}: {said}"
        );
    }
}

/// etcd 3.5.17 and kv-server side by side at etcd's real five-minute
/// interval: a 600-second lease, 310 s of checkpoints, then the leader
/// killed. Both new leaders report what the checkpoint left, not the full
/// TTL, within two seconds of each other (the last run's figures are in
/// `docs/testing.md`). Six minutes, so not in CI.
#[test]
#[ignore]
fn at_etcds_interval_both_go_on_from_the_checkpoint() {
    let flags = [CHECKPOINT, PERSIST];
    let runs: Vec<_> = [
        ("etcd", common::etcd_tool("ETCD_BIN", "etcd"), 28479),
        ("kv-server", common::kv_server(), 28579),
    ]
    .into_iter()
    .map(|(name, binary, base)| {
        std::thread::spawn(move || {
            let dir = tempfile::tempdir().expect("tempdir");
            let mut cluster = common::Cluster::new(&binary, dir.path(), base, 3, &flags);
            cluster.start_all();
            let id = grant(&cluster.endpoints(), 600);
            std::thread::sleep(Duration::from_secs(310));
            let ttl = ttl_after_leader_killed(&mut cluster, &id);
            eprintln!("{name}: TTL {ttl} of 600 after 310 s and a leader change");
            ttl
        })
    })
    .collect();
    let ttls: Vec<i64> = runs.into_iter().map(|run| run.join().expect("the run")).collect();
    // The checkpoint at 300 s left 300 s; the new leader adds an election
    // timeout. Without it, the new leader would answer 600.
    for ttl in &ttls {
        assert!(*ttl <= 305, "the new leader restarted the lease: TTL {ttl}");
    }
    assert!(
        (ttls[0] - ttls[1]).abs() <= 2,
        "etcd {} against kv-server {}",
        ttls[0],
        ttls[1]
    );
}
