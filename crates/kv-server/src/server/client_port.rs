//! What a client URL serves, split at the front of each request as etcd
//! splits it: an HTTP/2 request whose content type is gRPC's goes to the
//! gRPC services (behind the learner gate and call counters); every other
//! request is plain HTTP (`/health`, `/version`, `/metrics`, and the
//! gRPC-JSON gateway) behind etcd's access controller. So a JSON client
//! never gets a gRPC answer, and a gRPC client never meets the HTTP
//! routes.
//!
//! Each connection's requests carry one shared value of what the
//! connection is (`connection_info`): who, from where, and its own bound
//! on gateway streams.
//!
//! With `--listen-client-http-urls` set, etcd splits the two sides
//! ([`Traffic`]): the client URLs serve gRPC only (HTTP/2 only, and every
//! request goes to the gRPC services), the HTTP URLs plain HTTP only
//! (HTTP/1 only unless TLS, where ALPN may pick HTTP/2), as etcd's
//! listeners do.
//!
//! [`serve`] runs the connections on hyper's HTTP/1 and HTTP/2 server with
//! etcd's gRPC transport settings ([`Transport`]): the keepalive ping and
//! its timeout, the bound on one connection's concurrent streams, and
//! the policing of clients' pings (`server::ping_policy`).
//! Stopping, it sends each connection GOAWAY and waits for the requests
//! in flight.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::{header, Version};
use axum::response::Response;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use tower::ServiceExt;

use crate::api::gateway::gateway_streams;
use crate::api::grpc::{CallFuture, GrpcServices};
use crate::config::Config;
use crate::connection_info::ConnectionInfo;
use crate::server::listener::BoundedListener;
use crate::server::ping_policy::PingPoliced;
use crate::tls::ClientIdentity;

/// gRPC's server default for `--grpc-keepalive-interval` 0: two hours.
const KEEPALIVE_INTERVAL_DEFAULT: Duration = Duration::from_secs(2 * 60 * 60);

/// gRPC's server default for `--grpc-keepalive-timeout` 0: 20 s.
const KEEPALIVE_TIMEOUT_DEFAULT: Duration = Duration::from_secs(20);

/// The client connections' HTTP/2 settings, from etcd's flags.
#[derive(Debug, Clone, Copy)]
pub struct Transport {
    /// Silence after which the member pings the client.
    pub keepalive_interval: Duration,
    /// How long the ping's answer may take before the connection closes.
    pub keepalive_timeout: Duration,
    /// Concurrent streams per connection; `None` is no limit, and then
    /// nothing is advertised, as gRPC does for etcd's default.
    pub max_concurrent_streams: Option<u32>,
    /// The least time between a client's pings (`server::ping_policy`).
    pub keepalive_min_time: Duration,
}

/// gRPC's server default when etcd's `--grpc-keepalive-min-time` is 0
/// (etcd then sets no policy, and gRPC's own applies): five minutes.
const KEEPALIVE_MIN_TIME_DEFAULT: Duration = Duration::from_secs(5 * 60);

impl Transport {
    /// As etcd passes them to gRPC: the keepalive pair only when both are
    /// above 0 (else gRPC's defaults, 2h and 20s), and 0 or etcd's
    /// default streams as no bound (gRPC reads 0 so too).
    pub fn from_config(config: &Config) -> Transport {
        let (interval, timeout) = (config.grpc_keepalive_interval, config.grpc_keepalive_timeout);
        let (keepalive_interval, keepalive_timeout) = if interval.is_zero() || timeout.is_zero() {
            (KEEPALIVE_INTERVAL_DEFAULT, KEEPALIVE_TIMEOUT_DEFAULT)
        } else {
            (interval, timeout)
        };
        let streams = config.max_concurrent_streams;
        Transport {
            keepalive_interval,
            keepalive_timeout,
            max_concurrent_streams: (streams != 0 && streams != u32::MAX).then_some(streams),
            keepalive_min_time: match config.grpc_keepalive_min_time {
                zero if zero.is_zero() => KEEPALIVE_MIN_TIME_DEFAULT,
                least => least,
            },
        }
    }

    /// The server for one listener: `tls` says whether its connections
    /// are TLS, where ALPN, not the listener, picks the HTTP version.
    pub fn builder(&self, traffic: Traffic, tls: bool) -> Builder<TokioExecutor> {
        let mut builder = Builder::new(TokioExecutor::new());
        builder = match (traffic, tls) {
            (Traffic::Grpc, _) => builder.http2_only(),
            (Traffic::Http, false) => builder.http1_only(),
            _ => builder,
        };
        builder
            .http2()
            .timer(TokioTimer::new())
            // grpc-go, which serves etcd's gRPC, sends no `Date` on its
            // responses; HTTP answers get theirs (see `with_date`).
            .auto_date_header(traffic == Traffic::Http)
            .keep_alive_interval(self.keepalive_interval)
            .keep_alive_timeout(self.keepalive_timeout)
            .max_concurrent_streams(self.max_concurrent_streams);
        builder
    }
}

/// Serves `listener`'s connections (`traffic`, with `transport`'s
/// settings: see [`Transport::builder`]; `tls` if its URL is) until
/// `stop` resolves; then sends each GOAWAY and returns once their
/// requests in flight are answered (the caller bounds that wait).
pub async fn serve(
    mut listener: BoundedListener,
    port: ClientPort,
    (traffic, tls): (Traffic, bool),
    transport: Transport,
    stop: impl Future<Output = ()>,
) {
    use axum::serve::Listener as _;
    let builder = transport.builder(traffic, tls);
    let graceful = GracefulShutdown::new();
    let mut stop = std::pin::pin!(stop);
    loop {
        let (connection, remote) = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut stop => break,
        };
        let service = port.connection(traffic, connection.identity().clone(), remote);
        let connection = PingPoliced::new(connection, transport.keepalive_min_time);
        let served = builder.serve_connection(TokioIo::new(connection), service);
        let served = graceful.watch(served.into_owned());
        tokio::spawn(async move {
            if let Err(error) = served.await {
                tracing::trace!(%error, "client connection ended");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// The two sides of a client URL.
#[derive(Clone)]
pub struct ClientPort {
    pub grpc: GrpcServices,
    pub http: Router,
}

/// What one client URL serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Traffic {
    /// Both sides, split per request: etcd's default.
    GrpcAndHttp,
    /// gRPC only: a client URL when HTTP URLs are set apart.
    Grpc,
    /// Plain HTTP only: `--listen-client-http-urls`.
    Http,
}

impl Traffic {
    /// The `traffic` field of etcd's "serving client traffic" line.
    pub fn name(self) -> &'static str {
        match self {
            Traffic::GrpcAndHttp => "grpc+http",
            Traffic::Grpc => "grpc",
            Traffic::Http => "http",
        }
    }
}

/// Whether `request` is a gRPC call.
fn is_grpc(request: &Request<Incoming>) -> bool {
    request.version() == Version::HTTP_2
        && request
            .headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|value| value.as_bytes().starts_with(b"application/grpc"))
}

/// One connection's service.
#[derive(Clone)]
pub struct ClientConnection {
    port: ClientPort,
    traffic: Traffic,
    info: Arc<ConnectionInfo>,
}

/// hyper's service, called by reference for each request: the
/// connection's service is not cloned per request (a tower service would
/// be, whole), only what each request carries (its identity, and the
/// router for plain HTTP).
///
/// Each request goes on with hyper's own body: a gRPC call's straight to
/// its service, an HTTP request's boxed for the router.
impl hyper::service::Service<Request<Incoming>> for ClientConnection {
    type Response = Response;
    type Error = Infallible;
    type Future = CallFuture;

    fn call(&self, mut request: Request<Incoming>) -> Self::Future {
        request.extensions_mut().insert(self.info.clone());
        let grpc = match self.traffic {
            Traffic::GrpcAndHttp => is_grpc(&request),
            Traffic::Grpc => true,
            Traffic::Http => false,
        };
        if grpc {
            return self.port.grpc.serve(request);
        }
        // The HTTP/2 server leaves `Date` out on ports that serve gRPC;
        // HTTP/1's adds its own as it writes the answer.
        let dateless = self.traffic != Traffic::Http && request.version() == Version::HTTP_2;
        let answer = self.port.http.clone().oneshot(request.map(axum::body::Body::new));
        if dateless {
            return Box::pin(with_date(answer));
        }
        Box::pin(answer)
    }
}

/// An HTTP/2 answer on a port that also serves gRPC, with the `Date` that
/// Go's net/http sends and the HTTP/2 server (built without it, for
/// gRPC's sake: see [`Transport::builder`]) leaves out. A `Date` the
/// handler set is kept.
async fn with_date(answer: impl Future<Output = Result<Response, Infallible>>) -> Result<Response, Infallible> {
    let mut response = answer.await?;
    if let axum::http::header::Entry::Vacant(vacant) = response.headers_mut().entry(axum::http::header::DATE) {
        let date = httpdate::fmt_http_date(std::time::SystemTime::now());
        if let Ok(value) = axum::http::HeaderValue::from_str(&date) {
            vacant.insert(value);
        }
    }
    Ok(response)
}

impl ClientPort {
    /// The service of one connection, made by `identity`.
    fn connection(&self, traffic: Traffic, identity: ClientIdentity, remote: SocketAddr) -> ClientConnection {
        ClientConnection {
            port: self.clone(),
            traffic,
            info: ConnectionInfo::shared(identity, remote, gateway_streams()),
        }
    }
}
