//! The recipes' client: etcd's KV, Lease and Watch calls made inside the
//! member with the caller's own metadata (token) and connection (client
//! certificate), through the same services a gRPC client reaches. So a
//! lock or an election is checked, validated and counted against quota
//! exactly as the calls it is made of would be, as etcd's in-process
//! client does for its Lock and Election services.
//!
//! Errors come back as etcd's do through that client: every failure of
//! an inner call is the caller's `Unknown` with the inner message
//! (`etcdserver: requested lease not found`), since etcd's services
//! return the client's error values, which gRPC does not map to codes.

use std::sync::Arc;

use bytes::BytesMut;
use prost::Message;
use tokio_stream::StreamExt;
use tonic::metadata::MetadataMap;
use tonic::{Extensions, Request, Status};

use crate::api::kv::KvService;
use crate::api::lease::LeaseService;
use crate::member::core::Member;
use crate::proto::etcdserverpb as pb;
use crate::proto::etcdserverpb::kv_server::Kv;
use crate::proto::etcdserverpb::lease_server::Lease;
use crate::watch::outbox::{Outgoing, Responses};
use crate::watch::stream;

/// The TTL of the lease a recipe takes when the caller gives none: etcd's
/// session default (`concurrency.NewSession`), 60 s.
pub const SESSION_TTL_SECONDS: i64 = 60;

/// A failure of an inner call as etcd's Lock and Election services give
/// it: `Unknown`, with the inner call's message.
pub fn as_recipe_error(status: Status) -> Status {
    match status.code() {
        tonic::Code::Cancelled | tonic::Code::DeadlineExceeded => status,
        _ => Status::unknown(status.message().to_string()),
    }
}

#[derive(Clone)]
pub struct Client {
    member: Arc<Member>,
    metadata: MetadataMap,
    extensions: Extensions,
}

impl Client {
    /// A client calling as the caller of `request` did.
    pub fn of<T>(member: &Arc<Member>, request: &Request<T>) -> Client {
        Client {
            member: member.clone(),
            metadata: request.metadata().clone(),
            extensions: request.extensions().clone(),
        }
    }

    fn request<T>(&self, message: T) -> Request<T> {
        Request::from_parts(self.metadata.clone(), self.extensions.clone(), message)
    }

    fn kv(&self) -> KvService {
        KvService {
            member: self.member.clone(),
        }
    }

    pub async fn txn(&self, txn: pb::TxnRequest) -> Result<pb::TxnResponse, Status> {
        let response = self.kv().txn(self.request(txn)).await.map_err(as_recipe_error)?;
        Ok(response.into_inner())
    }

    /// A linearizable range, as the client's `Get`.
    pub async fn range(&self, range: pb::RangeRequest) -> Result<pb::RangeResponse, Status> {
        let response = self.kv().range(self.request(range)).await.map_err(as_recipe_error)?;
        Ok(response.into_inner())
    }

    pub async fn delete(&self, key: &[u8]) -> Result<pb::DeleteRangeResponse, Status> {
        let delete = pb::DeleteRangeRequest {
            key: key.to_vec(),
            ..Default::default()
        };
        let response = self
            .kv()
            .delete_range(self.request(delete))
            .await
            .map_err(as_recipe_error)?;
        Ok(response.into_inner())
    }

    /// The lease a recipe's keys are bound to: `lease`, or for 0 a new
    /// lease of [`SESSION_TTL_SECONDS`], which nothing keeps alive (etcd's
    /// services orphan their sessions the same way).
    pub async fn session_lease(&self, lease: i64) -> Result<i64, Status> {
        if lease != 0 {
            return Ok(lease);
        }
        let grant = pb::LeaseGrantRequest {
            ttl: SESSION_TTL_SECONDS,
            id: 0,
        };
        let service = LeaseService {
            member: self.member.clone(),
        };
        let granted = service
            .lease_grant(self.request(grant))
            .await
            .map_err(as_recipe_error)?;
        Ok(granted.into_inner().id)
    }

    /// A watch of `key` (to `range_end`) from `start_revision`, on the
    /// member's own watch stream.
    pub fn watch(&self, key: &[u8], range_end: &[u8], start_revision: i64) -> Watch {
        let create = pb::WatchRequest {
            request_union: Some(pb::watch_request::RequestUnion::CreateRequest(pb::WatchCreateRequest {
                key: key.to_vec(),
                range_end: range_end.to_vec(),
                start_revision,
                ..Default::default()
            })),
        };
        // One create, then a request stream that stays open: the watch
        // ends when this side drops it.
        let requests = tokio_stream::once(Ok(create)).chain(tokio_stream::pending());
        let opener = stream::Opener {
            metadata: self.metadata.clone(),
            extensions: self.extensions.clone(),
        };
        Watch {
            responses: stream::start(self.member.clone(), requests, false, opener),
        }
    }
}

/// A watch's responses, decoded.
pub struct Watch {
    responses: Responses,
}

impl Watch {
    /// The next response; an error if the watch ended (cancelled, as
    /// when its start revision was compacted, or the member stopping).
    pub async fn next(&mut self) -> Result<pb::WatchResponse, Status> {
        let response = match self.responses.next().await {
            Some(Ok(Outgoing::Message(response))) => response,
            Some(Ok(Outgoing::Events(events))) => {
                let mut buf = BytesMut::with_capacity(events.encoded_len());
                events.encode(&mut buf);
                pb::WatchResponse::decode(buf.freeze()).map_err(|e| Status::internal(e.to_string()))?
            }
            Some(Err(status)) => return Err(as_recipe_error(status)),
            None => return Err(Status::unknown("lost watcher waiting for delete")),
        };
        if response.canceled {
            let reason = if response.cancel_reason.is_empty() {
                "watch canceled".to_string()
            } else {
                response.cancel_reason.clone()
            };
            return Err(Status::unknown(reason));
        }
        Ok(response)
    }
}

/// Waits until the key `key`, seen at revision `revision`, is deleted:
/// the first delete event of it from `revision` on.
pub async fn wait_delete(client: &Client, key: &[u8], revision: i64) -> Result<(), Status> {
    let mut watch = client.watch(key, &[], revision);
    loop {
        let response = watch.next().await?;
        let deleted = response
            .events
            .iter()
            .any(|event| event.r#type == crate::proto::mvccpb::event::EventType::Delete as i32);
        if deleted {
            return Ok(());
        }
    }
}

/// The range end that makes `prefix` a prefix range (etcd's
/// `GetPrefixRangeEnd`).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// The key of `prefix` created first (or last, `first = false`), among
/// those created at or below `max_create_revision` if it is non-zero:
/// etcd's `WithFirstCreate` and `WithLastCreate`.
pub fn by_create(prefix: &[u8], first: bool, max_create_revision: i64) -> pb::RangeRequest {
    use pb::range_request::{SortOrder, SortTarget};
    pb::RangeRequest {
        key: prefix.to_vec(),
        range_end: prefix_end(prefix),
        limit: 1,
        sort_order: if first { SortOrder::Ascend } else { SortOrder::Descend } as i32,
        sort_target: SortTarget::Create as i32,
        max_create_revision,
        ..Default::default()
    }
}

/// Waits until every key of `prefix` created at or below
/// `max_create_revision` is gone, newest first (etcd's `waitDeletes`):
/// what a lock waiter and a campaigner wait for.
pub async fn wait_deletes(client: &Client, prefix: &[u8], max_create_revision: i64) -> Result<(), Status> {
    loop {
        let found = client.range(by_create(prefix, false, max_create_revision)).await?;
        let Some(newest) = found.kvs.first() else {
            return Ok(());
        };
        let revision = found.header.as_ref().map_or(0, |header| header.revision);
        wait_delete(client, &newest.key, revision).await?;
    }
}
