//! Runs a workload against endpoints the way etcd's benchmark tool does:
//! `--conns` gRPC connections, spread round-robin over the endpoints (or
//! all to the leader with `--target-leader`), shared round-robin by
//! `--clients` clients. Each client has one request in flight, so at most
//! `--clients` are in flight in all. Requests are taken in order from one
//! generator, optionally paced by one shared rate limiter.
//!
//! Clients run inside workers: one tokio task per core (never more than
//! the clients), each driving its share of the clients concurrently. Each
//! worker records its clients' latencies in its own HDR histogram and
//! counts their errors by message, uncontended; the workers' figures are
//! merged when the run ends. An error never stops the run.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_proto::etcdserverpb as pb;
use etcd_proto::etcdserverpb::cluster_client::ClusterClient;
use etcd_proto::etcdserverpb::kv_client::KvClient;
use etcd_proto::etcdserverpb::maintenance_client::MaintenanceClient;
use parking_lot::Mutex;

use crate::connection::Connection;
use crate::gateway;
use crate::report::{new_histogram, Report};
use crate::workload::{Request, Requests, Workload};

/// Clients at most: each is a task with a request in flight; a million
/// would be more than any etcd deployment serves and would only measure
/// the load generator.
pub const CLIENTS_MAX: usize = 100_000;
/// Connections at most: each is an HTTP/2 connection with its own socket.
pub const CONNS_MAX: usize = 10_000;
/// How long a request may take before it counts as an error. etcd's tool
/// waits forever; a bound keeps a stuck server from hanging the run, and
/// a minute is far beyond any latency worth measuring.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// How long connecting to an endpoint may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest response accepted: etcd's client default receive limit.
pub const MAX_RESPONSE_BYTES: usize = 2 << 30;

#[derive(Debug, Clone)]
pub struct Target {
    pub endpoints: Vec<String>,
    pub conns: usize,
    pub clients: usize,
    pub target_leader: bool,
    /// Send through etcd's gRPC-JSON gateway (`gateway.rs`), one HTTP/1.1
    /// connection per client, instead of gRPC.
    pub gateway: bool,
}

/// `host:port` or a URL, as a URL tonic can dial.
pub fn endpoint_url(endpoint: &str) -> String {
    let endpoint = endpoint.trim();
    if endpoint.contains("://") {
        endpoint.to_string()
    } else {
        format!("http://{endpoint}")
    }
}

async fn connect(endpoint: &str) -> Result<crate::dial::Channel, String> {
    crate::dial::channel(endpoint).await
}

/// Attempts to find the leader, and the pause between them: a cluster
/// just started may have no leader yet, or its leader may not have
/// published its client URLs; five seconds covers an election.
const LEADER_ATTEMPTS: usize = 50;
const LEADER_RETRY: Duration = Duration::from_millis(100);

/// The leader's client URLs: the first endpoint that answers Status names
/// the leader, and the member list gives its URLs (as etcd's tool does).
/// Retried while no leader or no URLs are known yet.
pub async fn leader_endpoints(endpoints: &[String]) -> Result<Vec<String>, String> {
    let mut last_error = String::new();
    for _ in 0..LEADER_ATTEMPTS {
        match find_leader(endpoints).await {
            Ok(urls) => return Ok(urls),
            Err(error) => last_error = error,
        }
        tokio::time::sleep(LEADER_RETRY).await;
    }
    Err(last_error)
}

async fn find_leader(endpoints: &[String]) -> Result<Vec<String>, String> {
    let mut last_error = String::from("no endpoints");
    for endpoint in endpoints {
        let channel = match connect(endpoint).await {
            Ok(channel) => channel,
            Err(error) => {
                last_error = error;
                continue;
            }
        };
        let status = match MaintenanceClient::new(channel.clone())
            .status(pb::StatusRequest {})
            .await
        {
            Ok(status) => status.into_inner(),
            Err(status) => {
                last_error = format!("{endpoint}: {}", status.message());
                continue;
            }
        };
        let members = ClusterClient::new(channel)
            .member_list(pb::MemberListRequest { linearizable: false })
            .await
            .map_err(|s| format!("{endpoint}: member list: {}", s.message()))?
            .into_inner()
            .members;
        return members
            .into_iter()
            .find(|m| m.id == status.leader && !m.client_ur_ls.is_empty())
            .map(|m| m.client_ur_ls)
            .ok_or_else(|| "failed to find a leader endpoint".to_string());
    }
    Err(format!("failed to get a leader from any endpoint: {last_error}"))
}

/// How a failed request is counted: etcd's server errors by their message
/// (as etcd's client reports them), anything else with its gRPC code.
pub fn error_message(status: &tonic::Status) -> String {
    if status.message().starts_with("etcdserver:") {
        status.message().to_string()
    } else {
        format!("rpc error: code = {:?} desc = {}", status.code(), status.message())
    }
}

/// etcd's `rate.NewLimiter(rate, 1)`: requests start at least `1 / rate`
/// apart, shared by every client.
pub struct RateLimiter {
    interval: Duration,
    next: Mutex<Instant>,
}

impl RateLimiter {
    pub fn new(per_second: u64) -> RateLimiter {
        RateLimiter {
            interval: Duration::from_secs_f64(1.0 / per_second.max(1) as f64),
            next: Mutex::new(Instant::now()),
        }
    }

    pub async fn wait(&self) {
        let slot = {
            let mut next = self.next.lock();
            let now = Instant::now();
            let slot = (*next).max(now);
            *next = slot + self.interval;
            slot
        };
        tokio::time::sleep_until(slot.into()).await;
    }
}

/// One client's way to the server: a gRPC client on a shared connection,
/// or its own gateway connection.
enum Client {
    Grpc(KvClient<Connection>),
    Gateway(gateway::Client),
}

impl Client {
    async fn send(&mut self, request: Request) -> Result<(), String> {
        match self {
            Client::Grpc(client) => send(client, request).await,
            Client::Gateway(client) => client.send(request).await,
        }
    }
}

/// Sends one request; an error is returned as the message it is counted
/// under.
async fn send(client: &mut KvClient<Connection>, request: Request) -> Result<(), String> {
    let status = |status: tonic::Status| error_message(&status);
    match request {
        Request::Put(put) => client.put(put).await.map(drop).map_err(status),
        Request::Range(range, expect_count) => {
            let count = client.range(range).await.map_err(status)?.into_inner().count;
            match expect_count {
                Some(expected) if count != expected => {
                    Err(format!("loadgen: the range counted {count} keys, expected {expected}"))
                }
                _ => Ok(()),
            }
        }
        Request::Txn(txn) => client.txn(txn).await.map(drop).map_err(status),
    }
}

fn progress_bar(total: u64) -> Option<indicatif::ProgressBar> {
    if !std::io::stdout().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::with_draw_target(Some(total), indicatif::ProgressDrawTarget::stdout());
    let style = indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} {percent}% {per_sec} ETA {eta}")
        .expect("a valid template");
    bar.set_style(style);
    Some(bar)
}

/// What every client of a run shares: the requests still to send, the
/// pace, and the progress bar.
#[derive(Clone)]
struct Shared {
    requests: Arc<Mutex<Requests>>,
    limiter: Option<Arc<RateLimiter>>,
    bar: Option<indicatif::ProgressBar>,
}

/// Latencies and errors (by message) one worker saw.
type Outcomes = (hdrhistogram::Histogram<u64>, BTreeMap<String, u64>);

fn check_target(target: &Target) -> Result<(), String> {
    if target.clients == 0 || target.clients > CLIENTS_MAX {
        return Err(format!("--clients must be 1 to {CLIENTS_MAX}"));
    }
    if target.conns == 0 || target.conns > CONNS_MAX {
        return Err(format!("--conns must be 1 to {CONNS_MAX}"));
    }
    if target.endpoints.is_empty() {
        return Err("no --endpoints".into());
    }
    Ok(())
}

/// `--conns` connections, round-robin over the endpoints (or all to the
/// leader), each with the origin its requests name.
async fn open_connections(target: &Target) -> Result<Vec<(Connection, http::Uri)>, String> {
    let endpoints = if target.target_leader {
        leader_endpoints(&target.endpoints).await?
    } else {
        target.endpoints.clone()
    };
    let mut conns = Vec::with_capacity(target.conns);
    for i in 0..target.conns {
        let endpoint = &endpoints[i % endpoints.len()];
        let origin: http::Uri = endpoint_url(endpoint).parse().map_err(|e| format!("{endpoint}: {e}"))?;
        conns.push((Connection::open(endpoint, CONNECT_TIMEOUT).await, origin));
    }
    Ok(conns)
}

/// The clients of a run: gRPC clients sharing `--conns` connections, or
/// gateway clients each with its own connection, round-robin over the
/// endpoints (or the leader's).
async fn open_clients(target: &Target) -> Result<Vec<Client>, String> {
    if !target.gateway {
        let conns = open_connections(target).await?;
        return Ok((0..target.clients)
            .map(|i| {
                let (connection, origin) = conns[i % conns.len()].clone();
                Client::Grpc(KvClient::with_origin(connection, origin).max_decoding_message_size(MAX_RESPONSE_BYTES))
            })
            .collect());
    }
    let endpoints = if target.target_leader {
        leader_endpoints(&target.endpoints).await?
    } else {
        target.endpoints.clone()
    };
    let mut clients = Vec::with_capacity(target.clients);
    for i in 0..target.clients {
        let endpoint = &endpoints[i % endpoints.len()];
        clients.push(Client::Gateway(gateway::Client::open(endpoint, CONNECT_TIMEOUT).await));
    }
    Ok(clients)
}

/// Runs `workload` against `target` and reports.
pub async fn run(target: &Target, workload: &Workload, rate: u64) -> Result<Report, String> {
    check_target(target)?;
    let mut clients = open_clients(target).await?.into_iter().map(Some).collect::<Vec<_>>();
    let shared = Shared {
        requests: Arc::new(Mutex::new(workload.requests()?)),
        limiter: (rate > 0).then(|| Arc::new(RateLimiter::new(rate))),
        bar: progress_bar(workload.total()),
    };
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(target.clients);
    let started = Instant::now();
    let mut handles = Vec::with_capacity(workers);
    for worker in 0..workers {
        let share: Vec<Client> = (worker..target.clients)
            .step_by(workers)
            .filter_map(|i| clients[i].take())
            .collect();
        handles.push(tokio::spawn(run_worker(share, shared.clone())));
    }
    let mut latencies = new_histogram();
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    for handle in handles {
        let (worker_latencies, worker_errors) = handle.await.map_err(|e| format!("a worker failed: {e}"))?;
        latencies.add(&worker_latencies).expect("histograms grow as needed");
        for (message, count) in worker_errors {
            *errors.entry(message).or_default() += count;
        }
    }
    let total = started.elapsed();
    if let Some(bar) = &shared.bar {
        bar.finish();
    }
    Ok(Report::new(total, &latencies, errors))
}

/// One worker task: its clients, each with one request in flight, until
/// the requests run out.
async fn run_worker(clients: Vec<Client>, shared: Shared) -> Outcomes {
    // Only this task touches them; the locks are never contended and only
    // satisfy the runtime's need for `Send` futures.
    let latencies = Mutex::new(new_histogram());
    let errors: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());
    let client_loops = clients
        .into_iter()
        .map(|client| run_client(client, &shared, &latencies, &errors));
    futures_util::future::join_all(client_loops).await;
    (latencies.into_inner(), errors.into_inner())
}

/// One client: takes the next request, waits for the pace, sends it and
/// records its latency or its error, until none are left.
async fn run_client(
    mut client: Client,
    shared: &Shared,
    latencies: &Mutex<hdrhistogram::Histogram<u64>>,
    errors: &Mutex<BTreeMap<String, u64>>,
) {
    loop {
        let Some(request) = shared.requests.lock().next() else {
            break;
        };
        if let Some(limiter) = &shared.limiter {
            limiter.wait().await;
        }
        let start = Instant::now();
        let outcome = tokio::time::timeout(REQUEST_TIMEOUT, client.send(request)).await;
        match outcome {
            Ok(Ok(())) => {
                let nanos = start.elapsed().as_nanos().max(1) as u64;
                latencies.lock().record(nanos).expect("histograms grow as needed");
            }
            Ok(Err(message)) => *errors.lock().entry(message).or_default() += 1,
            Err(_) => {
                let message = format!("loadgen: no answer within {}s", REQUEST_TIMEOUT.as_secs());
                *errors.lock().entry(message).or_default() += 1;
            }
        }
        if let Some(bar) = &shared.bar {
            bar.inc(1);
        }
    }
}
