//! `--config-file`: etcd's YAML configuration file, read as etcd's
//! `embed.ConfigFromFile` reads it.
//!
//! - Keys are etcd's flag names (`name`, `data-dir`, `initial-cluster`,
//!   ...), so each becomes the flag of that name and takes the same path
//!   as a command line: what kv-server honours, and what has no effect.
//! - TLS sits in two sections, `client-transport-security` and
//!   `peer-transport-security`, whose keys (`cert-file`, `key-file`,
//!   `trusted-ca-file`, `client-cert-auth`, `auto-tls`, `allowed-cn`,
//!   `allowed-hostname`, `crl-file`) become the client or `peer-` flags.
//! - Lists (`log-outputs`, `cipher-suites`, URLs) are joined with commas.
//! - Durations are Go's `time.Duration` in JSON: integer nanoseconds.
//! - An empty value (`data-dir:`) leaves the flag at its default.
//! - As in etcd, a key etcd does not know is ignored (and logged here),
//!   and with a config file every other flag and `ETCD_*` variable is
//!   ignored.

use serde_yaml_ng::Value;

use super::etcd_set::EtcdFlag;
use super::go_syntax::Setting;
use super::FlagError;

/// Largest config file read, in bytes: etcd's sample is 5 KiB, and a
/// config of every flag with long URL lists stays far below this. A
/// larger file is refused rather than read into memory.
pub const CONFIG_FILE_BYTES_MAX: u64 = 1 << 20;

/// The flag settings `path` holds, or why it cannot be read.
pub fn read(path: &str, flags: &[EtcdFlag]) -> Result<Vec<Setting>, FlagError> {
    let error = |reason: String| FlagError::ConfigFile(format!("error reading config file {path}: {reason}"));
    let size = std::fs::metadata(path).map_err(|e| error(e.to_string()))?.len();
    if size > CONFIG_FILE_BYTES_MAX {
        return Err(error(format!("{size} bytes, more than {CONFIG_FILE_BYTES_MAX}")));
    }
    let text = std::fs::read_to_string(path).map_err(|e| error(e.to_string()))?;
    parse(&text, flags).map_err(error)
}

/// The flag settings in a config file's text.
pub fn parse(text: &str, flags: &[EtcdFlag]) -> Result<Vec<Setting>, String> {
    let document: Value = serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?;
    let mapping = match document {
        Value::Mapping(mapping) => mapping,
        Value::Null => return Ok(Vec::new()),
        _ => return Err("the file is not a YAML mapping".into()),
    };
    let mut settings = Vec::new();
    for (key, value) in mapping {
        let key = key.as_str().ok_or("a key that is not a string")?.to_string();
        match key.as_str() {
            "client-transport-security" => transport(&value, "", flags, &mut settings)?,
            "peer-transport-security" => transport(&value, "peer-", flags, &mut settings)?,
            "discovery-config" => discovery(&value, flags, &mut settings)?,
            _ => setting(&key, &value, flags, &mut settings)?,
        }
    }
    Ok(settings)
}

/// etcd 3.6's `discovery-config` section (`client: {endpoints}`,
/// `token`): its endpoints and token as the flags, which are refused when
/// set, as on the command line.
fn discovery(value: &Value, flags: &[EtcdFlag], settings: &mut Vec<Setting>) -> Result<(), String> {
    let Value::Mapping(section) = value else {
        return Ok(());
    };
    if let Some(token) = section.get("token") {
        setting("discovery-token", token, flags, settings)?;
    }
    if let Some(endpoints) = section.get("client").and_then(|client| client.get("endpoints")) {
        setting("discovery-endpoints", endpoints, flags, settings)?;
    }
    Ok(())
}

/// One TLS section: its keys as the client (`prefix` empty) or peer flags.
fn transport(value: &Value, prefix: &str, flags: &[EtcdFlag], settings: &mut Vec<Setting>) -> Result<(), String> {
    let Value::Mapping(section) = value else {
        return Ok(());
    };
    for (key, value) in section {
        let key = key.as_str().ok_or("a key that is not a string")?;
        let flag = match (prefix, key) {
            ("", "allowed-hostname") => "client-cert-allowed-hostname".to_string(),
            ("", "crl-file") => "client-crl-file".to_string(),
            ("peer-", "allowed-cn" | "allowed-hostname") => format!("peer-cert-{key}"),
            _ => format!("{prefix}{key}"),
        };
        setting(&flag, value, flags, settings)?;
    }
    Ok(())
}

/// One key: the flag of that name, if etcd has it and the value is set.
fn setting(name: &str, value: &Value, flags: &[EtcdFlag], settings: &mut Vec<Setting>) -> Result<(), String> {
    let Some(flag) = flags.iter().find(|flag| flag.name == name) else {
        tracing::warn!(key = name, "config file key is not an etcd setting; ignored");
        return Ok(());
    };
    let text = match value {
        Value::Null => return Ok(()),
        Value::Bool(on) => on.to_string(),
        Value::Number(number) if flag.go_kind == "duration" => format!("{number}ns"),
        Value::Number(number) => number.to_string(),
        Value::String(text) if text.is_empty() => return Ok(()),
        Value::String(text) => text.clone(),
        Value::Sequence(items) => items
            .iter()
            .map(|item| match item {
                Value::String(text) => Ok(text.clone()),
                Value::Number(number) => Ok(number.to_string()),
                _ => Err(format!("{name}: a list of strings is expected")),
            })
            .collect::<Result<Vec<_>, _>>()?
            .join(","),
        _ => return Err(format!("{name}: a value of this shape is not an etcd setting")),
    };
    settings.push(Setting {
        name: flag.name.to_string(),
        value: text,
    });
    Ok(())
}
