//! Serving: the peer port (raft streams, snapshots, forwarded lease
//! calls) and the client port (etcd's gRPC services, and on the same
//! listener `/health`, `/version` and the gRPC-JSON gateway: see
//! `client_port.rs`), then the background tasks, until
//! SIGINT or SIGTERM, or until the member is removed from the cluster.
//!
//! A stop by signal is etcd's graceful stop, in etcd's order:
//! 1. the client listeners stop taking connections and requests (HTTP/2
//!    GOAWAY), and the requests already in flight are answered, for at
//!    most [`CLIENT_DRAIN_MAX`]; clients go on with another member;
//! 2. a leader hands leadership to its most caught-up voter
//!    (`Member::step_down`), so the cluster does not wait out an election
//!    timeout for a new leader;
//! 3. the raft loop ends after its current turn (its WAL closed), the
//!    apply stage applies what was committed, the store writes its open
//!    batch, and the process exits with 0.

use std::sync::Arc;

use tonic_health::ServingStatus;

use crate::api::access::{self, AccessPolicy};
use crate::api::gateway::{self, Gateway};
use crate::api::grpc::{GrpcServices, HealthService};
use crate::api::http;
use crate::api::peer::PeerService;
use crate::config::ListenAddr;
use crate::config::{self, GRPC_OVERHEAD_BYTES};
use crate::error::Error;
use crate::member::core::Member;
use crate::peer::receive::RaftInbound;
use crate::raft::inbox::NodeSender;
use crate::server::client_port::{self, ClientPort, Traffic, Transport};
use crate::server::listener::{BoundedListener, Listen, ListenerTls, CLIENT_CONNECTIONS_MAX, PEER_CONNECTIONS_MAX};
use crate::server::tasks;
use crate::storage::layout::DataDir;
use crate::tls::admission::Admission;

/// Serves until SIGINT or SIGTERM. The peer port is served on `peers`, a
/// runtime of its own (see `start.rs`), so that raft traffic keeps moving
/// while client requests hold every worker of the main runtime.
pub async fn serve(
    member: Arc<Member>,
    node: NodeSender,
    dir: DataDir,
    peers: tokio::runtime::Handle,
) -> Result<(), Error> {
    let peer_member = member.clone();
    peers
        .spawn(async move { serve_peers(&peer_member, node, dir).await })
        .await
        .map_err(|source| Error::Spawn {
            what: "the peer server",
            source: std::io::Error::other(source.to_string()),
        })??;
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_service_status("", ServingStatus::NotServing).await;
    let (stopping, stop_serving) = tokio::sync::watch::channel(false);
    let clients = serve_clients(&member, health_service, stop_serving).await?;
    serve_metrics(&member).await?;
    tasks::spawn(member.clone(), health);
    tokio::select! {
        _ = shutdown_signal() => {
            tracing::info!("received signal; shutting down");
            graceful_stop(&member, stopping, clients).await;
        }
        _ = member.removed() => {
            // Lets the answer to the removal reach its client first.
            tokio::time::sleep(REMOVED_GRACE).await;
            tracing::warn!("stopping: this member was removed from the cluster");
        }
        fault = member.halt().wait() => {
            // The thread that met it has stopped, and nothing it would
            // have written was acknowledged; `main` exits with status 1.
            return Err(Error::Fatal(fault));
        }
    }
    // A fault met while stopping is the stop's outcome too.
    match member.halt().raised() {
        Some(fault) => Err(Error::Fatal(fault)),
        None => Ok(()),
    }
}

/// How long a stopping member waits for its clients' requests in flight
/// (and open streams) before it closes their connections: etcd's request
/// timeout, 7 s, the longest a unary request may take anyway.
pub const CLIENT_DRAIN_MAX: std::time::Duration = crate::member::core::REQUEST_TIMEOUT;

/// How long a stopping member waits for its raft loop to end its turn and
/// for the apply stage to apply what was committed: a turn is one fsync
/// and an apply batch well under a second on any disk that keeps a
/// cluster healthy, so 5 s means something is stuck, and the process
/// exits anyway (the WAL holds every acknowledged entry).
pub const RAFT_STOP_MAX: std::time::Duration = std::time::Duration::from_secs(5);

/// etcd's graceful stop, the steps in this module's doc.
async fn graceful_stop(
    member: &Arc<Member>,
    stopping: tokio::sync::watch::Sender<bool>,
    clients: Vec<tokio::task::JoinHandle<()>>,
) {
    let _ = stopping.send(true);
    let all_drained = async {
        for client in clients {
            let _ = client.await;
        }
    };
    let drained = tokio::time::timeout(CLIENT_DRAIN_MAX, all_drained).await;
    if drained.is_err() {
        tracing::warn!(after = ?CLIENT_DRAIN_MAX, "closing client connections still open");
    }
    match member.step_down().await {
        Ok(Some(to)) => tracing::info!(to = format!("{to:x}"), "leadership transferred on stop"),
        Ok(None) => tracing::info!("skipped leadership transfer: not the leader of several voters"),
        Err(error) => tracing::warn!(%error, "leadership transfer failed"),
    }
    if !member.stop_raft(RAFT_STOP_MAX).await {
        tracing::warn!(after = ?RAFT_STOP_MAX, "the raft loop or the apply stage did not stop in time");
    }
    if member.halt().raised().is_some() {
        // A store or WAL that failed is not written again; the caller
        // returns the fault.
        return;
    }
    match member.flush_store() {
        Ok(()) => tracing::info!("store flushed; stopped"),
        Err(error) => tracing::warn!(%error, "the store could not be flushed on stop; the WAL replays it"),
    }
}

/// How long a removed member keeps serving after it applied its removal,
/// so that its answer to the `member remove` that removed it (if it took
/// that call) leaves before the process does; a response is written in
/// well under this on any machine.
const REMOVED_GRACE: std::time::Duration = std::time::Duration::from_millis(300);

fn bind(url: &str, flag: &'static str, reuse_port: bool) -> Result<Listen, Error> {
    let failed = |source| Error::Listen {
        url: url.to_string(),
        source,
    };
    match config::listen_addr(url).map_err(|reason| Error::Flag { flag, reason })? {
        ListenAddr::Tcp(address) => tcp_listener(address, reuse_port).map(Listen::Tcp).map_err(failed),
        ListenAddr::Unix(path) => Listen::unix(path).map_err(failed),
    }
}

/// Connections the kernel queues on a listener before they are accepted:
/// tokio's default, and what Linux's `somaxconn` allows by default; the
/// accept loop keeps up, and the connection bounds apply after it.
const LISTEN_BACKLOG: u32 = 1024;

/// A TCP listener on `address`. `SO_REUSEADDR` is always set, as Go sets
/// it on etcd's listeners; `SO_REUSEPORT` with `--socket-reuse-port`.
fn tcp_listener(address: std::net::SocketAddr, reuse_port: bool) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if address.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.set_reuseport(reuse_port)?;
    socket.bind(address)?;
    socket.listen(LISTEN_BACKLOG)
}

/// The TLS of a listener on `url`: none for `http://` and `unix://`.
fn tls_for(
    url: &str,
    make: impl Fn() -> Result<Arc<rustls::ServerConfig>, Error>,
    admission: impl Fn() -> Admission,
) -> Result<Option<ListenerTls>, Error> {
    if !config::is_tls(url) {
        return Ok(None);
    }
    Ok(Some(ListenerTls {
        config: make()?,
        admission: admission(),
    }))
}

async fn serve_peers(member: &Arc<Member>, node: NodeSender, dir: DataDir) -> Result<(), Error> {
    for url in config::urls(&member.config().listen_peer_urls) {
        let tls = &member.config().tls;
        let tls = tls_for(&url, || tls.peer_server_config(), || tls.peer_admission())?;
        let listener = bind(&url, "listen-peer-urls", member.config().socket_reuse_port)?;
        let raft = Arc::new(RaftInbound {
            node: node.clone(),
            membership: member.shared_membership(),
            timeouts: member.config().peer_timeouts().0,
        });
        let incoming = BoundedListener::with_raft(listener, PEER_CONNECTIONS_MAX, tls, Some(raft))
            .map_err(|source| Error::Listen {
                url: url.clone(),
                source,
            })?
            .into_incoming();
        let service = PeerService {
            node: node.clone(),
            member: member.clone(),
            dir: dir.clone(),
        };
        let peers = tonic::transport::Server::builder()
            .tcp_nodelay(true)
            .add_service(service.server());
        tokio::spawn(async move {
            if let Err(error) = peers.serve_with_incoming(incoming).await {
                tracing::error!(%error, "peer server stopped");
            }
        });
        tracing::info!(address = url, "serving peer traffic");
    }
    Ok(())
}

/// Serves the client URLs until `stop` turns true; returns the servers'
/// tasks, which end once their connections have drained.
async fn serve_clients(
    member: &Arc<Member>,
    health_service: tonic_health::pb::health_server::HealthServer<impl tonic_health::pb::health_server::Health>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<Vec<tokio::task::JoinHandle<()>>, Error> {
    let mut servers = Vec::new();
    let port = client_port(member, health_service);
    let transport = Transport::from_config(member.config());
    let config = member.config();
    let split = !config::urls(&config.listen_client_http_urls).is_empty();
    let client_traffic = if split { Traffic::Grpc } else { Traffic::GrpcAndHttp };
    let urls = config::urls(&config.listen_client_urls)
        .into_iter()
        .map(|url| (url, client_traffic));
    let http_urls = config::urls(&config.listen_client_http_urls)
        .into_iter()
        .map(|url| (url, Traffic::Http));
    for (url, traffic) in urls.chain(http_urls) {
        let flag = if traffic == Traffic::Http {
            "listen-client-http-urls"
        } else {
            "listen-client-urls"
        };
        let tls = tls_for(
            &url,
            || config.tls.client_server_config(),
            || config.tls.client_admission(),
        )?;
        let listener = bind(&url, flag, config.socket_reuse_port)?;
        let listener = BoundedListener::new(listener, CLIENT_CONNECTIONS_MAX, tls).map_err(|source| Error::Listen {
            url: url.clone(),
            source,
        })?;
        let (port, tls) = (port.clone(), config::is_tls(&url));
        let mut stop = stop.clone();
        servers.push(tokio::spawn(async move {
            let stopped = async move {
                let _ = stop.wait_for(|stopping| *stopping).await;
            };
            client_port::serve(listener, port, (traffic, tls), transport, stopped).await;
        }));
        log_serving(&url, traffic);
    }
    Ok(servers)
}

/// etcd's lines for a client URL that is ready.
fn log_serving(url: &str, traffic: Traffic) {
    tracing::info!("ready to serve client requests");
    let address = url.split_once("://").map_or(url, |(_, rest)| rest);
    let traffic = traffic.name();
    if config::is_tls(url) {
        tracing::info!(traffic, address, "serving client traffic securely");
    } else {
        tracing::info!(
            traffic,
            address,
            "serving client traffic insecurely; this is strongly discouraged!"
        );
    }
}

/// The client port's two sides (`client_port.rs`): etcd's gRPC services,
/// and its plain HTTP with the gateway unless `--enable-grpc-gateway` is
/// false.
fn client_port(
    member: &Arc<Member>,
    health_service: tonic_health::pb::health_server::HealthServer<impl tonic_health::pb::health_server::Health>,
) -> ClientPort {
    let max_decoding = member.config().max_request_bytes + GRPC_OVERHEAD_BYTES;
    let member_of = || member.clone();
    let health: HealthService = tower::util::BoxCloneSyncService::new(health_service);
    let grpc = GrpcServices::new(member, max_decoding, health);
    let mut http = http::routes(member_of());
    if member.config().enable_grpc_gateway {
        let gateway = Gateway::new(grpc.clone(), member.config().max_request_bytes);
        http = http.merge(gateway::routes(Arc::new(gateway)));
    }
    let http =
        http.fallback(|| async { gateway::errors::plain(axum::http::StatusCode::NOT_FOUND, "404 page not found") });
    // The access controller runs before routing (it may rewrite the
    // path), as etcd's wraps its whole HTTP mux.
    let http = axum::Router::new()
        .fallback_service(http)
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(AccessPolicy::new(member_of())),
            access::control,
        ));
    ClientPort { grpc, http }
}

/// `--listen-metrics-urls`: `/metrics` and `/health` on plain HTTP.
async fn serve_metrics(member: &Arc<Member>) -> Result<(), Error> {
    for url in config::urls(&member.config().listen_metrics_urls) {
        if config::is_tls(&url) {
            return Err(Error::Flag {
                flag: "listen-metrics-urls",
                reason: format!("{url}: only http:// metrics URLs are supported"),
            });
        }
        let Listen::Tcp(listener) = bind(&url, "listen-metrics-urls", member.config().socket_reuse_port)? else {
            return Err(Error::Flag {
                flag: "listen-metrics-urls",
                reason: format!("{url}: Unix sockets are served on client URLs only"),
            });
        };
        let router = http::metrics_routes(member.clone());
        tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, router).await {
                tracing::error!(%error, "metrics server stopped");
            }
        });
        tracing::info!(url, "serving metrics");
    }
    Ok(())
}

async fn shutdown_signal() {
    let mut terminate =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
}
