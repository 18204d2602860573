//! `--feature-gates`, etcd 3.6's switch for what 3.5 set with
//! `--experimental-*` flags: `Name=bool,Other=bool`, with etcd 3.7.3's
//! gate names and its errors (`pkg/featuregate`).
//!
//! The gates in [`HONOURED`] set the 3.5 flag they replaced. Every other
//! gate is accepted and logged as having no effect, with the reason in
//! [`GATES`].

use super::go_syntax::parse_bool;

/// Every gate etcd 3.7.3 knows, with what kv-server does with it. The two
/// `All*` gates set every alpha or beta gate at once.
pub const GATES: &[(&str, &str)] = &[
    (
        "AllAlpha",
        "sets every alpha gate; InitialCorruptCheck, CompactHashCheck, StopGRPCServiceOnDefrag, LeaseCheckpoint and \
         LeaseCheckpointPersist have an effect here",
    ),
    ("AllBeta", "sets every beta gate; none has an effect here"),
    (
        "InitialCorruptCheck",
        "honoured: as --experimental-initial-corrupt-check",
    ),
    (
        "CompactHashCheck",
        "honoured: as --experimental-compact-hash-check-enabled",
    ),
    (
        "StopGRPCServiceOnDefrag",
        "honoured: as --experimental-stop-grpc-service-on-defrag",
    ),
    (
        "TxnModeWriteWithSharedBuffer",
        "no effect: a bbolt buffering mode; the store is on sled",
    ),
    ("LeaseCheckpoint", "honoured: as --experimental-enable-lease-checkpoint"),
    (
        "LeaseCheckpointPersist",
        "honoured: as --experimental-enable-lease-checkpoint-persist",
    ),
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

/// The alpha gates kv-server honours, each with the 3.5 flag it sets.
pub const HONOURED: &[(&str, &str)] = &[
    ("InitialCorruptCheck", "experimental-initial-corrupt-check"),
    ("CompactHashCheck", "experimental-compact-hash-check-enabled"),
    ("StopGRPCServiceOnDefrag", "experimental-stop-grpc-service-on-defrag"),
    ("LeaseCheckpoint", "experimental-enable-lease-checkpoint"),
    ("LeaseCheckpointPersist", "experimental-enable-lease-checkpoint-persist"),
];

/// The flags the gates set: for each honoured gate its own last setting,
/// else `AllAlpha`'s, as etcd's feature gates weigh them (a gate named
/// explicitly wins over `AllAlpha` wherever either stands).
pub fn honoured_flags(gates: &[(&str, bool)]) -> Vec<(&'static str, bool)> {
    let last = |wanted: &str| gates.iter().rev().find(|(name, _)| *name == wanted).map(|(_, on)| *on);
    HONOURED
        .iter()
        .filter_map(|(gate, flag)| last(gate).or_else(|| last("AllAlpha")).map(|on| (*flag, on)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: etcd's gate syntax, names and errors.
    #[test]
    fn etcd_gates() {
        let gates = parse("InitialCorruptCheck=true, CompactHashCheck=false,").unwrap();
        assert_eq!(gates, [("InitialCorruptCheck", true), ("CompactHashCheck", false)]);
        assert_eq!(
            honoured_flags(&gates),
            [
                ("experimental-initial-corrupt-check", true),
                ("experimental-compact-hash-check-enabled", false)
            ]
        );
        assert_eq!(
            honoured_flags(&parse("AllAlpha=false,StopGRPCServiceOnDefrag=true").unwrap()),
            [
                ("experimental-initial-corrupt-check", false),
                ("experimental-compact-hash-check-enabled", false),
                ("experimental-stop-grpc-service-on-defrag", true),
                ("experimental-enable-lease-checkpoint", false),
                ("experimental-enable-lease-checkpoint-persist", false)
            ]
        );
        assert_eq!(
            honoured_flags(&parse("LeaseCheckpoint=1").unwrap()),
            [("experimental-enable-lease-checkpoint", true)]
        );
        assert_eq!(honoured_flags(&parse("PriorityRequest=1").unwrap()), []);
        assert_eq!(
            honoured_flags(&parse("StopGRPCServiceOnDefrag=false,AllAlpha=true").unwrap()),
            [
                ("experimental-initial-corrupt-check", true),
                ("experimental-compact-hash-check-enabled", true),
                ("experimental-stop-grpc-service-on-defrag", false),
                ("experimental-enable-lease-checkpoint", true),
                ("experimental-enable-lease-checkpoint-persist", true)
            ]
        );
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
