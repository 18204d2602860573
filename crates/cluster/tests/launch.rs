//! Goal: the launcher gives each member etcd's flags on its layout's
//! ports, the cluster's environment then the member's own, its log under
//! the cluster's directory; it kills a member (reaped, its status seen)
//! and starts it again; a member that never serves fails the health wait
//! within the bound, with a message naming the logs.
//!
//! Method: the member binary is a shell script that writes its arguments
//! and two variables to its log, then sleeps: a real process, with no
//! server in it.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use cluster::{Cluster, Layout, Spec};

/// A member that records its command line and environment, then sleeps.
fn recording_member(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("member.sh");
    std::fs::write(
        &path,
        "#!/bin/sh\necho \"args: $*\" >&2\necho \"env: $CLUSTER_WIDE $OWN\" >&2\nexec sleep 30\n",
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Waits (at most 5 s) until member `i`'s log has two lines.
fn log_of(cluster: &Cluster, i: usize) -> String {
    for _ in 0..100 {
        let log = std::fs::read_to_string(cluster.log_path(i)).unwrap_or_default();
        if log.lines().count() >= 2 {
            return log;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("member {i} wrote no log");
}

#[test]
fn members_get_etcd_flags_and_can_be_killed_and_restarted() {
    let dir = tempfile::tempdir().unwrap();
    let binary = recording_member(dir.path());
    let mut spec = Spec::new(&binary, dir.path(), 3, Layout::stride(17379), "test-token");
    spec.flags = vec!["--snapshot-count".into(), "1000".into()];
    spec.env = vec![("CLUSTER_WIDE".into(), "wide".into())];
    spec.healthy_within = Duration::from_secs(1);
    let mut cluster = Cluster::new(spec);
    cluster.members[1].env = vec![("OWN".into(), "mine".into())];
    for i in 0..3 {
        cluster.spawn(i).unwrap();
    }
    let second = log_of(&cluster, 1);
    let expected = "args: --name infra2 --data-dir ".to_string() + &dir.path().join("infra2").display().to_string();
    assert!(second.contains(&expected), "{second}");
    assert!(
        second.contains(
            "--listen-client-urls http://127.0.0.1:17389 --advertise-client-urls http://127.0.0.1:17389 \
             --listen-peer-urls http://127.0.0.1:17390 --initial-advertise-peer-urls http://127.0.0.1:17390 \
             --initial-cluster infra1=http://127.0.0.1:17380,infra2=http://127.0.0.1:17390,\
             infra3=http://127.0.0.1:17400 --initial-cluster-token test-token --initial-cluster-state new \
             --snapshot-count 1000"
        ),
        "{second}"
    );
    assert!(second.contains("env: wide mine"), "{second}");
    assert!(log_of(&cluster, 0).contains("env: wide \n") || log_of(&cluster, 0).contains("env: wide\n"));
    assert_eq!(cluster.endpoints(), "127.0.0.1:17379,127.0.0.1:17389,127.0.0.1:17399");

    let first = cluster.members[2].pid().unwrap();
    assert_eq!(cluster.exit_status(2), None, "a member still running has no status");
    cluster.kill(2);
    assert!(cluster.members[2].child.is_none(), "a killed member is reaped");
    cluster.spawn(2).unwrap();
    assert_ne!(cluster.members[2].pid(), Some(first), "the restart is a new process");

    // The script serves nothing: the health wait gives up within its bound.
    let error = cluster.wait_healthy(&[0]).unwrap_err().to_string();
    assert!(
        error.contains("not healthy") && error.contains(&dir.path().display().to_string()),
        "{error}"
    );
    cluster.stop();
    assert!(
        cluster.members.iter().all(|m| m.child.is_none()),
        "stop kills and reaps every member"
    );
}
