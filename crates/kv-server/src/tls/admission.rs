//! The checks a TLS connection passes after its handshake, as etcd's TLS
//! listener makes them, and the line a refused connection logs.
//!
//! - **Peer SAN check** (peer URLs; off with
//!   `--experimental-peer-skip-client-san-verification`): a client
//!   certificate with IP subject alternative names must name the address
//!   the connection comes from; one with only DNS names must have a name
//!   that resolves to that address; one with neither passes.
//! - **Revocation** (`--client-crl-file`, `--peer-crl-file`): every
//!   certificate the client presented (leaf and intermediates) is compared
//!   by serial number with the list's revoked entries. As in etcd the file
//!   is read anew for each connection, so a new list takes effect without
//!   a restart, and the list's signature and dates are not checked: the
//!   file is the operator's word. A list that no longer reads refuses every
//!   certificate-bearing connection (at start it is refused outright).
//!
//! A refused connection is closed without a word after its handshake, as
//! etcd closes it, and logs etcd's `rejected connection on client
//! endpoint` (or `peer endpoint`) with `remote-addr`, `server-name`,
//! `ip-addresses`, `dns-names` and `error`.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::num_bigint::BigUint;

use crate::logging::JsonList;

/// The serial numbers a CRL file revokes, or why it does not read. PEM
/// (its first `X509 CRL` block) or DER, as Go's `x509.ParseCRL` takes.
pub fn revoked_serials(path: &Path) -> Result<Vec<BigUint>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("open {}: {e}", path.display()))?;
    parse_crl(&bytes)
}

fn parse_crl(bytes: &[u8]) -> Result<Vec<BigUint>, String> {
    let der = if bytes.starts_with(b"-----BEGIN X509 CRL") {
        let (_, pem) = x509_parser::pem::parse_x509_pem(bytes).map_err(|e| format!("x509: {e}"))?;
        pem.contents
    } else {
        bytes.to_vec()
    };
    let (_, crl) = x509_parser::parse_x509_crl(&der).map_err(|e| format!("x509: malformed crl: {e}"))?;
    Ok(crl
        .iter_revoked_certificates()
        .map(|entry| entry.user_certificate.clone())
        .collect())
}

/// Go's `%x` of a serial's bytes.
fn hex(serial: &BigUint) -> String {
    serial.to_bytes_be().iter().map(|byte| format!("{byte:02x}")).collect()
}

/// What one listener checks after the handshake.
#[derive(Debug, Clone)]
pub struct Admission {
    /// `client` or `peer`, for the log line.
    pub endpoint: &'static str,
    pub crl: Option<PathBuf>,
    pub check_san: bool,
}

impl Admission {
    /// Whether the connection from `remote` that showed `chain` may stay,
    /// logging etcd's line when it may not. `remote` is None on a Unix
    /// socket, where there is no address to match.
    pub async fn admit(
        &self,
        chain: &[rustls::pki_types::CertificateDer<'static>],
        sni: Option<&str>,
        remote: Option<SocketAddr>,
    ) -> bool {
        let parsed: Vec<X509Certificate<'_>> = chain
            .iter()
            .filter_map(|der| x509_parser::parse_x509_certificate(der.as_ref()).ok().map(|(_, c)| c))
            .collect();
        let Some(first) = parsed.first() else {
            return true;
        };
        let (ips, dns) = alternative_names(first);
        let mut refusal = None;
        if let (true, Some(remote)) = (self.check_san, remote) {
            refusal = san_refusal(&ips, &dns, remote.ip()).await;
        }
        if let (None, Some(crl)) = (&refusal, &self.crl) {
            refusal = crl_refusal(crl, &parsed).await;
        }
        let Some(error) = refusal else {
            return true;
        };
        tracing::warn!(
            "remote-addr" = %remote.map_or_else(String::new, |a| a.to_string()),
            "server-name" = sni.unwrap_or_default(),
            "ip-addresses" = ?JsonList(&ips),
            "dns-names" = ?JsonList(&dns),
            error = %error,
            "rejected connection on {} endpoint",
            self.endpoint
        );
        false
    }
}

/// A certificate's IP and DNS subject alternative names.
fn alternative_names(certificate: &X509Certificate<'_>) -> (Vec<String>, Vec<String>) {
    let (mut ips, mut dns) = (Vec::new(), Vec::new());
    if let Ok(Some(names)) = certificate.subject_alternative_name() {
        for name in &names.value.general_names {
            match name {
                GeneralName::DNSName(name) => dns.push(name.to_string()),
                GeneralName::IPAddress(bytes) => {
                    let ip = match bytes.len() {
                        4 => <[u8; 4]>::try_from(*bytes).ok().map(IpAddr::from),
                        16 => <[u8; 16]>::try_from(*bytes).ok().map(IpAddr::from),
                        _ => None,
                    };
                    if let Some(ip) = ip {
                        ips.push(ip.to_string());
                    }
                }
                _ => {}
            }
        }
    }
    (ips, dns)
}

/// etcd's peer SAN check: None when the names allow `remote`.
async fn san_refusal(ips: &[String], dns: &[String], remote: IpAddr) -> Option<String> {
    if ips.is_empty() && dns.is_empty() {
        return None;
    }
    let remote_text = remote.to_string();
    let canonical = |text: &str| text.parse::<IpAddr>().ok().map(|ip| ip.to_canonical());
    if ips.iter().any(|ip| canonical(ip) == Some(remote.to_canonical())) {
        return None;
    }
    for name in dns {
        let host = name.trim_start_matches("*.");
        if let Ok(addresses) = tokio::net::lookup_host((host, 0)).await {
            if addresses
                .into_iter()
                .any(|a| a.ip().to_canonical() == remote.to_canonical())
            {
                return None;
            }
        }
    }
    if !ips.is_empty() {
        return Some(format!(
            "x509: certificate is valid for {}, not {remote_text}",
            ips.join(", ")
        ));
    }
    Some(format!("tls: {remote_text:?} does not match any of DNSNames {dns:?}"))
}

/// The revocation check: None when nothing the client showed is revoked.
async fn crl_refusal(crl: &Path, chain: &[X509Certificate<'_>]) -> Option<String> {
    let path = crl.to_path_buf();
    let read = tokio::task::spawn_blocking(move || revoked_serials(&path)).await;
    let revoked = match read {
        Ok(Ok(revoked)) => revoked,
        Ok(Err(error)) => return Some(error),
        Err(error) => return Some(error.to_string()),
    };
    chain
        .iter()
        .find(|certificate| revoked.contains(&certificate.serial))
        .map(|certificate| format!("transport: certificate serial {} revoked", hex(&certificate.serial)))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: a CRL reads as PEM or DER, garbage is refused, and serials
    // print as Go prints them. Method: a CRL made by rcgen.
    #[test]
    fn crls_read_as_go_reads_them() {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.key_usages = vec![rcgen::KeyUsagePurpose::CrlSign, rcgen::KeyUsagePurpose::KeyCertSign];
        let ca_cert = ca.self_signed(&key).expect("CA");
        let issuer = rcgen::Issuer::new(ca, key);
        let crl = rcgen::CertificateRevocationListParams {
            this_update: rcgen::date_time_ymd(2026, 1, 1),
            next_update: rcgen::date_time_ymd(2036, 1, 1),
            crl_number: rcgen::SerialNumber::from(1u64),
            issuing_distribution_point: None,
            revoked_certs: vec![rcgen::RevokedCertParams {
                serial_number: rcgen::SerialNumber::from_slice(&[0x0a, 0xbc]),
                revocation_time: rcgen::date_time_ymd(2026, 1, 1),
                reason_code: None,
                invalidity_date: None,
            }],
            key_identifier_method: rcgen::KeyIdMethod::Sha256,
        }
        .signed_by(&issuer)
        .expect("CRL");
        drop(ca_cert);
        let from_pem = parse_crl(crl.pem().expect("pem").as_bytes()).expect("PEM reads");
        let from_der = parse_crl(crl.der()).expect("DER reads");
        assert_eq!(from_pem, from_der);
        assert_eq!(from_pem.iter().map(hex).collect::<Vec<_>>(), vec!["0abc".to_string()]);
        assert!(parse_crl(b"not a crl").is_err());
    }
}
