//! The flags of one member of an in-process cluster (the raft loop's
//! tests and the simulator), as an operator would write them: a new
//! cluster of members named `m0`, `m1`, …, whose peer URLs name loopback
//! ports no one listens on (those clusters carry raft messages
//! themselves), with the given timing.

use std::path::Path;
use std::time::Duration;

/// Member `index`'s flags in a cluster of `members`, its data in `dir`.
pub fn member_args(members: usize, index: usize, dir: &Path, heartbeat: Duration, election: Duration) -> Vec<String> {
    let url = |i: usize| format!("http://127.0.0.1:{}", 1001 + i);
    let cluster: Vec<String> = (0..members).map(|i| format!("m{i}={}", url(i))).collect();
    vec![
        "--name".into(),
        format!("m{index}"),
        "--data-dir".into(),
        dir.display().to_string(),
        "--initial-cluster".into(),
        cluster.join(","),
        "--initial-advertise-peer-urls".into(),
        url(index),
        "--heartbeat-interval".into(),
        heartbeat.as_millis().to_string(),
        "--election-timeout".into(),
        election.as_millis().to_string(),
    ]
}
