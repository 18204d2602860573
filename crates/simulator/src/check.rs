//! What every seed's end is checked for:
//! - the history is linearizable (the robustness suite's checker,
//!   `robustness::linearize`), each key decided or counted undecided;
//! - the running members converge: a leader has committed an entry of
//!   its term, each member has applied all the leader committed, and they
//!   share one applied index, one revision, the
//!   same keys (values, revisions, versions, leases), and one HashKV at it
//!   wherever they report the same compact revision (etcd's rule);
//! - nothing acknowledged is lost: every acknowledged put (and successful
//!   compare-and-swap) is in every running member's store, at its
//!   revision, with its value, unless compacted away;
//! - every watcher kept etcd's watch guarantees (the robustness suite's
//!   `watch_check`: ordered, unique, reliable, atomic, resumable,
//!   bookmarkable), checked against what the members applied: each
//!   revision's changes as the apply stages published them, the same on
//!   every member that applied it, and itself checked against the
//!   history (every acknowledged write in it, nothing no call wrote).

use robustness::history::{Call, History, Return};
use robustness::linearize::{self, Verdict};
use robustness::watch_check::{check_truth, check_watcher, Received, WatchEvent, WatcherLog};

use crate::harness::SimCluster;

/// The checks' findings.
#[derive(Debug, Clone, Default)]
pub struct Findings {
    /// Keys whose operations have no valid order, with the shrunk
    /// sub-history that shows it.
    pub violations: Vec<(String, Vec<robustness::history::Operation>)>,
    pub undecided: Vec<String>,
    /// Why the members did not converge, if they did not.
    pub diverged: Option<String>,
    /// Acknowledged writes a running member's store lacks.
    pub lost_writes: Vec<String>,
    /// Each member at the end: running (applied index, revision) or down.
    pub members: Vec<String>,
    /// Broken watch guarantees, by watcher.
    pub watch_violations: Vec<String>,
    /// Events the watchers' checks compared against.
    pub watch_events: usize,
    /// Events the watchers received, over all their sessions.
    pub watch_delivered: usize,
}

impl Findings {
    pub fn failed(&self) -> bool {
        !self.violations.is_empty()
            || !self.watch_violations.is_empty()
            || self.diverged.is_some()
            || !self.lost_writes.is_empty()
    }
}

pub fn linearizability(history: &History, findings: &mut Findings) {
    for (key, verdict) in linearize::check(history) {
        match verdict {
            Verdict::Linearizable => {}
            Verdict::Violation(operations) => findings.violations.push((key, operations)),
            Verdict::Undecided => findings.undecided.push(key),
        }
    }
}

/// Whether the running members agree now: `Ok` with their revision, or
/// what differs.
pub fn agreement(cluster: &SimCluster) -> Result<i64, String> {
    let running: Vec<usize> = (0..cluster.size()).filter(|&m| cluster.is_running(m)).collect();
    let Some(&first) = running.first() else {
        return Err("no member runs".into());
    };
    // Until a leader has committed an entry of its term, entries its
    // predecessor committed may wait in the members' logs unknown as
    // committed; and a member just restarted has committed entries still
    // to apply. The members agree only once a settled leader's commit
    // index is every member's, and applied.
    let Some(leader) = cluster.settled_leader() else {
        return Err(format!("members {running:?} have no leader that committed in its term"));
    };
    let applied: Vec<Option<u64>> = running.iter().map(|&m| cluster.applied_index(m)).collect();
    let committed: Vec<Option<u64>> = running.iter().map(|&m| cluster.committed_index(m)).collect();
    let leader_committed = cluster.committed_index(leader);
    if applied.iter().chain(&committed).any(|&index| index != leader_committed) {
        return Err(format!(
            "members {running:?} applied {applied:?} of their committed {committed:?}; leader {leader} committed {leader_committed:?}"
        ));
    }
    let revisions: Vec<Option<i64>> = running.iter().map(|&m| cluster.current_revision(m)).collect();
    if applied.windows(2).any(|w| w[0] != w[1]) || revisions.windows(2).any(|w| w[0] != w[1]) {
        return Err(format!(
            "members {running:?} applied {applied:?} at revisions {revisions:?}"
        ));
    }
    let revision = cluster.current_revision(first).unwrap_or(0);
    let contents: Vec<_> = running.iter().map(|&m| cluster.all_keys(m)).collect();
    if contents.windows(2).any(|w| w[0] != w[1]) || contents.iter().any(|c| c.is_err()) {
        return Err(format!(
            "members {running:?} hold different keys at revision {revision}: {contents:?}"
        ));
    }
    // HashKV as etcd's corruption check compares it: between members that
    // report the same compact revision (a member remembers the hash it took
    // while compacting only until it restarts, as etcd's does).
    let hashes: Vec<Result<(u32, i64), String>> = running.iter().map(|&m| cluster.hash_kv(m, revision)).collect();
    for (i, a) in hashes.iter().enumerate() {
        for b in &hashes[i + 1..] {
            let comparable = matches!((a, b), (Ok((_, ca)), Ok((_, cb))) if ca == cb);
            if a.is_err() || b.is_err() || (comparable && a != b) {
                return Err(format!("members {running:?} hash revision {revision} as {hashes:?}"));
            }
        }
    }
    Ok(revision)
}

/// Each member's state, for a failed seed's report.
pub fn member_states(cluster: &SimCluster) -> Vec<String> {
    (0..cluster.size())
        .map(|m| match (cluster.applied_index(m), cluster.current_revision(m)) {
            (Some(applied), Some(revision)) => format!("member {m}: applied {applied}, revision {revision}"),
            _ => format!("member {m}: down"),
        })
        .collect()
}

pub fn lost_writes(history: &History, cluster: &SimCluster, findings: &mut Findings) {
    for operation in &history.operations {
        let (key, value, revision) = match (&operation.call, &operation.result) {
            (Call::Put { key, value, .. }, Return::Put { revision }) => (key, value, *revision),
            (
                Call::Cas { key, value, .. },
                Return::Cas {
                    revision,
                    succeeded: true,
                },
            ) => (key, value, *revision),
            _ => continue,
        };
        for member in (0..cluster.size()).filter(|&m| cluster.is_running(m)) {
            match cluster.read_at(member, key, revision) {
                Ok(Some((held, at))) if &held == value && at == revision => {}
                Err(error) if error.contains("compacted") => {}
                other => findings.lost_writes.push(format!(
                    "{key}={value} acknowledged at revision {revision}; member {member} reads {other:?}"
                )),
            }
        }
    }
}

/// What happened to the watched keys: every revision's changes as the
/// members applied them, as watch events.
pub fn applied_events(cluster: &SimCluster, prefix: &str) -> Vec<WatchEvent> {
    cluster
        .applied_events()
        .values()
        .flatten()
        .filter(|event| event.kv.key.starts_with(prefix.as_bytes()))
        .map(|event| WatchEvent {
            revision: event.kv.mod_revision,
            key: String::from_utf8_lossy(&event.kv.key).into_owned(),
            value: (event.kind == mvcc::EventKind::Put).then(|| String::from_utf8_lossy(&event.kv.value).into_owned()),
        })
        .collect()
}

/// Checks what the members applied against the history and each
/// watcher's logs against it. `last` is the revision the members agreed
/// at: every revision up to it changed something, so each must be in the
/// record (unless the record says it missed batches).
pub fn watches(
    cluster: &SimCluster,
    history: &History,
    watchers: &[Vec<WatcherLog>],
    last: i64,
    prefix: &str,
    findings: &mut Findings,
) {
    let recorded = cluster.applied_events();
    if cluster.stats().changes_missed == 0 {
        if let Some(missing) = (2..=last).find(|revision| !recorded.contains_key(revision)) {
            findings
                .watch_violations
                .push(format!("no member applied revision {missing} of 2..={last}"));
        }
    }
    if let Some(conflict) = cluster.event_conflicts().first() {
        let diverged = findings.diverged.get_or_insert_with(String::new);
        diverged.push_str(conflict);
    }
    let truth = applied_events(cluster, prefix);
    findings.watch_events = truth.len();
    let (lost, phantom) = check_truth(&truth, history);
    findings
        .lost_writes
        .extend(lost.into_iter().map(|lost| format!("applied changes: {lost}")));
    findings
        .watch_violations
        .extend(phantom.into_iter().map(|phantom| format!("applied changes: {phantom}")));
    for (watcher, logs) in watchers.iter().enumerate() {
        for (index, log) in logs.iter().enumerate() {
            findings.watch_delivered += log
                .sessions
                .iter()
                .flat_map(|session| &session.received)
                .map(|received| match received {
                    Received::Events(events) => events.len(),
                    Received::Progress(_) => 0,
                })
                .sum::<usize>();
            let found = check_watcher(log, &truth);
            findings
                .watch_violations
                .extend(found.into_iter().map(|v| format!("watcher {watcher} log {index}: {v}")));
        }
    }
}
