//! Who may connect: `--client-cert-allowed-hostname`,
//! `--peer-cert-allowed-cn` and `--peer-cert-allowed-hostname`, checked
//! inside the handshake after the certificate chain is verified, as
//! etcd's `VerifyPeerCertificate` does, so a refused certificate ends the
//! handshake with an alert and the error `client certificate
//! authentication failed`.
//!
//! - A CN rule matches the leaf's subject common name exactly (case
//!   counts); a hostname rule matches its DNS (wildcards allowed) or IP
//!   subject alternative names, never the CN. Lists are comma-separated,
//!   and a CN list and a hostname list on one side are refused at start
//!   with etcd's message.
//! - As in etcd, the peer rules also hold for the certificates of the
//!   peers this member dials: it refuses a peer whose server certificate
//!   the rule does not allow.
//! - With peer auto-TLS a member dials its peers without verifying their
//!   self-signed certificates ([`AcceptAny`]), as etcd does: auto-TLS
//!   encrypts, it does not authenticate.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, SignatureScheme};

/// The error a certificate the rule does not allow gets: etcd's words
/// (rustls prints it with `Debug`, so both say them).
struct NotAllowed;

impl std::fmt::Debug for NotAllowed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl std::fmt::Display for NotAllowed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("client certificate authentication failed")
    }
}

impl std::error::Error for NotAllowed {}

/// One side's rule on the names a verified certificate must carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowedNames {
    Any,
    CommonNames(Vec<String>),
    Hostnames(Vec<String>),
}

/// A comma-separated flag as etcd splits it: on commas, nothing trimmed.
fn list(text: &str) -> Vec<String> {
    text.split(',')
        .filter(|item| !item.is_empty())
        .map(str::to_string)
        .collect()
}

impl AllowedNames {
    /// The rule of one side's flags, or etcd's message when both are set.
    pub fn from_flags(cns: &str, hostnames: &str) -> Result<AllowedNames, String> {
        let (cns, hostnames) = (list(cns), list(hostnames));
        match (cns.is_empty(), hostnames.is_empty()) {
            (true, true) => Ok(AllowedNames::Any),
            (false, true) => Ok(AllowedNames::CommonNames(cns)),
            (true, false) => Ok(AllowedNames::Hostnames(hostnames)),
            (false, false) => Err(format!(
                "AllowedCNs and AllowedHostnames are mutually exclusive (cns={cns:?}, hostnames={hostnames:?})"
            )),
        }
    }

    /// Whether the leaf certificate `der` satisfies the rule.
    pub fn allows(&self, der: &CertificateDer<'_>) -> bool {
        match self {
            AllowedNames::Any => true,
            AllowedNames::CommonNames(names) => super::common_name(der.as_ref()).is_some_and(|cn| names.contains(&cn)),
            AllowedNames::Hostnames(names) => {
                let Ok(parsed) = rustls::server::ParsedCertificate::try_from(der) else {
                    return false;
                };
                names.iter().any(|name| {
                    ServerName::try_from(name.as_str())
                        .is_ok_and(|server| rustls::client::verify_server_name(&parsed, &server).is_ok())
                })
            }
        }
    }

    fn check(&self, der: &CertificateDer<'_>) -> Result<(), rustls::Error> {
        if self.allows(der) {
            return Ok(());
        }
        Err(rustls::Error::InvalidCertificate(CertificateError::Other(
            rustls::OtherError(Arc::new(NotAllowed)),
        )))
    }
}

/// A client certificate verifier that also applies [`AllowedNames`].
#[derive(Debug)]
pub struct AllowedClients {
    pub inner: Arc<dyn ClientCertVerifier>,
    pub names: AllowedNames,
}

impl ClientCertVerifier for AllowedClients {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self.inner.verify_client_cert(end_entity, intermediates, now)?;
        self.names.check(end_entity)?;
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// A peer's server certificate verifier that also applies the peer
/// side's [`AllowedNames`].
#[derive(Debug)]
pub struct AllowedServers {
    pub inner: Arc<dyn ServerCertVerifier>,
    pub names: AllowedNames,
}

impl ServerCertVerifier for AllowedServers {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)?;
        self.names.check(end_entity)?;
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Peer auto-TLS's dialling side: any certificate is taken, its
/// signatures still checked, as etcd's `InsecureSkipVerify` does.
#[derive(Debug)]
pub struct AcceptAny {
    pub provider: Arc<rustls::crypto::CryptoProvider>,
}

impl ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: the rules read etcd's flags as etcd does, and match CNs
    // exactly and hostnames by SAN only. Method: rcgen certificates.
    #[test]
    fn names_are_matched_as_etcd_matches_them() {
        assert_eq!(AllowedNames::from_flags("", ""), Ok(AllowedNames::Any));
        assert_eq!(
            AllowedNames::from_flags("a", "b"),
            Err("AllowedCNs and AllowedHostnames are mutually exclusive (cns=[\"a\"], hostnames=[\"b\"])".into())
        );
        let mut params =
            rcgen::CertificateParams::new(vec!["peer.example".to_string(), "127.0.0.1".to_string()]).expect("params");
        params.distinguished_name.push(rcgen::DnType::CommonName, "peer1");
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = params.self_signed(&key).expect("certificate");
        let der = cert.der();
        let rule = |cns: &str, hosts: &str| AllowedNames::from_flags(cns, hosts).expect("one list");
        assert!(rule("peer2,peer1", "").allows(der));
        assert!(!rule("Peer1", "").allows(der));
        assert!(rule("", "peer.example").allows(der));
        assert!(rule("", "127.0.0.1").allows(der));
        assert!(!rule("", "peer1").allows(der), "the CN is never a hostname");
    }
}
