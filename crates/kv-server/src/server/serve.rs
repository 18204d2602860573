//! Serving: the peer port (raft streams, snapshots, forwarded lease
//! calls) and the client port (etcd's gRPC services, `/health` and
//! `/version` on the same listener), then the background tasks, until
//! SIGINT or SIGTERM, or until the member is removed from the cluster.

use std::sync::mpsc::SyncSender;
use std::sync::Arc;

use tonic_health::ServingStatus;

use crate::api::auth::AuthService;
use crate::api::cluster::ClusterService;
use crate::api::http;
use crate::api::kv::KvService;
use crate::api::learner;
use crate::api::lease::LeaseService;
use crate::api::maintenance::MaintenanceService;
use crate::api::peer::PeerService;
use crate::api::watch::service::WatchService;
use crate::config::{self, GRPC_OVERHEAD_BYTES};
use crate::error::Error;
use crate::member::core::Member;
use crate::proto::etcdserverpb::auth_server::AuthServer;
use crate::proto::etcdserverpb::cluster_server::ClusterServer;
use crate::proto::etcdserverpb::kv_server::KvServer;
use crate::proto::etcdserverpb::lease_server::LeaseServer;
use crate::proto::etcdserverpb::maintenance_server::MaintenanceServer;
use crate::raft::input::NodeInput;
use crate::server::listener::{BoundedListener, CLIENT_CONNECTIONS_MAX, PEER_CONNECTIONS_MAX};
use crate::server::tasks;
use crate::storage::layout::DataDir;
use crate::tls::ClientIdentity;

/// Serves until SIGINT or SIGTERM.
pub async fn serve(member: Arc<Member>, node: SyncSender<NodeInput>, dir: DataDir) -> Result<(), Error> {
    serve_peers(&member, node, dir).await?;
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_service_status("", ServingStatus::NotServing).await;
    serve_clients(&member, health_service).await?;
    serve_metrics(&member).await?;
    tasks::spawn(member.clone(), health);
    tokio::select! {
        _ = shutdown_signal() => tracing::info!("stopping"),
        _ = member.stop.notified() => {
            // Lets the answer to the removal reach its client first.
            tokio::time::sleep(REMOVED_GRACE).await;
            tracing::warn!("stopping: this member was removed from the cluster");
        }
    }
    Ok(())
}

/// How long a removed member keeps serving after it applied its removal,
/// so that its answer to the `member remove` that removed it (if it took
/// that call) leaves before the process does; a response is written in
/// well under this on any machine.
const REMOVED_GRACE: std::time::Duration = std::time::Duration::from_millis(300);

async fn bind(url: &str, flag: &'static str) -> Result<tokio::net::TcpListener, Error> {
    let address = config::socket_addr(url).map_err(|reason| Error::Flag { flag, reason })?;
    tokio::net::TcpListener::bind(address)
        .await
        .map_err(|source| Error::Listen {
            url: url.to_string(),
            source,
        })
}

/// The TLS config of a listener on `url`: none for `http://`.
fn tls_for(
    url: &str,
    make: impl Fn() -> Result<Arc<rustls::ServerConfig>, Error>,
) -> Result<Option<Arc<rustls::ServerConfig>>, Error> {
    config::is_https(url).then(make).transpose()
}

async fn serve_peers(member: &Arc<Member>, node: SyncSender<NodeInput>, dir: DataDir) -> Result<(), Error> {
    for url in config::urls(&member.config.listen_peer_urls) {
        let tls = tls_for(&url, || member.config.tls.peer_server_config())?;
        let listener = bind(&url, "listen-peer-urls").await?;
        let incoming = BoundedListener::new(listener, PEER_CONNECTIONS_MAX, tls)
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
        tracing::info!(url, "serving peers");
    }
    Ok(())
}

async fn serve_clients(
    member: &Arc<Member>,
    health_service: tonic_health::pb::health_server::HealthServer<impl tonic_health::pb::health_server::Health>,
) -> Result<(), Error> {
    let max_decoding = member.config.max_request_bytes + GRPC_OVERHEAD_BYTES;
    let member_of = || member.clone();
    let router = tonic::service::Routes::new(
        KvServer::new(KvService { member: member_of() }).max_decoding_message_size(max_decoding),
    )
    .add_service(LeaseServer::new(LeaseService { member: member_of() }).max_decoding_message_size(max_decoding))
    .add_service(WatchService {
        member: member_of(),
        max_decoding_message_size: max_decoding,
    })
    .add_service(ClusterServer::new(ClusterService { member: member_of() }).max_decoding_message_size(max_decoding))
    .add_service(MaintenanceServer::new(MaintenanceService::new(member_of())).max_decoding_message_size(max_decoding))
    .add_service(AuthServer::new(AuthService { member: member_of() }).max_decoding_message_size(max_decoding))
    .add_service(health_service)
    .into_axum_router()
    .layer(axum::middleware::from_fn_with_state(member_of(), learner::gate))
    .layer(axum::middleware::from_fn(crate::metrics::grpc::count_calls))
    .merge(http::routes(member_of()));
    for url in config::urls(&member.config.listen_client_urls) {
        let tls = tls_for(&url, || member.config.tls.client_server_config())?;
        let listener = bind(&url, "listen-client-urls").await?;
        let service = router.clone().into_make_service_with_connect_info::<ClientIdentity>();
        let listener = BoundedListener::new(listener, CLIENT_CONNECTIONS_MAX, tls).map_err(|source| Error::Listen {
            url: url.clone(),
            source,
        })?;
        tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, service).await {
                tracing::error!(%error, "client server stopped");
            }
        });
        tracing::info!(url, "serving clients");
    }
    Ok(())
}

/// `--listen-metrics-urls`: `/metrics` and `/health` on plain HTTP.
async fn serve_metrics(member: &Arc<Member>) -> Result<(), Error> {
    for url in config::urls(&member.config.listen_metrics_urls) {
        if config::is_https(&url) {
            return Err(Error::Flag {
                flag: "listen-metrics-urls",
                reason: format!("{url}: only http:// metrics URLs are supported"),
            });
        }
        let listener = bind(&url, "listen-metrics-urls").await?;
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
