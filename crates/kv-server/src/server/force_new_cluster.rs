//! `--force-new-cluster`: etcd's recovery from a lost quorum. A member
//! started with it rewrites the cluster to itself alone, keeping every
//! committed entry and key, and serves at once.
//!
//! Before raft starts, as etcd's `restartAsStandaloneNode` does, but
//! keeping the log's tail:
//! 1. every entry in the WAL is kept, those past the persisted commit
//!    index too. A follower learns that an entry committed only from the
//!    leader's next message, and that news is not fsynced on its own, so
//!    the survivor's commit index can lag writes a quorum acknowledged
//!    to clients. etcd drops that tail and with it acknowledged writes;
//!    kv-server commits it, as any newly elected raft leader commits its
//!    whole log. An entry of the tail that no client was told about is
//!    one whose client saw a timeout, which may mean either outcome;
//! 2. the members are those of the store's applied membership, changed by
//!    the configuration changes in the log after it;
//! 3. configuration changes that remove every member but this one (and,
//!    for a learner, first make it a voter) are appended after the last
//!    entry in the current term, and the commit index is moved past them;
//! 4. both go to the WAL with one fdatasync before raft reads them.
//!
//! Raft and the apply stage then apply them as they apply any committed
//! change, so the store's membership says "one member" from then on: a
//! later start without the flag is still a cluster of one, and members
//! are added back with `member add`. Unlike etcd, learners are removed
//! too (etcd keeps a learner its snapshot lists), so the cluster is this
//! member alone.
//!
//! A data directory with no WAL has nothing to recover: the flag is
//! refused there at start (etcd ignores it and starts a new cluster),
//! because an operator who passes it meant to recover data, and a fresh
//! cluster would hide that the data is not where they thought.

use std::collections::BTreeSet;

use protobuf::Message as _;
use raft::prelude::{ConfChange, ConfChangeType, Entry, EntryType};
use raft::{GetEntriesContext, Storage as _};

use crate::error::Error;
use crate::membership::{conf_change, conf_change_refused, Membership};
use crate::proto::kvserverpb::ConfChangeContext;
use crate::storage::durable_log::DurableLog;
use crate::storage::layout::DataDir;

/// Refuses `--force-new-cluster` on a data directory with no member in
/// it, before anything is written there.
pub fn refuse_empty(dir: &DataDir) -> Result<(), Error> {
    if DurableLog::exists(dir) {
        return Ok(());
    }
    Err(Error::Flag {
        flag: "force-new-cluster",
        reason: format!(
            "{} holds no WAL, so there is no member to recover; start without --force-new-cluster to create one",
            dir.wal().display()
        ),
    })
}

/// Rewrites `log` so that this member of `membership` (the store's
/// applied membership) is the cluster's only member.
pub fn rewrite(log: &mut DurableLog, applied: u64, membership: &Membership) -> Result<(), Error> {
    let mut hard_state = log.memory.rl().hard_state().clone();
    let commit = hard_state.commit;
    let last = log.memory.last_index()?;
    if last > commit {
        tracing::info!(
            "entry-index" = commit + 1,
            "commit-index-from-wal" = commit,
            "number-of-kept-entries" = last - commit,
            "committing WAL entries past the commit index"
        );
    }
    let (voters, learners) = members_at(log, applied.max(log.snapshot_index), last, membership)?;
    let local = membership.local_id;
    let mut changes = Vec::new();
    if !voters.contains(&local) {
        // Its own record is what the addition carries; a member missing
        // from its own membership has none to give, and is refused.
        let Some(record) = membership.local().map(|member| member.record()) else {
            return Err(Error::Flag {
                flag: "force-new-cluster",
                reason: format!("member {local:x} is not in its own membership; it cannot be the cluster alone"),
            });
        };
        changes.push((ConfChangeType::AddNode, local, Some(record)));
    }
    for id in voters.iter().chain(&learners).filter(|id| **id != local) {
        changes.push((ConfChangeType::RemoveNode, *id, None));
    }
    let entries: Vec<Entry> = changes
        .into_iter()
        .zip(last + 1..)
        .map(|((kind, id, member), index)| conf_change_entry(kind, id, member, hard_state.term, index))
        .collect();
    hard_state.commit = entries.last().map_or(last, |newest| newest.index);
    log.persist(&entries, Some(&hard_state)).map_err(Error::from)?;
    tracing::info!(
        "cluster-id" = format!("{:x}", membership.cluster_id),
        "local-member-id" = format!("{local:x}"),
        "commit-index" = hard_state.commit,
        "forcing restart member"
    );
    Ok(())
}

/// Voters and learners after the entries in `(from, last]` are applied
/// to `membership`'s, each change taken or refused by
/// [`conf_change_refused`] as raft and the apply stage take it.
fn members_at(
    log: &DurableLog,
    from: u64,
    last: u64,
    membership: &Membership,
) -> Result<(BTreeSet<u64>, BTreeSet<u64>), Error> {
    let mut conf = membership.conf_state();
    if last > from {
        let entries = log
            .memory
            .entries(from + 1, last + 1, None, GetEntriesContext::empty(false))?;
        for entry in entries
            .iter()
            .filter(|e| e.get_entry_type() == EntryType::EntryConfChange)
        {
            let change = ConfChange::parse_from_bytes(&entry.data).map_err(|e| Error::BadWalEntry {
                index: entry.index,
                reason: e.to_string(),
            })?;
            if conf_change_refused(&conf, &change) {
                continue;
            }
            let id = change.node_id;
            conf.voters.retain(|member| *member != id);
            conf.learners.retain(|member| *member != id);
            match change.get_change_type() {
                ConfChangeType::AddNode => conf.voters.push(id),
                ConfChangeType::AddLearnerNode => conf.learners.push(id),
                ConfChangeType::RemoveNode => {}
            }
        }
    }
    Ok((conf.voters.into_iter().collect(), conf.learners.into_iter().collect()))
}

/// One configuration change entry, as `member/reconfigure.rs` proposes
/// them (no proposer: nobody waits for it).
fn conf_change_entry(
    kind: ConfChangeType,
    id: u64,
    member: Option<crate::proto::kvserverpb::MemberRecord>,
    term: u64,
    index: u64,
) -> Entry {
    let context = ConfChangeContext {
        proposer: 0,
        sequence: 0,
        member,
    };
    let change = conf_change(kind, id, context);
    let mut entry = Entry::default();
    entry.set_entry_type(EntryType::EntryConfChange);
    entry.term = term;
    entry.index = index;
    entry.data = change.write_to_bytes().expect("conf changes encode").into();
    entry
}
