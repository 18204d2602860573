//! Starts a member: opens the store and the WAL, starts the apply stage
//! and the raft loop on their own threads, then serves clients and peers
//! on tokio until SIGINT or SIGTERM.

use std::sync::mpsc::sync_channel;
use std::sync::Arc;
use std::time::Duration;

use tonic_health::ServingStatus;

use crate::apply::{self, APPLY_QUEUE_CAPACITY};
use crate::client_listener::{BoundedListener, CLIENT_CONNECTIONS_MAX};
use crate::cluster_service::ClusterService;
use crate::config::{self, Config, GRPC_OVERHEAD_BYTES};
use crate::http;
use crate::kv_service::KvService;
use crate::lease_service::{LeaseIds, LeaseService, PeerChannels};
use crate::maintenance_service::MaintenanceService;
use crate::membership::Membership;
use crate::node::{Node, NodeInput, NODE_INPUT_CAPACITY};
use crate::proto::etcdserverpb::cluster_server::ClusterServer;
use crate::proto::etcdserverpb::kv_server::KvServer;
use crate::proto::etcdserverpb::lease_server::LeaseServer;
use crate::proto::etcdserverpb::maintenance_server::MaintenanceServer;
use crate::proto::etcdserverpb::watch_server::WatchServer;
use crate::proto::kvserverpb::{raft_request, MemberAttributes};
use crate::raft_storage::RaftStorage;
use crate::slog_bridge;
use crate::state::MemberState;
use crate::transport::{self, Transport};
use crate::watch_service::WatchService;

/// Where the store lives inside the data directory.
pub const STORE_DIR: &str = "member/kv";

/// How often the gRPC health status follows whether a leader is known.
const HEALTH_POLL: Duration = Duration::from_millis(100);
/// How often the store's size on disk is sampled for the quota. sled
/// lists its blob directory to answer, too costly per write; a write can
/// overshoot the quota by what 100 ms of writes add, as etcd's can by what
/// its backend buffers between commits.
const DISK_SIZE_SAMPLE: Duration = Duration::from_millis(100);
/// Pause between attempts to publish this member's client URLs.
const PUBLISH_RETRY: Duration = Duration::from_millis(500);

pub fn run(config: Config) -> Result<(), String> {
    let membership = Membership::from_config(&config)?;
    if config.initial_cluster_state != "new" && config.initial_cluster_state != "existing" {
        return Err(format!(
            "--initial-cluster-state must be new or existing, not {:?}",
            config.initial_cluster_state
        ));
    }
    let data_dir = config.data_dir();
    std::fs::create_dir_all(data_dir.join("member")).map_err(|e| format!("{}: {e}", data_dir.display()))?;
    let store = mvcc::Store::open_with(&data_dir.join(STORE_DIR), config.max_txn_ops).map_err(|e| e.to_string())?;
    let storage = RaftStorage::open(
        &data_dir,
        membership.cluster_id,
        membership.local_id,
        membership.voter_ids(),
        &store,
    )?;
    let client_urls = apply::load_attributes(&data_dir);
    let state = Arc::new(MemberState::new(
        config.clone(),
        membership.clone(),
        Arc::new(store),
        client_urls,
    ));
    tracing::info!(
        name = config.name,
        member_id = format!("{:x}", membership.local_id),
        cluster_id = format!("{:x}", membership.cluster_id),
        data_dir = %data_dir.display(),
        "starting member"
    );

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("kv-server")
        .build()
        .map_err(|e| e.to_string())?;
    let (node_sender, node_inputs) = sync_channel(NODE_INPUT_CAPACITY);
    let (apply_sender, apply_inputs) = sync_channel(APPLY_QUEUE_CAPACITY);
    let transport = Transport::start(&membership, node_sender.clone(), runtime.handle(), &state);
    let node = Node::new(storage, state.clone(), transport, apply_sender, &slog_bridge::logger())?;
    let apply_state = state.clone();
    std::thread::Builder::new()
        .name("apply".into())
        .spawn(move || apply::run(apply_state, apply_inputs))
        .map_err(|e| e.to_string())?;
    std::thread::Builder::new()
        .name("raft".into())
        .spawn(move || node.run(node_inputs))
        .map_err(|e| e.to_string())?;

    runtime.block_on(serve(config, state, node_sender))
}

async fn serve(
    config: Config,
    state: Arc<MemberState>,
    node: std::sync::mpsc::SyncSender<NodeInput>,
) -> Result<(), String> {
    let kv = KvService {
        state: state.clone(),
        node: node.clone(),
    };
    let lease = LeaseService {
        kv: kv.clone(),
        peers: Arc::new(PeerChannels::new(&state.membership)),
        ids: Arc::new(LeaseIds::new(state.member_id())),
    };
    tokio::spawn(lease.clone().revoke_expired());
    for url in config::urls(&config.listen_peer_urls) {
        let address = config::socket_addr(&url)?;
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .map_err(|e| format!("listen on {url}: {e}"))?;
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        let peers = tonic::transport::Server::builder()
            .tcp_nodelay(true)
            .add_service(transport::server(node.clone(), lease.clone()));
        tokio::spawn(async move {
            if let Err(error) = peers.serve_with_incoming(incoming).await {
                tracing::error!(%error, "peer server stopped");
            }
        });
        tracing::info!(url, "serving peers");
    }

    let max_decoding = config.max_request_bytes + GRPC_OVERHEAD_BYTES;
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_service_status("", ServingStatus::NotServing).await;
    let router = tonic::service::Routes::new(KvServer::new(kv.clone()).max_decoding_message_size(max_decoding))
        .add_service(LeaseServer::new(lease).max_decoding_message_size(max_decoding))
        .add_service(WatchServer::new(WatchService { state: state.clone() }).max_decoding_message_size(max_decoding))
        .add_service(
            ClusterServer::new(ClusterService { state: state.clone() }).max_decoding_message_size(max_decoding),
        )
        .add_service(
            MaintenanceServer::new(MaintenanceService {
                state: state.clone(),
                node: node.clone(),
            })
            .max_decoding_message_size(max_decoding),
        )
        .add_service(health_service)
        .into_axum_router()
        .merge(http::routes(kv.clone()));
    for url in config::urls(&config.listen_client_urls) {
        let address = config::socket_addr(&url)?;
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .map_err(|e| format!("listen on {url}: {e}"))?;
        let router = router.clone();
        let listener = BoundedListener::new(listener, CLIENT_CONNECTIONS_MAX);
        tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, router).await {
                tracing::error!(%error, "client server stopped");
            }
        });
        tracing::info!(url, "serving clients");
    }

    let health_state = state.clone();
    tokio::spawn(async move {
        let mut serving = false;
        loop {
            let now = health_state.leader() != 0;
            if now != serving {
                let status = if now {
                    ServingStatus::Serving
                } else {
                    ServingStatus::NotServing
                };
                health.set_service_status("", status).await;
                serving = now;
            }
            tokio::time::sleep(HEALTH_POLL).await;
        }
    });

    let size_state = state.clone();
    tokio::spawn(async move {
        loop {
            match size_state.store.size_on_disk() {
                Ok(bytes) => size_state.disk_bytes.store(bytes, std::sync::atomic::Ordering::Release),
                Err(error) => tracing::warn!(%error, "could not read the store's size"),
            }
            tokio::time::sleep(DISK_SIZE_SAMPLE).await;
        }
    });

    let attributes = MemberAttributes {
        id: state.member_id(),
        name: config.name.clone(),
        client_urls: config::urls(&config.advertise_client_urls),
    };
    tokio::spawn(async move {
        loop {
            match kv.propose(raft_request::Request::Attributes(attributes.clone())).await {
                Err(status) => {
                    tracing::debug!(%status, "publishing client URLs; will retry");
                    tokio::time::sleep(PUBLISH_RETRY).await;
                }
                Ok(_) => {
                    tracing::info!("published client URLs");
                    return;
                }
            }
        }
    });

    shutdown_signal().await;
    tracing::info!("stopping");
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
