//! What every seed's end is checked for:
//! - the history is linearizable (the robustness suite's checker,
//!   `robustness::linearize`), each key decided or counted undecided;
//! - the running members converge: one applied index, one revision, the
//!   same keys (values, revisions, versions, leases), and one HashKV at it
//!   wherever they report the same compact revision (etcd's rule);
//! - nothing acknowledged is lost: every acknowledged put (and successful
//!   compare-and-swap) is in every running member's store, at its
//!   revision, with its value, unless compacted away.

use robustness::history::{Call, History, Return};
use robustness::linearize::{self, Verdict};

use kv_server::sim::SimCluster;

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
}

impl Findings {
    pub fn failed(&self) -> bool {
        !self.violations.is_empty() || self.diverged.is_some() || !self.lost_writes.is_empty()
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
    let applied: Vec<Option<u64>> = running.iter().map(|&m| cluster.applied_index(m)).collect();
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
