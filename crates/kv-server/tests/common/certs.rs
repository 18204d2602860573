//! Certificates made at test time (no private key is committed): a test
//! CA, member certificates for 127.0.0.1 and localhost (server and client
//! use, as etcd's peers need), client certificates named by their common
//! name, and a second CA whose certificates must be refused.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

/// A certificate and its key, as PEM files.
#[derive(Clone)]
pub struct Pair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The files a TLS test uses.
pub struct Certs {
    /// The CA the members trust.
    pub ca: PathBuf,
    /// The members' certificate (127.0.0.1, localhost).
    pub member: Pair,
    /// Client certificates signed by `ca`, by common name.
    pub clients: Vec<(String, Pair)>,
    /// A client certificate (common name "root") from another CA.
    pub stranger: Pair,
    /// The CA's key, for more certificates and for revocation lists.
    issuer: CertifiedIssuer<'static, KeyPair>,
    dir: PathBuf,
}

impl Certs {
    /// Writes a CA, the member pair, one client pair per name in
    /// `clients`, and a stranger's pair into `dir`.
    pub fn generate(dir: &Path, clients: &[&str]) -> Certs {
        std::fs::create_dir_all(dir).expect("certs dir");
        let ca = authority("kv-server test CA");
        let ca_path = dir.join("ca.pem");
        std::fs::write(&ca_path, ca.pem()).expect("write CA");
        let member = leaf(&ca, "member", &["127.0.0.1", "localhost"], dir, "member");
        let clients = clients
            .iter()
            .map(|name| (name.to_string(), leaf(&ca, name, &[], dir, &format!("client-{name}"))))
            .collect();
        let other = authority("another CA");
        let stranger = leaf(&other, "root", &[], dir, "stranger");
        Certs {
            ca: ca_path,
            member,
            clients,
            stranger,
            issuer: ca,
            dir: dir.to_path_buf(),
        }
    }

    /// Another certificate from the CA, with common name `name`, for
    /// server and client use, in files named after `file`.
    pub fn another(&self, name: &str, file: &str) -> Pair {
        leaf(&self.issuer, name, &[], &self.dir, file)
    }

    /// Makes the member's certificate one for server authentication
    /// only: a member that dials its peers with it is refused by peers
    /// that check client certificates.
    pub fn make_member_server_only(&mut self) {
        self.member = leaf_for(
            &self.issuer,
            "member",
            &["127.0.0.1", "localhost"],
            &self.dir,
            "member-server-only",
            &[ExtendedKeyUsagePurpose::ServerAuth],
        );
    }

    /// A revocation list from the CA revoking `revoked`, as a PEM file.
    pub fn revocation_list(&self, revoked: &[&Pair], file: &str) -> PathBuf {
        let revoked_certs = revoked
            .iter()
            .map(|pair| rcgen::RevokedCertParams {
                serial_number: rcgen::SerialNumber::from_slice(&serial(&pair.cert)),
                revocation_time: rcgen::date_time_ymd(2026, 1, 1),
                reason_code: None,
                invalidity_date: None,
            })
            .collect();
        let crl = rcgen::CertificateRevocationListParams {
            this_update: rcgen::date_time_ymd(2026, 1, 1),
            next_update: rcgen::date_time_ymd(2036, 1, 1),
            crl_number: rcgen::SerialNumber::from(1u64),
            issuing_distribution_point: None,
            revoked_certs,
            key_identifier_method: rcgen::KeyIdMethod::Sha256,
        }
        .signed_by(&self.issuer)
        .expect("revocation list");
        let path = self.dir.join(file);
        std::fs::write(&path, crl.pem().expect("PEM")).expect("write the list");
        path
    }

    /// The client pair named `name`.
    pub fn client(&self, name: &str) -> &Pair {
        &self
            .clients
            .iter()
            .find(|(n, _)| n == name)
            .expect("a generated client")
            .1
    }

    /// etcd's flags for TLS with certificate auth on client and peer URLs.
    pub fn member_flags(&self) -> Vec<String> {
        let path = |p: &PathBuf| p.display().to_string();
        [
            ("--cert-file", path(&self.member.cert)),
            ("--key-file", path(&self.member.key)),
            ("--trusted-ca-file", path(&self.ca)),
            ("--peer-cert-file", path(&self.member.cert)),
            ("--peer-key-file", path(&self.member.key)),
            ("--peer-trusted-ca-file", path(&self.ca)),
        ]
        .into_iter()
        .flat_map(|(flag, value)| [flag.to_string(), value])
        .chain(["--client-cert-auth".into(), "--peer-client-cert-auth".into()])
        .collect()
    }

    /// etcdctl's (and etcd's benchmark tool's) flags to connect as `pair`.
    pub fn client_flags(&self, pair: &Pair) -> Vec<String> {
        vec![
            format!("--cacert={}", self.ca.display()),
            format!("--cert={}", pair.cert.display()),
            format!("--key={}", pair.key.display()),
        ]
    }
}

/// The serial number of the certificate in the PEM file `path`, as Go
/// prints it in "certificate serial … revoked" (lowercase hex bytes).
pub fn serial_hex(path: &Path) -> String {
    let bytes = serial(path);
    let trimmed: Vec<u8> = bytes.iter().copied().skip_while(|byte| *byte == 0).collect();
    trimmed.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn serial(path: &Path) -> Vec<u8> {
    let pem = std::fs::read(path).expect("certificate file");
    let (_, pem) = x509_parser::pem::parse_x509_pem(&pem).expect("PEM");
    let certificate = pem.parse_x509().expect("certificate");
    certificate.raw_serial().to_vec()
}

fn authority(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    CertifiedIssuer::self_signed(params, KeyPair::generate().expect("CA key")).expect("CA certificate")
}

fn leaf(ca: &CertifiedIssuer<'static, KeyPair>, name: &str, hosts: &[&str], dir: &Path, file: &str) -> Pair {
    let both = [ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
    leaf_for(ca, name, hosts, dir, file, &both)
}

/// A certificate from `ca` for the extended key usages `purposes`.
fn leaf_for(
    ca: &CertifiedIssuer<'static, KeyPair>,
    name: &str,
    hosts: &[&str],
    dir: &Path,
    file: &str,
    purposes: &[ExtendedKeyUsagePurpose],
) -> Pair {
    let hosts: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
    let mut params = CertificateParams::new(hosts).expect("leaf params");
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    params.extended_key_usages = purposes.to_vec();
    let key = KeyPair::generate().expect("leaf key");
    let certificate = params.signed_by(&key, ca).expect("leaf certificate");
    let pair = Pair {
        cert: dir.join(format!("{file}.pem")),
        key: dir.join(format!("{file}-key.pem")),
    };
    std::fs::write(&pair.cert, certificate.pem()).expect("write certificate");
    std::fs::write(&pair.key, key.serialize_pem()).expect("write key");
    pair
}

/// GET `path` over HTTPS/1.1 on 127.0.0.1:`port` as `pair`, trusting
/// `ca`: the raw response, or an empty string when the member does not
/// answer or refuses the handshake.
pub fn https_get(port: u16, path: &str, ca: &Path, pair: &Pair) -> String {
    let config = client_config(ca, pair);
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("server name");
    let Ok(connection) = rustls::ClientConnection::new(config, name) else {
        return String::new();
    };
    let Ok(socket) = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200)) else {
        return String::new();
    };
    let _ = socket.set_read_timeout(Some(Duration::from_secs(3)));
    let mut stream = rustls::StreamOwned::new(connection, socket);
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return String::new();
    }
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    String::from_utf8_lossy(&response).into_owned()
}

/// Whether the TLS listener on `port` takes `pair` as a client
/// certificate, whatever protocol it speaks over TLS: the handshake, then
/// a second of listening (no request is sent) for the alert a server
/// sends when it refuses the certificate. `Err` says why it was refused.
pub fn tls_accepts(port: u16, ca: &Path, pair: &Pair) -> Result<(), String> {
    tls_accepts_with(port, client_config(ca, pair))
}

/// [`tls_accepts`] for a client that speaks only TLS 1.2.
pub fn tls12_accepts(port: u16, ca: &Path, pair: &Pair) -> Result<(), String> {
    tls_accepts_with(port, client_config_with(ca, pair, &[&rustls::version::TLS12]))
}

fn tls_accepts_with(port: u16, config: Arc<rustls::ClientConfig>) -> Result<(), String> {
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("server name");
    let mut connection = rustls::ClientConnection::new(config, name).map_err(|e| e.to_string())?;
    let mut socket = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(2))
        .map_err(|e| format!("connect: {e}"))?;
    socket
        .set_read_timeout(Some(Duration::from_secs(1)))
        .map_err(|e| e.to_string())?;
    connection
        .complete_io(&mut socket)
        .map_err(|e| format!("handshake: {e}"))?;
    loop {
        match connection.read_tls(&mut socket) {
            Ok(0) => return Err("closed without a word".into()),
            Ok(_) => {
                connection.process_new_packets().map_err(|e| e.to_string())?;
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return Ok(());
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

fn client_config(ca: &Path, pair: &Pair) -> Arc<rustls::ClientConfig> {
    client_config_with(ca, pair, rustls::DEFAULT_VERSIONS)
}

fn client_config_with(
    ca: &Path,
    pair: &Pair,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let mut roots = rustls::RootCertStore::empty();
    for certificate in CertificateDer::pem_file_iter(ca).expect("CA file") {
        roots.add(certificate.expect("CA certificate")).expect("add CA");
    }
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&pair.cert)
        .expect("certificate file")
        .map(|c| c.expect("certificate"))
        .collect();
    let key = PrivateKeyDer::from_pem_file(&pair.key).expect("key file");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .expect("versions")
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .expect("client certificate");
    Arc::new(config)
}

/// The certificate the TLS listener on 127.0.0.1:`port` presents (DER),
/// taken without verifying it, as a client of auto-TLS's self-signed
/// certificates must (etcdctl's `--insecure-skip-tls-verify`).
pub fn presented_certificate(port: u16) -> Result<Vec<u8>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(TakeAny(provider)))
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("server name");
    let mut connection = rustls::ClientConnection::new(Arc::new(config), name).map_err(|e| e.to_string())?;
    let mut socket = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(2))
        .map_err(|e| format!("connect: {e}"))?;
    socket
        .set_read_timeout(Some(Duration::from_secs(2)))
        .map_err(|e| e.to_string())?;
    while connection.is_handshaking() {
        connection
            .complete_io(&mut socket)
            .map_err(|e| format!("handshake: {e}"))?;
    }
    connection
        .peer_certificates()
        .and_then(|chain| chain.first())
        .map(|leaf| leaf.as_ref().to_vec())
        .ok_or_else(|| "no certificate presented".to_string())
}

/// A verifier that takes any certificate (signatures still checked).
#[derive(Debug)]
struct TakeAny(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for TakeAny {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
