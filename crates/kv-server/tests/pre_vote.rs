//! Goal: `--pre-vote` is honoured as etcd 3.5.17 honours it: a member cut
//! off from its quorum campaigns without raising its term while pre-vote
//! is on (the default), so its peers' return elects a leader at the next
//! term; with `--pre-vote=false` each of its campaigns raises its term,
//! and the cluster it rejoins must climb to it.
//!
//! Method: a 3-member cluster of real etcd and one of kv-server, started
//! with `--pre-vote=true` and then `--pre-vote=false`; two members are
//! killed, the survivor campaigns alone for several election timeouts,
//! the two are restarted, and the cluster's raft term (Status, after a
//! put) is compared with the term before. (etcd's Status gives the term
//! of the last applied entry, so the term is read once a leader has
//! applied a put, on both servers.)

mod common;

use std::path::Path;
use std::time::Duration;

/// Several election timeouts (1 s each, etcd's default, drawn up to
/// twice that), after a leader's step-down: at least five campaigns,
/// each raising the term when pre-vote is off (8 s gave etcd a rise of
/// just 4).
const CAMPAIGNING: Duration = Duration::from_secs(12);

/// A rise this large takes the survivor's own campaigns: with pre-vote a
/// rejoining cluster elects at the next term, or after a split vote or
/// two, the one after.
const DISRUPTED_RISE: u64 = 4;

/// The applied term through member 0, once a put has been applied.
fn term(cluster: &common::Cluster) -> u64 {
    let endpoint = cluster.members[0].endpoint();
    let put = common::etcdctl(&endpoint, &["put", "pre-vote", "x"]);
    assert!(put.status.success(), "{}", common::text(&put));
    common::endpoint_status(&endpoint)[0]["header"]["raft_term"]
        .as_u64()
        .expect("raft_term")
}

/// How far the term rose across the survivor's time alone.
fn rise(binary: &Path, dir: &Path, base: u16, pre_vote: bool) -> u64 {
    let flag = format!("--pre-vote={pre_vote}");
    let mut cluster = common::Cluster::start(binary, dir, base, &[&flag]);
    let before = term(&cluster);
    cluster.kill(1);
    cluster.kill(2);
    std::thread::sleep(CAMPAIGNING);
    cluster.restart(1);
    cluster.restart(2);
    cluster.wait_healthy(&[0, 1, 2]);
    let after = term(&cluster);
    after - before
}

#[test]
fn pre_vote_keeps_a_cut_off_members_term_as_etcd_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut seen = Vec::new();
    for (name, binary, base) in [
        ("etcd", common::etcd_tool("ETCD_BIN", "etcd"), 30179),
        ("kv-server", common::kv_server(), 30279),
    ] {
        for pre_vote in [true, false] {
            let place = dir.path().join(format!("{name}-{pre_vote}"));
            let rose = rise(&binary, &place, base, pre_vote);
            eprintln!("{name}, pre-vote {pre_vote}: the term rose by {rose}");
            seen.push(format!(
                "{name}, pre-vote {pre_vote}: disrupted {}",
                rose >= DISRUPTED_RISE
            ));
        }
    }
    assert_eq!(
        seen,
        [
            "etcd, pre-vote true: disrupted false",
            "etcd, pre-vote false: disrupted true",
            "kv-server, pre-vote true: disrupted false",
            "kv-server, pre-vote false: disrupted true",
        ]
    );
}
