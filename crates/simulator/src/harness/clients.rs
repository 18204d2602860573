//! The calls a simulated client makes, through the member core's own
//! methods (`Member::propose_as`, `Member::range`, the lease calls, the
//! membership calls), as the gRPC services make them. Each call runs in a client's tokio task on
//! the simulator's runtime, so its timeouts are simulated too. A call to a
//! member that crashes under it ends at once, its outcome unknown, as a
//! client's connection to a killed process would.

use std::future::Future;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::clock::SimClock;
use super::watch::StreamResponses;
use kv_server::driver::{Caller, Member, RequestError};
use kv_server::proto::etcdserverpb as pb;
use kv_server::proto::kvserverpb::raft_request::Request;

/// A member as its clients reach it.
#[derive(Clone, Default)]
pub(super) struct Slot {
    /// The core, while the member runs.
    pub member: Option<Arc<Member>>,
    /// Notified when the member crashes.
    pub crashed: Arc<Notify>,
    /// The watch streams opened on it, which its crash ends.
    pub streams: Vec<Weak<StreamResponses>>,
}

/// Why a call has no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// The member was down: the call was never made.
    Down,
    /// The call was made and failed (its effect, for a write, unknown).
    Failed(String),
}

/// What a key held: its value and mod revision.
pub type Held = Option<(String, i64)>;

/// The clients' way to the members.
#[derive(Clone)]
pub struct Clients {
    pub(super) slots: Arc<Mutex<Vec<Slot>>>,
    pub(super) clock: SimClock,
}

impl Clients {
    /// Nanoseconds of simulated time since the run began.
    pub fn now_nanos(&self) -> u64 {
        self.clock.elapsed().as_nanos() as u64
    }

    async fn call<T, F, Fut>(&self, member: usize, call: F) -> Result<T, CallError>
    where
        F: FnOnce(Arc<Member>) -> Fut,
        Fut: Future<Output = Result<T, RequestError>>,
    {
        let (core, crashed) = {
            let slots = self.slots.lock();
            let slot = &slots[member];
            (slot.member.clone().ok_or(CallError::Down)?, slot.crashed.clone())
        };
        let notified = crashed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        tokio::select! {
            biased;
            _ = &mut notified => Err(CallError::Failed("the member crashed".into())),
            result = call(core) => result.map_err(|error| CallError::Failed(error.to_string())),
        }
    }

    async fn write(&self, member: usize, request: Request) -> Result<mvcc::WriteResponse, CallError> {
        self.call(member, |core| async move {
            core.propose_as(request, &Caller::default()).await
        })
        .await
    }

    /// Whether member `member` runs and leads, as it sees itself.
    pub fn leads(&self, member: usize) -> bool {
        let slots = self.slots.lock();
        slots[member]
            .member
            .as_ref()
            .is_some_and(|core| core.leader() == core.member_id())
    }

    /// Puts `key`; the revision it made.
    pub async fn put(&self, member: usize, key: &str, value: &str, lease: i64) -> Result<i64, CallError> {
        let request = Request::Put(pb::PutRequest {
            key: key.as_bytes().to_vec(),
            value: value.as_bytes().to_vec(),
            lease,
            ..Default::default()
        });
        match self.write(member, request).await? {
            mvcc::WriteResponse::Put(put) => Ok(put.revision),
            other => Err(CallError::Failed(format!("a put answered {other:?}"))),
        }
    }

    /// A linearizable get: the revision read at and what the key held.
    pub async fn get(&self, member: usize, key: &str) -> Result<(i64, Held), CallError> {
        let request = pb::RangeRequest {
            key: key.as_bytes().to_vec(),
            ..Default::default()
        };
        let response = self
            .call(
                member,
                |core| async move { core.range(request, &Caller::default()).await },
            )
            .await?;
        let revision = response.header.map_or(0, |header| header.revision);
        let held = response
            .kvs
            .first()
            .map(|kv| (String::from_utf8_lossy(&kv.value).into_owned(), kv.mod_revision));
        Ok((revision, held))
    }

    /// Deletes `key`: the revision after, and how many keys went.
    pub async fn delete(&self, member: usize, key: &str) -> Result<(i64, i64), CallError> {
        let request = Request::DeleteRange(pb::DeleteRangeRequest {
            key: key.as_bytes().to_vec(),
            ..Default::default()
        });
        match self.write(member, request).await? {
            mvcc::WriteResponse::DeleteRange(deleted) => Ok((deleted.revision, deleted.deleted)),
            other => Err(CallError::Failed(format!("a delete answered {other:?}"))),
        }
    }

    /// Puts `value` if `key`'s mod revision is `expected` (0: absent): the
    /// revision after, and whether it did.
    pub async fn cas(&self, member: usize, key: &str, expected: i64, value: &str) -> Result<(i64, bool), CallError> {
        let compare = pb::Compare {
            result: pb::compare::CompareResult::Equal as i32,
            target: pb::compare::CompareTarget::Mod as i32,
            key: key.as_bytes().to_vec(),
            range_end: Vec::new(),
            target_union: Some(pb::compare::TargetUnion::ModRevision(expected)),
        };
        let put = pb::PutRequest {
            key: key.as_bytes().to_vec(),
            value: value.as_bytes().to_vec(),
            ..Default::default()
        };
        let request = Request::Txn(pb::TxnRequest {
            compare: vec![compare],
            success: vec![pb::RequestOp {
                request: Some(pb::request_op::Request::RequestPut(put)),
            }],
            failure: Vec::new(),
        });
        match self.write(member, request).await? {
            mvcc::WriteResponse::Txn(txn) => Ok((txn.revision, txn.succeeded)),
            other => Err(CallError::Failed(format!("a txn answered {other:?}"))),
        }
    }

    /// Grants lease `id` (0: the member picks one) of `ttl` seconds; its
    /// id.
    pub async fn lease_grant(&self, member: usize, id: i64, ttl: i64) -> Result<i64, CallError> {
        self.call(member, |core| async move { core.lease_grant(ttl, id).await })
            .await
            .map(|granted| granted.id)
    }

    /// Revokes lease `id`; the revision after.
    pub async fn lease_revoke(&self, member: usize, id: i64) -> Result<i64, CallError> {
        self.call(member, |core| async move { core.lease_revoke(id).await })
            .await
            .map(|revoked| revoked.revision)
    }

    /// MemberRemove of member `id`.
    pub async fn member_remove(&self, member: usize, id: u64) -> Result<(), CallError> {
        self.call(member, |core| async move { core.remove_member(id).await })
            .await
            .map(|_| ())
    }

    /// MemberAdd of a learner at `peer_url`; its id.
    pub async fn member_add_learner(&self, member: usize, peer_url: &str) -> Result<u64, CallError> {
        let urls = vec![peer_url.to_string()];
        self.call(member, |core| async move { core.add_member(urls, true).await })
            .await
            .map(|(added, _)| added.id)
    }

    /// MemberPromote of learner `id`, asked of member `member` as of the
    /// leader (a follower would forward it over gRPC).
    pub async fn member_promote(&self, member: usize, id: u64) -> Result<(), CallError> {
        self.call(member, |core| async move { core.promote_member_as_leader(id).await })
            .await
            .map(|_| ())
    }

    /// MemberList: each member's id, peer URLs and whether it is a learner.
    pub async fn member_list(&self, member: usize) -> Result<Vec<(u64, Vec<String>, bool)>, CallError> {
        let list = self.call(member, |core| async move { Ok(core.member_list()) }).await?;
        Ok(list.into_iter().map(|m| (m.id, m.peer_ur_ls, m.is_learner)).collect())
    }

    /// Compacts the store's history up to `revision`.
    pub async fn compact(&self, member: usize, revision: i64) -> Result<(), CallError> {
        let request = Request::Compaction(pb::CompactionRequest {
            revision,
            physical: false,
        });
        self.write(member, request).await.map(|_| ())
    }
}
