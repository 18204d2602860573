//! Runs a workload against endpoints the way etcd's benchmark tool does:
//! `--conns` gRPC connections, spread round-robin over the endpoints (or
//! all to the leader with `--target-leader`), shared round-robin by
//! `--clients` clients. Each client has one request in flight, so at most
//! `--clients` are in flight in all. Requests are taken in order from one
//! generator, optionally paced by one shared rate limiter.
//!
//! Each client records its latencies in its own HDR histogram and counts
//! its errors by message; they are merged when the run ends. An error
//! never stops the run.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_proto::etcdserverpb as pb;
use etcd_proto::etcdserverpb::cluster_client::ClusterClient;
use etcd_proto::etcdserverpb::kv_client::KvClient;
use etcd_proto::etcdserverpb::maintenance_client::MaintenanceClient;
use parking_lot::Mutex;
use tonic::transport::{Channel, Endpoint};

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

async fn connect(endpoint: &str) -> Result<Channel, String> {
    Endpoint::from_shared(endpoint_url(endpoint))
        .map_err(|e| format!("{endpoint}: {e}"))?
        .tcp_nodelay(true)
        .connect_timeout(CONNECT_TIMEOUT)
        .connect()
        .await
        .map_err(|e| format!("connecting to {endpoint}: {e}"))
}

/// A connection made on first use, as etcd's client dials: an endpoint
/// that cannot be reached fails each request sent to it (counted as
/// errors) instead of the run.
fn connect_lazy(endpoint: &str) -> Result<Channel, String> {
    Ok(Endpoint::from_shared(endpoint_url(endpoint))
        .map_err(|e| format!("{endpoint}: {e}"))?
        .tcp_nodelay(true)
        .connect_timeout(CONNECT_TIMEOUT)
        .connect_lazy())
}

/// The leader's client URLs: the first endpoint that answers Status names
/// the leader, and the member list gives its URLs (as etcd's tool does).
pub async fn leader_endpoints(endpoints: &[String]) -> Result<Vec<String>, String> {
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

async fn send(client: &mut KvClient<Channel>, request: Request) -> Result<(), tonic::Status> {
    match request {
        Request::Put(put) => client.put(put).await.map(drop),
        Request::Range(range) => client.range(range).await.map(drop),
        Request::Txn(txn) => client.txn(txn).await.map(drop),
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

/// Runs `workload` against `target` and reports.
pub async fn run(target: &Target, workload: &Workload, rate: u64) -> Result<Report, String> {
    if target.clients == 0 || target.clients > CLIENTS_MAX {
        return Err(format!("--clients must be 1 to {CLIENTS_MAX}"));
    }
    if target.conns == 0 || target.conns > CONNS_MAX {
        return Err(format!("--conns must be 1 to {CONNS_MAX}"));
    }
    if target.endpoints.is_empty() {
        return Err("no --endpoints".into());
    }
    let endpoints = if target.target_leader {
        leader_endpoints(&target.endpoints).await?
    } else {
        target.endpoints.clone()
    };
    let mut conns = Vec::with_capacity(target.conns);
    for i in 0..target.conns {
        conns.push(connect_lazy(&endpoints[i % endpoints.len()])?);
    }
    let requests: Arc<Mutex<Requests>> = Arc::new(Mutex::new(workload.requests()?));
    let limiter = (rate > 0).then(|| Arc::new(RateLimiter::new(rate)));
    let bar = progress_bar(workload.total());

    let started = Instant::now();
    let mut clients = Vec::with_capacity(target.clients);
    for i in 0..target.clients {
        let mut client = KvClient::new(conns[i % conns.len()].clone()).max_decoding_message_size(MAX_RESPONSE_BYTES);
        let requests = requests.clone();
        let limiter = limiter.clone();
        let bar = bar.clone();
        clients.push(tokio::spawn(async move {
            let mut latencies = new_histogram();
            let mut errors: BTreeMap<String, u64> = BTreeMap::new();
            loop {
                let Some(request) = requests.lock().next() else { break };
                if let Some(limiter) = &limiter {
                    limiter.wait().await;
                }
                let start = Instant::now();
                match tokio::time::timeout(REQUEST_TIMEOUT, send(&mut client, request)).await {
                    Ok(Ok(())) => {
                        let nanos = start.elapsed().as_nanos().max(1) as u64;
                        latencies.record(nanos).expect("histograms grow as needed");
                    }
                    Ok(Err(status)) => *errors.entry(error_message(&status)).or_default() += 1,
                    Err(_) => {
                        *errors
                            .entry(format!("loadgen: no answer within {}s", REQUEST_TIMEOUT.as_secs()))
                            .or_default() += 1
                    }
                }
                if let Some(bar) = &bar {
                    bar.inc(1);
                }
            }
            (latencies, errors)
        }));
    }
    let mut latencies = new_histogram();
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    for client in clients {
        let (client_latencies, client_errors) = client.await.map_err(|e| format!("a client task failed: {e}"))?;
        latencies.add(&client_latencies).expect("histograms grow as needed");
        for (message, count) in client_errors {
            *errors.entry(message).or_default() += count;
        }
    }
    let total = started.elapsed();
    if let Some(bar) = bar {
        bar.finish();
    }
    Ok(Report::new(total, &latencies, errors))
}
