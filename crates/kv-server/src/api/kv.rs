//! etcd's `KV` service: Range, RangeStream (range_stream.rs), Put,
//! DeleteRange, Txn, Compact.
//!
//! Writes are checked as etcd checks them before proposing, then go to the
//! member core, which answers once the entry has applied on this member.
//! Ranges and read-only txns are served by the core (`member/read.rs`):
//! linearizable ones wait for a ReadIndex round (shared by every read
//! waiting at that moment) and for the member to apply up to it;
//! serializable ones read locally.

use std::sync::Arc;
use std::time::Instant;

use tonic::{Request, Response, Status};

use crate::api::errors::{sendable, store_status};
use crate::api::range_stream::{range_stream, RangeStream};
use crate::api::request_stats::{self, Stats};
use crate::auth::operations::txn_touches;
use crate::auth::perms::Access;
use crate::member::core::Member;
use crate::proto::convert;
use crate::proto::etcdserverpb as pb;
use crate::proto::etcdserverpb::kv_server::Kv;
use crate::proto::kvserverpb::raft_request;

#[derive(Clone)]
pub struct KvService {
    pub member: Arc<Member>,
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

impl KvService {
    /// Whether a call that started at `started` is slow enough to log.
    fn slow(&self, started: Instant) -> bool {
        request_stats::slow(started, self.member.config().warning_unary_request_duration)
    }
}

/// `response` with `stats` for its "request stats" line, if it has any.
fn with_stats<T>(mut response: Response<T>, stats: Option<Stats>) -> Response<T> {
    if let Some(stats) = stats {
        response.extensions_mut().insert(stats);
    }
    response
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
        let started = request_stats::started(request.extensions());
        let request = request.into_inner();
        // What the "request stats" line needs of the request, should the
        // call be slow: the request is the member's once it is called.
        let sketch = request.clone();
        let response = self.member.range(request, &caller).await?;
        let stats = self.slow(started).then(|| Stats::range(&sketch, &response));
        Ok(with_stats(Response::new(response), stats))
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
        let started = request_stats::started(request.extensions());
        let request = request.into_inner();
        let (sketch, value_size) = request_stats::put_sketch(&request);
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
                let response = convert::put_response(response, header);
                let stats = self.slow(started).then(|| Stats::put(&sketch, value_size, &response));
                Ok(with_stats(Response::new(response), stats))
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
        let started = request_stats::started(request.extensions());
        let request = request.into_inner();
        if request.key.is_empty() {
            return Err(store_status(&mvcc::Error::EmptyKey));
        }
        let sketch = request.clone();
        match self
            .member
            .propose_as(raft_request::Request::DeleteRange(request), &caller)
            .await?
        {
            mvcc::WriteResponse::DeleteRange(response) => {
                let header = self.member.header(response.revision);
                let response = sendable(convert::delete_range_response(response, header))?;
                let stats = self.slow(started).then(|| Stats::delete_range(&sketch, &response));
                Ok(with_stats(Response::new(response), stats))
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
        let started = request_stats::started(request.extensions());
        let request = request.into_inner();
        let (sketch, sizes) = request_stats::txn_sketch(&request);
        let txn_stats = |response: &pb::TxnResponse| self.slow(started).then(|| Stats::txn(&sketch, &sizes, response));
        if txn_is_read_only(&request) {
            let response = sendable(self.member.read_txn(request, &caller).await?)?;
            let stats = txn_stats(&response);
            return Ok(with_stats(Response::new(response), stats));
        }
        let checked = convert::txn_request(request.clone()).map_err(|e| store_status(&e))?;
        mvcc::validate::check_txn(&checked, self.member.config().max_txn_ops).map_err(|e| store_status(&e))?;
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
                let response = sendable(convert::txn_response(response, header))?;
                let stats = txn_stats(&response);
                Ok(with_stats(Response::new(response), stats))
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
