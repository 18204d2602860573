//! `--feature-gates`, etcd 3.6's switch for what 3.5 set with
//! `--experimental-*` flags: `Name=bool,Other=bool`, with etcd 3.7.3's
//! gate names and its errors (`pkg/featuregate`).
//!
//! `InitialCorruptCheck` is honoured (it is 3.5's
//! `--experimental-initial-corrupt-check`). Every other gate is accepted
//! and logged as having no effect, with the reason in [`GATES`].

use super::go_syntax::parse_bool;

/// Every gate etcd 3.7.3 knows, with what kv-server does with it. The two
/// `All*` gates set every alpha or beta gate at once.
pub const GATES: &[(&str, &str)] = &[
    (
        "AllAlpha",
        "sets every alpha gate; only InitialCorruptCheck has an effect here",
    ),
    ("AllBeta", "sets every beta gate; none has an effect here"),
    (
        "InitialCorruptCheck",
        "honoured: as --experimental-initial-corrupt-check",
    ),
    (
        "CompactHashCheck",
        "no effect: the corruption check compares whole-store hashes on its own timer (--corrupt-check-time)",
    ),
    (
        "StopGRPCServiceOnDefrag",
        "no effect: defragment never stops the gRPC services here",
    ),
    (
        "TxnModeWriteWithSharedBuffer",
        "no effect: a bbolt buffering mode; the store is on sled",
    ),
    (
        "LeaseCheckpoint",
        "no effect: kv-server does not checkpoint lease TTLs through raft",
    ),
    ("LeaseCheckpointPersist", "no effect: as LeaseCheckpoint"),
    (
        "SetMemberLocalAddr",
        "no effect: peers dial from the address the system picks",
    ),
    (
        "FastLeaseKeepAlive",
        "no effect: a change to etcd's own keep-alive path; kv-server's is its own",
    ),
    ("PriorityRequest", "no effect: requests are not prioritised"),
];

/// The gates a `--feature-gates` value sets, in order, or etcd's error.
pub fn parse(value: &str) -> Result<Vec<(&'static str, bool)>, String> {
    let mut set = Vec::new();
    for item in value.split(',').filter(|item| !item.is_empty()) {
        let (key, text) = match item.split_once('=') {
            Some((key, text)) => (key.trim(), text.trim()),
            None => return Err(format!("missing bool value for {}", item.trim())),
        };
        let enabled = parse_bool(text).ok_or_else(|| {
            format!("invalid value of {key}={text}, err: strconv.ParseBool: parsing {text:?}: invalid syntax")
        })?;
        let (name, _) = GATES
            .iter()
            .find(|(name, _)| *name == key)
            .ok_or_else(|| format!("unrecognized feature gate: {key}"))?;
        set.push((*name, enabled));
    }
    Ok(set)
}

/// Whether the gates turn on the initial corruption check.
pub fn initial_corrupt_check(gates: &[(&str, bool)]) -> Option<bool> {
    gates
        .iter()
        .rev()
        .find(|(name, _)| *name == "InitialCorruptCheck" || *name == "AllAlpha")
        .map(|(_, on)| *on)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: etcd's gate syntax, names and errors.
    #[test]
    fn etcd_gates() {
        let gates = parse("InitialCorruptCheck=true, CompactHashCheck=false,").unwrap();
        assert_eq!(gates, [("InitialCorruptCheck", true), ("CompactHashCheck", false)]);
        assert_eq!(initial_corrupt_check(&gates), Some(true));
        assert_eq!(initial_corrupt_check(&parse("AllAlpha=false").unwrap()), Some(false));
        assert_eq!(initial_corrupt_check(&parse("LeaseCheckpoint=1").unwrap()), None);
        assert_eq!(parse("Nope=true").unwrap_err(), "unrecognized feature gate: Nope");
        assert_eq!(
            parse("InitialCorruptCheck").unwrap_err(),
            "missing bool value for InitialCorruptCheck"
        );
        assert_eq!(
            parse("InitialCorruptCheck=yes").unwrap_err(),
            "invalid value of InitialCorruptCheck=yes, err: strconv.ParseBool: parsing \"yes\": invalid syntax"
        );
    }
}
