//! etcd's benchmark tool's `watch` and `watch-latency`, with its flags
//! and its report.
//!
//! - `watch`: `--streams` streams over `--conns` connections, each with
//!   `--watch-per-stream` watchers on `--watched-key-total` keys (etcd's
//!   key scheme). It prints "Watch creation summary", each create timed
//!   until its `created` answer. Then `--put-total` puts go to the
//!   watched keys, at most `--put-rate` per second, from `--clients`
//!   concurrent putters. It prints "Watch events received summary", one
//!   result per event received, the rate being events per second until
//!   every watcher has every event, as etcd's tool does.
//! - `watch-latency`: `--clients` watchers of one key over `--conns`
//!   connections (one stream per connection, as the tool's clients share
//!   theirs), and `--total` puts to it at most `--put-rate` per second
//!   (the first second's worth at once, as the tool's limiter allows),
//!   each awaited by every watcher. The puts go over one more connection,
//!   to the endpoint after the watchers' last, where the tool's put
//!   client dials. It reports the time from the put's answer to each
//!   watcher's event, as etcd's tool times it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_proto::etcdserverpb as pb;
use etcd_proto::etcdserverpb::kv_client::KvClient;
use etcd_proto::etcdserverpb::watch_client::WatchClient;
use pb::watch_request::RequestUnion;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::cli::{WatchArgs, WatchLatencyArgs};
use crate::keys::{KeyBuffer, Rng};
use crate::report::{new_histogram, Report};
use crate::watchers::{connect_all, next_created};

/// The longest a benchmark waits for the events it expects: past it, a
/// watcher missed events and the run fails rather than hang.
const EVENTS_WITHIN: Duration = Duration::from_secs(600);

/// Watchers per stream the `watch` command takes (each create is queued
/// before the stream opens).
const WATCHERS_PER_STREAM_MAX: usize = 100_000;

type Stream = (mpsc::Sender<pb::WatchRequest>, tonic::Streaming<pb::WatchResponse>);

fn create(key: &[u8]) -> pb::WatchRequest {
    pb::WatchRequest {
        request_union: Some(RequestUnion::CreateRequest(pb::WatchCreateRequest {
            key: key.to_vec(),
            ..Default::default()
        })),
    }
}

/// Opens a stream creating a watcher on each of `keys` in turn, each
/// timed until its `created` answer.
async fn open_timed(channel: crate::dial::Channel, keys: Vec<Vec<u8>>) -> Result<(Stream, Vec<Duration>), String> {
    let (sender, outgoing) = mpsc::channel(keys.len() + 1);
    let started = Instant::now();
    sender
        .try_send(create(&keys[0]))
        .map_err(|_| "the stream's queue holds every create")?;
    let mut responses = WatchClient::new(channel)
        .watch(ReceiverStream::new(outgoing))
        .await
        .map_err(|e| format!("opening a watch stream: {e}"))?
        .into_inner();
    let mut took = Vec::with_capacity(keys.len());
    let mut asked = started;
    for next in keys.iter().skip(1).map(Some).chain([None]) {
        next_created(&mut responses).await?;
        took.push(asked.elapsed());
        if let Some(key) = next {
            asked = Instant::now();
            sender
                .try_send(create(key))
                .map_err(|_| "the stream's queue holds every create")?;
        }
    }
    Ok(((sender, responses), took))
}

/// Reads `stream` until it has had `expected` events; each event's
/// latency is recorded as etcd's tool records it (from receiving its
/// response), so the figure of note is the rate.
async fn receive(mut stream: Stream, expected: u64, results: mpsc::UnboundedSender<Duration>) -> Result<(), String> {
    let mut received = 0;
    while received < expected {
        let response = stream
            .1
            .message()
            .await
            .map_err(|e| format!("watch stream: {e}"))?
            .ok_or("the watch stream ended")?;
        let arrived = Instant::now();
        for _ in &response.events {
            let _ = results.send(arrived.elapsed());
            received += 1;
        }
    }
    Ok(())
}

/// etcd's tool's watched keys: `--watched-key-total` keys of
/// `--key-size` bytes, sequential or random within `--key-space-size`.
fn watched_keys(args: &WatchArgs) -> Result<Vec<Vec<u8>>, String> {
    let mut buffer = KeyBuffer::new(args.key_size, args.key_space_size)?;
    let mut rng = Rng::from_clock();
    Ok((0..args.watched_key_total as u64)
        .map(|i| {
            let number = if args.sequential_keys {
                i % args.key_space_size
            } else {
                rng.below(args.key_space_size)
            };
            buffer.key(number)
        })
        .collect())
}

/// Builds a report of `results` over `elapsed`, with its title line.
fn report(title: &str, elapsed: Duration, results: &[Duration]) -> String {
    let mut histogram = new_histogram();
    for latency in results {
        // `record`, not `saturating_record`: the latter clamps to the
        // histogram's first bounds (about 2 µs) instead of growing it.
        let nanos = (latency.as_nanos() as u64).max(1);
        histogram.record(nanos).expect("histograms grow as needed");
    }
    let report = Report::new(elapsed, &histogram, BTreeMap::new());
    format!("{title}\n{}", report.render())
}

/// `loadgen watch`.
pub async fn watch(endpoints: &[String], conns: usize, clients: usize, args: &WatchArgs) -> Result<String, String> {
    if args.watch_per_stream == 0 || args.watch_per_stream > WATCHERS_PER_STREAM_MAX {
        return Err(format!("--watch-per-stream must be 1 to {WATCHERS_PER_STREAM_MAX}"));
    }
    let keys = watched_keys(args)?;
    let channels = connect_all(endpoints, conns.max(1)).await?;
    // Watcher i watches key i mod keys, as etcd's tool assigns them.
    let started = Instant::now();
    let mut opening = Vec::with_capacity(args.streams);
    for s in 0..args.streams {
        let stream_keys: Vec<Vec<u8>> = (0..args.watch_per_stream)
            .map(|w| keys[(s * args.watch_per_stream + w) % keys.len()].clone())
            .collect();
        opening.push(tokio::spawn(open_timed(
            channels[s % channels.len()].clone(),
            stream_keys,
        )));
    }
    let mut streams = Vec::with_capacity(args.streams);
    let mut creates = Vec::new();
    for opened in opening {
        let (stream, took) = opened.await.map_err(|e| e.to_string())??;
        streams.push(stream);
        creates.extend(took);
    }
    let mut out = report("Watch creation summary:", started.elapsed(), &creates);
    out += &put_and_receive(&channels, clients, args, &keys, streams).await?;
    Ok(out)
}

/// The put phase of `watch`: the events summary.
async fn put_and_receive(
    channels: &[crate::dial::Channel],
    clients: usize,
    args: &WatchArgs,
    keys: &[Vec<u8>],
    streams: Vec<Stream>,
) -> Result<String, String> {
    // What each stream must receive: every put to a key, once per watcher
    // of that key on the stream.
    let puts_per_key: Vec<u64> = (0..keys.len())
        .map(|k| (0..args.put_total).filter(|i| i % keys.len() == k).count() as u64)
        .collect();
    let (results, mut collected) = mpsc::unbounded_channel();
    let started = Instant::now();
    let mut receivers = Vec::new();
    for (s, stream) in streams.into_iter().enumerate() {
        let expected: u64 = (0..args.watch_per_stream)
            .map(|w| puts_per_key[(s * args.watch_per_stream + w) % keys.len()])
            .sum();
        receivers.push(tokio::spawn(receive(stream, expected, results.clone())));
    }
    drop(results);
    let puts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let pacing = args.put_rate;
    let mut putters = Vec::new();
    for c in 0..clients.max(1) {
        let mut kv = KvClient::new(channels[c % channels.len()].clone());
        let (puts, keys) = (puts.clone(), keys.to_vec());
        let total = args.put_total;
        putters.push(tokio::spawn(async move {
            loop {
                let i = puts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= total {
                    return Ok::<(), String>(());
                }
                if pacing > 0 {
                    let due = started + Duration::from_secs_f64(i as f64 / pacing as f64);
                    tokio::time::sleep_until(due.into()).await;
                }
                let put = pb::PutRequest {
                    key: keys[i % keys.len()].clone(),
                    value: b"data".to_vec(),
                    ..Default::default()
                };
                kv.put(put).await.map_err(|e| format!("put: {}", e.message()))?;
            }
        }));
    }
    for putter in putters {
        putter.await.map_err(|e| e.to_string())??;
    }
    let waited = tokio::time::timeout(EVENTS_WITHIN, async {
        for receiver in receivers {
            receiver.await.map_err(|e| e.to_string())??;
        }
        Ok::<(), String>(())
    })
    .await;
    waited.map_err(|_| format!("not every event arrived within {EVENTS_WITHIN:?}"))??;
    let elapsed = started.elapsed();
    let mut events = Vec::new();
    while let Ok(latency) = collected.try_recv() {
        events.push(latency);
    }
    Ok(report("Watch events received summary:", elapsed, &events))
}

/// How many of `watchers` watchers each watch stream holds, as etcd's
/// tool places them: watcher c on connection c mod `conns`, and a
/// connection's watchers on its one stream. Streams are in connection
/// order; a connection without watchers opens none.
fn watchers_per_stream(conns: usize, watchers: usize) -> Vec<usize> {
    (0..conns.min(watchers))
        .map(|s| (s..watchers).step_by(conns).count())
        .collect()
}

/// `loadgen watch-latency`.
pub async fn watch_latency(
    endpoints: &[String],
    conns: usize,
    clients: usize,
    args: &WatchLatencyArgs,
) -> Result<String, String> {
    let mut rng = Rng::from_clock();
    let key = rng.bytes(args.key_size);
    let value = rng.bytes(args.val_size);
    // etcd's tool dials `--conns` clients, each to one endpoint in turn,
    // and gives watcher c the client c mod conns; a client's watchers
    // share its one watch stream. Its put client is the next dial, so it
    // goes to one endpoint: the one after the last watchers' connection.
    let conns = conns.max(1);
    let streams = watchers_per_stream(conns, clients.max(1));
    let channels = connect_all(endpoints, conns + 1).await?;
    let mut arrivals = Vec::with_capacity(streams.len());
    for (s, &on_stream) in streams.iter().enumerate() {
        let (mut stream, _) = open_timed(channels[s].clone(), vec![key.clone(); on_stream]).await?;
        // One reader per stream, noting when each event arrives.
        let (arrived, receiver) = mpsc::unbounded_channel();
        arrivals.push((receiver, on_stream));
        tokio::spawn(async move {
            while let Ok(Some(response)) = stream.1.message().await {
                let at = Instant::now();
                for _ in &response.events {
                    if arrived.send(at).is_err() {
                        return;
                    }
                }
            }
        });
    }
    let putter = KvClient::new(channels[conns].clone());
    // The puts run as a task of the runtime, as the stream readers do, so
    // that a put's answer and an event each wake a task on the runtime's
    // threads: timed from the caller's thread, the answer would also pay
    // for waking that thread, and every latency would read a few µs short.
    let timing = tokio::spawn(put_and_time(putter, arrivals, key, value, args.total, args.put_rate));
    let (elapsed, latencies) = timing.await.map_err(|e| format!("the put task: {e}"))??;
    Ok(report("", elapsed, &latencies).trim_start().to_string())
}

/// Arrival times of one stream's events, and how many watchers it holds.
type Arrivals = (mpsc::UnboundedReceiver<Instant>, usize);

/// Puts `value` to `key` `total` times at most `put_rate` per second
/// (0: no limit), and times each watcher's event from each put's answer.
/// Returns the time taken and the latencies.
async fn put_and_time(
    mut putter: KvClient<crate::dial::Channel>,
    mut arrivals: Vec<Arrivals>,
    key: Vec<u8>,
    value: Vec<u8>,
    total: usize,
    put_rate: u64,
) -> Result<(Duration, Vec<Duration>), String> {
    let watchers: usize = arrivals.iter().map(|(_, on_stream)| on_stream).sum();
    let started = Instant::now();
    let mut latencies = Vec::with_capacity(total * watchers);
    // etcd's tool's limiter holds a second's worth of puts at the start
    // (its burst is the rate): the first `put_rate` go at once.
    let burst = put_rate as usize;
    for i in 0..total {
        if put_rate > 0 && i >= burst {
            let due = started + Duration::from_secs_f64((i + 1 - burst) as f64 / put_rate as f64);
            tokio::time::sleep_until(due.into()).await;
        }
        let put = pb::PutRequest {
            key: key.clone(),
            value: value.clone(),
            ..Default::default()
        };
        putter.put(put).await.map_err(|e| format!("put: {}", e.message()))?;
        // Timed from the put's answer, as etcd's tool times it; an event
        // that came first counts as no wait.
        let answered = Instant::now();
        for (arrival, on_stream) in &mut arrivals {
            for _ in 0..*on_stream {
                let at = tokio::time::timeout(EVENTS_WITHIN, arrival.recv())
                    .await
                    .map_err(|_| "a watcher missed an event".to_string())?
                    .ok_or("a watch stream ended")?;
                latencies.push(at.saturating_duration_since(answered));
            }
        }
    }
    Ok((started.elapsed(), latencies))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watchers_are_placed_as_etcds_tool_places_them() {
        assert_eq!(watchers_per_stream(1, 1), vec![1]);
        assert_eq!(watchers_per_stream(10, 10), vec![1; 10]);
        assert_eq!(watchers_per_stream(10, 4), vec![1; 4]);
        assert_eq!(watchers_per_stream(3, 10), vec![4, 3, 3]);
        assert_eq!(watchers_per_stream(2, 100), vec![50, 50]);
    }

    #[test]
    fn a_report_keeps_latencies_of_milliseconds() {
        let results = [
            Duration::from_micros(5),
            Duration::from_micros(9_500),
            Duration::from_millis(40),
        ];
        let text = report("title", Duration::from_secs(1), &results);
        let slowest = text
            .lines()
            .find_map(|line| line.trim().strip_prefix("Slowest:"))
            .expect("a Slowest line");
        let seconds: f64 = slowest.trim().trim_end_matches(" secs.").parse().expect("a number");
        assert!((seconds - 0.040).abs() < 0.0001, "slowest {seconds} in:\n{text}");
        assert!(text.starts_with("title\n"), "{text}");
    }
}
