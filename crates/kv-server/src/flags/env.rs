//! etcd's `ETCD_*` environment variables, with etcd's precedence
//! (`pkg/flags.SetFlagsFromEnv`):
//! - every flag of etcd's set can come from `ETCD_` and its name in upper
//!   case with `-` as `_` (`--initial-cluster` is `ETCD_INITIAL_CLUSTER`);
//! - an empty variable counts as unset (but still conflicts with its
//!   flag on the command line, as in etcd);
//! - a flag given on the command line and in its variable at once is an
//!   error (etcd's is fatal), so neither silently wins;
//! - an `ETCD_*` variable that names no flag is reported, and ignored;
//! - `ETCD_VERSION` is refused as a flag, as in etcd.

use std::collections::HashSet;

use super::go_syntax::{parse_bool, Kind, Setting};
use super::FlagError;

/// The variable that carries flag `name`.
pub fn variable_of(name: &str) -> String {
    format!("ETCD_{}", name.to_uppercase().replace('-', "_"))
}

/// The value of `variable` in `env`; an empty one counts as unset.
pub fn lookup(env: &[(String, String)], variable: &str) -> Option<String> {
    env.iter()
        .find(|(key, value)| key == variable && !value.is_empty())
        .map(|(_, value)| value.clone())
}

/// Adds to `settings` the flags whose variables are set in `env`, for
/// every flag in `names`. Returns notes for the log: variables used,
/// and variables that name no flag.
pub fn fold_in(
    settings: &mut Vec<Setting>,
    env: &[(String, String)],
    names: &[(&str, Kind)],
) -> Result<Vec<String>, FlagError> {
    let on_command_line: HashSet<String> = settings.iter().map(|s| variable_of(&s.name)).collect();
    let known: HashSet<String> = names.iter().map(|(name, _)| variable_of(name)).collect();
    let mut notes = Vec::new();
    for (variable, value) in env {
        if !variable.starts_with("ETCD_") {
            continue;
        }
        // etcd refuses the pair even when the variable is empty.
        if on_command_line.contains(variable) {
            return Err(FlagError::Env(format!(
                "conflicting environment variable is shadowed by corresponding command-line flag \
                 (either unset environment variable or disable flag)): {variable}"
            )));
        }
        if value.is_empty() {
            continue;
        }
        if variable == "ETCD_VERSION" {
            notes.push(format!("cannot set special environment variable {variable}={value}"));
            continue;
        }
        if !known.contains(variable) {
            notes.push(format!("unrecognized environment variable {variable}={value}"));
        }
    }
    for (name, kind) in names {
        let variable = variable_of(name);
        if on_command_line.contains(&variable) || variable == "ETCD_VERSION" {
            continue;
        }
        let Some(value) = lookup(env, &variable) else {
            continue;
        };
        let value = match kind {
            Kind::Bool => parse_bool(&value)
                .ok_or_else(|| FlagError::Env(format!("invalid value {value:?} for {variable}: parse error")))?
                .to_string(),
            Kind::Value => value,
        };
        notes.push(format!("recognized and used environment variable {variable}={value}"));
        settings.push(Setting {
            name: name.to_string(),
            value,
        });
    }
    Ok(notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAMES: &[(&str, Kind)] = &[
        ("name", Kind::Value),
        ("initial-cluster", Kind::Value),
        ("client-cert-auth", Kind::Bool),
        ("version", Kind::Bool),
    ];

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    // Goal: variables fill the flags the command line left unset, as
    // etcd's do, and a flag set both ways is an error.
    #[test]
    fn etcd_precedence() {
        let mut settings = vec![Setting {
            name: "name".into(),
            value: "a".into(),
        }];
        let notes = fold_in(
            &mut settings,
            &env(&[
                ("ETCD_INITIAL_CLUSTER", "a=http://127.0.0.1:2380"),
                ("ETCD_CLIENT_CERT_AUTH", "TRUE"),
                ("ETCD_DATA_DIR", ""),
                ("ETCD_NOT_A_FLAG", "1"),
                ("PATH", "/bin"),
            ]),
            NAMES,
        )
        .unwrap();
        let values: Vec<(&str, &str)> = settings.iter().map(|s| (s.name.as_str(), s.value.as_str())).collect();
        assert_eq!(
            values,
            [
                ("name", "a"),
                ("initial-cluster", "a=http://127.0.0.1:2380"),
                ("client-cert-auth", "true")
            ]
        );
        assert!(notes
            .iter()
            .any(|n| n.starts_with("unrecognized environment variable ETCD_NOT_A_FLAG")));

        let error = fold_in(&mut settings, &env(&[("ETCD_NAME", "b")]), NAMES).unwrap_err();
        assert!(error
            .to_string()
            .starts_with("conflicting environment variable is shadowed"));
        assert!(error.to_string().ends_with("ETCD_NAME"), "{error}");

        let error = fold_in(&mut Vec::new(), &env(&[("ETCD_CLIENT_CERT_AUTH", "yes")]), NAMES).unwrap_err();
        assert_eq!(
            error.to_string(),
            "invalid value \"yes\" for ETCD_CLIENT_CERT_AUTH: parse error"
        );

        let mut none = Vec::new();
        fold_in(&mut none, &env(&[("ETCD_VERSION", "3.5")]), NAMES).unwrap();
        assert!(none.is_empty(), "ETCD_VERSION is not a flag's variable");
    }
}
