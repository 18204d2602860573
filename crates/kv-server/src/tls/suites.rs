//! `--cipher-suites`, `--tls-min-version` and `--tls-max-version`: etcd's
//! names, rules and messages, mapped onto rustls.
//!
//! - Versions are `TLS1.2` and `TLS1.3` (the maximum may be empty: the
//!   newest). Anything else is refused with etcd's message,
//!   `unexpected TLS version "TLS1.1" (must be one of: TLS1.2, TLS1.3)`, and
//!   a minimum above the maximum with `min version (TLS1.3) is greater
//!   than max version (TLS1.2)`.
//! - Suites are Go's names, exact and case-sensitive, plus etcd's two
//!   ChaCha20 aliases. A name Go does not know is refused with etcd's
//!   `unexpected TLS cipher suite "NAME"`. A name Go knows but rustls
//!   does not implement (CBC, RC4, 3DES, RSA key exchange: the suites Go
//!   itself calls insecure or legacy) is refused too, with a message
//!   saying so: etcd would offer it; kv-server cannot, and never ignores
//!   a security setting.
//! - The listed TLS 1.2 suites are the only 1.2 suites offered. Listed
//!   TLS 1.3 suites restrict 1.3 to them; a list without any 1.3 suite
//!   leaves 1.3's suites as they are (Go accepts 1.3 names and ignores
//!   them; here they are honoured, the stricter reading).
//! - Suites with a TLS 1.3 minimum are refused with etcd's `cipher suites
//!   cannot be configured when only TLS1.3 is enabled`.
//!
//! The checks run at start whether or not any URL is `https://`, as
//! etcd's do.

use rustls::crypto::CryptoProvider;
use rustls::{SupportedCipherSuite, SupportedProtocolVersion};

/// The two ChaCha20 names etcd accepts besides Go's own.
const ALIASES: &[(&str, &str)] = &[
    (
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    ),
    (
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    ),
];

/// Suites Go knows that rustls does not implement: refused at start with
/// a message of their own, not etcd's "unexpected" one.
const GO_ONLY: &[&str] = &[
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "TLS_RSA_WITH_RC4_128_SHA",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
];

/// The versions `min` and `max` allow, or etcd's message for why not.
pub fn versions(min: &str, max: &str) -> Result<Vec<&'static SupportedProtocolVersion>, String> {
    let rank = |text: &str| match text {
        "TLS1.2" => Ok(2),
        "TLS1.3" => Ok(3),
        other => Err(format!(
            "unexpected TLS version {other:?} (must be one of: TLS1.2, TLS1.3)"
        )),
    };
    let low = rank(min)?;
    let high = if max.is_empty() { 3 } else { rank(max)? };
    if low > high {
        return Err(format!("min version ({min}) is greater than max version ({max})"));
    }
    let all = [(2, &rustls::version::TLS12), (3, &rustls::version::TLS13)];
    Ok(all
        .into_iter()
        .filter(|(rank, _)| (low..=high).contains(rank))
        .map(|(_, version)| version)
        .collect())
}

/// ring's provider with its suites cut to the comma-separated `list`
/// (empty: all of them), or etcd's message for why not.
pub fn provider(list: &str, min: &str) -> Result<CryptoProvider, String> {
    let mut provider = rustls::crypto::ring::default_provider();
    let wanted: Vec<&str> = list.split(',').filter(|name| !name.is_empty()).collect();
    if wanted.is_empty() {
        return Ok(provider);
    }
    if min == "TLS1.3" {
        return Err("cipher suites cannot be configured when only TLS1.3 is enabled".into());
    }
    let mut chosen: Vec<SupportedCipherSuite> = Vec::new();
    for name in wanted {
        let canonical = ALIASES
            .iter()
            .find(|(alias, _)| *alias == name)
            .map_or(name, |(_, canonical)| canonical);
        let suite = provider
            .cipher_suites
            .iter()
            .find(|suite| rustls_name_matches(&format!("{:?}", suite.suite()), canonical));
        match suite {
            Some(suite) if !chosen.contains(suite) => chosen.push(*suite),
            Some(_) => {}
            None if GO_ONLY.contains(&canonical) => {
                return Err(format!(
                    "TLS cipher suite {name:?} is not offered by kv-server: only AEAD suites with forward secrecy are implemented"
                ))
            }
            None => return Err(format!("unexpected TLS cipher suite {name:?}")),
        }
    }
    let is_13 = |suite: &SupportedCipherSuite| suite.version() == &rustls::version::TLS13;
    if !chosen.iter().any(is_13) {
        chosen.extend(provider.cipher_suites.iter().copied().filter(is_13));
    }
    provider.cipher_suites = chosen;
    Ok(provider)
}

/// Whether rustls's name for a suite is Go's `go`: rustls prefixes TLS
/// 1.3's suites `TLS13_` where Go writes `TLS_`.
fn rustls_name_matches(rustls: &str, go: &str) -> bool {
    match (rustls.strip_prefix("TLS13_"), go.strip_prefix("TLS_")) {
        (Some(rustls), Some(go)) => rustls == go,
        _ => rustls == go,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: every name etcd accepts is either honoured or refused with a
    // message saying rustls lacks it, unknown names get etcd's message,
    // and the version rules give etcd's messages.
    #[test]
    fn names_and_versions_follow_etcd() {
        for name in [
            "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
            "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
            "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
            "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
            "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
            "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
            "TLS_AES_128_GCM_SHA256",
        ] {
            let chosen = provider(name, "TLS1.2").unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(!chosen.cipher_suites.is_empty());
        }
        let one = provider("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS1.2").expect("known");
        let twelve: Vec<_> = one
            .cipher_suites
            .iter()
            .filter(|s| s.version() == &rustls::version::TLS12)
            .collect();
        assert_eq!(twelve.len(), 1, "only the listed 1.2 suite is offered");
        assert_eq!(
            provider("TLS_FOO_BAR", "TLS1.2").err().as_deref(),
            Some("unexpected TLS cipher suite \"TLS_FOO_BAR\"")
        );
        assert!(provider("TLS_RSA_WITH_RC4_128_SHA", "TLS1.2")
            .err()
            .is_some_and(|e| e.contains("not offered")));
        assert_eq!(
            provider("TLS_AES_128_GCM_SHA256", "TLS1.3").err().as_deref(),
            Some("cipher suites cannot be configured when only TLS1.3 is enabled")
        );
        assert_eq!(versions("TLS1.2", "").expect("both").len(), 2);
        assert_eq!(
            versions("TLS1.1", "").err().as_deref(),
            Some("unexpected TLS version \"TLS1.1\" (must be one of: TLS1.2, TLS1.3)")
        );
        assert_eq!(
            versions("TLS1.3", "TLS1.2").err().as_deref(),
            Some("min version (TLS1.3) is greater than max version (TLS1.2)")
        );
    }
}
