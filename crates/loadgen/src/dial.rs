//! How loadgen reaches a server, for every command that sends requests,
//! as etcd's benchmark tool does from the same flags:
//! - over TCP, or over TLS when `--cacert` is given (with `--cert` and
//!   `--key`, loadgen shows that certificate: a member with
//!   `--client-cert-auth` takes it), for `http://` and `https://`
//!   endpoints alike;
//! - with `--user NAME[:PASSWORD]` (and `--password`), as that user: one
//!   login before the run, and its token on every request (the `token`
//!   metadata over gRPC, the `Authorization` header through the gateway).
//!
//! The settings are the process's, set once from the command line
//! ([`init`]) before anything is dialled.

use std::io;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use etcd_proto::etcdserverpb as pb;
use etcd_proto::etcdserverpb::auth_client::AuthClient;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tonic::body::Body;

use crate::cli::{AuthArgs, TlsArgs};

/// A connection's bytes: a TCP stream, or TLS over one.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

pub type Stream = Box<dyn Io>;

/// How long a connection, with its TLS handshake, may take.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(5);

struct Settings {
    tls: Option<Arc<rustls::ClientConfig>>,
    user: Option<(String, String)>,
    token: OnceLock<String>,
}

static SETTINGS: OnceLock<Settings> = OnceLock::new();

fn settings() -> &'static Settings {
    SETTINGS.get_or_init(|| Settings {
        tls: None,
        user: None,
        token: OnceLock::new(),
    })
}

/// Sets how every connection of this process is made; an error names the
/// flag at fault.
pub fn init(tls: &TlsArgs, auth: &AuthArgs) -> Result<(), String> {
    let tls = match (&tls.cacert, &tls.cert, &tls.key) {
        (None, None, None) => None,
        _ => Some(Arc::new(crate::tls::client_config(tls)?)),
    };
    let user = match &auth.user {
        None if auth.password.is_some() => return Err("--password needs --user".into()),
        None => None,
        Some(user) => Some(match (user.split_once(':'), &auth.password) {
            (Some((name, password)), None) => (name.to_string(), password.to_string()),
            (None, Some(password)) => (user.clone(), password.clone()),
            (Some(_), Some(_)) => return Err("--password cannot be given when --user has one".into()),
            (None, None) => {
                return Err(format!(
                    "--user {user} needs a password: --user {user}:PASSWORD or --password"
                ))
            }
        }),
    };
    SETTINGS
        .set(Settings {
            tls,
            user,
            token: OnceLock::new(),
        })
        .map_err(|_| "connection settings were set twice".to_string())
}

/// `host:port` of an endpoint given as `host:port` or a URL.
pub fn address(endpoint: &str) -> String {
    endpoint
        .trim()
        .trim_start_matches("http://")
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .to_string()
}

/// A connection to `endpoint`, speaking `alpn` (`h2` or `http/1.1`) when
/// it is TLS.
pub async fn connect(endpoint: &str, alpn: &[u8]) -> io::Result<Stream> {
    let address = address(endpoint);
    let connecting = async {
        let stream = tokio::net::TcpStream::connect(&address).await?;
        stream.set_nodelay(true)?;
        let Some(tls) = &settings().tls else {
            return Ok(Box::new(stream) as Stream);
        };
        let mut config = (**tls).clone();
        config.alpn_protocols = vec![alpn.to_vec()];
        let host = address.rsplit_once(':').map_or(address.as_str(), |(host, _)| host);
        let name = rustls::pki_types::ServerName::try_from(host.trim_matches(['[', ']']).to_string())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        Ok(Box::new(connector.connect(name, stream).await?) as Stream)
    };
    tokio::time::timeout(DIAL_TIMEOUT, connecting)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, format!("connecting to {address}: timed out")))?
}

/// The token requests carry, once logged in.
pub fn token() -> Option<&'static str> {
    settings().token.get().map(String::as_str)
}

/// Logs in as `--user`, if given, through the first of `endpoints` that
/// answers; every later request carries the token.
pub async fn login(endpoints: &[String]) -> Result<(), String> {
    let Some((name, password)) = &settings().user else {
        return Ok(());
    };
    let mut last_error = String::from("no endpoints");
    for endpoint in endpoints {
        let channel = match channel(endpoint).await {
            Ok(channel) => channel,
            Err(error) => {
                last_error = error;
                continue;
            }
        };
        let request = pb::AuthenticateRequest {
            name: name.clone(),
            password: password.clone(),
        };
        match AuthClient::new(channel).authenticate(request).await {
            Ok(answer) => {
                let _ = settings().token.set(answer.into_inner().token);
                return Ok(());
            }
            Err(status) => last_error = format!("{endpoint}: {}", status.message()),
        }
    }
    Err(format!("logging in as {name}: {last_error}"))
}

/// A gRPC channel to `endpoint` over [`connect`], whose requests carry
/// the token.
#[derive(Clone)]
pub struct Channel {
    inner: tonic::transport::Channel,
}

/// A tonic channel to `endpoint` dialled by [`connect`].
pub async fn channel(endpoint: &str) -> Result<Channel, String> {
    let endpoint = endpoint.to_string();
    let uri = format!("http://{}", address(&endpoint));
    let connector = tower::service_fn(move |_: http::Uri| {
        let endpoint = endpoint.clone();
        async move { connect(&endpoint, b"h2").await.map(TokioIo::new) }
    });
    let inner = tonic::transport::Endpoint::from_shared(uri.clone())
        .map_err(|e| format!("{uri}: {e}"))?
        .connect_with_connector(connector)
        .await
        .map_err(|e| format!("connecting to {uri}: {e}"))?;
    Ok(Channel { inner })
}

/// Adds the token, if logged in, to a request's headers.
pub fn with_token<B>(mut request: http::Request<B>) -> http::Request<B> {
    if let Some(token) = token() {
        if let Ok(value) = http::HeaderValue::from_str(token) {
            request.headers_mut().insert("token", value);
        }
    }
    request
}

impl tower_service::Service<http::Request<Body>> for Channel {
    type Response = <tonic::transport::Channel as tower_service::Service<http::Request<Body>>>::Response;
    type Error = <tonic::transport::Channel as tower_service::Service<http::Request<Body>>>::Error;
    type Future = <tonic::transport::Channel as tower_service::Service<http::Request<Body>>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        tower_service::Service::poll_ready(&mut self.inner, cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        tower_service::Service::call(&mut self.inner, with_token(request))
    }
}
