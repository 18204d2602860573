//! The flags of one member of an in-process cluster (the raft loop's
//! tests and the simulator), as an operator would write them: a new
//! cluster of members named `m0`, `m1`, …, or a member joining it later,
//! whose peer URLs name loopback ports no one listens on (those clusters
//! carry raft messages themselves), with the given timing.

use std::path::Path;
use std::time::Duration;

/// The peer URL of the member numbered `number`.
pub fn peer_url(number: usize) -> String {
    format!("http://127.0.0.1:{}", 1001 + number)
}

/// Member `index`'s flags in a cluster of `members`, its data in `dir`.
pub fn member_args(members: usize, index: usize, dir: &Path, heartbeat: Duration, election: Duration) -> Vec<String> {
    let cluster: Vec<String> = (0..members).map(|i| format!("m{i}={}", peer_url(i))).collect();
    args(index, &cluster.join(","), dir, heartbeat, election)
}

/// The flags of the member numbered `number` (past the first `members`)
/// that joins their running cluster, once a member add has named its peer
/// URL: its `--initial-cluster` lists the first members and itself.
/// The simulator's alone (`crates/simulator/src/harness/cluster.rs`).
pub fn joining_args(members: usize, number: usize, dir: &Path, heartbeat: Duration, election: Duration) -> Vec<String> {
    let cluster: Vec<String> = (0..members)
        .chain([number])
        .map(|i| format!("m{i}={}", peer_url(i)))
        .collect();
    let mut args = args(number, &cluster.join(","), dir, heartbeat, election);
    args.extend(["--initial-cluster-state".into(), "existing".into()]);
    args
}

/// The flags of the member numbered `number`, named `m<number>`.
fn args(number: usize, cluster: &str, dir: &Path, heartbeat: Duration, election: Duration) -> Vec<String> {
    vec![
        "--name".into(),
        format!("m{number}"),
        "--data-dir".into(),
        dir.display().to_string(),
        "--initial-cluster".into(),
        cluster.into(),
        "--initial-advertise-peer-urls".into(),
        peer_url(number),
        "--heartbeat-interval".into(),
        heartbeat.as_millis().to_string(),
        "--election-timeout".into(),
        election.as_millis().to_string(),
    ]
}
