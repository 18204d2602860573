//! etcd's `Election` service (`v3electionpb`).
//!
//! A campaigner of election `name` holds the key `name/<lease id in
//! hex>`, bound to its lease, whose value is its proclamation; the leader
//! is the campaigner whose key was created first. Campaign puts the key
//! (or takes it back, proclaiming its value anew) and waits until every
//! older campaigner's key is gone. Proclaim and Resign act on a leader
//! key only while the key still has the create revision the leadership
//! was won with: a stale leadership proclaims "election: not leader" and
//! resigns as a no-op, as in etcd. Observe follows the leader: its
//! proclamations in order, then the next leader when the key goes.

use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::api::recipes::client::{by_create, prefix_end, wait_deletes, Client};
use crate::api::recipes::lock::{absent, holder_key, op_get, op_put, op_range, range_kvs};
use crate::member::core::Member;
use crate::proto::etcdserverpb as pb;
use crate::proto::mvccpb;
use crate::proto::v3electionpb as epb;
use crate::proto::v3electionpb::election_server::Election;

/// etcd's errors, in its words.
pub const NOT_LEADER: &str = "election: not leader";
pub const NO_LEADER: &str = "election: no leader";
pub const MISSING_LEADER_KEY: &str = "\"leader\" field must be provided";

/// Observe's responses queued for a client that reads slowly. A leader
/// proclaims rarely; a client further behind holds back its own
/// observation only (the observer waits for room).
pub const OBSERVE_QUEUE: usize = 16;

#[derive(Clone)]
pub struct ElectionService {
    pub member: Arc<Member>,
}

fn prefix_of(name: &[u8]) -> Vec<u8> {
    let mut prefix = name.to_vec();
    prefix.push(b'/');
    prefix
}

/// A compare that `key` still has create revision `revision`.
fn created_at(key: &[u8], revision: i64) -> pb::Compare {
    pb::Compare {
        target_union: Some(pb::compare::TargetUnion::CreateRevision(revision)),
        ..absent(key)
    }
}

/// Proclaims `value` under `leader`: etcd's `Election.Proclaim`.
async fn proclaim(client: &Client, leader: &epb::LeaderKey, value: &[u8]) -> Result<pb::TxnResponse, Status> {
    let put = pb::RequestOp {
        request: Some(pb::request_op::Request::RequestPut(pb::PutRequest {
            key: leader.key.clone(),
            value: value.to_vec(),
            ignore_lease: true,
            ..Default::default()
        })),
    };
    let response = client
        .txn(pb::TxnRequest {
            compare: vec![created_at(&leader.key, leader.rev)],
            success: vec![put],
            failure: Vec::new(),
        })
        .await?;
    if !response.succeeded {
        return Err(Status::unknown(NOT_LEADER));
    }
    Ok(response)
}

/// Deletes `leader`'s key if it still holds that leadership: etcd's
/// `Election.Resign`.
async fn resign(client: &Client, leader: &epb::LeaderKey) -> Result<pb::TxnResponse, Status> {
    let delete = pb::RequestOp {
        request: Some(pb::request_op::Request::RequestDeleteRange(pb::DeleteRangeRequest {
            key: leader.key.clone(),
            ..Default::default()
        })),
    };
    client
        .txn(pb::TxnRequest {
            compare: vec![created_at(&leader.key, leader.rev)],
            success: vec![delete],
            failure: Vec::new(),
        })
        .await
}

/// Resigns a campaign whose call ended before it won (the caller went
/// away), as etcd's campaign resigns on a cancelled context.
struct Withdraw {
    client: Option<Client>,
    leader: epb::LeaderKey,
}

impl Drop for Withdraw {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            let leader = std::mem::take(&mut self.leader);
            tokio::spawn(async move {
                if let Err(status) = resign(&client, &leader).await {
                    tracing::debug!(%status, "an abandoned campaign could not resign");
                }
            });
        }
    }
}

type ObserveStream = Pin<Box<dyn Stream<Item = Result<epb::LeaderResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Election for ElectionService {
    async fn campaign(
        &self,
        request: Request<epb::CampaignRequest>,
    ) -> Result<Response<epb::CampaignResponse>, Status> {
        let client = Client::of(&self.member, &request);
        let request = request.into_inner();
        let lease = client.session_lease(request.lease).await?;
        let key = holder_key(&request.name, lease);
        let txn = pb::TxnRequest {
            compare: vec![absent(&key)],
            success: vec![op_put(&key, &request.value, lease)],
            failure: vec![op_range(op_get(&key))],
        };
        let response = client.txn(txn).await?;
        let mut leader = epb::LeaderKey {
            name: request.name.clone(),
            key: key.clone(),
            rev: response.header.as_ref().map_or(0, |header| header.revision),
            lease,
        };
        if !response.succeeded {
            let current = range_kvs(&response, 0).first().cloned().unwrap_or_default();
            leader.rev = current.create_revision;
            if current.value != request.value {
                if let Err(status) = proclaim(&client, &leader, &request.value).await {
                    let _ = resign(&client, &leader).await;
                    return Err(status);
                }
            }
        }
        let mut withdraw = Withdraw {
            client: Some(client.clone()),
            leader: leader.clone(),
        };
        let waited = wait_deletes(&client, &prefix_of(&request.name), leader.rev - 1).await;
        // Waiting failed on its own (not a caller gone): etcd keeps the
        // key, so only a dropped call resigns.
        withdraw.client = None;
        waited?;
        Ok(Response::new(epb::CampaignResponse {
            header: response.header,
            leader: Some(leader),
        }))
    }

    async fn proclaim(
        &self,
        request: Request<epb::ProclaimRequest>,
    ) -> Result<Response<epb::ProclaimResponse>, Status> {
        let client = Client::of(&self.member, &request);
        let request = request.into_inner();
        let leader = request.leader.ok_or_else(|| Status::unknown(MISSING_LEADER_KEY))?;
        client.session_lease(leader.lease).await?;
        let response = proclaim(&client, &leader, &request.value).await?;
        Ok(Response::new(epb::ProclaimResponse {
            header: response.header,
        }))
    }

    async fn leader(&self, request: Request<epb::LeaderRequest>) -> Result<Response<epb::LeaderResponse>, Status> {
        let client = Client::of(&self.member, &request);
        let found = client
            .range(by_create(&prefix_of(&request.get_ref().name), true, 0))
            .await?;
        let kv = found.kvs.into_iter().next().ok_or_else(|| Status::unknown(NO_LEADER))?;
        Ok(Response::new(epb::LeaderResponse {
            header: found.header,
            kv: Some(kv),
        }))
    }

    type ObserveStream = ObserveStream;

    async fn observe(&self, request: Request<epb::LeaderRequest>) -> Result<Response<ObserveStream>, Status> {
        let client = Client::of(&self.member, &request);
        let prefix = prefix_of(&request.into_inner().name);
        let (sender, responses) = mpsc::channel(OBSERVE_QUEUE);
        tokio::spawn(async move {
            tokio::select! {
                _ = observe(&client, &prefix, &sender) => {}
                _ = sender.closed() => {}
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(responses))))
    }

    async fn resign(&self, request: Request<epb::ResignRequest>) -> Result<Response<epb::ResignResponse>, Status> {
        let client = Client::of(&self.member, &request);
        let leader = request
            .into_inner()
            .leader
            .ok_or_else(|| Status::unknown(MISSING_LEADER_KEY))?;
        client.session_lease(leader.lease).await?;
        let response = resign(&client, &leader).await?;
        Ok(Response::new(epb::ResignResponse {
            header: response.header,
        }))
    }
}

type Observed = mpsc::Sender<Result<epb::LeaderResponse, Status>>;

/// etcd's `Election.observe`: the leader's key-value, each of its later
/// values, and on its deletion the next leader, until an inner call
/// fails or the observer goes (then the stream just ends, as etcd's).
async fn observe(client: &Client, prefix: &[u8], out: &Observed) {
    loop {
        let Ok(found) = client.range(by_create(prefix, true, 0)).await else {
            return;
        };
        let (mut header, kv) = match found.kvs.into_iter().next() {
            Some(kv) => (found.header.unwrap_or_default(), kv),
            None => {
                let from = found.header.as_ref().map_or(0, |header| header.revision);
                match first_put(client, prefix, from).await {
                    Some(first) => first,
                    None => return,
                }
            }
        };
        let leader = epb::LeaderResponse {
            header: Some(header),
            kv: Some(kv.clone()),
        };
        if out.send(Ok(leader)).await.is_err() {
            return;
        }
        let mut watch = client.watch(&kv.key, &[], header.revision + 1);
        'leader: loop {
            let Ok(response) = watch.next().await else {
                return;
            };
            for event in response.events {
                if event.r#type == mvccpb::event::EventType::Delete as i32 {
                    break 'leader;
                }
                header = response.header.unwrap_or_default();
                let update = epb::LeaderResponse {
                    header: Some(header),
                    kv: event.kv,
                };
                if out.send(Ok(update)).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// The first key put under `prefix` from revision `from` on, with its
/// response's header at the key's revision: who leads an election that
/// had no leader.
async fn first_put(client: &Client, prefix: &[u8], from: i64) -> Option<(pb::ResponseHeader, mvccpb::KeyValue)> {
    let mut watch = client.watch(prefix, &prefix_end(prefix), from);
    loop {
        let response = watch.next().await.ok()?;
        let put = response
            .events
            .into_iter()
            .find(|event| event.r#type == mvccpb::event::EventType::Put as i32);
        if let Some(kv) = put.and_then(|event| event.kv) {
            let mut header = response.header.unwrap_or_default();
            header.revision = kv.mod_revision;
            return Some((header, kv));
        }
    }
}
