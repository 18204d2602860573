//! The client port's gRPC side (`server/client_port.rs` hands it every
//! gRPC call, and the gateway its calls in process): the call's path picks
//! one of etcd's services, and around the service run, outermost first,
//! the call counters (`metrics::grpc`), the learner gate ([`learner`])
//! and the slow-call log ([`SlowLog`]).
//!
//! It is one service written out, not a router with middleware layers.
//! A router clones itself and boxes a future for each layer on every
//! call, then matches the path again; a put or a point range costs a few
//! tens of µs of CPU in all, and paid for each of those. Here a call
//! costs the service's own boxed future and one more for the counting
//! and timing around it.
//!
//! A path that names no service here is answered Unimplemented with no
//! message and no body, as grpc-go answers it.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::http;
use axum::response::Response;
use bytes::Bytes;
use tower::util::BoxCloneSyncService;
use tower::Service;

use crate::api::auth::AuthService;
use crate::api::cluster::ClusterService;
use crate::api::kv::KvService;
use crate::api::learner;
use crate::api::lease::LeaseService;
use crate::api::maintenance::MaintenanceService;
use crate::api::recipes::election::ElectionService;
use crate::api::recipes::lock::LockService;
use crate::api::request_stats::SlowLog;
use crate::api::watch::WatchService;
use crate::member::core::Member;
use crate::metrics::grpc as counters;
use crate::proto::etcdserverpb::auth_server::AuthServer;
use crate::proto::etcdserverpb::cluster_server::ClusterServer;
use crate::proto::etcdserverpb::kv_server::KvServer;
use crate::proto::etcdserverpb::lease_server::LeaseServer;
use crate::proto::etcdserverpb::maintenance_server::MaintenanceServer;
use crate::proto::v3electionpb::election_server::ElectionServer;
use crate::proto::v3lockpb::lock_server::LockServer;

/// What a service's call returns: the generated servers' own future.
type ServiceFuture = Pin<Box<dyn Future<Output = Result<http::Response<tonic::body::Body>, Infallible>> + Send>>;

/// The gRPC health service, boxed: its type is not nameable, and it is
/// called once per probe, not on the hot path.
pub type HealthService =
    BoxCloneSyncService<http::Request<tonic::body::Body>, http::Response<tonic::body::Body>, Infallible>;

/// etcd's gRPC services on one member, with the gRPC health service.
#[derive(Clone)]
pub struct GrpcServices {
    member: Arc<Member>,
    /// `--warning-unary-request-duration`.
    slow_after: Duration,
    kv: KvServer<KvService>,
    lease: LeaseServer<LeaseService>,
    watch: WatchService,
    cluster: ClusterServer<ClusterService>,
    maintenance: MaintenanceServer<MaintenanceService>,
    auth: AuthServer<AuthService>,
    lock: LockServer<LockService>,
    election: ElectionServer<ElectionService>,
    health: HealthService,
}

impl GrpcServices {
    /// The services of `member`, each taking requests up to
    /// `max_decoding` bytes, and `health`.
    pub fn new(member: &Arc<Member>, max_decoding: usize, health: HealthService) -> GrpcServices {
        let member_of = || member.clone();
        GrpcServices {
            member: member_of(),
            slow_after: member.config().warning_unary_request_duration,
            kv: KvServer::new(KvService { member: member_of() }).max_decoding_message_size(max_decoding),
            lease: LeaseServer::new(LeaseService { member: member_of() }).max_decoding_message_size(max_decoding),
            watch: WatchService {
                member: member_of(),
                max_decoding_message_size: max_decoding,
            },
            cluster: ClusterServer::new(ClusterService { member: member_of() }).max_decoding_message_size(max_decoding),
            maintenance: MaintenanceServer::new(MaintenanceService::new(member_of()))
                .max_decoding_message_size(max_decoding),
            auth: AuthServer::new(AuthService { member: member_of() }).max_decoding_message_size(max_decoding),
            lock: LockServer::new(LockService { member: member_of() }).max_decoding_message_size(max_decoding),
            election: ElectionServer::new(ElectionService { member: member_of() })
                .max_decoding_message_size(max_decoding),
            health,
        }
    }

    /// The call of `request` on the service its path names, on a clone
    /// of that service alone (a generated server's is an `Arc` and a few
    /// settings; the health service's is boxed). Every service
    /// here is always ready (the generated servers and the health service
    /// have no back-pressure of their own), so none is polled for
    /// readiness first.
    fn dispatch<B>(&self, request: http::Request<B>) -> ServiceFuture
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<tonic::codegen::StdError> + Send + 'static,
    {
        let service = request.uri().path().get(1..).and_then(|path| path.split('/').next());
        match service.unwrap_or_default() {
            "etcdserverpb.KV" => self.kv.clone().call(request),
            "etcdserverpb.Lease" => self.lease.clone().call(request),
            "etcdserverpb.Watch" => self.watch.clone().call(request),
            "etcdserverpb.Cluster" => self.cluster.clone().call(request),
            "etcdserverpb.Maintenance" => self.maintenance.clone().call(request),
            "etcdserverpb.Auth" => self.auth.clone().call(request),
            "v3lockpb.Lock" => self.lock.clone().call(request),
            "v3electionpb.Election" => self.election.clone().call(request),
            "grpc.health.v1.Health" => self.health.clone().call(request.map(tonic::body::Body::new)),
            _ => Box::pin(std::future::ready(Ok(tonic::Status::unimplemented("").into_http()))),
        }
    }

    /// Serves one call: what a connection calls for each gRPC request
    /// (`server/client_port.rs`), and the gateway for each of its calls,
    /// by reference, so that nothing but the called service is cloned
    /// per call.
    pub fn serve<B>(&self, mut request: http::Request<B>) -> CallFuture
    where
        B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: Into<tonic::codegen::StdError> + Send + 'static,
    {
        let counting = counters::start(request.uri().path());
        if let Some(refused) = learner::refusal(&self.member, request.uri().path()) {
            let answer = counters::end(counting, refused.into_http::<tonic::body::Body>());
            return Box::pin(std::future::ready(Ok(answer)));
        }
        let timing = SlowLog::start(self.slow_after, &mut request);
        let answer = self.dispatch(counters::receiving(&counting, request));
        Box::pin(async move {
            let Ok(mut response) = answer.await;
            timing.end(&mut response);
            Ok(counters::end(counting, response))
        })
    }
}

/// One call's answer, as the client port sends it.
pub type CallFuture = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;
