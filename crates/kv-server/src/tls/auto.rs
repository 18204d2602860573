//! `--auto-tls` and `--peer-auto-tls`: self-signed certificates where
//! etcd keeps them, `<data-dir>/fixtures/client/` and
//! `<data-dir>/fixtures/peer/` (`cert.pem`, `key.pem`).
//!
//! - Made once and reused on every later start while both files exist,
//!   as etcd reuses them (their expiry is not checked, as in etcd).
//! - Subject and issuer `O=etcd`; valid from now for
//!   `--self-signed-cert-validity` years (365-day years, as etcd counts);
//!   key usage digital signature and key encipherment; extended key usage
//!   server authentication; not a CA. Subject alternative names are the
//!   hosts of the listen URLs, an IP literal as an IP name and anything
//!   else as a DNS name.
//! - The key is ECDSA on P-256. etcd's is on P-521, which the TLS
//!   library here (ring) does not sign with; clients cannot tell the
//!   difference. A P-521 key left by etcd in `fixtures/` does not load:
//!   start-up names the file, and removing both files makes new ones.
//! - Directories are `0700`, the key `0600`, the certificate `0644`.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::error::Error;

/// Seconds in the year `--self-signed-cert-validity` counts in: etcd's
/// `365 * 24 * time.Hour`.
const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);

/// The certificate and key an auto-TLS side serves with.
pub struct AutoFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The host of each URL: what the certificate names.
pub fn hosts(urls: &[String]) -> Vec<String> {
    let mut hosts: Vec<String> = urls
        .iter()
        .filter_map(|url| url.split_once("://").map(|(_, rest)| rest))
        .map(|rest| rest.split('/').next().unwrap_or_default())
        .map(|authority| match authority.rsplit_once(':') {
            Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => host,
            _ => authority,
        })
        .map(|host| host.trim_start_matches('[').trim_end_matches(']').to_string())
        .filter(|host| !host.is_empty())
        .collect();
    hosts.sort();
    hosts.dedup();
    hosts
}

/// The files in `dir`, made for `hosts` valid for `years` unless both are
/// there already. `flag` names the side in errors.
pub fn self_signed(dir: &Path, hosts: &[String], years: u64, flag: &'static str) -> Result<AutoFiles, Error> {
    let files = AutoFiles {
        cert: dir.join("cert.pem"),
        key: dir.join("key.pem"),
    };
    if files.cert.exists() && files.key.exists() {
        return Ok(files);
    }
    if years == 0 {
        return Err(Error::Flag {
            flag: "self-signed-cert-validity",
            reason: "selfSignedCertValidity is invalid,it should be greater than 0".into(),
        });
    }
    let bad = |reason: String| Error::Flag { flag, reason };
    let now = SystemTime::now();
    let until = now + YEAR * u32::try_from(years).map_err(|_| bad(format!("{years} years is too long")))?;
    tracing::warn!(
        "certificate-validity-bound-not-after" = %crate::logging::timestamp(until),
        "automatically generate certificates"
    );
    let mut params = rcgen::CertificateParams::new(hosts.to_vec()).map_err(|e| bad(e.to_string()))?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(rcgen::DnType::OrganizationName, "etcd");
    params.not_before = offset_time(now);
    params.not_after = offset_time(until);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::DigitalSignature,
        rcgen::KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    params.is_ca = rcgen::IsCa::ExplicitNoCa;
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|e| bad(e.to_string()))?;
    let cert = params.self_signed(&key).map_err(|e| bad(e.to_string()))?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(Error::io(dir))?;
    write(&files.key, key.serialize_pem().as_bytes(), 0o600)?;
    write(&files.cert, cert.pem().as_bytes(), 0o644)?;
    tracing::info!(path = %files.cert.display(), "created cert file");
    tracing::info!(path = %files.key.display(), "created key file");
    Ok(files)
}

/// rcgen's time type from a system time (whole seconds).
fn offset_time(at: SystemTime) -> time::OffsetDateTime {
    let seconds = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    time::OffsetDateTime::from_unix_timestamp(i64::try_from(seconds).unwrap_or(i64::MAX))
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
}

/// Writes a new file with `mode`, durably.
fn write(path: &Path, bytes: &[u8], mode: u32) -> Result<(), Error> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .map_err(Error::io(path))?;
    file.write_all(bytes).map_err(Error::io(path))?;
    file.sync_all().map_err(Error::io(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: the hosts come from the listen URLs as etcd takes them, and a
    // second start reuses the files. Method: a temporary data directory.
    #[test]
    fn files_are_made_once_for_the_listen_hosts() {
        let urls = vec![
            "https://127.0.0.1:2379".to_string(),
            "https://localhost:2379".to_string(),
            "https://[::1]:2379".to_string(),
        ];
        assert_eq!(hosts(&urls), vec!["127.0.0.1", "::1", "localhost"]);
        let dir = tempfile::tempdir().expect("temporary directory");
        let fixtures = dir.path().join("fixtures/client");
        let first = self_signed(&fixtures, &hosts(&urls), 1, "auto-tls").expect("made");
        let made = std::fs::read(&first.cert).expect("certificate");
        let again = self_signed(&fixtures, &hosts(&urls), 1, "auto-tls").expect("reused");
        assert_eq!(std::fs::read(&again.cert).expect("certificate"), made);
        let (_, certificate) = x509_parser::pem::parse_x509_pem(&made).expect("PEM");
        let certificate = certificate.parse_x509().expect("a certificate");
        assert_eq!(certificate.subject().to_string(), "O=etcd");
        let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&again.key).expect("key").permissions());
        assert_eq!(mode & 0o777, 0o600);
        let other = dir.path().join("fixtures/peer");
        assert!(self_signed(&other, &hosts(&urls), 0, "peer-auto-tls").is_err());
    }
}
