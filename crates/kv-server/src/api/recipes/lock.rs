//! etcd's `Lock` service (`v3lockpb`): a distributed mutex.
//!
//! A holder of lock `name` is the key `name/<lease id in hex>`, bound to
//! its lease; the lock belongs to the key of the name created first. Lock
//! puts the caller's key (or finds it, for a second Lock with the same
//! lease), then waits until every key of the name created before it is
//! deleted: unlocked, or gone with its lease. A waiter whose call ends
//! first (deadline, cancel) deletes its own key, so it never takes the
//! lock later unseen. Unlock deletes the key it is given, as etcd's does
//! (any key: it is a plain delete).

use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::api::recipes::client::{by_create, wait_deletes, Client};
use crate::member::core::Member;
use crate::proto::etcdserverpb as pb;
use crate::proto::v3lockpb;
use crate::proto::v3lockpb::lock_server::Lock;

/// etcd's error when a waiter's key vanished (its lease expired) before
/// the lock came to it.
pub const SESSION_EXPIRED: &str = "mutex: session is expired";

#[derive(Clone)]
pub struct LockService {
    pub member: Arc<Member>,
}

/// A compare that `key` does not exist yet.
pub fn absent(key: &[u8]) -> pb::Compare {
    pb::Compare {
        result: pb::compare::CompareResult::Equal as i32,
        target: pb::compare::CompareTarget::Create as i32,
        key: key.to_vec(),
        target_union: Some(pb::compare::TargetUnion::CreateRevision(0)),
        range_end: Vec::new(),
    }
}

pub fn op_range(range: pb::RangeRequest) -> pb::RequestOp {
    pb::RequestOp {
        request: Some(pb::request_op::Request::RequestRange(range)),
    }
}

pub fn op_put(key: &[u8], value: &[u8], lease: i64) -> pb::RequestOp {
    pb::RequestOp {
        request: Some(pb::request_op::Request::RequestPut(pb::PutRequest {
            key: key.to_vec(),
            value: value.to_vec(),
            lease,
            ..Default::default()
        })),
    }
}

pub fn op_get(key: &[u8]) -> pb::RangeRequest {
    pb::RangeRequest {
        key: key.to_vec(),
        ..Default::default()
    }
}

/// The `index`th response of a txn as a range's kvs.
pub fn range_kvs(response: &pb::TxnResponse, index: usize) -> &[crate::proto::mvccpb::KeyValue] {
    match response.responses.get(index).and_then(|op| op.response.as_ref()) {
        Some(pb::response_op::Response::ResponseRange(range)) => &range.kvs,
        _ => &[],
    }
}

/// The key `name/<lease in hex>` a holder of `name` takes.
pub fn holder_key(name: &[u8], lease: i64) -> Vec<u8> {
    let mut key = name.to_vec();
    key.extend_from_slice(format!("/{lease:x}").as_bytes());
    key
}

/// Deletes `key` unless disarmed: a waiter's key, taken back when its
/// call ends before it holds the lock (the caller went away, or waiting
/// failed), as etcd's mutex unlocks on a failed wait.
struct TakeBack {
    client: Option<Client>,
    key: Vec<u8>,
}

impl TakeBack {
    fn disarm(&mut self) {
        self.client = None;
    }
}

impl Drop for TakeBack {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            let key = std::mem::take(&mut self.key);
            tokio::spawn(async move {
                if let Err(status) = client.delete(&key).await {
                    tracing::debug!(%status, "a lock waiter's key could not be taken back");
                }
            });
        }
    }
}

#[tonic::async_trait]
impl Lock for LockService {
    async fn lock(&self, request: Request<v3lockpb::LockRequest>) -> Result<Response<v3lockpb::LockResponse>, Status> {
        let client = Client::of(&self.member, &request);
        let request = request.into_inner();
        let lease = client.session_lease(request.lease).await?;
        let mut prefix = request.name.clone();
        prefix.push(b'/');
        let key = holder_key(&request.name, lease);
        // Put the key if it is new, else read it; with either, the oldest
        // holder, so an uncontended lock takes one call.
        let txn = pb::TxnRequest {
            compare: vec![absent(&key)],
            success: vec![op_put(&key, b"", lease), op_range(by_create(&prefix, true, 0))],
            failure: vec![op_range(op_get(&key)), op_range(by_create(&prefix, true, 0))],
        };
        let response = client.txn(txn).await?;
        let mut my_revision = response.header.as_ref().map_or(0, |header| header.revision);
        if !response.succeeded {
            my_revision = range_kvs(&response, 0).first().map_or(0, |kv| kv.create_revision);
        }
        let owner = range_kvs(&response, 1).first();
        if owner.is_none_or(|owner| owner.create_revision == my_revision) {
            return Ok(Response::new(v3lockpb::LockResponse {
                header: response.header,
                key,
            }));
        }
        let mut take_back = TakeBack {
            client: Some(client.clone()),
            key: key.clone(),
        };
        wait_deletes(&client, &prefix, my_revision - 1).await?;
        // The lock is ours only if the key is still there: its lease may
        // have expired while it waited.
        let mine = client.range(op_get(&key)).await?;
        if mine.kvs.is_empty() {
            take_back.disarm();
            return Err(Status::unknown(SESSION_EXPIRED));
        }
        take_back.disarm();
        Ok(Response::new(v3lockpb::LockResponse {
            header: mine.header,
            key,
        }))
    }

    async fn unlock(
        &self,
        request: Request<v3lockpb::UnlockRequest>,
    ) -> Result<Response<v3lockpb::UnlockResponse>, Status> {
        let client = Client::of(&self.member, &request);
        let deleted = client.delete(&request.into_inner().key).await?;
        Ok(Response::new(v3lockpb::UnlockResponse { header: deleted.header }))
    }
}
