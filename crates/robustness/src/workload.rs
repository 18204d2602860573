//! The workload: concurrent clients on a small set of keys, each call and
//! return recorded (`history.rs`).
//!
//! Each client talks to one member (round-robin at start) and moves to the
//! next after an error. It picks, at random and seeded: a put, a
//! linearizable get, a delete, a compare-and-swap txn (compare the key's
//! mod revision with the last this client saw, then put), or a step of its
//! lease's life (grant; put a key with the lease; revoke). Values are
//! unique in the round, so any value read names the write that made it.

use std::time::{Duration, Instant};

use etcd_proto::etcdserverpb as pb;
use etcd_proto::etcdserverpb::kv_client::KvClient;
use etcd_proto::etcdserverpb::lease_client::LeaseClient;
use pb::compare::{CompareResult, CompareTarget, TargetUnion};
use pb::request_op::Request;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tonic::transport::{Channel, Endpoint};

use crate::call_mix::CallMix;
use crate::history::{Call, Operation, Return};

/// One call's bound: past it, a write's outcome is unknown. Two seconds
/// outlast an election (1 s) with room, so most faults end in answers.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// How long connecting to a member may take.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// The lease TTL: longer than any round, so leases end by revocation.
const LEASE_TTL: i64 = 600;

/// Nanoseconds since the round began, one clock for every client.
#[derive(Clone, Copy)]
pub struct Clock(pub Instant);

impl Clock {
    pub fn now(&self) -> u64 {
        self.0.elapsed().as_nanos() as u64
    }
}

#[derive(Debug, Clone)]
pub struct WorkloadSpec {
    pub clients: usize,
    pub keys: Vec<String>,
    /// Operations per second per client.
    pub rate: u32,
    pub duration: Duration,
    pub seed: u64,
    /// Lease ids of this round start here (unique across rounds).
    pub lease_base: i64,
}

pub fn channel(endpoint: &str) -> Channel {
    Endpoint::from_shared(format!("http://{endpoint}"))
        .expect("endpoints are host:port")
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(CALL_TIMEOUT)
        .connect_lazy()
}

struct Client {
    id: usize,
    endpoints: Vec<String>,
    at: usize,
    kv: KvClient<Channel>,
    lease: LeaseClient<Channel>,
    random: StdRng,
    mix: CallMix,
}

impl Client {
    fn new(id: usize, endpoints: &[String], seed: u64) -> Client {
        let at = id % endpoints.len();
        let channel = channel(&endpoints[at]);
        Client {
            id,
            endpoints: endpoints.to_vec(),
            at,
            kv: KvClient::new(channel.clone()),
            lease: LeaseClient::new(channel),
            random: StdRng::seed_from_u64(seed.wrapping_mul(1000).wrapping_add(id as u64)),
            mix: CallMix::new(id),
        }
    }

    /// Moves to the next member, after an error.
    fn move_on(&mut self) {
        self.at = (self.at + 1) % self.endpoints.len();
        let channel = channel(&self.endpoints[self.at]);
        self.kv = KvClient::new(channel.clone());
        self.lease = LeaseClient::new(channel);
    }

    fn pick_call(&mut self, keys: &[String], lease_base: i64) -> Call {
        let key = keys[self.random.random_range(0..keys.len())].clone();
        let roll = self.random.random_range(0..100i32) as u64;
        self.mix.pick(key, roll, lease_base + (self.id as i64) * 1000)
    }

    /// Makes the call; what it returned, or the error.
    async fn call(&mut self, call: &Call) -> Result<Return, tonic::Status> {
        let revision = |header: Option<pb::ResponseHeader>| header.map_or(0, |h| h.revision);
        match call.clone() {
            Call::Put { key, value, lease } => {
                let request = pb::PutRequest {
                    key: key.into_bytes(),
                    value: value.into_bytes(),
                    lease,
                    ..Default::default()
                };
                let response = self.kv.put(request).await?.into_inner();
                Ok(Return::Put {
                    revision: revision(response.header),
                })
            }
            Call::Get { key } => {
                let request = pb::RangeRequest {
                    key: key.into_bytes(),
                    ..Default::default()
                };
                let response = self.kv.range(request).await?.into_inner();
                let kv = response
                    .kvs
                    .first()
                    .map(|kv| (String::from_utf8_lossy(&kv.value).into_owned(), kv.mod_revision));
                Ok(Return::Get {
                    revision: revision(response.header),
                    kv,
                })
            }
            Call::Delete { key } => {
                let request = pb::DeleteRangeRequest {
                    key: key.into_bytes(),
                    ..Default::default()
                };
                let response = self.kv.delete_range(request).await?.into_inner();
                Ok(Return::Delete {
                    revision: revision(response.header),
                    deleted: response.deleted,
                })
            }
            Call::Cas { key, expected, value } => self.cas(key, expected, value).await,
            Call::LeaseGrant { id } => {
                self.lease
                    .lease_grant(pb::LeaseGrantRequest { ttl: LEASE_TTL, id })
                    .await?;
                Ok(Return::LeaseGrant)
            }
            Call::LeaseRevoke { id } => {
                let response = self
                    .lease
                    .lease_revoke(pb::LeaseRevokeRequest { id })
                    .await?
                    .into_inner();
                Ok(Return::LeaseRevoke {
                    revision: revision(response.header),
                })
            }
        }
    }

    async fn cas(&mut self, key: String, expected: i64, value: String) -> Result<Return, tonic::Status> {
        let compare = pb::Compare {
            result: CompareResult::Equal as i32,
            target: CompareTarget::Mod as i32,
            key: key.clone().into_bytes(),
            range_end: Vec::new(),
            target_union: Some(TargetUnion::ModRevision(expected)),
        };
        let put = pb::PutRequest {
            key: key.into_bytes(),
            value: value.into_bytes(),
            ..Default::default()
        };
        let request = pb::TxnRequest {
            compare: vec![compare],
            success: vec![pb::RequestOp {
                request: Some(Request::RequestPut(put)),
            }],
            failure: Vec::new(),
        };
        let response = self.kv.txn(request).await?.into_inner();
        Ok(Return::Cas {
            revision: response.header.map_or(0, |h| h.revision),
            succeeded: response.succeeded,
        })
    }
}

/// Runs one client until the workload's time is up; its operations.
async fn run_client(id: usize, endpoints: Vec<String>, spec: WorkloadSpec, clock: Clock) -> Vec<Operation> {
    let mut client = Client::new(id, &endpoints, spec.seed);
    let pause = Duration::from_secs(1) / spec.rate.max(1);
    let deadline = Instant::now() + spec.duration;
    let mut operations = Vec::new();
    while Instant::now() < deadline {
        let call = client.pick_call(&spec.keys, spec.lease_base);
        let invoked = clock.now();
        let answer = client.call(&call).await;
        let returned = clock.now();
        match answer {
            Ok(result) => {
                client.mix.learn(&call, &result);
                operations.push(Operation {
                    client: id,
                    call,
                    invoked,
                    returned,
                    result,
                });
            }
            Err(status) => {
                client.move_on();
                client.mix.lease_call_failed(&call);
                if !call.is_read() {
                    operations.push(Operation {
                        client: id,
                        call,
                        invoked,
                        returned: u64::MAX,
                        result: Return::Unknown(status.message().to_string()),
                    });
                }
            }
        }
        tokio::time::sleep(pause).await;
    }
    operations
}

/// Runs every client; all their operations.
pub async fn run(endpoints: &[String], spec: &WorkloadSpec, clock: Clock) -> Vec<Operation> {
    let handles: Vec<_> = (0..spec.clients)
        .map(|id| tokio::spawn(run_client(id, endpoints.to_vec(), spec.clone(), clock)))
        .collect();
    let mut operations = Vec::new();
    for handle in handles {
        operations.extend(handle.await.expect("a client task panicked"));
    }
    operations
}

/// A last linearizable get of every key, once the faults are over, so a
/// lost write shows in the history. Each is tried on every member in turn,
/// at most `attempts` times.
pub async fn final_reads(endpoints: &[String], keys: &[String], clock: Clock, client: usize) -> Vec<Operation> {
    let mut reader = Client::new(client, endpoints, 0);
    let mut operations = Vec::new();
    for key in keys {
        for _ in 0..10 {
            let call = Call::Get { key: key.clone() };
            let invoked = clock.now();
            if let Ok(result) = reader.call(&call).await {
                let returned = clock.now();
                operations.push(Operation {
                    client,
                    call,
                    invoked,
                    returned,
                    result,
                });
                break;
            }
            reader.move_on();
        }
    }
    operations
}
