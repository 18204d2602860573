//! Goal: a range whose answer is over etcd's gRPC send limit
//! (`math.MaxInt32` bytes) gets etcd's answer from kv-server, as from
//! etcd 3.5.17: ResourceExhausted, "grpc: trying to send message larger
//! than max (N vs. 2147483647)", with N the answer's encoded size; the
//! member holds no more of it than the bound while it counts, and serves
//! on with nothing lost.
//!
//! Method: a fresh single member of each server (one after the other, so
//! that their data is not on disk at once), with a quota of 8 GiB, gets
//! [`KEYS`] puts of [`VALUE_BYTES`] (2.24 GB in all, each put under the
//! default `--max-request-bytes`). Then real etcdctl asks for every key.
//! N must be the size prost gives the answer with the header the server
//! answers a small range with just before (same revision and term), so
//! both servers are held to one exact figure. For kv-server, the peak RSS
//! during the refused range must stay within the bound plus the buffers
//! of one read ([`GROWTH_MAX`]); etcd's peak is printed beside it. After
//! it, a limited range of the same keys is answered whole, and every key
//! is still there.
//!
//! Needs etcd 3.5.17 (`ETCD_BIN`) and etcdctl (`ETCDCTL_BIN`).

mod common;

use std::time::Duration;

use kv_server::proto::etcdserverpb as pb;
use kv_server::proto::etcdserverpb::kv_client::KvClient;
use kv_server::proto::mvccpb;

/// Keys put: with [`VALUE_BYTES`] each, an answer of about 2.24 GB, over
/// the send limit by about 90 MB.
const KEYS: usize = 1_600;
/// Each value: under etcd's default `--max-request-bytes` (1.5 MiB).
const VALUE_BYTES: usize = 1_400_000;
/// Puts in flight at once while filling.
const FILL_CLIENTS: usize = 8;
/// The quota both servers run with: the keys need more than the default
/// 2 GiB.
const QUOTA: &str = "--quota-backend-bytes=8589934592";
/// etcd's gRPC send limit.
const SEND_MAX: u64 = i32::MAX as u64;
/// How far above where the range found it kv-server's RSS may peak: the
/// bound on what a range holds (the send limit, counted in encoded
/// bytes), plus 256 MiB for a read's buffers and the index entries of
/// the keys it walks.
const GROWTH_MAX: i64 = SEND_MAX as i64 + (256 << 20);
/// How long one put may take on a loaded machine.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

fn key(at: usize) -> Vec<u8> {
    format!("k{at:04}").into_bytes()
}

async fn fill(endpoint: &str) {
    let channel = common::connect(endpoint, CALL_TIMEOUT).await.expect("connect");
    let mut clients = tokio::task::JoinSet::new();
    for client in 0..FILL_CLIENTS {
        let mut kv = KvClient::new(channel.clone());
        clients.spawn(async move {
            for at in (client..KEYS).step_by(FILL_CLIENTS) {
                let put = pb::PutRequest {
                    key: key(at),
                    value: vec![b'v'; VALUE_BYTES],
                    ..Default::default()
                };
                kv.put(put).await.expect("put");
            }
        });
    }
    while let Some(done) = clients.join_next().await {
        done.expect("a fill client");
    }
}

/// The header the member answers a small range with, from etcdctl's JSON.
fn header(endpoint: &str) -> pb::ResponseHeader {
    let output = common::etcdctl(endpoint, &["get", "k0000", "-w", "json"]);
    assert!(output.status.success(), "{}", common::text(&output));
    let answer: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
    let field = |name: &str| answer["header"][name].as_u64().unwrap_or(0);
    pb::ResponseHeader {
        cluster_id: field("cluster_id"),
        member_id: field("member_id"),
        revision: field("revision") as i64,
        raft_term: field("raft_term"),
    }
}

/// The encoded size of the answer to a range of every key, with
/// `header`: each key was put once, at one of revisions 2 to KEYS + 1.
fn answer_bytes(header: &pb::ResponseHeader) -> u64 {
    let mut kv = mvccpb::KeyValue {
        key: key(0),
        version: 1,
        value: vec![b'v'; VALUE_BYTES],
        ..Default::default()
    };
    let mut bytes = prost::encoding::message::encoded_len(1, header);
    for revision in 2..=KEYS as i64 + 1 {
        kv.create_revision = revision;
        kv.mod_revision = revision;
        bytes += prost::encoding::message::encoded_len(2, &kv);
    }
    bytes += prost::encoding::int64::encoded_len(4, &(KEYS as i64));
    bytes as u64
}

/// Fills a fresh member of `binary`, asks it for every key, and checks
/// the refusal. Returns the peak growth of its RSS during the range.
async fn refuses_every_key(binary: &std::path::Path, base: u16) -> i64 {
    let dir = tempfile::tempdir().expect("tempdir");
    let member = common::Cluster::start_members(binary, dir.path(), base, 1, &[QUOTA]);
    let endpoint = member.members[0].endpoint();
    fill(&endpoint).await;
    let header = header(&endpoint);
    assert_eq!(header.revision, KEYS as i64 + 1, "one revision per put");

    let pid = member.members[0].pid().expect("the member runs");
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("reset the high-water mark");
    let before = common::status_bytes(pid, "VmRSS:");
    let output = common::etcdctl(&endpoint, &["get", "k", "--prefix", "-w", "json"]);
    let growth = common::status_bytes(pid, "VmHWM:") - before;
    let printed = common::text(&output);
    assert!(!output.status.success(), "{binary:?} sent the whole answer");
    let expected = format!(
        "code = ResourceExhausted desc = grpc: trying to send message larger than max ({} vs. {SEND_MAX})",
        answer_bytes(&header)
    );
    assert!(
        printed.contains(&expected),
        "{binary:?}: expected {expected:?} in\n{printed}"
    );

    let output = common::etcdctl(&endpoint, &["get", "k", "--prefix", "--limit", "100", "--keys-only"]);
    assert!(output.status.success(), "{}", common::text(&output));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter(|l| !l.is_empty())
            .count(),
        100
    );
    let output = common::etcdctl(&endpoint, &["get", "k", "--prefix", "--count-only", "-w", "fields"]);
    let printed = common::text(&output);
    let count = format!("\"Count\" : {KEYS}");
    assert!(
        printed.lines().any(|line| line == count),
        "every key is still there:\n{printed}"
    );
    growth
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_over_the_send_limit_is_refused_as_etcd_refuses_it() {
    let etcd_growth = refuses_every_key(&common::etcd_tool("ETCD_BIN", "etcd"), 27379).await;
    let kv_growth = refuses_every_key(&common::kv_server(), 27479).await;
    eprintln!(
        "RSS peak growth during the refused range: etcd 3.5.17 {} MiB, kv-server {} MiB",
        etcd_growth >> 20,
        kv_growth >> 20
    );
    assert!(
        kv_growth <= GROWTH_MAX,
        "kv-server's RSS peaked {kv_growth} bytes above where the range found it"
    );
}
