//! Goal: HashKV answers exactly as etcd 3.5.17's for the same history:
//! the same hash, the same compact revision and the same header revision,
//! or the same error, at the current revision and at earlier ones, below,
//! at and above the compact revision, including the revisions etcd
//! answers from the hashes it took while compacting.
//!
//! Method: a real etcd single member and a kv-server single member, each
//! its own process on loopback, take the same seeded random sequence of
//! puts (some with a lease), deletes (single keys, ranges, "from key"),
//! txns (nested too) and compactions, one request at a time; every
//! answer must match. After every step, HashKV is asked at a set of
//! revisions on both and the answers compared. `HASH_KV_STEPS` sets the
//! number of steps (200 by default, for CI; 2,000 passes too).

mod common;

use std::time::Duration;

use kv_server::proto::etcdserverpb as pb;
use kv_server::proto::etcdserverpb::kv_client::KvClient;
use kv_server::proto::etcdserverpb::lease_client::LeaseClient;
use kv_server::proto::etcdserverpb::maintenance_client::MaintenanceClient;
use tonic::transport::Channel;

/// Each call's bound: a single loopback member answers in milliseconds.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// The lease some puts attach, granted with this id on both servers.
const LEASE_ID: i64 = 7_000;
/// Long enough that the lease outlives the test.
const LEASE_TTL: i64 = 3_600;
const KEYS: &[&str] = &["a", "a/1", "a/2", "b", "c", "d"];

/// SplitMix64: a seeded sequence, so a failing run can be repeated.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn key(&mut self) -> Vec<u8> {
        KEYS[self.below(KEYS.len() as u64) as usize].as_bytes().to_vec()
    }
}

struct Server {
    kv: KvClient<Channel>,
    maintenance: MaintenanceClient<Channel>,
    lease: LeaseClient<Channel>,
}

impl Server {
    async fn connect(endpoint: &str) -> Server {
        let channel = common::connect(endpoint, CALL_TIMEOUT).await.expect("connect");
        Server {
            kv: KvClient::new(channel.clone()),
            maintenance: MaintenanceClient::new(channel.clone()),
            lease: LeaseClient::new(channel),
        }
    }

    /// One write: the revision it answered with, or its error.
    async fn write(&mut self, write: &Write) -> Result<i64, (tonic::Code, String)> {
        let revision = |header: Option<pb::ResponseHeader>| header.expect("header").revision;
        let result = match write.clone() {
            Write::Put(put) => self.kv.put(put).await.map(|r| revision(r.into_inner().header)),
            Write::Delete(delete) => self
                .kv
                .delete_range(delete)
                .await
                .map(|r| revision(r.into_inner().header)),
            Write::Txn(txn) => self.kv.txn(txn).await.map(|r| revision(r.into_inner().header)),
            Write::Compact(revision_to) => self
                .kv
                .compact(pb::CompactionRequest {
                    revision: revision_to,
                    physical: true,
                })
                .await
                .map(|r| revision(r.into_inner().header)),
        };
        result.map_err(|status| (status.code(), status.message().to_string()))
    }

    /// HashKV at `revision`: (hash, compact revision, header revision).
    async fn hash_kv(&mut self, revision: i64) -> Result<(u32, i64, i64), (tonic::Code, String)> {
        self.maintenance
            .hash_kv(pb::HashKvRequest { revision })
            .await
            .map(|response| {
                let response = response.into_inner();
                (
                    response.hash,
                    response.compact_revision,
                    response.header.expect("header").revision,
                )
            })
            .map_err(|status| (status.code(), status.message().to_string()))
    }
}

#[derive(Debug, Clone)]
enum Write {
    Put(pb::PutRequest),
    Delete(pb::DeleteRangeRequest),
    Txn(pb::TxnRequest),
    Compact(i64),
}

fn put(key: Vec<u8>, value: Vec<u8>, lease: i64) -> pb::PutRequest {
    pb::PutRequest {
        key,
        value,
        lease,
        ..pb::PutRequest::default()
    }
}

fn op(request: pb::request_op::Request) -> pb::RequestOp {
    pb::RequestOp { request: Some(request) }
}

fn random_put(random: &mut Random, step: usize) -> pb::PutRequest {
    let lease = if random.below(4) == 0 { LEASE_ID } else { 0 };
    let value = format!("v{step}").repeat(random.below(3) as usize);
    put(random.key(), value.into_bytes(), lease)
}

fn random_delete(random: &mut Random) -> pb::DeleteRangeRequest {
    let key = random.key();
    let range_end = match random.below(4) {
        0 => vec![0],
        1 => {
            let mut end = key.clone();
            end.push(0xff);
            end
        }
        _ => Vec::new(),
    };
    pb::DeleteRangeRequest {
        key,
        range_end,
        prev_kv: false,
    }
}

/// A txn comparing a key's version, putting or deleting in each branch,
/// sometimes with a nested txn that puts one key in both its branches.
fn random_txn(random: &mut Random, step: usize) -> pb::TxnRequest {
    use pb::request_op::Request;
    let compare = pb::Compare {
        result: pb::compare::CompareResult::Equal as i32,
        target: pb::compare::CompareTarget::Version as i32,
        key: random.key(),
        range_end: Vec::new(),
        target_union: Some(pb::compare::TargetUnion::Version(random.below(3) as i64)),
    };
    let mut success = vec![op(Request::RequestPut(random_put(random, step)))];
    if random.below(2) == 0 {
        let key = random.key();
        let nested = pb::TxnRequest {
            compare: vec![pb::Compare {
                key: key.clone(),
                ..compare.clone()
            }],
            success: vec![op(Request::RequestPut(put(key.clone(), b"then".to_vec(), 0)))],
            failure: vec![op(Request::RequestPut(put(key, b"else".to_vec(), 0)))],
        };
        success.push(op(Request::RequestTxn(nested)));
    }
    let failure = vec![op(Request::RequestDeleteRange(random_delete(random)))];
    pb::TxnRequest {
        compare: vec![compare],
        success,
        failure,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hash_kv_matches_etcd_through_a_random_history() {
    let steps: usize = std::env::var("HASH_KV_STEPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let etcd_dir = tempfile::tempdir().expect("tempdir");
    let kv_dir = tempfile::tempdir().expect("tempdir");
    let etcd = common::Cluster::start_members(&common::etcd_tool("ETCD_BIN", "etcd"), etcd_dir.path(), 14379, 1, &[]);
    let kv_server = common::Cluster::start_members(&common::kv_server(), kv_dir.path(), 14479, 1, &[]);
    let mut servers = [
        Server::connect(&etcd.members[0].endpoint()).await,
        Server::connect(&kv_server.members[0].endpoint()).await,
    ];
    for server in &mut servers {
        server
            .lease
            .lease_grant(pb::LeaseGrantRequest {
                ttl: LEASE_TTL,
                id: LEASE_ID,
            })
            .await
            .expect("grant");
    }

    let mut random = Random(13);
    let mut current = 1;
    let mut compact = -1;
    let mut compactions: Vec<i64> = Vec::new();
    let mut hashes_compared = 0;
    for step in 0..steps {
        let write = match random.below(10) {
            0..=3 => Write::Put(random_put(&mut random, step)),
            4 | 5 => Write::Delete(random_delete(&mut random)),
            6 | 7 => Write::Txn(random_txn(&mut random, step)),
            // Mostly a revision that can be compacted, sometimes one that
            // cannot (at or below the compact revision).
            _ => Write::Compact(if random.below(4) == 0 {
                compact.max(0) - random.below(2) as i64
            } else {
                compact + 1 + random.below((current - compact).max(1) as u64) as i64
            }),
        };
        let etcd_answer = servers[0].write(&write).await;
        let kv_answer = servers[1].write(&write).await;
        assert_eq!(kv_answer, etcd_answer, "step {step}: {write:?}");
        if let Ok(revision) = etcd_answer {
            current = revision;
            if let Write::Compact(at) = write {
                compact = at;
                compactions.push(at);
            }
        }

        let mut revisions = vec![
            0,
            current,
            current - 1,
            current + 1,
            compact - 1,
            compact,
            compact + 1,
            -3,
        ];
        revisions.push(1 + random.below(current as u64) as i64);
        revisions.extend(compactions.iter().rev().take(12));
        for revision in revisions {
            let etcd_hash = servers[0].hash_kv(revision).await;
            let kv_hash = servers[1].hash_kv(revision).await;
            assert_eq!(
                kv_hash, etcd_hash,
                "step {step}: HashKV({revision}) after {write:?}, compact revision {compact}"
            );
            hashes_compared += 1;
        }
    }
    assert!(compactions.len() >= steps / 20, "compactions: {compactions:?}");
    eprintln!(
        "{steps} steps, {} compactions, {hashes_compared} HashKV answers equal, last revision {current}",
        compactions.len()
    );
}
