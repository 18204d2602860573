//! Goal: txns nested in txns are accepted or refused exactly as etcd
//! 3.5.17 accepts or refuses them, with its gRPC code and message, and
//! an accepted one does what etcd does. The set includes the shape etcd's
//! leasing KV builds (a key put in both branches of a txn two levels
//! down), duplicates within one branch, a put and a delete of one key in
//! one branch, range deletes around puts ("from key" ones too), sibling
//! txns, and the operation budget across levels.
//!
//! Method: a real etcd single member and a kv-server single member, each
//! its own process on loopback, take the same txns in the same order.
//! Every answer (accepted with its revision and branch, or the error)
//! must match, a few are also asserted outright, and at the end every
//! key, with its revisions and version, must read the same on both.

mod common;

use std::time::Duration;

use kv_server::proto::etcdserverpb as pb;
use kv_server::proto::etcdserverpb::kv_client::KvClient;
use pb::request_op::Request;
use tonic::transport::Channel;

const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// etcd's `--max-txn-ops` default.
const MAX_TXN_OPS: usize = 128;

fn put(key: &str) -> pb::RequestOp {
    pb::RequestOp {
        request: Some(Request::RequestPut(pb::PutRequest {
            key: key.as_bytes().to_vec(),
            value: b"v".to_vec(),
            ..pb::PutRequest::default()
        })),
    }
}

fn put_keeping_value(key: &str) -> pb::RequestOp {
    pb::RequestOp {
        request: Some(Request::RequestPut(pb::PutRequest {
            key: key.as_bytes().to_vec(),
            ignore_value: true,
            ..pb::PutRequest::default()
        })),
    }
}

fn delete(key: &str, end: &[u8]) -> pb::RequestOp {
    pb::RequestOp {
        request: Some(Request::RequestDeleteRange(pb::DeleteRangeRequest {
            key: key.as_bytes().to_vec(),
            range_end: end.to_vec(),
            prev_kv: false,
        })),
    }
}

fn txn(success: Vec<pb::RequestOp>, failure: Vec<pb::RequestOp>) -> pb::TxnRequest {
    pb::TxnRequest {
        compare: Vec::new(),
        success,
        failure,
    }
}

fn nested(request: pb::TxnRequest) -> pb::RequestOp {
    pb::RequestOp {
        request: Some(Request::RequestTxn(request)),
    }
}

/// A txn whose compare fails, so its failure branch runs.
fn failing(success: Vec<pb::RequestOp>, failure: Vec<pb::RequestOp>) -> pb::TxnRequest {
    pb::TxnRequest {
        compare: vec![pb::Compare {
            result: pb::compare::CompareResult::Equal as i32,
            target: pb::compare::CompareTarget::Version as i32,
            key: b"never".to_vec(),
            range_end: Vec::new(),
            target_union: Some(pb::compare::TargetUnion::Version(5)),
        }],
        success,
        failure,
    }
}

/// Accepted (and, if so, whether the outer compare held), or refused.
const ACCEPTED: Option<&str> = None;
const DUPLICATE: Option<&str> = Some("etcdserver: duplicate key given in txn request");
const TOO_MANY: Option<&str> = Some("etcdserver: too many operations in txn request");

fn shapes() -> Vec<(&'static str, pb::TxnRequest, Option<&'static str>)> {
    let both = |key: &str| nested(txn(vec![put(key)], vec![put(key)]));
    vec![
        (
            "a key put in both branches, two levels down (etcd's leasing KV)",
            txn(vec![nested(txn(vec![both("k")], vec![]))], vec![]),
            ACCEPTED,
        ),
        (
            "the same, taking the failure branches",
            failing(vec![], vec![nested(failing(vec![], vec![both("k")]))]),
            ACCEPTED,
        ),
        (
            "a key put twice in one branch",
            txn(vec![put("k"), put("k")], vec![]),
            DUPLICATE,
        ),
        (
            "a key put twice in one branch, three levels down",
            txn(
                vec![nested(txn(vec![nested(txn(vec![put("k"), put("k")], vec![]))], vec![]))],
                vec![],
            ),
            DUPLICATE,
        ),
        (
            "a key put and deleted in one branch",
            txn(vec![delete("k", b""), put("k")], vec![]),
            DUPLICATE,
        ),
        (
            "a key put, then deleted, in one branch",
            txn(vec![put("k"), delete("k", b"")], vec![]),
            DUPLICATE,
        ),
        (
            "a put inside a deleted range",
            txn(vec![delete("a", b"c"), put("b")], vec![]),
            DUPLICATE,
        ),
        (
            "a put at a deleted range's end",
            txn(vec![delete("a", b"c"), put("c")], vec![]),
            ACCEPTED,
        ),
        (
            "a delete from a key on, then a put after it",
            txn(vec![delete("a", b"\0"), put("b")], vec![]),
            ACCEPTED,
        ),
        (
            "a key put in both branches of one txn",
            txn(vec![put("k")], vec![put("k")]),
            ACCEPTED,
        ),
        (
            "a key put in both branches, and again beside that txn",
            txn(vec![both("k"), put("k")], vec![]),
            DUPLICATE,
        ),
        (
            "two sibling txns each putting a key in both branches",
            txn(vec![both("k"), both("k")], vec![]),
            DUPLICATE,
        ),
        (
            "a nested put, then a sibling's delete covering it",
            txn(
                vec![
                    nested(txn(vec![put("b")], vec![])),
                    nested(txn(vec![delete("a", b"c")], vec![])),
                ],
                vec![],
            ),
            ACCEPTED,
        ),
        (
            "a sibling's delete, then a nested put it covers",
            txn(
                vec![
                    nested(txn(vec![delete("a", b"c")], vec![])),
                    nested(txn(vec![put("b")], vec![])),
                ],
                vec![],
            ),
            DUPLICATE,
        ),
        (
            "a nested delete covering a put beside it",
            txn(vec![put("b"), nested(txn(vec![delete("a", b"c")], vec![]))], vec![]),
            DUPLICATE,
        ),
        (
            "a put in one branch, a delete of it in the other",
            txn(vec![nested(txn(vec![put("k")], vec![delete("k", b"")]))], vec![]),
            ACCEPTED,
        ),
        (
            "a put keeping the value of a key deleted in another branch",
            txn(
                vec![nested(txn(vec![put_keeping_value("k")], vec![delete("k", b"")]))],
                vec![],
            ),
            ACCEPTED,
        ),
        (
            "the operation budget shared across levels",
            txn(
                (0..MAX_TXN_OPS / 2 - 1)
                    .map(|i| put(&format!("p{i}")))
                    .chain([nested(txn(vec![put("q"), put("r")], vec![]))])
                    .collect(),
                vec![],
            ),
            ACCEPTED,
        ),
        (
            "the operation budget exceeded by a nested txn",
            txn(
                (0..MAX_TXN_OPS - 1)
                    .map(|i| put(&format!("p{i}")))
                    .chain([nested(txn(vec![put("q"), put("r")], vec![]))])
                    .collect(),
                vec![],
            ),
            TOO_MANY,
        ),
    ]
}

/// What a txn answered: the revision and the outer branch, or the error.
type Outcome = Result<(i64, bool), (tonic::Code, String)>;

async fn send(kv: &mut KvClient<Channel>, request: pb::TxnRequest) -> Outcome {
    kv.txn(request)
        .await
        .map(|response| {
            let response = response.into_inner();
            (response.header.expect("header").revision, response.succeeded)
        })
        .map_err(|status| (status.code(), status.message().to_string()))
}

/// Every key with its revisions, version and value.
async fn everything(kv: &mut KvClient<Channel>) -> Vec<(Vec<u8>, i64, i64, i64, Vec<u8>)> {
    let response = kv
        .range(pb::RangeRequest {
            key: vec![0],
            range_end: vec![0],
            ..pb::RangeRequest::default()
        })
        .await
        .expect("range")
        .into_inner();
    response
        .kvs
        .into_iter()
        .map(|kv| (kv.key, kv.create_revision, kv.mod_revision, kv.version, kv.value))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_txns_are_judged_as_etcd_judges_them() {
    let etcd_dir = tempfile::tempdir().expect("tempdir");
    let kv_dir = tempfile::tempdir().expect("tempdir");
    let etcd = common::Cluster::start_members(&common::etcd_tool("ETCD_BIN", "etcd"), etcd_dir.path(), 15379, 1, &[]);
    let kv_server = common::Cluster::start_members(&common::kv_server(), kv_dir.path(), 15479, 1, &[]);
    let connect = |endpoint: String| async move {
        KvClient::new(common::connect(&endpoint, CALL_TIMEOUT).await.expect("connect"))
    };
    let mut etcd_kv = connect(etcd.members[0].endpoint()).await;
    let mut kv = connect(kv_server.members[0].endpoint()).await;

    for (what, request, expected) in shapes() {
        let etcd_outcome = send(&mut etcd_kv, request.clone()).await;
        let outcome = send(&mut kv, request).await;
        match expected {
            None => assert!(etcd_outcome.is_ok(), "{what}: etcd refused it: {etcd_outcome:?}"),
            Some(message) => assert_eq!(
                etcd_outcome,
                Err((tonic::Code::InvalidArgument, message.to_string())),
                "{what}: etcd"
            ),
        }
        assert_eq!(outcome, etcd_outcome, "{what}");
    }
    assert_eq!(everything(&mut kv).await, everything(&mut etcd_kv).await);
}
