//! TLS on the client and peer URLs, with etcd's flags and behaviour.
//!
//! - [`suites`]: `--cipher-suites`, `--tls-min-version`,
//!   `--tls-max-version`, with etcd's names and messages.
//! - [`verify`]: allowed CNs and hostnames, checked in the handshake.
//! - [`admission`]: revocation lists and the peer SAN check, after it.
//! - [`auto`]: `--auto-tls` and `--peer-auto-tls`'s self-signed files.
//!
//! The rules, side by side with etcd's:
//! - A listener whose URL is `https://` (or `unixs://`) needs a
//!   certificate and key (`--cert-file`/`--key-file` for clients,
//!   `--peer-cert-file`/`--peer-key-file` for peers, or auto-TLS's);
//!   start-up fails without them, as etcd's does.
//! - With `--client-cert-auth` (`--peer-client-cert-auth`), or with a
//!   `--trusted-ca-file` (`--peer-trusted-ca-file`) given at all, the
//!   server requires a client certificate signed by that CA and refuses
//!   the handshake otherwise, as etcd's listener does. With neither, no
//!   certificate is asked for. The CN names the caller only with
//!   `--client-cert-auth`, as in etcd.
//! - The verified client certificate's subject common name is the
//!   connection's [`ClientIdentity`]; with auth enabled, a request that
//!   carries no token is made as that user.
//! - Peers dial each other with the peer certificate as their client
//!   identity and the peer CA as the only trusted root; every dial (the
//!   raft stream, snapshots, forwarded calls, joining) uses one rustls
//!   configuration ([`PeerDial`]).
//! - Auto-TLS differs from etcd in one way: etcd silently drops
//!   `--client-cert-auth`, `--trusted-ca-file`, the CRL and the allowed
//!   names of a side it generates certificates for; kv-server keeps them
//!   (a CA given still requires client certificates), and refuses
//!   `--client-cert-auth` without a CA at start, as it does without
//!   auto-TLS, so no security setting is ever dropped.
//!
//! Everything here is checked at start ([`TlsFlags::check`]), before the
//! data directory is touched, so a bad setting is a start-up error
//! naming the flag, never a failure later.

pub mod admission;
pub mod auto;
pub mod suites;
pub mod verify;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::Error;
use rustls::client::danger::ServerCertVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

use admission::Admission;
use verify::{AcceptAny, AllowedClients, AllowedNames, AllowedServers};

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
    /// Path to the client certificate revocation list file.
    #[arg(long)]
    pub client_crl_file: Option<PathBuf>,
    /// Comma-separated SAN hostnames a client certificate must carry one of.
    #[arg(long, default_value = "")]
    pub client_cert_allowed_hostname: String,
    /// The certificate etcd shows when it dials its own client port (its
    /// gRPC gateway does). kv-server's gateway is served inside the
    /// member, so no connection presents it; the pair is still checked
    /// at start as etcd checks it (both files, a matching pair), so a
    /// configuration etcd refuses is refused here too.
    #[arg(long)]
    pub client_cert_file: Option<PathBuf>,
    /// The key of `--client-cert-file`.
    #[arg(long)]
    pub client_key_file: Option<PathBuf>,
    /// Client TLS using generated certificates (`tls/auto.rs`).
    #[arg(long, action = clap::ArgAction::Set, default_value_t = false)]
    pub auto_tls: bool,
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
    /// Path to the peer certificate revocation list file.
    #[arg(long)]
    pub peer_crl_file: Option<PathBuf>,
    /// Comma-separated CNs a peer's certificate must carry one of.
    #[arg(long, default_value = "")]
    pub peer_cert_allowed_cn: String,
    /// Comma-separated SAN hostnames a peer's certificate must carry one of.
    #[arg(long, default_value = "")]
    pub peer_cert_allowed_hostname: String,
    /// Skip the check that a peer's client certificate names the address
    /// it connects from (`tls/admission.rs`).
    #[arg(
        long = "experimental-peer-skip-client-san-verification",
        action = clap::ArgAction::Set,
        default_value_t = false
    )]
    pub peer_skip_client_san_verification: bool,
    /// Peer TLS using generated certificates (`tls/auto.rs`).
    #[arg(long, action = clap::ArgAction::Set, default_value_t = false)]
    pub peer_auto_tls: bool,
    /// The certificate this member shows when it dials its peers, when
    /// it is not the peer server certificate (one made for client
    /// authentication only, say).
    #[arg(long)]
    pub peer_client_cert_file: Option<PathBuf>,
    /// The key of `--peer-client-cert-file`.
    #[arg(long)]
    pub peer_client_key_file: Option<PathBuf>,
    /// Years the generated certificates are valid for.
    #[arg(long, default_value_t = 1)]
    pub self_signed_cert_validity: u64,
    /// Comma-separated TLS cipher suites (Go's names; `tls/suites.rs`);
    /// empty means all rustls implements.
    #[arg(long, default_value = "")]
    pub cipher_suites: String,
    /// Minimum TLS version: TLS1.2 or TLS1.3.
    #[arg(long, default_value = "TLS1.2")]
    pub tls_min_version: String,
    /// Maximum TLS version: TLS1.2 or TLS1.3; empty means TLS1.3.
    #[arg(long, default_value = "")]
    pub tls_max_version: String,
    /// Whether the peer certificate is auto-TLS's (set at start by
    /// [`TlsFlags::make_auto_files`]): peers are then dialled without
    /// verifying theirs, as etcd does.
    #[arg(skip)]
    pub peer_auto_active: bool,
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
    crl: Option<&'a Path>,
    /// The allowed CN and hostname flags' values.
    allowed: (&'a str, &'a str),
    /// The flags' names: certificate, key, trusted CA, CRL, client auth.
    names: [&'static str; 5],
}

impl Side<'_> {
    fn allowed_names(&self) -> Result<AllowedNames, Error> {
        let flag = if self.names[0] == "cert-file" {
            "client-cert-allowed-hostname"
        } else {
            "peer-cert-allowed-cn"
        };
        AllowedNames::from_flags(self.allowed.0, self.allowed.1).map_err(|reason| error(flag, reason))
    }

    /// Whether connections must show a certificate: as etcd, a trusted
    /// CA file alone also requires one.
    fn requires_certificates(&self) -> bool {
        self.client_cert_auth || self.trusted_ca.is_some()
    }
}

impl TlsFlags {
    fn client_side(&self) -> Side<'_> {
        Side {
            cert: self.cert_file.as_deref(),
            key: self.key_file.as_deref(),
            trusted_ca: self.trusted_ca_file.as_deref(),
            client_cert_auth: self.client_cert_auth,
            crl: self.client_crl_file.as_deref(),
            allowed: ("", &self.client_cert_allowed_hostname),
            names: [
                "cert-file",
                "key-file",
                "trusted-ca-file",
                "client-crl-file",
                "client-cert-auth",
            ],
        }
    }

    fn peer_side(&self) -> Side<'_> {
        Side {
            cert: self.peer_cert_file.as_deref(),
            key: self.peer_key_file.as_deref(),
            trusted_ca: self.peer_trusted_ca_file.as_deref(),
            client_cert_auth: self.peer_client_cert_auth,
            crl: self.peer_crl_file.as_deref(),
            allowed: (&self.peer_cert_allowed_cn, &self.peer_cert_allowed_hostname),
            names: [
                "peer-cert-file",
                "peer-key-file",
                "peer-trusted-ca-file",
                "peer-crl-file",
                "peer-client-cert-auth",
            ],
        }
    }

    /// Every TLS setting checked, whether or not a URL is `https://`, as
    /// etcd checks them: versions, suites, allowed names, revocation
    /// lists, and client certificate authentication's CA.
    pub fn check(&self) -> Result<(), Error> {
        if let Err(reason) = suites::versions(&self.tls_min_version, &self.tls_max_version) {
            let min_alone = suites::versions(&self.tls_min_version, "");
            let flag = if min_alone.is_err() {
                "tls-min-version"
            } else {
                "tls-max-version"
            };
            return Err(error(flag, reason));
        }
        suites::provider(&self.cipher_suites, &self.tls_min_version)
            .map_err(|reason| error("cipher-suites", reason))?;
        if self.peer_client_cert_file.is_some() != self.peer_client_key_file.is_some() {
            return Err(error(
                "peer-client-cert-file",
                "--peer-client-cert-file and --peer-client-key-file are given together",
            ));
        }
        self.check_client_pair()?;
        for side in [self.client_side(), self.peer_side()] {
            side.allowed_names()?;
            if let Some(crl) = side.crl {
                admission::revoked_serials(crl).map_err(|reason| error(side.names[3], reason))?;
            }
            if side.client_cert_auth && side.trusted_ca.is_none() {
                return Err(error(
                    side.names[4],
                    format!(
                        "client certificate authentication needs a trusted CA (--{})",
                        side.names[2]
                    ),
                ));
            }
        }
        Ok(())
    }

    /// `--client-cert-file` and `--client-key-file`, checked as etcd's
    /// `TLSInfo` checks them before it serves: both or neither, and a
    /// certificate the key belongs to (etcd's messages).
    fn check_client_pair(&self) -> Result<(), Error> {
        let (cert, key) = match (&self.client_cert_file, &self.client_key_file) {
            (None, None) => return Ok(()),
            (Some(cert), Some(key)) => (cert, key),
            (cert, key) => {
                let shown = |path: &Option<PathBuf>| path.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
                return Err(error(
                    "client-cert-file",
                    format!(
                        "ClientKeyFile and ClientCertFile must both be present or both absent: key: {}, cert: {}]",
                        shown(key),
                        shown(cert)
                    ),
                ));
            }
        };
        let chain = certificates(cert, "client-cert-file")?;
        let key = PrivateKeyDer::from_pem_file(key)
            .map_err(|e| error("client-key-file", format!("{}: {e}", key.display())))?;
        rustls::sign::CertifiedKey::from_der(chain, key, &self.provider()?).map_err(|e| {
            let reason = match e {
                rustls::Error::InconsistentKeys(_) => "tls: private key does not match public key".to_string(),
                other => other.to_string(),
            };
            error("client-key-file", reason)
        })?;
        Ok(())
    }

    /// `--auto-tls` and `--peer-auto-tls`: a side with no certificate
    /// files given gets auto-TLS's, made (or found) under `data_dir` for
    /// the hosts of its listen URLs. Peers first, as etcd makes them.
    pub fn make_auto_files(
        &mut self,
        data_dir: &Path,
        client_urls: &[String],
        peer_urls: &[String],
    ) -> Result<(), Error> {
        let fixtures = data_dir.join("fixtures");
        let years = self.self_signed_cert_validity;
        if self.peer_auto_tls {
            if self.peer_cert_file.is_some() || self.peer_key_file.is_some() {
                tracing::warn!("ignoring peer auto TLS since certs given");
            } else {
                let files = auto::self_signed(&fixtures.join("peer"), &auto::hosts(peer_urls), years, "peer-auto-tls")?;
                self.peer_cert_file = Some(files.cert);
                self.peer_key_file = Some(files.key);
                self.peer_auto_active = true;
            }
        }
        if self.auto_tls {
            if self.cert_file.is_some() || self.key_file.is_some() {
                tracing::warn!("ignoring client auto TLS since certs given");
            } else {
                let files = auto::self_signed(&fixtures.join("client"), &auto::hosts(client_urls), years, "auto-tls")?;
                self.cert_file = Some(files.cert);
                self.key_file = Some(files.key);
            }
        }
        Ok(())
    }

    /// The server config for `https://` and `unixs://` client URLs.
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

    /// What client connections are checked for after the handshake.
    pub fn client_admission(&self) -> Admission {
        Admission {
            endpoint: "client",
            crl: self.client_crl_file.clone(),
            check_san: false,
        }
    }

    /// What peer connections are checked for after the handshake.
    pub fn peer_admission(&self) -> Admission {
        Admission {
            endpoint: "peer",
            crl: self.peer_crl_file.clone(),
            check_san: !self.peer_skip_client_san_verification,
        }
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
        let builder = match side.trusted_ca.filter(|_| side.requires_certificates()) {
            Some(ca) => {
                let roots = Arc::new(roots(ca, side.names[2])?);
                let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider)
                    .build()
                    .map_err(|e| error(side.names[2], e.to_string()))?;
                let verifier: Arc<dyn ClientCertVerifier> = Arc::new(AllowedClients {
                    inner: verifier,
                    names: side.allowed_names()?,
                });
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let mut config = builder
            .with_single_cert(chain, key)
            .map_err(|e| error(side.names[1], e.to_string()))?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }

    fn provider(&self) -> Result<CryptoProvider, Error> {
        suites::provider(&self.cipher_suites, &self.tls_min_version).map_err(|reason| error("cipher-suites", reason))
    }

    fn versions(&self) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, Error> {
        suites::versions(&self.tls_min_version, &self.tls_max_version)
            .map_err(|reason| error("tls-min-version", reason))
    }

    /// How this member dials `https://` peers, when peer TLS is set up
    /// (by files or by auto-TLS). A member that dials `https://` peers
    /// (`dials_https`) needs the CA that signed them, unless auto-TLS.
    pub fn peer_dial(&self, dials_https: bool) -> Result<Option<PeerDial>, Error> {
        let side = self.peer_side();
        let provider = Arc::new(self.provider()?);
        let verifier: Arc<dyn ServerCertVerifier> = if self.peer_auto_active {
            Arc::new(AcceptAny {
                provider: provider.clone(),
            })
        } else if let Some(ca) = side.trusted_ca {
            let inner = rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots(ca, side.names[2])?),
                provider.clone(),
            )
            .build()
            .map_err(|e| error(side.names[2], e.to_string()))?;
            Arc::new(AllowedServers {
                inner,
                names: side.allowed_names()?,
            })
        } else if dials_https {
            return Err(error(
                side.names[2],
                "https:// peer URLs need the CA that signed the peers' certificates",
            ));
        } else {
            return Ok(None);
        };
        // As etcd: the peer client pair when given, else the server's.
        let (files, names) = match (&self.peer_client_cert_file, &self.peer_client_key_file) {
            (Some(cert), Some(key)) => (
                (Some(cert.as_path()), Some(key.as_path())),
                ["peer-client-cert-file", "peer-client-key-file"],
            ),
            _ => ((side.cert, side.key), [side.names[0], side.names[1]]),
        };
        let identity = match files {
            (Some(cert), Some(key)) => Some((
                certificates(cert, names[0])?,
                PrivateKeyDer::from_pem_file(key).map_err(|e| error(names[1], format!("{}: {e}", key.display())))?,
            )),
            _ => None,
        };
        let config = |alpn: &[u8]| -> Result<Arc<rustls::ClientConfig>, Error> {
            let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
                .with_protocol_versions(&self.versions()?)
                .map_err(|e| error("tls-min-version", e.to_string()))?
                .dangerous()
                .with_custom_certificate_verifier(verifier.clone());
            let mut config = match &identity {
                Some((chain, key)) => builder
                    .with_client_auth_cert(chain.clone(), key.clone_key())
                    .map_err(|e| error(names[1], e.to_string()))?,
                None => builder.with_no_client_auth(),
            };
            config.alpn_protocols = vec![alpn.to_vec()];
            Ok(Arc::new(config))
        };
        Ok(Some(PeerDial {
            raft: config(RAFT_ALPN)?,
            grpc: config(b"h2")?,
        }))
    }
}

/// The ALPN protocol of the raft stream on a TLS peer connection
/// (`peer::frames`): the dialler asks for it, and the peer port's
/// listener routes a connection that agreed on it to the raft stream.
pub const RAFT_ALPN: &[u8] = b"kv-raft/1";

/// How this member dials its peers over TLS: the raft stream's config
/// (ALPN `kv-raft/1`) and gRPC's (ALPN `h2`), with the same identity and
/// the same verification.
pub struct PeerDial {
    pub raft: Arc<rustls::ClientConfig>,
    pub grpc: Arc<rustls::ClientConfig>,
}

fn roots(path: &Path, flag: &'static str) -> Result<RootCertStore, Error> {
    let mut roots = RootCertStore::empty();
    for certificate in certificates(path, flag)? {
        roots.add(certificate).map_err(|e| error(flag, e.to_string()))?;
    }
    Ok(roots)
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
