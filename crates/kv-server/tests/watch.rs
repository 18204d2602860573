//! Goal: watches behave as etcd's do: history from a start revision with
//! previous values, ranges and filters, automatic and chosen watch ids and
//! the create errors, cancel, progress requests, periodic progress,
//! fragmented responses, the cancel of a watcher whose start was compacted,
//! and streams that require a leader ending when there is none.
//!
//! Method: one sequence of real gRPC calls on one watch stream, made
//! through a follower, run against a real etcd v3.5.17 cluster and against
//! this project's, each three member processes on loopback. Every
//! expectation is asserted against both, so the test also shows the
//! expectations are etcd's.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use kv_server::proto::etcdserverpb as pb;
use kv_server::proto::etcdserverpb::kv_client::KvClient;
use kv_server::proto::etcdserverpb::watch_client::WatchClient;
use kv_server::proto::mvccpb;
use pb::watch_create_request::FilterType;
use pb::watch_request::RequestUnion;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::transport::Channel;
use tonic::Streaming;

/// How long any one expected response may take.
const RESPONSE_WITHIN: Duration = Duration::from_secs(10);
/// The request limit both clusters run with.
const MAX_REQUEST_BYTES: usize = 10_000;
/// The size from which etcd fragments a watch response: the request limit
/// plus gRPC's 512 KiB allowance.
const FRAGMENT_LIMIT: usize = MAX_REQUEST_BYTES + 512 * 1024;
/// Bytes of each value in the fragmenting step, within the request limit.
const BIG_VALUE_BYTES: usize = 9000;
/// Keys put twice in the fragmenting step: 60 events, 30 of them with a
/// previous value, about 810 KB, above [`FRAGMENT_LIMIT`].
const FRAGMENTED_KEYS: usize = 30;
/// The periodic progress interval both clusters run with.
const PROGRESS_INTERVAL: &str = "1s";

const PUT: i32 = mvccpb::event::EventType::Put as i32;
const DELETE: i32 = mvccpb::event::EventType::Delete as i32;

struct Watching {
    requests: mpsc::Sender<pb::WatchRequest>,
    responses: Streaming<pb::WatchResponse>,
}

impl Watching {
    /// Opens a stream with `first` already queued: etcd sends a stream's
    /// headers only with its first response.
    async fn open(channel: Channel, first: pb::WatchRequest, require_leader: bool) -> Result<Watching, tonic::Status> {
        let (requests, queued) = mpsc::channel(16);
        requests.send(first).await.expect("queue");
        let mut call = tonic::Request::new(ReceiverStream::new(queued));
        if require_leader {
            call.metadata_mut().insert("hasleader", "true".parse().expect("ascii"));
        }
        let responses = WatchClient::new(channel).watch(call).await?.into_inner();
        Ok(Watching { requests, responses })
    }

    async fn send(&self, request: RequestUnion) {
        self.requests
            .send(pb::WatchRequest {
                request_union: Some(request),
            })
            .await
            .expect("send");
    }

    async fn next(&mut self) -> pb::WatchResponse {
        tokio::time::timeout(RESPONSE_WITHIN, self.responses.next())
            .await
            .expect("a response in time")
            .expect("the stream is open")
            .expect("a response, not an error")
    }

    /// Reads event responses until each watcher in `expected` has its
    /// number of events; fails on any other response or any extra event.
    async fn events(&mut self, expected: &[(i64, usize)]) -> HashMap<i64, Vec<mvccpb::Event>> {
        let mut got: HashMap<i64, Vec<mvccpb::Event>> = HashMap::new();
        let done = |got: &HashMap<i64, Vec<mvccpb::Event>>| {
            expected.iter().all(|(id, n)| got.get(id).map_or(0, Vec::len) == *n)
        };
        while !done(&got) {
            let response = self.next().await;
            let wanted = expected.iter().find(|(id, _)| *id == response.watch_id);
            assert!(
                wanted.is_some() && !response.events.is_empty() && !response.created && !response.canceled,
                "unexpected {response:?} while waiting for {expected:?}"
            );
            let list = got.entry(response.watch_id).or_default();
            list.extend(response.events);
            assert!(list.len() <= wanted.expect("checked").1, "too many events: {got:?}");
        }
        got
    }
}

fn create(request: pb::WatchCreateRequest) -> RequestUnion {
    RequestUnion::CreateRequest(request)
}

fn watch_key(key: &str) -> pb::WatchCreateRequest {
    pb::WatchCreateRequest {
        key: key.as_bytes().to_vec(),
        ..Default::default()
    }
}

async fn put(kv: &mut KvClient<Channel>, key: &str, value: &[u8]) -> i64 {
    let response = kv
        .put(pb::PutRequest {
            key: key.as_bytes().to_vec(),
            value: value.to_vec(),
            ..Default::default()
        })
        .await
        .expect("put")
        .into_inner();
    response.header.expect("header").revision
}

async fn delete(kv: &mut KvClient<Channel>, key: &str) -> i64 {
    let response = kv
        .delete_range(pb::DeleteRangeRequest {
            key: key.as_bytes().to_vec(),
            ..Default::default()
        })
        .await
        .expect("delete")
        .into_inner();
    response.header.expect("header").revision
}

/// An event's kind, key, value, mod revision, and previous value.
fn summary(event: &mvccpb::Event) -> (i32, String, String, i64, Option<String>) {
    let kv = event.kv.clone().expect("kv");
    (
        event.r#type,
        String::from_utf8_lossy(&kv.key).into_owned(),
        String::from_utf8_lossy(&kv.value).into_owned(),
        kv.mod_revision,
        event
            .prev_kv
            .as_ref()
            .map(|previous| String::from_utf8_lossy(&previous.value).into_owned()),
    )
}

fn revision(response: &pb::WatchResponse) -> i64 {
    response.header.as_ref().expect("header").revision
}

async fn exercise(binary: &Path, base: u16) {
    let dir = tempfile::tempdir().expect("tempdir");
    let max_request_bytes = MAX_REQUEST_BYTES.to_string();
    let mut cluster = common::Cluster::start(
        binary,
        dir.path(),
        base,
        &[
            "--max-request-bytes",
            &max_request_bytes,
            "--experimental-watch-progress-notify-interval",
            PROGRESS_INTERVAL,
        ],
    );
    let endpoints: Vec<String> = cluster.members.iter().map(common::Member::endpoint).collect();
    let (leader, _) = common::leader(&endpoints, Duration::from_secs(5)).await;
    let follower = (leader + 1) % 3;
    let channel = common::connect(&endpoints[follower], Duration::from_secs(10))
        .await
        .expect("connect");
    let mut kv = KvClient::new(channel.clone());

    let r1 = put(&mut kv, "w/a", b"1").await;
    put(&mut kv, "w/b", b"1").await;
    let r3 = delete(&mut kv, "w/a").await;
    let r4 = put(&mut kv, "w/a", b"2").await;

    // History from r1 with previous values; the header is the store's
    // revision when the watcher was created.
    let first = pb::WatchCreateRequest {
        start_revision: r1,
        prev_kv: true,
        ..watch_key("w/a")
    };
    let mut w = Watching::open(
        channel.clone(),
        pb::WatchRequest {
            request_union: Some(create(first)),
        },
        false,
    )
    .await
    .expect("watch stream");
    let created = w.next().await;
    assert!(created.created && !created.canceled, "{created:?}");
    assert_eq!((created.watch_id, revision(&created)), (0, r4));
    let history = w.events(&[(0, 3)]).await;
    let history: Vec<_> = history[&0].iter().map(summary).collect();
    assert_eq!(
        history,
        vec![
            (PUT, "w/a".into(), "1".into(), r1, None),
            (DELETE, "w/a".into(), "".into(), r3, Some("1".into())),
            (PUT, "w/a".into(), "2".into(), r4, None),
        ]
    );

    // A chosen id, a range with a filter; then an automatic id, which
    // continues after the last automatic one.
    w.send(create(pb::WatchCreateRequest {
        range_end: b"w0".to_vec(),
        filters: vec![FilterType::Nodelete as i32],
        watch_id: 7,
        ..watch_key("w/")
    }))
    .await;
    let created = w.next().await;
    assert!(
        created.created && !created.canceled && created.watch_id == 7,
        "{created:?}"
    );
    w.send(create(watch_key("w/c"))).await;
    let created = w.next().await;
    assert!(
        created.created && !created.canceled && created.watch_id == 1,
        "{created:?}"
    );

    // The create errors: a duplicate id, and a range that ends before it
    // starts. Both answer created and canceled, with id -1 and etcd's text.
    for (request, reason) in [
        (
            pb::WatchCreateRequest {
                watch_id: 7,
                ..watch_key("w/x")
            },
            "mvcc: duplicate watch ID provided on the WatchStream",
        ),
        (
            pb::WatchCreateRequest {
                range_end: b"w/a".to_vec(),
                ..watch_key("w/z")
            },
            "mvcc: watcher range is empty",
        ),
    ] {
        w.send(create(request)).await;
        let refused = w.next().await;
        assert!(refused.created && refused.canceled, "{refused:?}");
        assert_eq!((refused.watch_id, refused.cancel_reason.as_str()), (-1, reason));
    }

    // Live events: the range sees the put but not the delete; the single
    // key sees its put.
    let r5 = put(&mut kv, "w/c", b"x").await;
    let r6 = delete(&mut kv, "w/b").await;
    let live = w.events(&[(7, 1), (1, 1)]).await;
    for id in [7, 1] {
        let got: Vec<_> = live[&id].iter().map(summary).collect();
        assert_eq!(got, vec![(PUT, "w/c".into(), "x".into(), r5, None)], "watch {id}");
    }

    // A progress request: id -1 at the revision every watcher has reached.
    w.send(RequestUnion::ProgressRequest(pb::WatchProgressRequest {})).await;
    let progress = w.next().await;
    assert!(
        progress.events.is_empty() && !progress.created && !progress.canceled,
        "{progress:?}"
    );
    assert_eq!((progress.watch_id, revision(&progress)), (-1, r6));

    // Cancel: answered, and the watcher hears nothing more; the next
    // response is watch 0's, with its previous value.
    w.send(RequestUnion::CancelRequest(pb::WatchCancelRequest { watch_id: 7 }))
        .await;
    let canceled = w.next().await;
    assert!(canceled.canceled && !canceled.created, "{canceled:?}");
    assert_eq!((canceled.watch_id, revision(&canceled)), (7, r6));
    put(&mut kv, "w/d", b"1").await;
    let r8 = put(&mut kv, "w/a", b"3").await;
    let next = w.events(&[(0, 1)]).await;
    assert_eq!(
        next[&0].iter().map(summary).collect::<Vec<_>>(),
        vec![(PUT, "w/a".into(), "3".into(), r8, Some("2".into()))]
    );

    // Fragments: a watcher that asks and starts in the past gets its
    // history in one response, too big here (etcd's limit: the request
    // limit plus 512 KiB), so it comes in pieces: all but the last marked,
    // each below the limit unless it holds one event.
    let big = vec![b'v'; BIG_VALUE_BYTES];
    let mut fragmented_from = 0;
    for generation in 0..2 {
        for i in 0..FRAGMENTED_KEYS {
            let at = put(&mut kv, &format!("f/{i:02}"), &big).await;
            if generation == 0 && i == 0 {
                fragmented_from = at;
            }
        }
    }
    w.send(create(pb::WatchCreateRequest {
        range_end: b"f0".to_vec(),
        start_revision: fragmented_from,
        prev_kv: true,
        fragment: true,
        ..watch_key("f/")
    }))
    .await;
    let created = w.next().await;
    assert!(created.created && created.watch_id == 2, "{created:?}");
    let mut pieces = Vec::new();
    let mut events = 0;
    while events < 2 * FRAGMENTED_KEYS {
        let piece = w.next().await;
        assert_eq!(piece.watch_id, 2, "{:?}", piece.header);
        let bytes = prost::Message::encoded_len(&piece);
        assert!(bytes < FRAGMENT_LIMIT || piece.events.len() == 1, "{bytes} bytes");
        events += piece.events.len();
        pieces.push(piece.fragment);
    }
    assert_eq!(events, 2 * FRAGMENTED_KEYS);
    assert!(pieces.len() >= 2, "{pieces:?}");
    assert!(!pieces[pieces.len() - 1], "{pieces:?}");
    assert!(pieces[..pieces.len() - 1].iter().all(|marked| *marked), "{pieces:?}");

    // Periodic progress for a watcher that asked, at the revision reached.
    w.send(create(pb::WatchCreateRequest {
        progress_notify: true,
        ..watch_key("quiet")
    }))
    .await;
    let created = w.next().await;
    assert!(created.created && created.watch_id == 3, "{created:?}");
    let notified = w.next().await;
    assert!(notified.events.is_empty() && !notified.canceled, "{notified:?}");
    assert_eq!((notified.watch_id, revision(&notified)), (3, revision(&created)));

    // A start below the compact revision: created, then cancelled with
    // the compact revision.
    let compacted_at = put(&mut kv, "w/e", b"1").await;
    kv.compact(pb::CompactionRequest {
        revision: compacted_at,
        ..Default::default()
    })
    .await
    .expect("compact");
    w.send(create(pb::WatchCreateRequest {
        start_revision: r1,
        ..watch_key("w/a")
    }))
    .await;
    // The periodic progress of watch 3 may come in between.
    let mut responses = Vec::new();
    while responses.len() < 2 {
        let response = w.next().await;
        if response.watch_id != 3 {
            responses.push(response);
        }
    }
    assert!(responses[0].created && responses[0].watch_id == 4, "{:?}", responses[0]);
    let compacted = &responses[1];
    assert!(compacted.canceled && compacted.watch_id == 4, "{compacted:?}");
    assert_eq!(compacted.compact_revision, compacted_at);

    // A stream that requires a leader: refused, or ended with "no leader",
    // once the member it reaches has none.
    let mut guarded = Watching::open(
        channel.clone(),
        pb::WatchRequest {
            request_union: Some(create(watch_key("g"))),
        },
        true,
    )
    .await
    .expect("guarded stream");
    assert!(guarded.next().await.created);
    for other in (0..3).filter(|i| *i != follower) {
        cluster.kill(other);
    }
    let ended = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match guarded.responses.next().await {
                Some(Ok(_)) => continue,
                Some(Err(status)) => return Some(status),
                None => return None,
            }
        }
    })
    .await
    .expect("the guarded stream ends");
    let status = ended.expect("an error status");
    assert_eq!(
        (status.code(), status.message()),
        (tonic::Code::Unavailable, "etcdserver: no leader")
    );
    let refused = Watching::open(
        channel,
        pb::WatchRequest {
            request_union: Some(create(watch_key("g"))),
        },
        true,
    )
    .await;
    match refused {
        Err(status) => assert_eq!(
            (status.code(), status.message()),
            (tonic::Code::Unavailable, "etcdserver: no leader")
        ),
        Ok(mut stream) => panic!("a stream without a leader: {:?}", stream.responses.next().await),
    }
}

/// Puts made while a watcher does not read: more responses than the
/// client's HTTP/2 stream window (2 MiB: 500 of these), the stream's queue
/// (128) and the hub (1024 batches) hold together.
const UNREAD_PUTS: usize = 3000;
/// Bytes of each value those puts write.
const UNREAD_VALUE_BYTES: usize = 4096;
/// A value above the 256 KiB of events the hub carries per batch, below
/// the 1.5 MiB request limit.
const LARGE_VALUE_BYTES: usize = 300 * 1024;
/// How long reading all of them back may take.
const READ_BACK_WITHIN: Duration = Duration::from_secs(60);

/// A watcher that stops reading while thousands of changes are made loses
/// none of them: once it reads again it gets every revision, once, in
/// order (this project's stream catches up from history once it has
/// fallen behind the hub). Then a value too large for the hub to carry
/// arrives whole (read from history too), and a small one after it.
///
/// `lag_logged`: a line the member's log must then hold, to show the test
/// exercised the catch-up.
async fn slow_reader(binary: &Path, base: u16, lag_logged: Option<&str>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = common::Cluster::start(binary, dir.path(), base, &[]);
    let endpoints: Vec<String> = cluster.members.iter().map(common::Member::endpoint).collect();
    let (leader, _) = common::leader(&endpoints, Duration::from_secs(5)).await;
    let channel = common::connect(&endpoints[(leader + 1) % 3], Duration::from_secs(10))
        .await
        .expect("connect");
    let mut kv = KvClient::new(channel.clone());
    let mut w = Watching::open(
        channel,
        pb::WatchRequest {
            request_union: Some(create(pb::WatchCreateRequest {
                range_end: b"s0".to_vec(),
                ..watch_key("s/")
            })),
        },
        false,
    )
    .await
    .expect("watch stream");
    let created = w.next().await;
    assert!(created.created, "{created:?}");
    let value = vec![b'v'; UNREAD_VALUE_BYTES];
    let mut revisions = Vec::with_capacity(UNREAD_PUTS);
    for i in 0..UNREAD_PUTS {
        revisions.push(put(&mut kv, &format!("s/{i:05}"), &value).await);
    }
    let read_back = tokio::time::timeout(READ_BACK_WITHIN, async {
        let mut seen = Vec::with_capacity(UNREAD_PUTS);
        while seen.len() < UNREAD_PUTS {
            let response = w.next().await;
            assert_eq!(response.watch_id, 0, "{:?}", response.header);
            for event in response.events {
                let kv = event.kv.expect("kv");
                assert_eq!(event.r#type, PUT);
                assert_eq!(kv.value.len(), UNREAD_VALUE_BYTES);
                seen.push((String::from_utf8_lossy(&kv.key).into_owned(), kv.mod_revision));
            }
        }
        seen
    })
    .await
    .expect("every event read back in time");
    let expected: Vec<(String, i64)> = revisions
        .iter()
        .enumerate()
        .map(|(i, revision)| (format!("s/{i:05}"), *revision))
        .collect();
    assert_eq!(read_back.len(), expected.len());
    let first_difference = read_back.iter().zip(&expected).position(|(got, want)| got != want);
    assert_eq!(first_difference, None, "events differ from the puts");

    // A value larger than the hub carries (256 KiB; this project's streams
    // then read the batch from history) arrives whole, then a small one.
    let big = vec![b'b'; LARGE_VALUE_BYTES];
    let big_revision = put(&mut kv, "s/large", &big).await;
    let small_revision = put(&mut kv, "s/small", b"v").await;
    let mut after = Vec::new();
    while after.len() < 2 {
        let response = w.next().await;
        after.extend(response.events.into_iter().map(|event| {
            let kv = event.kv.expect("kv");
            (kv.key, kv.value.len(), kv.mod_revision)
        }));
    }
    assert_eq!(
        after,
        vec![
            (b"s/large".to_vec(), LARGE_VALUE_BYTES, big_revision),
            (b"s/small".to_vec(), 1, small_revision),
        ]
    );
    if let Some(line) = lag_logged {
        let follower = &cluster.members[(leader + 1) % 3].name;
        let log = std::fs::read_to_string(cluster.dir.join(format!("{follower}.log"))).expect("member log");
        assert!(log.contains(line), "{follower}'s log lacks {line:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_etcd_slow_watchers_lose_nothing() {
    slow_reader(&common::etcd_tool("ETCD_BIN", "etcd"), 12379, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_server_slow_watchers_lose_nothing() {
    slow_reader(
        &common::kv_server(),
        12479,
        Some("a watch stream fell behind the hub; catching up from history"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_etcd_watches_behave_so() {
    exercise(&common::etcd_tool("ETCD_BIN", "etcd"), 11379).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_server_watches_behave_as_etcd_does() {
    exercise(&common::kv_server(), 11479).await;
}
