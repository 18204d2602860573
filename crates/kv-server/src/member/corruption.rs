//! etcd's corruption checks: members' HashKV compared at the same
//! revision. Two members that applied the same entries hold the same
//! history, so the same hash; a difference at the same compact revision
//! means one store was altered or damaged.
//!
//! - **Initial** (`--experimental-initial-corrupt-check`): once a starting
//!   member has caught up with the leader, it asks each peer for the hash
//!   at its own revision; a peer that differs raises CORRUPT for this
//!   member. (etcd refuses to start instead; an alarm keeps the member up
//!   for an operator to inspect, and stops writes everywhere.)
//! - **Periodic** (`--experimental-corrupt-check-time`): the leader asks
//!   every peer for the hash at the leader's revision and groups the
//!   members (itself included) by hash. When one hash is held by a quorum
//!   of the membership, every member outside that group gets CORRUPT,
//!   the leader too if it is the odd one out; when no hash has a quorum,
//!   CORRUPT is raised for member 0, the whole cluster. This is etcd
//!   3.7's reasoning for its hash checks: etcd 3.5 raises for member 0 on
//!   any mismatch, and a check that blamed every peer of an altered
//!   leader would stop the wrong members.
//!
//! - **Compaction hashes** (`--experimental-compact-hash-check-enabled`,
//!   3.6's `CompactHashCheck` gate, every
//!   `--experimental-compact-hash-check-time`): each compaction records
//!   the hash of the history it compacted (mvcc's `hash.rs`); the leader
//!   asks every peer for the hash at the revisions of its recorded
//!   hashes not yet checked, newest first, and stops at the first that
//!   every peer answered at the same compact revision. Differing hashes
//!   are judged as the periodic check judges them, as etcd 3.7 does; a
//!   peer that has not compacted there yet (or does not answer) makes the
//!   leader try the next older hash.
//!
//! While CORRUPT is raised every member refuses writes with etcd's
//! "etcdserver: corrupt cluster"; reads still work, as in etcd.
//!
//! Hashes travel over the peer port (`Peer.HashKV`). A peer that cannot
//! answer (down, behind the revision, or compacted past it) is skipped,
//! as etcd skips it.

use std::time::Duration;

use crate::error::RequestError;
use crate::member::core::{Member, REQUEST_TIMEOUT};
use crate::proto::etcdserverpb as pb;
use crate::proto::kvserverpb::raft_request;

/// etcd's `AlarmType` number for CORRUPT.
pub const ALARM_CORRUPT: i32 = 2;

/// How long the initial check waits for this member to catch up with the
/// leader before it gives up: a restarted member replays its WAL and
/// hears from the leader within a few election timeouts.
pub const INITIAL_CHECK_WITHIN: Duration = Duration::from_secs(60);

/// Pause between the initial check's attempts to catch up.
const CATCH_UP_RETRY: Duration = Duration::from_millis(500);

impl Member {
    /// HashKV as etcd answers it: the hash at `revision` (0 for the
    /// current one), the compact revision, and the current revision in
    /// the header.
    pub fn hash_kv(&self, revision: i64) -> Result<pb::HashKvResponse, RequestError> {
        let (hash, current) = self.store.hash_kv(revision)?;
        Ok(pb::HashKvResponse {
            header: self.header(current),
            hash: hash.hash,
            compact_revision: hash.compact_revision,
        })
    }

    /// The initial check; logs and raises CORRUPT for this member on a
    /// mismatch.
    pub async fn initial_corrupt_check(&self) {
        let deadline = tokio::time::Instant::now() + INITIAL_CHECK_WITHIN;
        while self.linearize().await.is_err() {
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!("initial corruption check skipped: could not catch up with a leader");
                return;
            }
            tokio::time::sleep(CATCH_UP_RETRY).await;
        }
        let own = match self.hash_kv(0) {
            Ok(own) => own,
            Err(error) => return tracing::warn!(%error, "initial corruption check skipped"),
        };
        if let Some(peer) = self.differing_peers(&own).await.first() {
            tracing::error!(peer = format!("{peer:x}"), "found data inconsistency with peers");
            self.raise_corrupt(self.local_id).await;
            return;
        }
        tracing::info!("initial corruption check passed");
    }

    /// The periodic check, every `interval` while this member leads.
    pub async fn periodic_corrupt_checks(&self, interval: Duration) {
        loop {
            tokio::time::sleep(interval).await;
            if self.leader() != self.local_id {
                continue;
            }
            let Ok(own) = self.hash_kv(0) else { continue };
            let members = self.membership.get().members.len();
            let hashes = self.peer_hashes(&own).await;
            for member in corrupt_members(self.local_id, own.hash, &hashes, members) {
                tracing::error!(
                    member = format!("{member:x}"),
                    "a member's hash differs from the quorum's (0: no quorum agrees)"
                );
                self.raise_corrupt(member).await;
            }
        }
    }

    /// The compaction hash check, every `interval` while this member
    /// leads; logs as etcd 3.7.3's.
    pub async fn compact_hash_checks(&self, interval: Duration) {
        let mut latest_checked = 0;
        loop {
            tokio::time::sleep(interval).await;
            if self.leader() != self.local_id {
                continue;
            }
            tracing::info!(
                "local-member-id" = format!("{:x}", self.local_id),
                timeout = %crate::logging::go_duration(REQUEST_TIMEOUT),
                "starting compact hash check"
            );
            let unchecked: Vec<mvcc::hash::KeyValueHash> = self
                .store
                .compaction_hashes()
                .into_iter()
                .take_while(|hash| hash.revision > latest_checked)
                .collect();
            let mut checked = unchecked.len();
            for (i, hash) in unchecked.iter().enumerate() {
                let peers = self.peer_hashes_at(hash.revision).await;
                if peers.is_empty() {
                    continue;
                }
                let Some(agreed) = self.judge_compaction_hash(hash, &peers).await else {
                    continue;
                };
                if agreed {
                    latest_checked = latest_checked.max(hash.revision);
                }
                checked = i + 1;
                break;
            }
            tracing::info!("number-of-hashes-checked" = checked, "finished compaction hash check");
        }
    }

    /// Each peer's (compact revision, hash) at `revision`, None for a peer
    /// that did not answer.
    async fn peer_hashes_at(&self, revision: i64) -> Vec<(u64, Option<(i64, u32)>)> {
        let peers: Vec<u64> = self.membership.get().peers().map(|m| m.id).collect();
        let mut answers = Vec::with_capacity(peers.len());
        for peer in peers {
            answers.push((peer, self.peer_hash(peer, revision).await));
        }
        answers
    }

    /// Judges the peers' answers for one recorded hash: `Some(true)` when
    /// every member agreed, `Some(false)` when a mismatch was found and
    /// CORRUPT raised, None when some peer could not be compared and an
    /// older hash should be tried.
    async fn judge_compaction_hash(
        &self,
        own: &mvcc::hash::KeyValueHash,
        peers: &[(u64, Option<(i64, u32)>)],
    ) -> Option<bool> {
        let leader_id = format!("{:x}", self.local_id);
        let mut compared = Vec::new();
        for (peer, answer) in peers {
            let reason = match answer {
                None => "no response".to_string(),
                Some((compact, _)) if *compact != own.compact_revision => format!(
                    "the peer's CompactRevision {compact} doesn't match leader's CompactRevision {}",
                    own.compact_revision
                ),
                Some((_, hash)) => {
                    compared.push((*peer, *hash));
                    continue;
                }
            };
            tracing::warn!(
                "number-of-peers" = peers.len(),
                "leader-id" = %leader_id,
                "peer-id" = format!("{peer:x}"),
                reason = %reason,
                "Skipped peer's hash"
            );
        }
        if compared.iter().all(|&(_, hash)| hash == own.hash) {
            if compared.len() == peers.len() {
                tracing::info!(
                    "number-of-peers-checked" = compared.len(),
                    revision = own.revision,
                    compactRevision = own.compact_revision,
                    "successfully checked hash on whole cluster"
                );
                return Some(true);
            }
            tracing::warn!(
                "number-of-peers-checked" = compared.len(),
                "number-of-peers" = peers.len(),
                revision = own.revision,
                compactRevision = own.compact_revision,
                "skipped revision in compaction hash check; was not able to check all peers"
            );
            return None;
        }
        self.raise_compaction_mismatch(own, &compared, peers.len() + 1).await;
        Some(false)
    }

    /// Logs a compaction hash mismatch as etcd 3.7.3 does and raises
    /// CORRUPT for the members outside the quorum's hash (member 0 when
    /// there is none), given the peers' hashes that were compared, in a
    /// membership of `members`.
    async fn raise_compaction_mismatch(&self, own: &mvcc::hash::KeyValueHash, compared: &[(u64, u32)], members: usize) {
        let leader_id = format!("{:x}", self.local_id);
        let corrupt = corrupt_members(self.local_id, own.hash, compared, members);
        let quorum_exist = corrupt != [0];
        if !quorum_exist {
            tracing::error!(
                "leader-id" = %leader_id,
                "leader-revision" = own.revision,
                "leader-compact-revision" = own.compact_revision,
                "leader-hash" = own.hash,
                "Detected compaction hash mismatch but cannot identify the corrupted members, so intentionally set the memberID as 0"
            );
        }
        // One line per hash outside the quorum's (every differing hash
        // when there is none), with the members holding it, as etcd logs.
        let mut groups: Vec<(u32, Vec<String>)> = Vec::new();
        for (member, hash) in std::iter::once((self.local_id, own.hash)).chain(compared.iter().copied()) {
            match groups.iter_mut().find(|(held, _)| *held == hash) {
                Some((_, ids)) => ids.push(format!("{member:x}")),
                None => groups.push((hash, vec![format!("{member:x}")])),
            }
        }
        let quorum = members / 2 + 1;
        for (hash, ids) in groups.iter().filter(|(_, ids)| !quorum_exist || ids.len() < quorum) {
            tracing::error!(
                "leader-id" = %leader_id,
                "leader-revision" = own.revision,
                "leader-compact-revision" = own.compact_revision,
                "leader-hash" = own.hash,
                "peer-hash" = *hash,
                "peer-ids" = %ids.join(","),
                "quorum-exist" = quorum_exist,
                "Detected compaction hash mismatch"
            );
        }
        for member in corrupt {
            self.raise_corrupt(member).await;
        }
    }

    /// The peers whose hash at `own`'s revision differs from it.
    async fn differing_peers(&self, own: &pb::HashKvResponse) -> Vec<u64> {
        let hashes = self.peer_hashes(own).await;
        hashes
            .into_iter()
            .filter(|&(_, hash)| hash != own.hash)
            .map(|(peer, _)| peer)
            .collect()
    }

    /// Each peer's hash at `own`'s revision, for the peers that answer at
    /// `own`'s compact revision.
    async fn peer_hashes(&self, own: &pb::HashKvResponse) -> Vec<(u64, u32)> {
        let revision = own.header.as_ref().map_or(0, |h| h.revision);
        let peers: Vec<u64> = self.membership.get().peers().map(|m| m.id).collect();
        let mut hashes = Vec::new();
        for peer in peers {
            if let Some((compact_revision, hash)) = self.peer_hash(peer, revision).await {
                if compact_revision == own.compact_revision {
                    hashes.push((peer, hash));
                }
            }
        }
        hashes
    }

    /// `peer`'s (compact revision, hash) at `revision`; None when the
    /// peer cannot say.
    async fn peer_hash(&self, peer: u64, revision: i64) -> Option<(i64, u32)> {
        let mut client = self.leader_channels.client(peer).ok()?;
        match client.hash_kv(pb::HashKvRequest { revision }).await {
            Ok(answer) => {
                let answer = answer.into_inner();
                Some((answer.compact_revision, answer.hash))
            }
            Err(status) => {
                tracing::debug!(peer = format!("{peer:x}"), %status, "no hash from a peer");
                None
            }
        }
    }

    /// Raises CORRUPT for `member_id` through raft.
    async fn raise_corrupt(&self, member_id: u64) {
        let alarm = pb::AlarmRequest {
            action: pb::alarm_request::AlarmAction::Activate as i32,
            member_id,
            alarm: ALARM_CORRUPT,
        };
        if let Err(error) = self.propose(raft_request::Request::Alarm(alarm)).await {
            tracing::error!(%error, "could not raise the CORRUPT alarm");
        }
    }
}

/// The members to raise CORRUPT for, given the leader's own hash and the
/// peers' hashes at the same revision, in a membership of `members`: none
/// when all agree; those outside the group a quorum holds; or member 0
/// (the whole cluster) when no hash has a quorum.
fn corrupt_members(leader: u64, own: u32, peers: &[(u64, u32)], members: usize) -> Vec<u64> {
    if peers.iter().all(|&(_, hash)| hash == own) {
        return Vec::new();
    }
    let quorum = members / 2 + 1;
    let held_by = |hash: u32| usize::from(own == hash) + peers.iter().filter(|p| p.1 == hash).count();
    let Some(agreed) = std::iter::once(own)
        .chain(peers.iter().map(|p| p.1))
        .find(|&hash| held_by(hash) >= quorum)
    else {
        return vec![0];
    };
    let leader = (own != agreed).then_some(leader);
    let peers = peers.iter().filter(|p| p.1 != agreed).map(|p| p.0);
    leader.into_iter().chain(peers).collect()
}

impl Member {
    /// While CORRUPT is raised, refuses every write to the store, as
    /// etcd's corrupt applier does; alarms and membership still go
    /// through. Reads no lock.
    pub(super) fn refuse_if_corrupt(&self, request: &raft_request::Request) -> Result<(), RequestError> {
        use raft_request::Request;
        let write = matches!(
            request,
            Request::Put(_)
                | Request::DeleteRange(_)
                | Request::Txn(_)
                | Request::Compaction(_)
                | Request::LeaseGrant(_)
                | Request::LeaseRevoke(_)
        );
        if write && self.store.has_alarm(ALARM_CORRUPT) {
            return Err(RequestError::Corrupt);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::corrupt_members;

    #[test]
    fn agreement_raises_nothing() {
        assert!(corrupt_members(1, 7, &[(2, 7), (3, 7)], 3).is_empty());
        assert!(corrupt_members(1, 7, &[], 3).is_empty());
    }

    #[test]
    fn the_member_outside_the_quorum_is_raised() {
        assert_eq!(corrupt_members(1, 7, &[(2, 7), (3, 9)], 3), vec![3]);
        assert_eq!(corrupt_members(1, 9, &[(2, 7), (3, 7)], 3), vec![1]);
        assert_eq!(corrupt_members(1, 7, &[(2, 7), (3, 9), (4, 7), (5, 8)], 5), vec![3, 5]);
    }

    #[test]
    fn no_quorum_raises_for_the_whole_cluster() {
        assert_eq!(corrupt_members(1, 7, &[(2, 9)], 3), vec![0]);
        assert_eq!(corrupt_members(1, 7, &[(2, 9), (3, 8)], 3), vec![0]);
    }
}
