//! Goal: each row of etcd's error table that this server can produce
//! answers with etcd's gRPC code and exact message (clients map errors by
//! that text), and a refused request changes nothing.
//!
//! Method: a 3-member cluster of real processes with a small
//! `--quota-backend-bytes`, driven through gRPC. The quota row writes until
//! refused (bounded in count); the no-leader row kills two members and
//! writes to the third. The lease rows (unknown lease, TTL too large,
//! lease already exists) are in `lease.rs`, asserted against real etcd
//! too; the apply-lag "too many requests" row needs a stalled store and
//! has its own test (`apply_lag.rs`).

mod common;

use std::time::Duration;

use kv_server::proto::etcdserverpb as pb;
use kv_server::proto::etcdserverpb::kv_client::KvClient;
use tonic::transport::Channel;
use tonic::Code;

/// Small enough that the quota row reaches it after a few megabytes.
const QUOTA_BYTES: &str = "4194304";
/// Bounds the quota row: 200 puts of 64 KiB is 12.5 MiB, well past 4 MiB.
const QUOTA_PUTS_MAX: usize = 200;

async fn client(endpoint: &str) -> KvClient<Channel> {
    let channel = common::connect(endpoint, Duration::from_secs(15))
        .await
        .expect("connect");
    KvClient::new(channel).max_encoding_message_size(4 << 20)
}

fn put(key: &str, value: Vec<u8>) -> pb::PutRequest {
    pb::PutRequest {
        key: key.as_bytes().to_vec(),
        value,
        ..pb::PutRequest::default()
    }
}

fn put_op(key: &str) -> pb::RequestOp {
    pb::RequestOp {
        request: Some(pb::request_op::Request::RequestPut(put(key, b"v".to_vec()))),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_row_matches_etcd() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cluster = common::Cluster::start(
        &common::kv_server(),
        dir.path(),
        6379,
        &["--quota-backend-bytes", QUOTA_BYTES],
    );
    let endpoint = cluster.members[0].endpoint();
    let mut kv = client(&endpoint).await;
    kv.put(put("present", b"v".to_vec())).await.expect("setup put");
    for i in 0..4 {
        kv.put(put("counter", vec![b'0' + i])).await.expect("setup put");
    }
    let revision_before = kv
        .range(pb::RangeRequest {
            key: b"present".to_vec(),
            ..Default::default()
        })
        .await
        .expect("range")
        .into_inner()
        .header
        .expect("header")
        .revision;

    common::expect_error(
        "request larger than --max-request-bytes",
        kv.put(put("big", vec![b'x'; 1_600_000])).await,
        Code::InvalidArgument,
        "etcdserver: request is too large",
    );
    common::expect_error(
        "more than --max-txn-ops",
        kv.txn(pb::TxnRequest {
            success: (0..129).map(|i| put_op(&format!("k{i}"))).collect(),
            ..Default::default()
        })
        .await,
        Code::InvalidArgument,
        "etcdserver: too many operations in txn request",
    );
    common::expect_error(
        "empty key",
        kv.put(put("", b"v".to_vec())).await,
        Code::InvalidArgument,
        "etcdserver: key is not provided",
    );
    common::expect_error(
        "same key twice in a txn",
        kv.txn(pb::TxnRequest {
            success: vec![put_op("twice"), put_op("twice")],
            ..Default::default()
        })
        .await,
        Code::InvalidArgument,
        "etcdserver: duplicate key given in txn request",
    );
    common::expect_error(
        "ignore_value on a missing key",
        kv.put(pb::PutRequest {
            key: b"absent".to_vec(),
            ignore_value: true,
            ..Default::default()
        })
        .await,
        Code::InvalidArgument,
        "etcdserver: key not found",
    );
    common::expect_error(
        "unknown lease",
        kv.put(pb::PutRequest {
            key: b"leased".to_vec(),
            value: b"v".to_vec(),
            lease: 0x1234,
            ..Default::default()
        })
        .await,
        Code::NotFound,
        "etcdserver: requested lease not found",
    );
    let range_at = |revision| pb::RangeRequest {
        key: b"counter".to_vec(),
        revision,
        ..Default::default()
    };
    kv.compact(pb::CompactionRequest {
        revision: revision_before - 1,
        physical: false,
    })
    .await
    .expect("compact");
    common::expect_error(
        "revision below the compact revision",
        kv.range(range_at(2)).await,
        Code::OutOfRange,
        "etcdserver: mvcc: required revision has been compacted",
    );
    common::expect_error(
        "revision above the current revision",
        kv.range(range_at(revision_before + 100)).await,
        Code::OutOfRange,
        "etcdserver: mvcc: required revision is a future revision",
    );
    // Nothing above changed the store: the revision is where it was.
    let after = kv
        .range(pb::RangeRequest {
            key: b"present".to_vec(),
            ..Default::default()
        })
        .await
        .expect("range")
        .into_inner();
    assert_eq!(
        after.header.expect("header").revision,
        revision_before,
        "refused requests changed nothing"
    );

    // The quota: write until refused; deletes still go through.
    let mut refused = None;
    for i in 0..QUOTA_PUTS_MAX {
        if let Err(status) = kv.put(put(&format!("fill/{i:04}"), vec![b'f'; 64 << 10])).await {
            refused = Some(status);
            break;
        }
        // sled grows its files as it flushes; let size catch up.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let status = refused.expect("the quota refused a write within the bound");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert_eq!(status.message(), "etcdserver: mvcc: database space exceeded");
    kv.delete_range(pb::DeleteRangeRequest {
        key: b"fill/".to_vec(),
        range_end: b"fill0".to_vec(),
        prev_kv: false,
    })
    .await
    .expect("deletes pass the quota");

    // No leader: two of three members gone; the third cannot make progress.
    cluster.kill(1);
    cluster.kill(2);
    tokio::time::sleep(Duration::from_secs(3)).await;
    // A delete, because the quota still refuses puts (as etcd's alarm
    // does until an operator frees space), and a delete needs raft too.
    let delete = pb::DeleteRangeRequest {
        key: b"present".to_vec(),
        ..Default::default()
    };
    common::expect_error(
        "no leader",
        kv.delete_range(delete).await,
        Code::Unavailable,
        "etcdserver: no leader",
    );
    // And /health says so, in etcd's words.
    let port = cluster.members[0].client_port;
    let health = tokio::task::spawn_blocking(move || common::health_response(port))
        .await
        .expect("health");
    assert!(health.starts_with("HTTP/1.1 503"), "{health}");
    assert!(
        health.contains(r#"{"health":"false","reason":"RAFT NO LEADER"}"#),
        "{health}"
    );
}
