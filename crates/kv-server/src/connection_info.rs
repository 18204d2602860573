//! What every request carries of the client connection it came on: who
//! the client proved to be (its TLS identity), where it connects from,
//! and the connection's own bound on gateway streams.
//!
//! Made once per connection (`server::client_port`) and put in each
//! request's extensions as one shared value. It was three values, and
//! each insert into a request's extensions is a boxed value (the first
//! also allocates the map, a fourth grows it), so every request paid for
//! several allocations and a clone of the identity before it reached its
//! handler (`docs/benchmarks/history.md`, sixth round).

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::Semaphore;

use crate::tls::ClientIdentity;

/// A client connection's facts, shared by its requests.
#[derive(Debug)]
pub struct ConnectionInfo {
    pub identity: ClientIdentity,
    pub remote: SocketAddr,
    /// The gateway's streams this connection may still open (see
    /// `api::gateway`).
    pub gateway_streams: Arc<Semaphore>,
}

impl ConnectionInfo {
    /// The value each request of the connection carries.
    pub fn shared(
        identity: ClientIdentity,
        remote: SocketAddr,
        gateway_streams: Arc<Semaphore>,
    ) -> Arc<ConnectionInfo> {
        Arc::new(ConnectionInfo {
            identity,
            remote,
            gateway_streams,
        })
    }

    /// The connection a request with these `extensions` came on; none
    /// for a request made inside the member (the gateway's calls).
    pub fn of(extensions: &axum::http::Extensions) -> Option<&ConnectionInfo> {
        extensions.get::<Arc<ConnectionInfo>>().map(Arc::as_ref)
    }
}
