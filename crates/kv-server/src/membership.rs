//! The cluster's members: who they are, how the membership changes, and
//! how it is kept.
//!
//! Ids are derived as etcd derives them, so the same flags give the same
//! ids on every member of a new cluster:
//!
//! - member id: the first 8 bytes (big-endian) of SHA-1 over the member's
//!   sorted peer URLs concatenated, followed by the cluster token (and,
//!   for a member added at run time, the Unix second it was added);
//! - cluster id: the first 8 bytes of SHA-1 over the sorted member ids,
//!   each as 8 big-endian bytes.
//!
//! Raft uses the member ids as its node ids.
//!
//! **Where the membership lives.** A new cluster's membership comes from
//! `--initial-cluster`, once; after that it is replicated state. Changes
//! travel through raft (configuration change entries for add, promote and
//! remove; normal entries for an update of peer URLs and for the name and
//! client URLs a member publishes when it starts),
//! and the apply stage writes the whole membership after each change into
//! the store (`MembershipRecord`, under a meta key), in the same batch as
//! the raft index it stands at. So a restart reads it from the store, and
//! every snapshot carries it.
//!
//! **Two views, one rule.** The raft loop applies a configuration change
//! to raft as soon as it is committed; the apply stage applies it to the
//! membership when it reaches the entry. Both refuse the same changes by
//! [`conf_change_refused`] (adding a member already present, removing one
//! absent), judged on the same sequence of entries from the same starting
//! point, so raft's voters and learners always match the membership's.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;
use prost::Message as _;
use raft::prelude::{ConfChange, ConfChangeType, ConfState};
use sha1::{Digest, Sha1};

use crate::error::{Error, RequestError};
use crate::proto::kvserverpb::{MemberRecord, MembershipRecord};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub id: u64,
    /// Empty until the member has started and published its attributes.
    pub name: String,
    pub peer_urls: Vec<String>,
    pub is_learner: bool,
    /// Empty until the member has published its attributes.
    pub client_urls: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    pub cluster_id: u64,
    /// This member's id (not part of the replicated record).
    pub local_id: u64,
    pub members: Vec<Member>,
    /// Members removed for good, whose ids are never used again.
    pub removed: Vec<u64>,
}

/// One change to the membership, as an entry asks for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    AddVoter(Member),
    AddLearner(Member),
    Promote(u64),
    Remove(u64),
    /// MemberUpdate: new peer URLs.
    PeerUrls {
        id: u64,
        peer_urls: Vec<String>,
    },
    /// A member published its name and client URLs when it started.
    Attributes {
        id: u64,
        name: String,
        client_urls: Vec<String>,
    },
}

fn first_eight(digest: &[u8]) -> u64 {
    u64::from_be_bytes(digest[..8].try_into().expect("SHA-1 has 20 bytes"))
}

/// The id of a member with these peer URLs in the cluster of `token`; a
/// member added at run time also hashes the second it was added in, as
/// etcd's `member add` does, so re-adding the same URLs gives a new id.
pub fn member_id(peer_urls: &[String], token: &str, added_at: Option<u64>) -> u64 {
    let mut sorted = peer_urls.to_vec();
    sorted.sort();
    let mut hasher = Sha1::new();
    hasher.update(sorted.concat().as_bytes());
    hasher.update(token.as_bytes());
    if let Some(seconds) = added_at {
        hasher.update(seconds.to_string().as_bytes());
    }
    first_eight(&hasher.finalize())
}

/// Whether raft and the membership both refuse this configuration
/// change, judged on raft's configuration (see the module docs): adding a
/// voter that is one, adding a learner already present in any role, or
/// removing a member absent.
pub fn conf_change_refused(conf: &ConfState, change: &ConfChange) -> bool {
    let voter = conf.voters.contains(&change.node_id);
    let learner = conf.learners.contains(&change.node_id);
    match change.get_change_type() {
        ConfChangeType::AddNode => voter,
        ConfChangeType::AddLearnerNode => voter || learner,
        ConfChangeType::RemoveNode => !voter && !learner,
    }
}

/// A configuration change of `kind` for member `id`, carrying its
/// context: who proposed it (`proposer` 0 and `sequence` 0: nobody waits
/// for it) and, when it adds a member, that member's record.
pub fn conf_change(kind: ConfChangeType, id: u64, context: crate::proto::kvserverpb::ConfChangeContext) -> ConfChange {
    let mut change = ConfChange::default();
    change.set_change_type(kind);
    change.node_id = id;
    change.context = context.encode_to_vec().into();
    change
}

impl Membership {
    /// A new cluster's membership, from `--initial-cluster` and
    /// `--initial-cluster-token`; this member is the one named `name`.
    pub fn new_cluster(initial_cluster: &str, token: &str, name: &str) -> Result<Membership, Error> {
        let members: Vec<Member> = initial_members(initial_cluster)?
            .into_iter()
            .map(|(name, peer_urls)| Member {
                id: member_id(&peer_urls, token, None),
                name,
                peer_urls,
                is_learner: false,
                client_urls: Vec::new(),
            })
            .collect();
        let local = members.iter().find(|m| m.name == name).ok_or_else(|| Error::Flag {
            flag: "initial-cluster",
            reason: format!("no member is named {name:?}"),
        })?;
        let mut ids: Vec<u64> = members.iter().map(|m| m.id).collect();
        ids.sort_unstable();
        let mut hasher = Sha1::new();
        for id in &ids {
            hasher.update(id.to_be_bytes());
        }
        Ok(Membership {
            cluster_id: first_eight(&hasher.finalize()),
            local_id: local.id,
            members,
            removed: Vec::new(),
        })
    }

    /// The membership a record holds, seen from member `local_id`.
    pub fn from_record(record: MembershipRecord, local_id: u64) -> Membership {
        Membership {
            cluster_id: record.cluster_id,
            local_id,
            members: record.members.into_iter().map(Member::from_record).collect(),
            removed: record.removed,
        }
    }

    /// Decodes a record the store keeps.
    pub fn decode(bytes: &[u8], local_id: u64) -> Result<Membership, Error> {
        let record = MembershipRecord::decode(bytes).map_err(|error| Error::BadMembership(error.to_string()))?;
        Ok(Membership::from_record(record, local_id))
    }

    pub fn record(&self) -> MembershipRecord {
        MembershipRecord {
            cluster_id: self.cluster_id,
            members: self.members.iter().map(Member::record).collect(),
            removed: self.removed.clone(),
        }
    }

    /// The record, encoded for the store.
    pub fn encode(&self) -> Vec<u8> {
        self.record().encode_to_vec()
    }

    /// Raft's configuration for this membership.
    pub fn conf_state(&self) -> ConfState {
        let ids = |learner: bool| {
            self.members
                .iter()
                .filter(|m| m.is_learner == learner)
                .map(|m| m.id)
                .collect::<Vec<u64>>()
        };
        ConfState::from((ids(false), ids(true)))
    }

    pub fn get(&self, id: u64) -> Option<&Member> {
        self.members.iter().find(|m| m.id == id)
    }

    /// This member, unless it has been removed.
    pub fn local(&self) -> Option<&Member> {
        self.get(self.local_id)
    }

    pub fn peers(&self) -> impl Iterator<Item = &Member> {
        self.members.iter().filter(move |m| m.id != self.local_id)
    }

    pub fn voter_ids(&self) -> Vec<u64> {
        self.members.iter().filter(|m| !m.is_learner).map(|m| m.id).collect()
    }

    pub fn learner_count(&self) -> usize {
        self.members.iter().filter(|m| m.is_learner).count()
    }

    /// The member using any of these peer URLs.
    pub fn with_peer_url(&self, urls: &[String]) -> Option<&Member> {
        self.members
            .iter()
            .find(|m| m.peer_urls.iter().any(|url| urls.contains(url)))
    }

    /// Applies one change, or refuses it with etcd's error and changes
    /// nothing. Configuration changes follow [`conf_change_refused`].
    pub fn apply(&mut self, change: &Change) -> Result<(), RequestError> {
        self.change(change)?;
        self.log(change);
        Ok(())
    }

    /// etcd's lines for a membership change applied, with its fields.
    fn log(&self, change: &Change) {
        use crate::logging::JsonList;
        let (cluster, local) = (format!("{:x}", self.cluster_id), format!("{:x}", self.local_id));
        match change {
            Change::AddVoter(member) | Change::AddLearner(member) => tracing::info!(
                "cluster-id" = cluster,
                "local-member-id" = local,
                "added-peer-id" = format!("{:x}", member.id),
                "added-peer-peer-urls" = ?JsonList(&member.peer_urls),
                "added member"
            ),
            Change::Remove(id) => tracing::info!(
                "cluster-id" = cluster,
                "local-member-id" = local,
                "removed-remote-peer-id" = format!("{id:x}"),
                "removed member"
            ),
            Change::Promote(_) => tracing::info!("cluster-id" = cluster, "local-member-id" = local, "promote member"),
            Change::PeerUrls { id, peer_urls } => tracing::info!(
                "cluster-id" = cluster,
                "local-member-id" = local,
                "updated-remote-peer-id" = format!("{id:x}"),
                "updated-remote-peer-urls" = ?JsonList(peer_urls),
                "updated member"
            ),
            Change::Attributes { .. } => {}
        }
    }

    fn change(&mut self, change: &Change) -> Result<(), RequestError> {
        match change {
            Change::AddVoter(member) | Change::AddLearner(member) => {
                if self.get(member.id).is_some() {
                    return Err(RequestError::MemberExists);
                }
                self.members.push(member.clone());
            }
            Change::Promote(id) => match self.members.iter_mut().find(|m| m.id == *id) {
                Some(member) if member.is_learner => member.is_learner = false,
                Some(_) => return Err(RequestError::MemberExists),
                None => return Err(RequestError::MemberNotFound),
            },
            Change::Remove(id) => {
                let before = self.members.len();
                self.members.retain(|m| m.id != *id);
                if self.members.len() == before {
                    return Err(RequestError::MemberNotFound);
                }
                self.removed.push(*id);
            }
            Change::PeerUrls { id, peer_urls } => {
                let member = self.members.iter_mut().find(|m| m.id == *id);
                member.ok_or(RequestError::MemberNotFound)?.peer_urls = peer_urls.clone();
            }
            Change::Attributes { id, name, client_urls } => {
                let member = self.members.iter_mut().find(|m| m.id == *id);
                let member = member.ok_or(RequestError::MemberNotFound)?;
                member.name = name.clone();
                member.client_urls = client_urls.clone();
            }
        }
        Ok(())
    }
}

impl Member {
    pub fn record(&self) -> MemberRecord {
        MemberRecord {
            id: self.id,
            name: self.name.clone(),
            peer_urls: self.peer_urls.clone(),
            is_learner: self.is_learner,
            client_urls: self.client_urls.clone(),
        }
    }

    pub fn from_record(record: MemberRecord) -> Member {
        Member {
            id: record.id,
            name: record.name,
            peer_urls: record.peer_urls,
            is_learner: record.is_learner,
            client_urls: record.client_urls,
        }
    }
}

/// `--initial-cluster` (`name=url,...`) as (name, peer URLs) pairs, in
/// order.
pub fn initial_members(initial_cluster: &str) -> Result<Vec<(String, Vec<String>)>, Error> {
    let mut by_name: Vec<(String, Vec<String>)> = Vec::new();
    for pair in initial_cluster.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, url) = pair.split_once('=').ok_or_else(|| Error::Flag {
            flag: "initial-cluster",
            reason: format!("{pair:?} is not name=url"),
        })?;
        match by_name.iter_mut().find(|(n, _)| n == name) {
            Some((_, urls)) => urls.push(url.to_string()),
            None => by_name.push((name.to_string(), vec![url.to_string()])),
        }
    }
    Ok(by_name)
}

/// The membership as the member knows it now: set by the apply stage
/// after each change, read by anyone.
pub struct SharedMembership {
    current: RwLock<Arc<Membership>>,
    /// Whether this member is a learner, for the per-request check.
    learner: AtomicBool,
}

impl SharedMembership {
    pub fn new(membership: Membership) -> SharedMembership {
        let learner = AtomicBool::new(membership.local().is_some_and(|m| m.is_learner));
        SharedMembership {
            current: RwLock::new(Arc::new(membership)),
            learner,
        }
    }

    pub fn get(&self) -> Arc<Membership> {
        self.current.read().clone()
    }

    pub fn set(&self, membership: Membership) {
        let learner = membership.local().is_some_and(|m| m.is_learner);
        *self.current.write() = Arc::new(membership);
        self.learner.store(learner, Ordering::Release);
    }

    /// Whether this member is a learner now; reads no lock.
    pub fn local_is_learner(&self) -> bool {
        self.learner.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLUSTER: &str = "a=http://127.0.0.1:2380,b=http://127.0.0.1:22380,c=http://127.0.0.1:32380";

    fn membership(name: &str) -> Membership {
        Membership::new_cluster(CLUSTER, "etcd-cluster", name).unwrap()
    }

    // Goal: ids are deterministic, distinct per member, and the same cluster
    // id comes out whichever member computes it.
    #[test]
    fn ids_agree_across_members() {
        let (a, b) = (membership("a"), membership("b"));
        assert_eq!(a.cluster_id, b.cluster_id);
        assert_ne!(a.local_id, b.local_id);
        assert_eq!(a.peers().count(), 2);
        assert_eq!(a.members, b.members);
        assert!(Membership::new_cluster(CLUSTER, "etcd-cluster", "zz").is_err());
    }

    /// The configuration real raft reaches from `start`'s by `change`.
    fn raft_applies(start: &Membership, change: &ConfChange) -> ConfState {
        let storage = raft::storage::MemStorage::new_with_conf_state(start.conf_state());
        let config = raft::Config {
            id: start.local_id,
            ..raft::Config::default()
        };
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let mut node = raft::RawNode::new(&config, storage, &logger).unwrap();
        node.apply_conf_change(change).unwrap()
    }

    fn sorted(conf: ConfState) -> (Vec<u64>, Vec<u64>) {
        let (mut voters, mut learners) = (conf.voters, conf.learners);
        voters.sort_unstable();
        learners.sort_unstable();
        (voters, learners)
    }

    // Goal: a change the membership refuses is one raft's configuration
    // refuses too, and an accepted one leaves both with the same voters and
    // learners, so the two views never part.
    // Method: every change kind against a member present as voter, present
    // as learner, and absent, from the same starting point.
    #[test]
    fn membership_and_raft_refuse_the_same_changes() {
        let base = membership("a");
        let learner = Member {
            id: 99,
            name: String::new(),
            peer_urls: vec!["http://127.0.0.1:42380".into()],
            is_learner: true,
            client_urls: Vec::new(),
        };
        let mut with_learner = base.clone();
        with_learner.apply(&Change::AddLearner(learner.clone())).unwrap();
        let voter_id = base.members[1].id;
        for start in [&base, &with_learner] {
            for (id, kind) in [
                (voter_id, ConfChangeType::AddNode),
                (voter_id, ConfChangeType::AddLearnerNode),
                (voter_id, ConfChangeType::RemoveNode),
                (99, ConfChangeType::AddNode),
                (99, ConfChangeType::AddLearnerNode),
                (99, ConfChangeType::RemoveNode),
            ] {
                let mut conf_change = ConfChange {
                    node_id: id,
                    ..ConfChange::default()
                };
                conf_change.set_change_type(kind);
                let present = start.get(id).cloned();
                let change = match (kind, present) {
                    (ConfChangeType::AddNode, Some(m)) if m.is_learner => Change::Promote(id),
                    (ConfChangeType::AddNode, _) => Change::AddVoter(Member {
                        id,
                        is_learner: false,
                        ..learner.clone()
                    }),
                    (ConfChangeType::AddLearnerNode, _) => Change::AddLearner(Member { id, ..learner.clone() }),
                    (ConfChangeType::RemoveNode, _) => Change::Remove(id),
                };
                let mut after = start.clone();
                let refused = after.apply(&change).is_err();
                assert_eq!(
                    refused,
                    conf_change_refused(&start.conf_state(), &conf_change),
                    "{change:?}"
                );
                if !refused {
                    assert_eq!(
                        sorted(after.conf_state()),
                        sorted(raft_applies(start, &conf_change)),
                        "{change:?}"
                    );
                }
            }
        }
        let record = with_learner.encode();
        assert_eq!(Membership::decode(&record, base.local_id).unwrap(), with_learner);
    }
}
