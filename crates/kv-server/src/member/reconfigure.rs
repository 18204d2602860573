//! Membership changes as etcd's `Cluster` service makes them: MemberAdd
//! (a voter or a learner), MemberRemove, MemberUpdate and MemberPromote,
//! each checked first as etcd checks it, then proposed through raft and
//! answered once applied here.
//!
//! etcd's strict reconfiguration check (`--strict-reconfig-check`, on by
//! default; off, these checks are skipped, as in etcd) is kept:
//!
//! - adding or promoting a voter needs a quorum of the voters after the
//!   change to have started (published a name);
//! - adding any member needs every voter connected to this member for
//!   [`RECONFIG_HEALTH_INTERVAL`] (etcd's `isConnectedFullySince`);
//! - removing a voter needs a quorum of the remaining voters started, and,
//!   unless the one removed is down, enough members connected that the
//!   quorum survives without it.
//!
//! Removing the leader first hands leadership to another voter, so the
//! cluster has a leader throughout (etcd leaves an election to follow).
//!
//! At most `--max-learners` learners (default
//! [`crate::config::LEARNERS_MAX`]), and a learner is promoted only once
//! its log matches at least [`LEARNER_READY_FRACTION`] of the leader's,
//! as the leader sees it (a follower forwards the promotion to the
//! leader).

use std::time::Duration;

use raft::prelude::ConfChangeType;

use crate::error::RequestError;
use crate::member::core::{queue_error, Member};
use crate::membership::{conf_change, member_id, Member as ClusterMember, Membership};
use crate::proto::etcdserverpb as pb;
use crate::proto::kvserverpb::{raft_request, ConfChangeContext, MemberRecord};
use crate::raft::input::NodeInput;

/// How long a peer must have been connected to count as healthy for a
/// reconfiguration: etcd's `HealthInterval`.
pub const RECONFIG_HEALTH_INTERVAL: Duration = Duration::from_secs(5);

/// How close a learner's log must be to the leader's to be promoted:
/// etcd's `readyPercentThreshold`.
pub const LEARNER_READY_FRACTION: f64 = 0.9;

impl Member {
    /// MemberList's members: by id, with the client URLs each published.
    pub fn member_list(&self) -> Vec<pb::Member> {
        to_pb(&self.membership.get())
    }

    /// MemberAdd: returns the new member and the members after.
    pub async fn add_member(
        &self,
        peer_urls: Vec<String>,
        is_learner: bool,
    ) -> Result<(pb::Member, Vec<pb::Member>), RequestError> {
        // In etcd's order: the URLs, the strict checks, then what etcd
        // checks when it applies the change.
        check_urls(&peer_urls)?;
        let membership = self.membership.get();
        let strict = self.config.strict_reconfig_check;
        if strict && !is_learner && !started_quorum(&membership, None, Joining::Added) {
            return Err(RequestError::NotEnoughStarted);
        }
        if strict && self.connected_voters(&membership) < membership.voter_ids().len() {
            return Err(RequestError::Unhealthy);
        }
        if membership.with_peer_url(&peer_urls).is_some() {
            return Err(RequestError::PeerUrlExists);
        }
        if is_learner && membership.learner_count() >= self.config.max_learners {
            return Err(RequestError::TooManyLearners);
        }
        let now = self.clock.since_epoch().as_secs();
        let member = ClusterMember {
            id: member_id(&peer_urls, &self.config.initial_cluster_token, Some(now)),
            name: String::new(),
            peer_urls,
            is_learner,
            client_urls: Vec::new(),
        };
        if membership.removed.contains(&member.id) {
            return Err(RequestError::MemberExists);
        }
        let kind = if is_learner {
            ConfChangeType::AddLearnerNode
        } else {
            ConfChangeType::AddNode
        };
        self.propose_conf_change(kind, member.id, Some(member.record())).await?;
        let added = pb::Member {
            id: member.id,
            name: String::new(),
            peer_ur_ls: member.peer_urls,
            client_ur_ls: Vec::new(),
            is_learner,
        };
        Ok((added, self.member_list()))
    }

    /// MemberRemove: returns the members after.
    pub async fn remove_member(&self, id: u64) -> Result<Vec<pb::Member>, RequestError> {
        let membership = self.membership.get();
        let member = membership.get(id).ok_or(RequestError::MemberNotFound)?;
        if !member.is_learner && self.config.strict_reconfig_check {
            if !started_quorum(&membership, Some(id), Joining::None) {
                return Err(RequestError::NotEnoughStarted);
            }
            // A member that is down is safe to remove: it is not part of
            // the quorum that is up.
            let down = id != self.local_id && self.peers.active_since(id).is_none();
            if !down {
                let voters = membership.voter_ids().len();
                let active = self.connected_voters(&membership);
                if active.saturating_sub(1) < 1 + (voters - 1) / 2 {
                    return Err(RequestError::Unhealthy);
                }
            }
        }
        self.lead_elsewhere(id).await;
        self.propose_conf_change(ConfChangeType::RemoveNode, id, None).await?;
        Ok(self.member_list())
    }

    /// Before the leader is removed, hands leadership to another voter
    /// (this member if it is one, else a peer it is connected to), so the
    /// cluster need not wait out an election timeout without a leader
    /// once the old one stops. Best effort: after `REQUEST_TIMEOUT` the
    /// removal goes ahead, and an election follows it.
    async fn lead_elsewhere(&self, leaving: u64) {
        if self.leader() != leaving {
            return;
        }
        let membership = self.membership.get();
        let voter = |id: u64| membership.get(id).is_some_and(|m| !m.is_learner);
        let target = if leaving != self.local_id && voter(self.local_id) {
            Some(self.local_id)
        } else {
            membership
                .peers()
                .map(|m| m.id)
                .find(|&id| id != leaving && voter(id) && self.peers.active_since(id).is_some())
        };
        let Some(target) = target else { return };
        if self.node.try_send(NodeInput::TransferLeader(target)).is_err() {
            return;
        }
        self.await_leader(|leader| leader != leaving).await;
    }

    /// MemberUpdate: new peer URLs for a member; returns the members after.
    pub async fn update_member(&self, id: u64, peer_urls: Vec<String>) -> Result<Vec<pb::Member>, RequestError> {
        check_urls(&peer_urls)?;
        let membership = self.membership.get();
        membership.get(id).ok_or(RequestError::MemberNotFound)?;
        if membership.with_peer_url(&peer_urls).is_some_and(|m| m.id != id) {
            return Err(RequestError::PeerUrlExists);
        }
        let update = MemberRecord {
            id,
            peer_urls,
            ..MemberRecord::default()
        };
        self.propose(raft_request::Request::MemberUpdate(update)).await?;
        Ok(self.member_list())
    }

    /// MemberPromote: a follower forwards it to the leader, which alone
    /// knows how far the learner's log has come.
    pub async fn promote_member(&self, id: u64) -> Result<Vec<pb::Member>, RequestError> {
        match self.leader() {
            0 => Err(RequestError::NoLeader),
            leader if leader == self.local_id => self.promote_member_as_leader(id).await,
            leader => {
                let mut client = self.leader_channels.client(leader)?;
                let answer = client.member_promote(pb::MemberPromoteRequest { id }).await;
                Ok(answer.map_err(RequestError::Forwarded)?.into_inner().members)
            }
        }
    }

    /// MemberPromote on the leader.
    pub async fn promote_member_as_leader(&self, id: u64) -> Result<Vec<pb::Member>, RequestError> {
        if self.leader() != self.local_id {
            return Err(RequestError::NotLeader);
        }
        let membership = self.membership.get();
        let member = membership.get(id).ok_or(RequestError::MemberNotFound)?;
        if !member.is_learner {
            return Err(RequestError::MemberNotLearner);
        }
        let progress = self.raft_progress().await?;
        let matched = |who: u64| progress.iter().find(|(id, _)| *id == who).map(|(_, m)| *m);
        let (Some(leader), Some(learner)) = (matched(self.local_id), matched(id)) else {
            return Err(RequestError::LearnerNotReady);
        };
        if (learner as f64) < leader as f64 * LEARNER_READY_FRACTION {
            return Err(RequestError::LearnerNotReady);
        }
        if self.config.strict_reconfig_check && !started_quorum(&membership, None, Joining::Promoted) {
            return Err(RequestError::NotEnoughStarted);
        }
        self.propose_conf_change(ConfChangeType::AddNode, id, Some(member.record()))
            .await?;
        Ok(self.member_list())
    }

    /// Proposes one configuration change and waits until it is applied
    /// here (or refused at apply).
    async fn propose_conf_change(
        &self,
        kind: ConfChangeType,
        id: u64,
        member: Option<MemberRecord>,
    ) -> Result<(), RequestError> {
        let (sequence, answer) = self.waiters.register();
        let context = ConfChangeContext {
            proposer: self.local_id,
            sequence,
            member,
        };
        let change = conf_change(kind, id, context);
        if let Err(error) = self.node.try_send(NodeInput::ProposeConfChange { sequence, change }) {
            self.waiters.forget(sequence);
            return Err(queue_error(error));
        }
        self.wait_for_answer(sequence, answer).await.map(|_| ())
    }

    /// Voters connected to this member for the health interval, itself
    /// included: etcd's `numConnectedSince`.
    fn connected_voters(&self, membership: &Membership) -> usize {
        let since = self.clock.now().checked_sub(RECONFIG_HEALTH_INTERVAL);
        membership
            .members
            .iter()
            .filter(|m| !m.is_learner)
            .filter(|m| {
                m.id == self.local_id
                    || self
                        .peers
                        .active_since(m.id)
                        .zip(since)
                        .is_some_and(|(up, since)| up <= since)
            })
            .count()
    }
}

/// The voter joining in a change that [`started_quorum`] judges.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Joining {
    None,
    /// A member added as a voter: not started yet.
    Added,
    /// A learner promoted: etcd counts it as started.
    Promoted,
}

/// Whether a quorum of the voters after a change has started (published
/// a name): the voters without `leaving`, plus the one `joining`. etcd's
/// `IsReadyToAddVotingMember` (which also lets a one-member cluster,
/// started, grow to two), `IsReadyToRemoveVotingMember` and
/// `IsReadyToPromoteMember`.
fn started_quorum(membership: &Membership, leaving: Option<u64>, joining: Joining) -> bool {
    let voters = membership
        .members
        .iter()
        .filter(|m| !m.is_learner && Some(m.id) != leaving);
    let (count, started) = voters.fold(
        (
            usize::from(joining != Joining::None),
            usize::from(joining == Joining::Promoted),
        ),
        |(count, started), m| (count + 1, started + usize::from(!m.name.is_empty())),
    );
    if joining == Joining::Added && count == 2 && started == 1 {
        return true;
    }
    started > count / 2
}

/// etcd's check of member URLs: each an http or https URL with a host and
/// a port, and nothing after.
fn check_urls(urls: &[String]) -> Result<(), RequestError> {
    let good = |url: &String| {
        url.parse::<tonic::codegen::http::Uri>().is_ok_and(|uri| {
            matches!(uri.scheme_str(), Some("http" | "https"))
                && uri.port_u16().is_some()
                && matches!(uri.path(), "" | "/")
                && uri.query().is_none()
        })
    };
    if urls.is_empty() || !urls.iter().all(good) {
        return Err(RequestError::BadMemberUrls);
    }
    Ok(())
}

/// Members as etcd lists them: by id.
fn to_pb(membership: &Membership) -> Vec<pb::Member> {
    let mut members: Vec<pb::Member> = membership
        .members
        .iter()
        .map(|m| pb::Member {
            id: m.id,
            name: m.name.clone(),
            peer_ur_ls: m.peer_urls.clone(),
            client_ur_ls: m.client_urls.clone(),
            is_learner: m.is_learner,
        })
        .collect();
    members.sort_by_key(|m| m.id);
    members
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: u64, name: &str, is_learner: bool) -> ClusterMember {
        ClusterMember {
            id,
            name: name.into(),
            peer_urls: vec![format!("http://127.0.0.1:{}", 2000 + id)],
            is_learner,
            client_urls: Vec::new(),
        }
    }

    // Goal: the started-quorum rule is etcd's: adding a voter to three
    // started voters is fine, but not when two of three never started; a
    // one-member cluster may grow to two; a promoted learner counts as
    // started; removing needs a quorum of the rest started.
    #[test]
    fn started_quorum_follows_etcd() {
        let mut membership = Membership {
            cluster_id: 1,
            local_id: 1,
            members: vec![member(1, "a", false), member(2, "b", false), member(3, "c", false)],
            removed: Vec::new(),
        };
        assert!(started_quorum(&membership, None, Joining::Added));
        assert!(started_quorum(&membership, Some(1), Joining::None));
        membership.members[2].name.clear();
        assert!(!started_quorum(&membership, None, Joining::Added), "2 started of 4");
        assert!(
            started_quorum(&membership, None, Joining::Promoted),
            "3 started of 4, the learner counted"
        );
        membership.members[1].name.clear();
        assert!(!started_quorum(&membership, None, Joining::Added));
        assert!(
            !started_quorum(&membership, Some(2), Joining::None),
            "one of the two left never started"
        );
        membership.members.push(member(4, "", true));
        assert!(
            !started_quorum(&membership, None, Joining::None),
            "learners do not count"
        );
        let single = Membership {
            members: vec![member(1, "a", false)],
            ..membership.clone()
        };
        assert!(started_quorum(&single, None, Joining::Added), "one member grows to two");
        assert!(started_quorum(&single, None, Joining::Promoted));
    }

    // Goal: member URLs are checked as etcd checks them.
    #[test]
    fn member_urls_are_checked() {
        let ok = |urls: &[&str]| check_urls(&urls.iter().map(|u| u.to_string()).collect::<Vec<_>>()).is_ok();
        assert!(ok(&["http://127.0.0.1:2380"]));
        assert!(ok(&["https://node-1:2380", "http://10.0.0.1:2380"]));
        assert!(!ok(&[]));
        assert!(!ok(&["127.0.0.1:2380"]));
        assert!(!ok(&["http://127.0.0.1"]));
        assert!(!ok(&["http://127.0.0.1:2380/path"]));
        assert!(!ok(&["ftp://127.0.0.1:2380"]));
    }
}
