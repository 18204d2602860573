//! Command-line arguments read the way Go's `flag` package reads them, as
//! etcd's flag set does.
//!
//! The rules, from Go's `flag.FlagSet.parseOne`:
//! - a flag is `-name` or `--name` (one or two dashes mean the same);
//! - a value follows as `-name=value`, or as the next argument
//!   `-name value`, except for booleans;
//! - a boolean is set by `-name` alone (true) or `-name=value`, where the
//!   value is one of `strconv.ParseBool`'s spellings (`1`, `t`, `T`,
//!   `TRUE`, `true`, `True` and their false twins); `-name false` is the
//!   flag followed by a stray argument;
//! - `--` ends the flags, and so does the first argument that is not a
//!   flag; etcd refuses anything left over;
//! - a flag given twice keeps its last value.
//!
//! Every error text is Go's (or etcd's for what is left over), so an
//! operator reading the log of a failed start sees what etcd would print.

use super::FlagError;

/// What kind of value a flag takes, as far as its syntax is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A Go boolean: may stand alone.
    Bool,
    /// Anything else: needs a value.
    Value,
}

/// One flag as the command line set it: its name (without dashes) and
/// its value (`true`/`false` for booleans, normalized).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    pub name: String,
    pub value: String,
}

/// Parses `args` (without the program name). `kind_of` says whether a
/// name is a flag and of which kind; `None` means it is not defined.
pub fn parse(args: &[String], kind_of: impl Fn(&str) -> Option<Kind>) -> Result<Vec<Setting>, FlagError> {
    let mut settings = Vec::new();
    let mut rest = args;
    while let Some((arg, tail)) = rest.split_first() {
        rest = tail;
        let bytes = arg.as_bytes();
        if bytes.len() < 2 || bytes[0] != b'-' {
            return Err(FlagError::Leftover(arg.clone()));
        }
        let dashes = if bytes[1] == b'-' { 2 } else { 1 };
        if dashes == 2 && bytes.len() == 2 {
            // `--` ends the flags; whatever follows is left over.
            return match rest.first() {
                Some(first) => Err(FlagError::Leftover(first.clone())),
                None => Ok(settings),
            };
        }
        let body = &arg[dashes..];
        if body.is_empty() || body.starts_with('-') || body.starts_with('=') {
            return Err(FlagError::Syntax(format!("bad flag syntax: {arg}")));
        }
        let (name, inline) = match body[1..].find('=') {
            Some(at) => (&body[..at + 1], Some(&body[at + 2..])),
            None => (body, None),
        };
        let Some(kind) = kind_of(name) else {
            if name == "help" || name == "h" {
                return Err(FlagError::Help);
            }
            return Err(FlagError::Syntax(format!("flag provided but not defined: -{name}")));
        };
        let value = match (kind, inline) {
            (Kind::Bool, None) => "true".to_string(),
            (Kind::Bool, Some(text)) => parse_bool(text)
                .ok_or_else(|| FlagError::Syntax(format!("invalid boolean value {text:?} for -{name}: parse error")))?
                .to_string(),
            (Kind::Value, Some(text)) => text.to_string(),
            (Kind::Value, None) => match rest.split_first() {
                Some((next, tail)) => {
                    rest = tail;
                    next.clone()
                }
                None => return Err(FlagError::Syntax(format!("flag needs an argument: -{name}"))),
            },
        };
        settings.push(Setting {
            name: name.to_string(),
            value,
        });
    }
    Ok(settings)
}

/// Go's `strconv.ParseBool`.
pub fn parse_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Go's `time.ParseDuration`: a sequence of decimal numbers, each with a
/// unit (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`), such as `1m30s`, `1.5h`
/// or `300ms`; `0` alone is zero. Negative durations are refused: no
/// flag of etcd's takes one.
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let invalid = || format!("time: invalid duration {text:?}");
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest == "0" {
        return Ok(std::time::Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut nanos: f64 = 0.0;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        let number: f64 = rest[..number_end].parse().map_err(|_| invalid())?;
        rest = &rest[number_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(invalid()),
        };
        rest = &rest[unit_end..];
        nanos += number * scale;
    }
    Ok(std::time::Duration::from_nanos(nanos.round() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(name: &str) -> Option<Kind> {
        match name {
            "client-cert-auth" | "enable-pprof" => Some(Kind::Bool),
            "name" | "data-dir" | "snapshot-count" => Some(Kind::Value),
            _ => None,
        }
    }

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn set(pairs: &[(&str, &str)]) -> Vec<Setting> {
        pairs
            .iter()
            .map(|(name, value)| Setting {
                name: name.to_string(),
                value: value.to_string(),
            })
            .collect()
    }

    // Goal: every spelling Go's flag package takes reads the same.
    #[test]
    fn go_spellings() {
        let parsed = parse(
            &args(&[
                "--name=a",
                "-data-dir",
                "/d",
                "-snapshot-count=5",
                "--client-cert-auth=true",
                "-enable-pprof",
                "--name",
                "b",
            ]),
            kinds,
        )
        .unwrap();
        assert_eq!(
            parsed,
            set(&[
                ("name", "a"),
                ("data-dir", "/d"),
                ("snapshot-count", "5"),
                ("client-cert-auth", "true"),
                ("enable-pprof", "true"),
                ("name", "b"),
            ])
        );
        for (text, expected) in [("T", "true"), ("0", "false"), ("False", "false"), ("1", "true")] {
            let parsed = parse(&args(&[&format!("--client-cert-auth={text}")]), kinds).unwrap();
            assert_eq!(parsed[0].value, expected, "{text}");
        }
        // A value that looks like a flag is still the value.
        assert_eq!(parse(&args(&["--name", "-x"]), kinds).unwrap(), set(&[("name", "-x")]));
        assert_eq!(parse(&args(&["--name=a", "--"]), kinds).unwrap(), set(&[("name", "a")]));
    }

    // Goal: bad input gets Go's own error text, never a silent default.
    #[test]
    fn go_errors() {
        let error = |list: &[&str]| parse(&args(list), kinds).unwrap_err().to_string();
        assert_eq!(error(&["--nope"]), "flag provided but not defined: -nope");
        assert_eq!(error(&["-nope=1"]), "flag provided but not defined: -nope");
        assert_eq!(error(&["--name"]), "flag needs an argument: -name");
        assert_eq!(
            error(&["--client-cert-auth=yes"]),
            "invalid boolean value \"yes\" for -client-cert-auth: parse error"
        );
        assert_eq!(error(&["---name=a"]), "bad flag syntax: ---name=a");
        assert_eq!(error(&["-=a"]), "bad flag syntax: -=a");
        // `--client-cert-auth false`: false is a stray argument, as in Go.
        assert_eq!(error(&["--client-cert-auth", "false"]), "'false' is not a valid flag");
        assert_eq!(error(&["--name=a", "--", "x"]), "'x' is not a valid flag");
        assert!(matches!(parse(&args(&["-h"]), kinds), Err(FlagError::Help)));
    }

    // Goal: durations as Go writes and reads them.
    #[test]
    fn go_durations() {
        use std::time::Duration;
        for (text, millis) in [
            ("5s", 5_000),
            ("1m0s", 60_000),
            ("2h0m0s", 7_200_000),
            ("1m30s", 90_000),
            ("1.5h", 5_400_000),
            ("100ms", 100),
            ("0", 0),
            ("0s", 0),
            ("600000000000ns", 600_000),
        ] {
            assert_eq!(parse_duration(text), Ok(Duration::from_millis(millis)), "{text}");
        }
        assert_eq!(parse_duration("300us"), Ok(Duration::from_micros(300)));
        for bad in ["", "5", "soon", "1x", "-1s", "s"] {
            assert_eq!(
                parse_duration(bad),
                Err(format!("time: invalid duration {bad:?}")),
                "{bad}"
            );
        }
    }
}
