//! Goal: `--pre-vote` is honoured as etcd 3.5.17 honours it: a member cut
//! off from its quorum campaigns without raising its term while pre-vote
//! is on (the default), so its return does not depose a working leader;
//! with `--pre-vote=false` each of its campaigns raises its term.
//!
//! Method: a 3-member cluster of real etcd and one of kv-server, started
//! with `--pre-vote=true` and then `--pre-vote=false`; two members are
//! killed, and the survivor's raft term is read through Status once it
//! has no leader and again after several election timeouts.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

/// Several election timeouts (1 s each, etcd's default, drawn up to
/// twice that): enough campaigns that a term raised by each would show.
const CAMPAIGNING: Duration = Duration::from_secs(6);

/// How long a lone member may take to notice it has no leader.
const LEADERLESS_WITHIN: Duration = Duration::from_secs(30);

/// The survivor's term once it has no leader, and after [`CAMPAIGNING`].
async fn terms_alone(binary: &Path, dir: &Path, base: u16, pre_vote: bool) -> (u64, u64) {
    let flag = format!("--pre-vote={pre_vote}");
    let mut cluster = common::Cluster::start(binary, dir, base, &[&flag]);
    cluster.kill(1);
    cluster.kill(2);
    let endpoint = cluster.members[0].endpoint();
    let deadline = Instant::now() + LEADERLESS_WITHIN;
    let first = loop {
        let status = common::status(&endpoint, Duration::from_secs(5)).await;
        if status.leader == 0 {
            break status.raft_term;
        }
        assert!(Instant::now() < deadline, "the survivor still sees a leader");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    tokio::time::sleep(CAMPAIGNING).await;
    let second = common::status(&endpoint, Duration::from_secs(5)).await.raft_term;
    (first, second)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_vote_keeps_a_cut_off_members_term_as_etcd_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut seen = Vec::new();
    for (name, binary, base) in [
        ("etcd", common::etcd_tool("ETCD_BIN", "etcd"), 30179),
        ("kv-server", common::kv_server(), 30279),
    ] {
        for pre_vote in [true, false] {
            let place = dir.path().join(format!("{name}-{pre_vote}"));
            let (first, second) = terms_alone(&binary, &place, base, pre_vote).await;
            eprintln!("{name}, pre-vote {pre_vote}: term {first}, then {second}");
            seen.push(format!("{name}, pre-vote {pre_vote}: term rises {}", second > first));
        }
    }
    assert_eq!(
        seen,
        [
            "etcd, pre-vote true: term rises false",
            "etcd, pre-vote false: term rises true",
            "kv-server, pre-vote true: term rises false",
            "kv-server, pre-vote false: term rises true",
        ]
    );
}
