//! etcd's access controller on the client port's plain HTTP (the gateway,
//! `/version`, `/health`, `/metrics`), in etcd's order:
//! 0. `/v3beta/…` is rewritten to `/v3/…`, as etcd keeps the old prefix;
//! 1. a plain-http request whose `Host` is not in `--host-whitelist` is
//!    refused (421, etcd's DNS-rebinding text); TLS requests pass;
//! 2. with `--client-cert-auth`, the gateway on and auth enabled, a TLS
//!    request to `/v3/` whose client certificate names a common name is
//!    refused (400): the gateway cannot act as that name, and etcd says
//!    so rather than serve it as nobody;
//! 3. the CORS headers, for any origin while `--cors` allows `*`, else
//!    for an `Origin` it lists;
//! 4. `OPTIONS` (a browser's preflight) is answered 200 at once;
//! 5. then, as Go's `ServeMux` before it routes, a path that is not clean
//!    (`/v3//kv/range`) is redirected to its clean form, and `/v3` to
//!    `/v3/` while the gateway is served (307, with `Location`).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;

use crate::api::gateway::errors::plain;
use crate::connection_info::ConnectionInfo;
use crate::member::core::Member;

/// The client port's HTTP policy, from the member's flags.
pub struct AccessPolicy {
    member: Arc<Member>,
    /// Allowed origins; empty or holding `*` allows any.
    cors: Vec<String>,
    /// Allowed hosts; empty or holding `*` allows any.
    hosts: Vec<String>,
}

/// A comma-separated flag's entries, spaces trimmed, empties dropped.
fn list(flag: &str) -> Vec<String> {
    flag.split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .map(str::to_string)
        .collect()
}

fn allows(list: &[String], entry: &str) -> bool {
    list.is_empty() || list.iter().any(|allowed| allowed == "*" || allowed == entry)
}

impl AccessPolicy {
    pub fn new(member: Arc<Member>) -> AccessPolicy {
        let config = member.config();
        AccessPolicy {
            cors: list(&config.cors),
            hosts: list(&config.host_whitelist),
            member,
        }
    }
}

/// etcd's answer to a `Host` it does not serve.
fn unrecognized_host(host: &str) -> String {
    format!(
        "\netcd received your request, but the Host header was unrecognized.\n\n\
         To fix this, choose one of the following options:\n\
         - Enable TLS, then any HTTPS request will be allowed.\n\
         - Add the hostname you want to use to the whitelist in settings.\n  \
         - e.g. etcd --host-whitelist {host:?}\n\n\
         This requirement has been added to help prevent \"DNS Rebinding\" attacks (CVE-2018-5702).\n"
    )
}

/// The host a request names, without its port, as Go's `GetHostname`.
fn hostname(request: &Request) -> String {
    let host = request
        .uri()
        .authority()
        .map(|authority| authority.as_str().to_string())
        .or_else(|| {
            request
                .headers()
                .get(header::HOST)
                .and_then(|value| value.to_str().ok())
                .map(str::to_string)
        })
        .unwrap_or_default();
    match host.rsplit_once(':') {
        Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => {
            name.trim_start_matches('[').trim_end_matches(']').to_string()
        }
        _ => host,
    }
}

fn add_cors(headers: &mut HeaderMap, origin: HeaderValue) {
    headers.append(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("POST, GET, OPTIONS, PUT, DELETE"),
    );
    headers.append(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    headers.append(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static("accept, content-type, authorization"),
    );
}

/// Go's `cleanPath`: `path.Clean`, with a trailing slash kept.
fn clean_path(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            part => parts.push(part),
        }
    }
    let mut clean = format!("/{}", parts.join("/"));
    if path.ends_with('/') && clean != "/" {
        clean.push('/');
    }
    clean
}

/// Where Go's `ServeMux` would send a request for `path`, if elsewhere.
fn redirect_of(path: &str, gateway: bool) -> Option<String> {
    let clean = clean_path(path);
    if clean != path {
        return Some(clean);
    }
    (gateway && path == "/v3").then(|| "/v3/".to_string())
}

/// A 307 to `location` (with the request's query), as Go's redirect
/// answers anything but GET and HEAD: no body.
fn redirect(request: &Request, location: &str) -> Response {
    let location = match request.uri().query() {
        Some(query) => format!("{location}?{query}"),
        None => location.to_string(),
    };
    let mut response = Response::new(axum::body::Body::empty());
    *response.status_mut() = StatusCode::TEMPORARY_REDIRECT;
    if let Ok(location) = HeaderValue::from_str(&location) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    response
}

/// `/v3beta/…` as `/v3/…`.
fn rewrite_v3beta(request: &mut Request) {
    let Some(rest) = request.uri().path().strip_prefix("/v3beta/") else {
        return;
    };
    let path_and_query = match request.uri().query() {
        Some(query) => format!("/v3/{rest}?{query}"),
        None => format!("/v3/{rest}"),
    };
    let mut parts = request.uri().clone().into_parts();
    if let Ok(rewritten) = path_and_query.parse() {
        parts.path_and_query = Some(rewritten);
        if let Ok(uri) = axum::http::Uri::from_parts(parts) {
            *request.uri_mut() = uri;
        }
    }
}

/// The most of a refused request's body read before its answer: Go's
/// server reads up to 256 KiB of a body its handler left (so the client
/// gets the answer, not a reset stream); a larger body is left, and the
/// client may then see the stream reset.
const REFUSED_BODY_DRAIN_MAX: usize = 256 << 10;

/// Reads what is left of a refused request's body, up to
/// [`REFUSED_BODY_DRAIN_MAX`]: answered before its body ended, an HTTP/2
/// stream is reset, and a client such as curl then reports the reset
/// instead of the answer.
async fn drain(request: Request) {
    let _ = axum::body::to_bytes(request.into_body(), REFUSED_BODY_DRAIN_MAX).await;
}

/// The middleware: the checks of this module's doc around the request.
pub async fn control(State(policy): State<Arc<AccessPolicy>>, mut request: Request, next: Next) -> Response {
    rewrite_v3beta(&mut request);
    let identity = ConnectionInfo::of(request.extensions())
        .map(|info| info.identity.clone())
        .unwrap_or_default();
    if !identity.tls {
        let host = hostname(&request);
        if !allows(&policy.hosts, &host) {
            tracing::warn!(host, "rejecting HTTP request to prevent DNS rebinding attacks");
            drain(request).await;
            return plain(StatusCode::MISDIRECTED_REQUEST, &unrecognized_host(&host));
        }
    } else {
        let config = policy.member.config();
        let named = identity.common_name.as_deref().is_some_and(|name| !name.is_empty());
        if named
            && config.tls.client_cert_auth
            && config.enable_grpc_gateway
            && policy.member.auth_enabled()
            && request.uri().path().starts_with("/v3/")
        {
            drain(request).await;
            return plain(
                StatusCode::BAD_REQUEST,
                "CommonName of client sending a request against gateway will be ignored and not used as expected",
            );
        }
    }
    let origin = if allows(&policy.cors, "*") {
        Some(HeaderValue::from_static("*"))
    } else {
        request
            .headers()
            .get(header::ORIGIN)
            .filter(|origin| origin.to_str().is_ok_and(|origin| allows(&policy.cors, origin)))
            .cloned()
    };
    let gateway = policy.member.config().enable_grpc_gateway;
    let mut response = if request.method() == Method::OPTIONS {
        Response::new(axum::body::Body::empty())
    } else if let Some(location) = redirect_of(request.uri().path(), gateway) {
        redirect(&request, &location)
    } else {
        next.run(request).await
    };
    if let Some(origin) = origin {
        add_cors(response.headers_mut(), origin);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_cleaned_as_gos_servemux_cleans_them() {
        assert_eq!(redirect_of("/v3//kv/range", true).as_deref(), Some("/v3/kv/range"));
        assert_eq!(
            redirect_of("/v3/./kv/../kv/range", true).as_deref(),
            Some("/v3/kv/range")
        );
        assert_eq!(redirect_of("/v3", true).as_deref(), Some("/v3/"));
        assert_eq!(redirect_of("/v3", false), None);
        assert_eq!(redirect_of("/v3/kv/range", true), None);
        assert_eq!(redirect_of("/v3/", true), None);
        assert_eq!(redirect_of("/health", true), None);
        assert_eq!(redirect_of("/a//", true).as_deref(), Some("/a/"));
    }
}
