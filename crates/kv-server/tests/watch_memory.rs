//! Goal: watch streams whose clients stop reading cost their member a
//! bounded amount of memory, `WATCH_STREAM_STALLED_BYTES_MAX` each, however
//! much is written meanwhile, and lose nothing: once read, a stalled
//! stream delivers every event.
//!
//! Method: one kv-server member process on loopback. `STALLED` streams,
//! each on a connection of its own, watch every key and then never read,
//! while 100 MiB of puts are made: ten times each stream's bound. The
//! member's resident memory is taken then, and again after one stalled
//! stream has been read to its end (every event of the puts, once, in
//! revision order) and all were closed: the member returns freed memory
//! to the system at once, so the drop is what the stalled streams held,
//! and must stay within `STALLED` × the bound plus a little noise. (The
//! member's own growth from the writes, in its store, is there in both
//! readings.) With the bound taken out, the same test measured a drop of
//! 105–115 MB.

mod common;

use std::time::Duration;

use kv_server::proto::etcdserverpb as pb;
use kv_server::proto::etcdserverpb::kv_client::KvClient;
use kv_server::proto::etcdserverpb::watch_client::WatchClient;
use kv_server::WATCH_STREAM_STALLED_BYTES_MAX;
use pb::watch_request::RequestUnion;
use tokio::sync::mpsc;
use tokio::time::timeout;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

/// Client port of the member (peer port one above).
const BASE_PORT: u16 = 17379;
const STALLED: usize = 2;
/// Puts per round and their values: 25,600 × 4 KiB = 100 MiB of events
/// for every stream, ten times its bound.
const PUTS: usize = 25_600;
const VALUE_BYTES: usize = 4096;
/// Puts in flight: batches stay well under the hub's 256 KiB, so events
/// take the hub's path, not history's.
const WRITERS: usize = 32;
/// Allowed for the allocator's and the store's own noise.
const NOISE_BYTES: i64 = 16 << 20;
/// How long the member is given to free a closed stream's memory.
const SETTLE: Duration = Duration::from_secs(2);
/// Bound on each call.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Bound on reading a stalled stream to its end.
const READ_WITHIN: Duration = Duration::from_secs(120);

fn rss_bytes(pid: u32) -> i64 {
    common::status_bytes(pid, "VmRSS:")
}

/// `PUTS` puts of distinct keys under `prefix`, `WRITERS` at a time;
/// returns their revisions in key order.
async fn put_round(channel: &Channel, prefix: &str) -> Vec<i64> {
    let mut writers = Vec::new();
    for writer in 0..WRITERS {
        let mut kv = KvClient::new(channel.clone());
        let prefix = prefix.to_string();
        writers.push(tokio::spawn(async move {
            let mut revisions = Vec::new();
            for i in (writer..PUTS).step_by(WRITERS) {
                let request = pb::PutRequest {
                    key: format!("{prefix}{i:06}").into_bytes(),
                    value: vec![b'v'; VALUE_BYTES],
                    ..Default::default()
                };
                let response = timeout(CALL_TIMEOUT, kv.put(request))
                    .await
                    .expect("put in time")
                    .expect("put");
                revisions.push((i, response.into_inner().header.expect("header").revision));
            }
            revisions
        }));
    }
    let mut all = Vec::new();
    for writer in writers {
        all.extend(writer.await.expect("writer"));
    }
    all.sort_unstable();
    all.into_iter().map(|(_, revision)| revision).collect()
}

/// A stream on a connection of its own watching every key, created and
/// then not read.
async fn stalled_stream(endpoint: &str) -> (mpsc::Sender<pb::WatchRequest>, tonic::Streaming<pb::WatchResponse>) {
    let channel = common::connect(endpoint, CALL_TIMEOUT).await.expect("connect");
    let (requests, queued) = mpsc::channel(4);
    let create = pb::WatchCreateRequest {
        key: vec![0],
        range_end: vec![0],
        ..Default::default()
    };
    requests
        .send(pb::WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(create)),
        })
        .await
        .expect("queue");
    let mut client = WatchClient::new(channel);
    let call = client.watch(ReceiverStream::new(queued));
    let mut responses = timeout(CALL_TIMEOUT, call)
        .await
        .expect("in time")
        .expect("watch")
        .into_inner();
    let created = timeout(CALL_TIMEOUT, responses.message()).await.expect("in time");
    assert!(created.expect("created").expect("a response").created);
    (requests, responses)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_watch_streams_hold_bounded_memory_and_lose_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = common::Cluster::start_members(&common::kv_server(), dir.path(), BASE_PORT, 1, &[]);
    let endpoint = cluster.members[0].endpoint();
    let pid = cluster.members[0].child.as_ref().expect("running").id();
    let channel = common::connect(&endpoint, CALL_TIMEOUT).await.expect("connect");
    put_round(&channel, "warm/").await;

    let mut stalled = Vec::new();
    for _ in 0..STALLED {
        stalled.push(stalled_stream(&endpoint).await);
    }
    let revisions = put_round(&channel, "stalled/").await;
    let while_stalled = rss_bytes(pid);

    let (_requests, mut responses) = stalled.pop().expect("a stalled stream");
    let read = timeout(READ_WITHIN, async {
        let mut seen = Vec::with_capacity(PUTS);
        while seen.len() < PUTS {
            let response = responses.message().await.expect("no error").expect("open");
            for event in response.events {
                let kv = event.kv.expect("kv");
                assert_eq!(kv.value.len(), VALUE_BYTES);
                seen.push(kv.mod_revision);
            }
        }
        seen
    })
    .await
    .expect("the stalled stream read to its end in time");
    let mut expected = revisions;
    expected.sort_unstable();
    assert_eq!(read, expected, "every event once, in revision order");

    drop(responses);
    stalled.clear();
    tokio::time::sleep(SETTLE).await;
    let released = while_stalled - rss_bytes(pid);
    let allowed = (STALLED * WATCH_STREAM_STALLED_BYTES_MAX) as i64 + NOISE_BYTES;
    eprintln!("member RSS {while_stalled} B while {STALLED} streams were stalled, {released} B less once they closed; allowed {allowed} B");
    assert!(
        released <= allowed,
        "stalled streams held {released} B, more than {STALLED} x {WATCH_STREAM_STALLED_BYTES_MAX} B + {NOISE_BYTES} B"
    );
    let written = (PUTS * VALUE_BYTES) as i64;
    assert!(
        allowed * 2 < written,
        "the test writes too little to tell a bound from none"
    );
}
