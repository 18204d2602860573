//! `loadgen watchers`: watchers held open, for the watch benchmarks that
//! etcd's tool has no command for. It opens `--streams` watch streams over
//! `--conns` connections, creates `--watch-per-stream` watchers on each
//! (all on `--watched-key`/`--range-end`; by default every key), waits for every
//! `created` response, prints one line saying so, and holds them for
//! `--hold` seconds. With `--read` (the default) it reads and drops what
//! arrives; with `--read=false` it never reads again after the creates, a
//! client that stopped reading: its HTTP/2 windows fill and the member
//! must hold back its events without delaying anyone else.
//!
//! `scripts/watch-bench.sh` runs it to measure memory per idle watcher
//! (member RSS before and while they are held) and the cost of streams
//! that stop reading to other clients' puts.

use std::time::{Duration, Instant};

use etcd_proto::etcdserverpb as pb;
use etcd_proto::etcdserverpb::watch_client::WatchClient;
use pb::watch_request::RequestUnion;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::cli::WatchersArgs;

/// How long connecting and creating every watcher may take.
const CREATED_WITHIN: Duration = Duration::from_secs(300);

/// Requests buffered per stream: every create of a stream at once. The
/// command refuses more watchers per stream than this.
pub const WATCHERS_PER_STREAM_MAX: usize = 100_000;

/// Runs the command: creates the watchers, holds them, reports both.
pub async fn run(endpoints: &[String], conns: usize, args: &WatchersArgs) -> Result<(), String> {
    if args.watch_per_stream == 0 || args.watch_per_stream > WATCHERS_PER_STREAM_MAX {
        return Err(format!("--watch-per-stream must be 1..={WATCHERS_PER_STREAM_MAX}"));
    }
    let conns = conns.max(1);
    let started = Instant::now();
    let channels = connect_all(endpoints, conns).await?;
    let (key, range_end) = watched_range(args);
    let mut creating = Vec::with_capacity(args.streams);
    for s in 0..args.streams {
        let channel = channels[s % conns].clone();
        let (key, range_end, count) = (key.clone(), range_end.clone(), args.watch_per_stream);
        creating.push(tokio::spawn(open_and_create(channel, key, range_end, count)));
    }
    let mut streams = Vec::with_capacity(args.streams);
    for task in creating {
        let stream = tokio::time::timeout(CREATED_WITHIN, task)
            .await
            .map_err(|_| format!("watchers not created within {CREATED_WITHIN:?}"))?
            .map_err(|e| e.to_string())??;
        streams.push(stream);
    }
    println!(
        "watchers: created {} on {} streams over {conns} connections in {:.2} s; holding {} s, {}",
        args.streams * args.watch_per_stream,
        args.streams,
        started.elapsed().as_secs_f64(),
        args.hold,
        if args.read { "reading" } else { "not reading" }
    );
    let (events, responses) = hold(streams, Duration::from_secs(args.hold), args.read).await?;
    println!("watchers: received {events} events in {responses} responses while holding");
    Ok(())
}

/// One channel per connection, over the endpoints in turn.
pub(crate) async fn connect_all(endpoints: &[String], conns: usize) -> Result<Vec<crate::dial::Channel>, String> {
    let mut channels = Vec::with_capacity(conns);
    for i in 0..conns {
        channels.push(crate::dial::channel(&endpoints[i % endpoints.len()]).await?);
    }
    Ok(channels)
}

/// The watched key and range end, as etcd's clients send them: an empty
/// key with no end is every key.
fn watched_range(args: &WatchersArgs) -> (Vec<u8>, Vec<u8>) {
    if args.watched_key.is_empty() && args.range_end.is_empty() {
        return (vec![0], vec![0]);
    }
    let key = if args.watched_key.is_empty() {
        vec![0]
    } else {
        args.watched_key.clone().into_bytes()
    };
    (key, args.range_end.clone().into_bytes())
}

/// Holds the streams for `hold`: reading and counting events, or not
/// reading at all. Returns the events read and the responses that
/// carried them (a server that batches sends fewer, larger responses).
async fn hold(streams: Vec<Stream>, hold: Duration, read: bool) -> Result<(u64, u64), String> {
    let mut readers = Vec::new();
    let mut requests = Vec::new();
    for (sender, mut responses) in streams {
        // The request side stays open while the watchers are held.
        requests.push(sender);
        if read {
            readers.push(tokio::spawn(async move {
                let deadline = tokio::time::Instant::now() + hold;
                let (mut events, mut received) = (0u64, 0u64);
                while let Ok(Ok(Some(response))) = tokio::time::timeout_at(deadline, responses.message()).await {
                    events += response.events.len() as u64;
                    received += u64::from(!response.events.is_empty());
                }
                (events, received)
            }));
        } else {
            // Kept, never read: the server's sends to it back up.
            readers.push(tokio::spawn(async move {
                tokio::time::sleep(hold).await;
                drop(responses);
                (0, 0)
            }));
        }
    }
    let (mut events, mut received) = (0, 0);
    for reader in readers {
        let (read, responses) = reader.await.map_err(|e| e.to_string())?;
        events += read;
        received += responses;
    }
    drop(requests);
    Ok((events, received))
}

type Stream = (mpsc::Sender<pb::WatchRequest>, tonic::Streaming<pb::WatchResponse>);

/// Opens one watch stream and creates `count` watchers on it, waiting for
/// every `created` response.
async fn open_and_create(
    channel: crate::dial::Channel,
    key: Vec<u8>,
    range_end: Vec<u8>,
    count: usize,
) -> Result<Stream, String> {
    // The creates are queued before the call: etcd's server sends the
    // response headers only with its first response, so waiting for
    // them before creating anything would wait forever.
    let (sender, outgoing) = mpsc::channel(count + 1);
    for _ in 0..count {
        let create = pb::WatchCreateRequest {
            key: key.clone(),
            range_end: range_end.clone(),
            ..Default::default()
        };
        sender
            .try_send(pb::WatchRequest {
                request_union: Some(RequestUnion::CreateRequest(create)),
            })
            .map_err(|_| "the watch stream's queue is sized for every create".to_string())?;
    }
    let mut responses = WatchClient::new(channel)
        .watch(ReceiverStream::new(outgoing))
        .await
        .map_err(|e| format!("opening a watch stream: {e}"))?
        .into_inner();
    let mut created = 0;
    while created < count {
        next_created(&mut responses).await?;
        created += 1;
    }
    Ok((sender, responses))
}

/// Reads `responses` up to the next `created` answer; a refused watcher
/// or an ended stream is an error.
pub(crate) async fn next_created(responses: &mut tonic::Streaming<pb::WatchResponse>) -> Result<(), String> {
    loop {
        let response = responses
            .message()
            .await
            .map_err(|e| format!("watch stream: {e}"))?
            .ok_or("the watch stream ended")?;
        if response.canceled {
            return Err(format!("a watcher was refused: {}", response.cancel_reason));
        }
        if response.created {
            return Ok(());
        }
    }
}
