//! The rustls client config loadgen dials TLS with, built from etcd's
//! benchmark tool's `--cacert`, `--cert` and `--key`: ring's provider (the
//! one the workspace's rustls is built with), the CA file as the only
//! trusted roots, and the certificate and key, when given, as the client's
//! identity. Every endpoint is dialled with it when `--cacert` is given
//! (`dial.rs`), and sweep's `https://` metrics scrape uses it too. No ALPN
//! is set here: each user names the protocols it speaks.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore};

use crate::cli::TlsArgs;

/// The client config for `args`; an error names the flag and file at
/// fault.
pub fn client_config(args: &TlsArgs) -> Result<ClientConfig, String> {
    let ca = args
        .cacert
        .as_deref()
        .ok_or("TLS needs --cacert, the CA bundle that signed the servers' certificates")?;
    let mut roots = RootCertStore::empty();
    for certificate in certificates(ca, "--cacert")? {
        roots
            .add(certificate)
            .map_err(|e| format!("--cacert {}: {e}", ca.display()))?;
    }
    let builder = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS versions: {e}"))?
        .with_root_certificates(roots);
    match (args.cert.as_deref(), args.key.as_deref()) {
        (None, None) => Ok(builder.with_no_client_auth()),
        (Some(cert), Some(key)) => {
            let chain = certificates(cert, "--cert")?;
            let key = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("--key {}: {e}", key.display()))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("--cert and --key: {e}"))
        }
        _ => Err("--cert and --key go together: give both or neither".into()),
    }
}

/// Every certificate in the PEM file at `path`, given by `flag`; at least
/// one.
fn certificates(path: &Path, flag: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let unreadable = |e: rustls::pki_types::pem::Error| format!("{flag} {}: {e}", path.display());
    let chain = CertificateDer::pem_file_iter(path)
        .map_err(unreadable)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(unreadable)?;
    if chain.is_empty() {
        return Err(format!("{flag} {}: no certificate in the file", path.display()));
    }
    Ok(chain)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn args(cacert: Option<&Path>, cert: Option<&Path>, key: Option<&Path>) -> TlsArgs {
        TlsArgs {
            cacert: cacert.map(PathBuf::from),
            cert: cert.map(PathBuf::from),
            key: key.map(PathBuf::from),
        }
    }

    // Goal: a flag missing, unpaired or naming a bad file is an error that
    // names the flag (and the file).
    #[test]
    fn bad_flags_are_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("missing.pem");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").expect("write");
        let error = client_config(&args(None, None, None)).expect_err("no CA");
        assert!(error.contains("--cacert"), "{error}");
        let error = client_config(&args(Some(missing.as_path()), None, None)).expect_err("missing CA");
        assert!(
            error.starts_with("--cacert") && error.contains("missing.pem"),
            "{error}"
        );
        let error = client_config(&args(Some(empty.as_path()), None, None)).expect_err("empty CA");
        assert!(error.contains("no certificate"), "{error}");
    }
}
