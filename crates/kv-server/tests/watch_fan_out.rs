//! Goal: watch fan-out delivers exactly what it must at scale. 100,000
//! watchers on 100 streams all receive every event of 100 puts, in
//! revision order, each exactly once; and a watcher cancelled mid-stream
//! receives nothing more, while another on the same stream and key goes
//! on receiving.
//!
//! Method: one kv-server member process on loopback and real gRPC
//! streams from this process, 10 connections carrying 10 streams each.
//! Half the streams are read while the puts are made (events delivered as
//! they apply); the other half only after every put, so the member has to
//! hold their events back, merged in its outbox (the slow-client path). The
//! client keeps a little per watcher, not the events: the late readers
//! check each event against the puts' revisions as it arrives; the live
//! readers check that each watcher's revisions strictly increase, and at
//! the end that their count, sum and last revision are the puts'. After
//! the last expected event every stream is read for a further quiet
//! period, in which nothing more may arrive. Every wait is bounded.

mod common;

use std::time::Duration;

use kv_server::proto::etcdserverpb as pb;
use kv_server::proto::etcdserverpb::kv_client::KvClient;
use kv_server::proto::etcdserverpb::watch_client::WatchClient;
use pb::watch_request::RequestUnion;
use tokio::sync::mpsc;
use tokio::time::timeout;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::Streaming;

/// Client port of the member (peer port one above).
const BASE_PORT: u16 = 10379;
const CONNECTIONS: usize = 10;
const STREAMS_PER_CONNECTION: usize = 10;
const WATCHERS_PER_STREAM: usize = 1000;
const PUTS: usize = 100;
/// Keys the puts cycle through, all under the watched prefix.
const KEYS: usize = 10;
/// Bound on each call, and on creating all watchers.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Bound on every event reaching every watcher.
const DELIVERED_WITHIN: Duration = Duration::from_secs(240);
/// How long streams stay quiet after the last expected event.
const QUIET: Duration = Duration::from_millis(500);

fn create(watch_id: i64) -> pb::WatchRequest {
    pb::WatchRequest {
        request_union: Some(RequestUnion::CreateRequest(pb::WatchCreateRequest {
            key: b"fan/".to_vec(),
            range_end: b"fan0".to_vec(),
            watch_id,
            ..Default::default()
        })),
    }
}

fn cancel(watch_id: i64) -> pb::WatchRequest {
    pb::WatchRequest {
        request_union: Some(RequestUnion::CancelRequest(pb::WatchCancelRequest { watch_id })),
    }
}

async fn open_stream(channel: Channel) -> (mpsc::Sender<pb::WatchRequest>, Streaming<pb::WatchResponse>) {
    let (requests, outgoing) = mpsc::channel(WATCHERS_PER_STREAM + 16);
    let responses = WatchClient::new(channel)
        .watch(ReceiverStream::new(outgoing))
        .await
        .expect("open a watch stream")
        .into_inner();
    (requests, responses)
}

/// Creates watchers `1..=count` on the stream and waits for every
/// `created` response.
async fn create_watchers(
    requests: &mpsc::Sender<pb::WatchRequest>,
    responses: &mut Streaming<pb::WatchResponse>,
    count: usize,
) {
    for id in 1..=count as i64 {
        requests.send(create(id)).await.expect("send a create");
    }
    let mut created = 0;
    while created < count {
        let response = timeout(CALL_TIMEOUT, responses.message())
            .await
            .expect("created in time")
            .expect("stream open")
            .expect("a response");
        assert!(response.created && !response.canceled, "{response:?}");
        assert!(response.events.is_empty());
        created += 1;
    }
}

/// The next response on the stream: its watcher (one of `1..=watchers`,
/// not cancelled) and the revisions of its events.
async fn next_events(responses: &mut Streaming<pb::WatchResponse>, watchers: usize) -> (usize, Vec<i64>) {
    let response = responses.message().await.expect("stream open").expect("a response");
    let id = response.watch_id as usize;
    assert!((1..=watchers).contains(&id), "unknown watch id {id}");
    assert!(!response.canceled, "{response:?}");
    let revisions = response
        .events
        .iter()
        .map(|event| event.kv.as_ref().expect("an event has a key-value").mod_revision)
        .collect();
    (id, revisions)
}

/// Nothing more arrives on the stream for [`QUIET`].
async fn assert_quiet(responses: &mut Streaming<pb::WatchResponse>) {
    if let Ok(extra) = timeout(QUIET, responses.message()).await {
        panic!("a response after the last expected event: {extra:?}");
    }
}

/// A channel for watch streams: no call timeout, as watch calls are
/// long-lived.
async fn watch_channel(endpoint: &str) -> Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{endpoint}"))
        .expect("endpoint")
        .connect_timeout(common::CONNECT_TIMEOUT)
        .connect()
        .await
        .expect("connect")
}

/// Reads `responses` until every watcher has seen all of `revisions`,
/// checking each event against the next one its watcher expects; then
/// for [`QUIET`], in which nothing may arrive. Returns the events read.
async fn receive_all(mut responses: Streaming<pb::WatchResponse>, revisions: Vec<i64>, watchers: usize) -> usize {
    let mut next = vec![0usize; watchers + 1];
    let mut done = 0;
    let mut events = 0;
    while done < watchers {
        let (id, received) = next_events(&mut responses, watchers).await;
        for revision in received {
            assert!(
                next[id] < revisions.len(),
                "watcher {id} got revision {revision} after every put's"
            );
            assert_eq!(revision, revisions[next[id]], "watcher {id}, event {}", next[id]);
            next[id] += 1;
            events += 1;
            if next[id] == revisions.len() {
                done += 1;
            }
        }
    }
    assert_quiet(&mut responses).await;
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_watchers_each_receive_every_event_once_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _cluster = common::Cluster::start_members(&common::kv_server(), dir.path(), BASE_PORT, 1, &[]);
    let endpoint = format!("127.0.0.1:{BASE_PORT}");
    let mut streams = Vec::new();
    for _ in 0..CONNECTIONS {
        let channel = watch_channel(&endpoint).await;
        for _ in 0..STREAMS_PER_CONNECTION {
            streams.push(open_stream(channel.clone()).await);
        }
    }
    for (requests, responses) in &mut streams {
        create_watchers(requests, responses, WATCHERS_PER_STREAM).await;
    }
    let late = streams.split_off(streams.len() / 2);
    let (announce, puts) = tokio::sync::watch::channel(None);
    let mut senders = Vec::new();
    let mut live_readers = Vec::new();
    for (requests, responses) in streams {
        // The request side stays open until the check ends.
        senders.push(requests);
        live_readers.push(tokio::spawn(receive_live(responses, puts.clone(), WATCHERS_PER_STREAM)));
    }

    let mut kv = KvClient::new(common::connect(&endpoint, CALL_TIMEOUT).await.expect("connect"));
    let mut revisions = Vec::with_capacity(PUTS);
    for i in 0..PUTS {
        let put = pb::PutRequest {
            key: format!("fan/{}", i % KEYS).into_bytes(),
            value: format!("v{i}").into_bytes(),
            ..Default::default()
        };
        let header = kv.put(put).await.expect("put").into_inner().header.expect("header");
        revisions.push(header.revision);
    }
    assert!(revisions.windows(2).all(|pair| pair[0] < pair[1]));
    announce.send_replace(Some(revisions.clone()));

    let mut readers = Vec::new();
    for (requests, responses) in late {
        senders.push(requests);
        readers.push(tokio::spawn(receive_all(
            responses,
            revisions.clone(),
            WATCHERS_PER_STREAM,
        )));
    }
    let mut total = 0;
    for reader in readers {
        total += timeout(DELIVERED_WITHIN, reader)
            .await
            .expect("every event delivered in time")
            .expect("a reader");
    }
    for live in live_readers {
        total += timeout(DELIVERED_WITHIN, live)
            .await
            .expect("every event delivered in time")
            .expect("a live reader");
    }
    assert_eq!(total, CONNECTIONS * STREAMS_PER_CONNECTION * WATCHERS_PER_STREAM * PUTS);
    drop(senders);
}

/// Reads `responses` while the puts are still being made: each watcher's
/// revisions must strictly increase; once the puts' revisions arrive on
/// `puts`, every watcher must have exactly as many as there are puts,
/// with the same sum and the same last one. Then [`QUIET`] as above.
/// Returns the events read.
async fn receive_live(
    mut responses: Streaming<pb::WatchResponse>,
    puts: tokio::sync::watch::Receiver<Option<Vec<i64>>>,
    watchers: usize,
) -> usize {
    let mut count = vec![0usize; watchers + 1];
    let mut sum = vec![0i64; watchers + 1];
    let mut last = vec![0i64; watchers + 1];
    let mut done = 0;
    let mut events = 0;
    while done < watchers {
        let (id, received) = next_events(&mut responses, watchers).await;
        for revision in received {
            assert!(revision > last[id], "watcher {id}: {revision} after {}", last[id]);
            last[id] = revision;
            sum[id] += revision;
            count[id] += 1;
            events += 1;
            assert!(count[id] <= PUTS, "watcher {id} got more events than puts");
            if count[id] == PUTS {
                done += 1;
            }
        }
    }
    let revisions = puts
        .clone()
        .wait_for(Option::is_some)
        .await
        .expect("the puts' revisions")
        .clone()
        .expect("some");
    let expected_sum: i64 = revisions.iter().sum();
    for id in 1..=watchers {
        assert_eq!(
            (count[id], sum[id], last[id]),
            (revisions.len(), expected_sum, *revisions.last().expect("puts")),
            "watcher {id}"
        );
    }
    assert_quiet(&mut responses).await;
    events
}

/// Puts value `v{i}` at `fan/x`; the revision it made.
async fn put(kv: &mut KvClient<Channel>, i: usize) -> i64 {
    let request = pb::PutRequest {
        key: b"fan/x".to_vec(),
        value: format!("v{i}").into_bytes(),
        ..Default::default()
    };
    kv.put(request)
        .await
        .expect("put")
        .into_inner()
        .header
        .expect("header")
        .revision
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_watcher_receives_nothing_more() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = BASE_PORT + 100;
    let _cluster = common::Cluster::start_members(&common::kv_server(), dir.path(), port, 1, &[]);
    let endpoint = format!("127.0.0.1:{port}");
    let channel = common::connect(&endpoint, CALL_TIMEOUT).await.expect("connect");
    let (requests, mut responses) = open_stream(watch_channel(&endpoint).await).await;
    create_watchers(&requests, &mut responses, 2).await;
    let mut kv = KvClient::new(channel);

    // Five puts reach both watchers.
    let mut before = Vec::new();
    for i in 0..5 {
        before.push(put(&mut kv, i).await);
    }
    let mut seen = [0usize; 3];
    while seen[1] < 5 || seen[2] < 5 {
        let response = timeout(CALL_TIMEOUT, responses.message())
            .await
            .expect("events in time")
            .expect("stream open")
            .expect("a response");
        let id = response.watch_id as usize;
        for event in &response.events {
            assert_eq!(event.kv.as_ref().unwrap().mod_revision, before[seen[id]]);
            seen[id] += 1;
        }
    }

    // Watcher 1 is cancelled; five more puts reach watcher 2 only.
    requests.send(cancel(1)).await.expect("send the cancel");
    let cancelled = timeout(CALL_TIMEOUT, responses.message())
        .await
        .expect("cancel answered in time")
        .expect("stream open")
        .expect("a response");
    assert!(cancelled.canceled && cancelled.watch_id == 1, "{cancelled:?}");
    let mut after = Vec::new();
    for i in 5..10 {
        after.push(put(&mut kv, i).await);
    }
    let mut received = 0;
    while received < 5 {
        let response = timeout(CALL_TIMEOUT, responses.message())
            .await
            .expect("events in time")
            .expect("stream open")
            .expect("a response");
        assert_eq!(response.watch_id, 2, "the cancelled watcher got {response:?}");
        for event in &response.events {
            assert_eq!(event.kv.as_ref().unwrap().mod_revision, after[received]);
            received += 1;
        }
    }
    assert_quiet(&mut responses).await;
    drop(requests);
}
