//! etcd's `KV` service: Range, Put, DeleteRange, Txn, Compact.
//!
//! Writes become raft proposals, and a client is answered only once its
//! entry has been applied on this member. Linearizable ranges wait for a
//! ReadIndex round (shared by every read waiting at that moment) and for
//! the member to apply up to it; serializable ranges read locally.

use std::sync::atomic::Ordering;
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Duration;

use prost::Message as _;
use tokio::sync::oneshot;
use tonic::{Request, Response, Status};

use crate::convert;
use crate::errors;
use crate::node::NodeInput;
use crate::proto::etcdserverpb as pb;
use crate::proto::etcdserverpb::kv_server::Kv;
use crate::proto::kvserverpb::{raft_request, RaftRequest};
use crate::state::MemberState;

/// etcd's bound on how far applying may fall behind committing, in
/// entries: past it, new proposals are refused with "too many requests"
/// so the backlog drains instead of growing.
pub const APPLY_LAG_ENTRIES_MAX: u64 = 5000;

/// How long a client waits for its write to apply or its read index to
/// come back before getting etcd's "request timed out": etcd waits 5 s
/// plus two election timeouts; 7 s matches its defaults.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(7);

#[derive(Clone)]
pub struct KvService {
    pub state: Arc<MemberState>,
    pub node: SyncSender<NodeInput>,
}

/// A refused send to the raft loop's queue, as the client sees it.
pub fn queue_error<T>(error: TrySendError<T>) -> Status {
    match error {
        TrySendError::Full(_) => errors::too_many_requests(),
        TrySendError::Disconnected(_) => errors::stopped(),
    }
}

/// Bytes a txn's puts would add, over both branches.
fn txn_put_bytes(txn: &mvcc::TxnRequest) -> usize {
    txn.success
        .iter()
        .chain(&txn.failure)
        .map(|op| match op {
            mvcc::RequestOp::Put(put) => put.key.len() + put.value.len(),
            mvcc::RequestOp::Txn(nested) => txn_put_bytes(nested),
            _ => 0,
        })
        .sum()
}

impl KvService {
    /// Proposes a write and waits until it is applied here.
    pub async fn propose(&self, request: raft_request::Request) -> Result<mvcc::WriteResponse, Status> {
        let committed = self.state.committed_index.load(Ordering::Acquire);
        let applied = self.state.applied_index.load(Ordering::Acquire);
        if committed.saturating_sub(applied) > APPLY_LAG_ENTRIES_MAX {
            return Err(errors::too_many_requests());
        }
        let (sequence, answer) = self.state.register();
        let data = RaftRequest {
            member: self.state.member_id(),
            sequence,
            request: Some(request),
        }
        .encode_to_vec();
        if data.len() > self.state.config.max_request_bytes {
            self.state.forget(sequence);
            return Err(errors::request_too_large());
        }
        if let Err(error) = self.node.try_send(NodeInput::Propose { sequence, data }) {
            self.state.forget(sequence);
            return Err(queue_error(error));
        }
        match tokio::time::timeout(REQUEST_TIMEOUT, answer).await {
            Ok(Ok(Ok(applied))) => applied.response.map_err(|e| convert::status(&e)),
            Ok(Ok(Err(status))) => Err(status),
            Ok(Err(_)) => Err(errors::stopped()),
            Err(_) => {
                self.state.forget(sequence);
                Err(errors::timed_out())
            }
        }
    }

    /// Waits until this member has applied everything committed when the
    /// call began, as confirmed by the leader.
    pub async fn linearize(&self) -> Result<(), Status> {
        let (reply, answer) = oneshot::channel();
        self.node
            .try_send(NodeInput::ReadIndex { reply })
            .map_err(queue_error)?;
        match tokio::time::timeout(REQUEST_TIMEOUT, answer).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(errors::stopped()),
            Err(_) => Err(errors::timed_out()),
        }
    }

    /// etcd's quota: a write that adds data is refused once the store has
    /// reached `--quota-backend-bytes`. Deletes and compactions still go
    /// through, so space can be won back.
    pub fn check_quota(&self, added_bytes: usize) -> Result<(), Status> {
        let size = self.state.disk_bytes.load(Ordering::Acquire);
        if size + added_bytes as u64 > self.state.config.quota_backend_bytes {
            return Err(errors::no_space());
        }
        Ok(())
    }

    pub fn header(&self, revision: i64) -> Option<pb::ResponseHeader> {
        self.state.header_fields().header(revision)
    }
}

#[tonic::async_trait]
impl Kv for KvService {
    async fn range(&self, request: Request<pb::RangeRequest>) -> Result<Response<pb::RangeResponse>, Status> {
        let request = request.into_inner();
        if request.key.is_empty() {
            return Err(convert::status(&mvcc::Error::EmptyKey));
        }
        if !request.serializable {
            self.linearize().await?;
        }
        let response = self
            .state
            .store
            .range(&convert::range_request(request))
            .map_err(|e| convert::status(&e))?;
        let header = self.header(response.revision);
        Ok(Response::new(convert::range_response(response, header)))
    }

    async fn put(&self, request: Request<pb::PutRequest>) -> Result<Response<pb::PutResponse>, Status> {
        let request = request.into_inner();
        mvcc::validate::check_put(&convert::put_request(request.clone())).map_err(|e| convert::status(&e))?;
        self.check_quota(request.key.len() + request.value.len())?;
        match self.propose(raft_request::Request::Put(request)).await? {
            mvcc::WriteResponse::Put(response) => {
                let header = self.header(response.revision);
                Ok(Response::new(convert::put_response(response, header)))
            }
            other => unreachable!("a put answered {other:?}"),
        }
    }

    async fn delete_range(
        &self,
        request: Request<pb::DeleteRangeRequest>,
    ) -> Result<Response<pb::DeleteRangeResponse>, Status> {
        let request = request.into_inner();
        if request.key.is_empty() {
            return Err(convert::status(&mvcc::Error::EmptyKey));
        }
        match self.propose(raft_request::Request::DeleteRange(request)).await? {
            mvcc::WriteResponse::DeleteRange(response) => {
                let header = self.header(response.revision);
                Ok(Response::new(convert::delete_range_response(response, header)))
            }
            other => unreachable!("a delete answered {other:?}"),
        }
    }

    async fn txn(&self, request: Request<pb::TxnRequest>) -> Result<Response<pb::TxnResponse>, Status> {
        let request = request.into_inner();
        let checked = convert::txn_request(request.clone()).map_err(|e| convert::status(&e))?;
        mvcc::validate::check_txn(&checked, self.state.config.max_txn_ops).map_err(|e| convert::status(&e))?;
        let put_bytes = txn_put_bytes(&checked);
        if put_bytes > 0 {
            self.check_quota(put_bytes)?;
        }
        match self.propose(raft_request::Request::Txn(request)).await? {
            mvcc::WriteResponse::Txn(response) => {
                let header = self.header(response.revision);
                Ok(Response::new(convert::txn_response(response, header)))
            }
            other => unreachable!("a txn answered {other:?}"),
        }
    }

    async fn compact(
        &self,
        request: Request<pb::CompactionRequest>,
    ) -> Result<Response<pb::CompactionResponse>, Status> {
        match self
            .propose(raft_request::Request::Compaction(request.into_inner()))
            .await?
        {
            mvcc::WriteResponse::Compaction(response) => Ok(Response::new(pb::CompactionResponse {
                header: self.header(response.revision),
            })),
            other => unreachable!("a compaction answered {other:?}"),
        }
    }
}
