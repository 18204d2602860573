//! etcd's `KV` service: Range, RangeStream (range_stream.rs), Put,
//! DeleteRange, Txn, Compact.
//!
//! Writes are checked as etcd checks them before proposing, then go to the
//! member core, which answers once the entry has applied on this member.
//! Linearizable ranges wait for a ReadIndex round (shared by every read
//! waiting at that moment) and for the member to apply up to it;
//! serializable ranges read locally.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::api::errors::store_status;
use crate::api::range_stream::{range_stream, RangeStream};
use crate::auth::perms::Access;
use crate::auth::Caller;
use crate::error::RequestError;
use crate::member::auth::txn_touches;
use crate::member::core::Member;
use crate::proto::convert;
use crate::proto::etcdserverpb as pb;
use crate::proto::etcdserverpb::kv_server::Kv;
use crate::proto::kvserverpb::raft_request;

#[derive(Clone)]
pub struct KvService {
    pub member: Arc<Member>,
}

/// A build broken on purpose, to show the robustness suite catches it:
/// with the `kv::stale_read` failpoint set, linearizable ranges skip the
/// ReadIndex round and read whatever this member has applied. Off (and
/// compiled out) unless the `failpoints` feature and the failpoint are on.
fn stale_reads_on_purpose() -> bool {
    fail::fail_point!("kv::stale_read", |_| true);
    false
}

/// etcd's `isTxnReadonly`: every operation of both branches a range.
fn txn_is_read_only(request: &pb::TxnRequest) -> bool {
    use pb::request_op::Request;
    request
        .success
        .iter()
        .chain(&request.failure)
        .all(|op| matches!(op.request, Some(Request::RequestRange(_))))
}

/// etcd's `isTxnSerializable`: every range of both branches serializable.
fn txn_is_serializable(request: &pb::TxnRequest) -> bool {
    use pb::request_op::Request;
    request
        .success
        .iter()
        .chain(&request.failure)
        .all(|op| matches!(&op.request, Some(Request::RequestRange(range)) if range.serializable))
}

impl KvService {
    /// A txn of ranges, served as etcd serves one: without raft or the
    /// WAL, after a ReadIndex round unless every range is serializable,
    /// from one view of this member's store.
    async fn read_txn(&self, request: pb::TxnRequest, caller: &Caller) -> Result<Response<pb::TxnResponse>, Status> {
        let serializable = txn_is_serializable(&request);
        let checked = convert::txn_request(request).map_err(|e| store_status(&e))?;
        mvcc::validate::check_txn(&checked, self.member.config.max_txn_ops).map_err(|e| store_status(&e))?;
        if !serializable && !stale_reads_on_purpose() {
            self.member.linearize().await?;
        }
        let response = self.member.store.read_txn(&checked).map_err(|e| store_status(&e))?;
        self.member.still_authorized(caller)?;
        let header = self.member.header(response.revision);
        Ok(Response::new(convert::txn_response(response, header)))
    }
}

#[tonic::async_trait]
impl Kv for KvService {
    type RangeStreamStream = RangeStream;

    /// etcd 3.7's chunked range (see range_stream.rs).
    async fn range_stream(&self, request: Request<pb::RangeRequest>) -> Result<Response<RangeStream>, Status> {
        range_stream(&self.member, request).await
    }

    async fn range(&self, request: Request<pb::RangeRequest>) -> Result<Response<pb::RangeResponse>, Status> {
        let touch = (
            &request.get_ref().key[..],
            &request.get_ref().range_end[..],
            Access::Read,
        );
        let caller = self
            .member
            .authorize(request.metadata(), request.extensions(), &[touch])
            .await?;
        let request = request.into_inner();
        if request.key.is_empty() {
            return Err(store_status(&mvcc::Error::EmptyKey));
        }
        if !request.serializable && self.member.membership.local_is_learner() {
            return Err(RequestError::NotSupportedForLearner.into());
        }
        if !request.serializable && !stale_reads_on_purpose() {
            self.member.linearize().await?;
        }
        let response = self
            .member
            .store
            .range(&convert::range_request(request))
            .map_err(|e| store_status(&e))?;
        // As etcd: a read checked at an auth revision that changed while
        // it ran is not answered.
        self.member.still_authorized(&caller)?;
        crate::metrics::metrics().mvcc.range_total.inc();
        let header = self.member.header(response.revision);
        Ok(Response::new(convert::range_response(response, header)))
    }

    async fn put(&self, request: Request<pb::PutRequest>) -> Result<Response<pb::PutResponse>, Status> {
        let caller = {
            let put = request.get_ref();
            let mut touches = vec![(&put.key[..], &[][..], Access::Write)];
            if put.prev_kv {
                touches.push((&put.key[..], &[][..], Access::Read));
            }
            if put.lease != 0 {
                // As etcd: attaching a key to a lease needs what revoking
                // it would (the lease's keys are deleted with it).
                self.member
                    .authorize_lease_revoke(request.metadata(), request.extensions(), put.lease)
                    .await?;
            }
            self.member
                .authorize(request.metadata(), request.extensions(), &touches)
                .await?
        };
        let request = request.into_inner();
        mvcc::validate::check_put_fields(&mvcc::validate::PutFields {
            key: &request.key,
            value: &request.value,
            lease: request.lease,
            ignore_value: request.ignore_value,
            ignore_lease: request.ignore_lease,
        })
        .map_err(|e| store_status(&e))?;
        self.member.check_quota(request.key.len() + request.value.len()).await?;
        match self
            .member
            .propose_as(raft_request::Request::Put(request), &caller)
            .await?
        {
            mvcc::WriteResponse::Put(response) => {
                let header = self.member.header(response.revision);
                Ok(Response::new(convert::put_response(response, header)))
            }
            other => unreachable!("a put answered {other:?}"),
        }
    }

    async fn delete_range(
        &self,
        request: Request<pb::DeleteRangeRequest>,
    ) -> Result<Response<pb::DeleteRangeResponse>, Status> {
        let caller = {
            let delete = request.get_ref();
            let mut touches = vec![(&delete.key[..], &delete.range_end[..], Access::Write)];
            if delete.prev_kv {
                touches.push((&delete.key[..], &delete.range_end[..], Access::Read));
            }
            self.member
                .authorize(request.metadata(), request.extensions(), &touches)
                .await?
        };
        let request = request.into_inner();
        if request.key.is_empty() {
            return Err(store_status(&mvcc::Error::EmptyKey));
        }
        match self
            .member
            .propose_as(raft_request::Request::DeleteRange(request), &caller)
            .await?
        {
            mvcc::WriteResponse::DeleteRange(response) => {
                let header = self.member.header(response.revision);
                Ok(Response::new(convert::delete_range_response(response, header)))
            }
            other => unreachable!("a delete answered {other:?}"),
        }
    }

    async fn txn(&self, request: Request<pb::TxnRequest>) -> Result<Response<pb::TxnResponse>, Status> {
        let touches = txn_touches(request.get_ref());
        let caller = self
            .member
            .authorize(request.metadata(), request.extensions(), &touches)
            .await?;
        drop(touches);
        let request = request.into_inner();
        if txn_is_read_only(&request) {
            return self.read_txn(request, &caller).await;
        }
        let checked = convert::txn_request(request.clone()).map_err(|e| store_status(&e))?;
        mvcc::validate::check_txn(&checked, self.member.config.max_txn_ops).map_err(|e| store_status(&e))?;
        let put_bytes = checked.put_bytes();
        if put_bytes > 0 {
            self.member.check_quota(put_bytes).await?;
        }
        match self
            .member
            .propose_as(raft_request::Request::Txn(request), &caller)
            .await?
        {
            mvcc::WriteResponse::Txn(response) => {
                let header = self.member.header(response.revision);
                Ok(Response::new(convert::txn_response(response, header)))
            }
            other => unreachable!("a txn answered {other:?}"),
        }
    }

    async fn compact(
        &self,
        request: Request<pb::CompactionRequest>,
    ) -> Result<Response<pb::CompactionResponse>, Status> {
        self.member
            .authenticated(request.metadata(), request.extensions())
            .await?;
        let request = request.into_inner();
        let physical = request.physical;
        match self.member.propose(raft_request::Request::Compaction(request)).await? {
            mvcc::WriteResponse::Compaction(response) => {
                if physical {
                    self.member.compacted_physically().await;
                }
                Ok(Response::new(pb::CompactionResponse {
                    header: self.member.header(response.revision),
                }))
            }
            other => unreachable!("a compaction answered {other:?}"),
        }
    }
}
