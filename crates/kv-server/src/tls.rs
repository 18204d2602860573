//! TLS on the client and peer URLs, with etcd's flags and behaviour.
//!
//! - A listener whose URL is `https://` needs a certificate and key
//!   (`--cert-file`/`--key-file` for clients, `--peer-cert-file`/
//!   `--peer-key-file` for peers); start-up fails without them, as etcd's
//!   does.
//! - With `--client-cert-auth` (`--peer-client-cert-auth`), or with a
//!   `--trusted-ca-file` (`--peer-trusted-ca-file`) given at all, the
//!   server requires a client certificate signed by that CA and refuses
//!   the handshake otherwise, as etcd's listener does. With neither, no
//!   certificate is asked for. The CN names the caller only with
//!   `--client-cert-auth`, as in etcd.
//! - The verified client certificate's subject common name is the
//!   connection's [`ClientIdentity`]; with auth enabled, a request that
//!   carries no token is made as that user.
//! - `--tls-min-version`/`--tls-max-version` take etcd's `TLS1.2` and
//!   `TLS1.3` (rustls speaks nothing older; `TLS1.0`/`TLS1.1` are refused
//!   with a clear error). `--cipher-suites` takes Go's names of the TLS
//!   1.2 suites rustls implements (AEAD with forward secrecy); TLS 1.3's
//!   suites are fixed, as in Go.
//! - Peers dial each other with the peer certificate as their client
//!   identity and the peer CA as the only trusted root.
//!
//! Everything here is built once at start from files, so a bad file is a
//! start-up error naming the flag, never a failure later.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::Error;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, SupportedCipherSuite, SupportedProtocolVersion};

/// etcd's TLS flags, for the client URLs and the peer URLs.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TlsFlags {
    /// Path to the client server TLS certificate file.
    #[arg(long)]
    pub cert_file: Option<PathBuf>,
    /// Path to the client server TLS key file.
    #[arg(long)]
    pub key_file: Option<PathBuf>,
    /// Path to the client server TLS trusted CA certificate file.
    #[arg(long)]
    pub trusted_ca_file: Option<PathBuf>,
    /// Enable client certificate authentication.
    #[arg(long, action = clap::ArgAction::Set, default_value_t = false)]
    pub client_cert_auth: bool,
    /// Path to the peer server TLS certificate file.
    #[arg(long)]
    pub peer_cert_file: Option<PathBuf>,
    /// Path to the peer server TLS key file.
    #[arg(long)]
    pub peer_key_file: Option<PathBuf>,
    /// Path to the peer server TLS trusted CA file.
    #[arg(long)]
    pub peer_trusted_ca_file: Option<PathBuf>,
    /// Enable peer client certificate authentication.
    #[arg(long, action = clap::ArgAction::Set, default_value_t = false)]
    pub peer_client_cert_auth: bool,
    /// Comma-separated list of supported TLS 1.2 cipher suites (Go's
    /// names); empty means rustls's defaults.
    #[arg(long, default_value = "")]
    pub cipher_suites: String,
    /// Minimum TLS version: TLS1.2 or TLS1.3.
    #[arg(long, default_value = "TLS1.2")]
    pub tls_min_version: String,
    /// Maximum TLS version: TLS1.2 or TLS1.3; empty means TLS1.3.
    #[arg(long, default_value = "")]
    pub tls_max_version: String,
}

/// A TLS setting that cannot be used: start-up stops with it.
fn error(flag: &'static str, reason: impl Into<String>) -> Error {
    Error::Flag {
        flag,
        reason: reason.into(),
    }
}

/// Who a client connection proved to be: the subject common name of its
/// verified certificate, if it showed one.
#[derive(Debug, Clone, Default)]
pub struct ClientIdentity {
    pub common_name: Option<String>,
    /// The connection is TLS (etcd checks a plain one's `Host` header).
    pub tls: bool,
}

impl ClientIdentity {
    /// The identity a verified TLS connection carries.
    pub fn of(connection: &rustls::ServerConnection) -> ClientIdentity {
        let common_name = connection
            .peer_certificates()
            .and_then(|chain| chain.first())
            .and_then(|leaf| common_name(leaf.as_ref()));
        ClientIdentity { common_name, tls: true }
    }
}

/// The first common name in a DER certificate's subject.
fn common_name(der: &[u8]) -> Option<String> {
    let (_, certificate) = x509_parser::parse_x509_certificate(der).ok()?;
    let name = certificate.subject().iter_common_name().next()?;
    name.as_str().ok().map(str::to_string)
}

/// The files and policy of one side (clients or peers).
struct Side<'a> {
    cert: Option<&'a Path>,
    key: Option<&'a Path>,
    trusted_ca: Option<&'a Path>,
    client_cert_auth: bool,
    names: [&'static str; 3],
}

impl TlsFlags {
    fn client_side(&self) -> Side<'_> {
        Side {
            cert: self.cert_file.as_deref(),
            key: self.key_file.as_deref(),
            trusted_ca: self.trusted_ca_file.as_deref(),
            client_cert_auth: self.client_cert_auth,
            names: ["cert-file", "key-file", "trusted-ca-file"],
        }
    }

    fn peer_side(&self) -> Side<'_> {
        Side {
            cert: self.peer_cert_file.as_deref(),
            key: self.peer_key_file.as_deref(),
            trusted_ca: self.peer_trusted_ca_file.as_deref(),
            client_cert_auth: self.peer_client_cert_auth,
            names: ["peer-cert-file", "peer-key-file", "peer-trusted-ca-file"],
        }
    }

    /// The server config for `https://` client URLs.
    pub fn client_server_config(&self) -> Result<Arc<ServerConfig>, Error> {
        self.server_config(&self.client_side())
    }

    /// The server config for `https://` peer URLs.
    /// It also offers the raft stream's ALPN protocol (`peer::frames`).
    pub fn peer_server_config(&self) -> Result<Arc<ServerConfig>, Error> {
        let mut config = Arc::unwrap_or_clone(self.server_config(&self.peer_side())?);
        config.alpn_protocols.push(RAFT_ALPN.to_vec());
        Ok(Arc::new(config))
    }

    /// The identity (certificate and key, PEM) and trusted CA (PEM) this
    /// member dials its peers with, when peer TLS is configured. A member
    /// that dials `https://` peers (`dials_https`) needs the CA.
    pub fn peer_client_files(&self, dials_https: bool) -> Result<Option<PeerClientFiles>, Error> {
        let side = self.peer_side();
        let Some(ca) = side.trusted_ca else {
            if dials_https {
                return Err(error(
                    side.names[2],
                    "https:// peer URLs need the CA that signed the peers' certificates",
                ));
            }
            return Ok(None);
        };
        let read = |path: &Path, flag| std::fs::read(path).map_err(|e| error(flag, format!("{}: {e}", path.display())));
        let identity = match (side.cert, side.key) {
            (Some(cert), Some(key)) => Some((read(cert, side.names[0])?, read(key, side.names[1])?)),
            _ => None,
        };
        Ok(Some(PeerClientFiles {
            trusted_ca: read(ca, side.names[2])?,
            identity,
        }))
    }

    fn server_config(&self, side: &Side<'_>) -> Result<Arc<ServerConfig>, Error> {
        let (Some(cert), Some(key)) = (side.cert, side.key) else {
            return Err(error(
                side.names[0],
                format!(
                    "an https:// URL needs a TLS certificate and key (--{}, --{})",
                    side.names[0], side.names[1]
                ),
            ));
        };
        let chain = certificates(cert, side.names[0])?;
        let key =
            PrivateKeyDer::from_pem_file(key).map_err(|e| error(side.names[1], format!("{}: {e}", key.display())))?;
        let provider = Arc::new(self.provider()?);
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&self.versions()?)
            .map_err(|e| error("tls-min-version", e.to_string()))?;
        // As etcd: a trusted CA file alone also requires certificates.
        let builder = if side.client_cert_auth || side.trusted_ca.is_some() {
            let ca = side.trusted_ca.ok_or_else(|| {
                error(
                    side.names[2],
                    "client certificate authentication needs a trusted CA file",
                )
            })?;
            let mut roots = RootCertStore::empty();
            for certificate in certificates(ca, side.names[2])? {
                roots
                    .add(certificate)
                    .map_err(|e| error(side.names[2], e.to_string()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| error(side.names[2], e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        let mut config = builder
            .with_single_cert(chain, key)
            .map_err(|e| error(side.names[1], e.to_string()))?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }

    /// ring's provider, its TLS 1.2 suites cut to `--cipher-suites`.
    fn provider(&self) -> Result<CryptoProvider, Error> {
        let mut provider = rustls::crypto::ring::default_provider();
        let wanted: Vec<&str> = self
            .cipher_suites
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        if wanted.is_empty() {
            return Ok(provider);
        }
        if self.tls_min_version == "TLS1.3" {
            return Err(error(
                "cipher-suites",
                "cipher suites cannot be configured when only TLS1.3 is enabled",
            ));
        }
        let mut suites: Vec<SupportedCipherSuite> = provider
            .cipher_suites
            .iter()
            .copied()
            .filter(|suite| suite.version() == &rustls::version::TLS13)
            .collect();
        for name in wanted {
            let suite = provider
                .cipher_suites
                .iter()
                .find(|suite| go_name(suite).as_deref() == Some(name))
                .ok_or_else(|| {
                    error(
                        "cipher-suites",
                        format!("{name} is not supported (TLS 1.2 AEAD suites with ECDHE only)"),
                    )
                })?;
            suites.push(*suite);
        }
        provider.cipher_suites = suites;
        Ok(provider)
    }

    fn versions(&self) -> Result<Vec<&'static SupportedProtocolVersion>, Error> {
        let rank = |text: &str, flag| match text {
            "TLS1.2" => Ok(2),
            "" | "TLS1.3" => Ok(3),
            "TLS1.0" | "TLS1.1" => Err(error(flag, format!("{text} is not supported; TLS1.2 is the oldest"))),
            other => Err(error(flag, format!("unknown TLS version {other:?}"))),
        };
        let min = rank(&self.tls_min_version, "tls-min-version")?;
        let max = rank(&self.tls_max_version, "tls-max-version")?;
        if min > max {
            return Err(error("tls-max-version", "is below --tls-min-version"));
        }
        let all = [(2, &rustls::version::TLS12), (3, &rustls::version::TLS13)];
        Ok(all
            .into_iter()
            .filter(|(rank, _)| (min..=max).contains(rank))
            .map(|(_, v)| v)
            .collect())
    }
}

/// The ALPN protocol of the raft stream on a TLS peer connection
/// (`peer::frames`): the dialler asks for it, and the peer port's
/// listener routes a connection that agreed on it to the raft stream.
pub const RAFT_ALPN: &[u8] = b"kv-raft/1";

/// What a member needs to dial peers over TLS.
pub struct PeerClientFiles {
    pub trusted_ca: Vec<u8>,
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl PeerClientFiles {
    /// The rustls config the raft stream dials peers with: the CA as the
    /// only root, the identity if there is one, and the raft stream's
    /// ALPN protocol, by which the peer's listener knows it.
    pub fn raft_client_config(&self) -> Result<Arc<rustls::ClientConfig>, Error> {
        let bad = |what: &str, e: String| error("peer-trusted-ca-file", format!("{what}: {e}"));
        let mut roots = RootCertStore::empty();
        for certificate in CertificateDer::pem_slice_iter(&self.trusted_ca) {
            let certificate = certificate.map_err(|e| bad("the CA", e.to_string()))?;
            roots.add(certificate).map_err(|e| bad("the CA", e.to_string()))?;
        }
        let builder = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| bad("protocol versions", e.to_string()))?
            .with_root_certificates(roots);
        let mut config = match &self.identity {
            Some((cert, key)) => {
                let chain = CertificateDer::pem_slice_iter(cert)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| error("peer-cert-file", e.to_string()))?;
                let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| error("peer-key-file", e.to_string()))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| error("peer-key-file", e.to_string()))?
            }
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![RAFT_ALPN.to_vec()];
        Ok(Arc::new(config))
    }
}

/// Go's name of a TLS 1.2 suite, which is the IANA name rustls's
/// `CipherSuite` also prints; None for TLS 1.3 suites.
fn go_name(suite: &SupportedCipherSuite) -> Option<String> {
    (suite.version() == &rustls::version::TLS12).then(|| format!("{:?}", suite.suite()))
}

fn certificates(path: &Path, flag: &'static str) -> Result<Vec<CertificateDer<'static>>, Error> {
    let chain: Result<Vec<_>, _> = CertificateDer::pem_file_iter(path)
        .map_err(|e| error(flag, format!("{}: {e}", path.display())))?
        .collect();
    let chain = chain.map_err(|e| error(flag, format!("{}: {e}", path.display())))?;
    if chain.is_empty() {
        return Err(error(flag, format!("{}: no certificate in the file", path.display())));
    }
    Ok(chain)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: Go's suite names map onto rustls's TLS 1.2 suites, and the
    // version flags take etcd's spellings and refuse what rustls lacks.
    #[test]
    fn suites_and_versions_take_etcds_names() {
        let provider = rustls::crypto::ring::default_provider();
        let names: Vec<String> = provider.cipher_suites.iter().filter_map(go_name).collect();
        for expected in [
            "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
            "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
            "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
        ] {
            assert!(names.iter().any(|n| n == expected), "{expected} not in {names:?}");
        }
        let mut flags = TlsFlags {
            tls_min_version: "TLS1.2".into(),
            cipher_suites: "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".into(),
            ..TlsFlags::default()
        };
        let chosen = flags.provider().expect("a known suite");
        assert!(chosen
            .cipher_suites
            .iter()
            .any(|s| s.version() == &rustls::version::TLS12));
        assert_eq!(flags.versions().expect("1.2 and 1.3").len(), 2);
        flags.cipher_suites = "TLS_RSA_WITH_RC4_128_SHA".into();
        assert!(flags.provider().is_err());
        flags.tls_min_version = "TLS1.1".into();
        assert!(flags.versions().is_err());
        flags.tls_min_version = "TLS1.3".into();
        flags.tls_max_version = "TLS1.2".into();
        assert!(flags.versions().is_err());
    }
}
