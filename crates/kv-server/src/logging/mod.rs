//! The member's log, as etcd writes its own, so that operators' pipelines
//! and alerts built on etcd's logs work unchanged:
//! - **JSON by default**, one object per line in zap's shape: `level`,
//!   `ts` (`2026-11-26T10:58:38.315326Z`, six fractional digits, UTC),
//!   `logger` for raft's lines, `caller` (`server/compactor.rs:134`, the
//!   last directory and the file, as zap's short caller), `msg`, then the
//!   event's fields in order; durations are Go's strings (`"1.2ms"`), as
//!   the call sites write them.
//! - `--log-format=console` (etcd 3.6's): `ts`, level, caller and message
//!   separated by tabs, then the fields as one JSON object.
//! - `--log-outputs`: `default` (standard error), `stderr`, `stdout`, or
//!   file paths (opened for appending, created if missing), several at
//!   once, each line written whole to each; `--log-level` as zap reads it.
//! - `--enable-log-rotation`: the one file among the outputs rotated by
//!   size, as etcd rotates it (`rotation.rs`).
//! - `--logger` is zap, the only logger etcd 3.5 has.
//!
//! Unlike zap's production logger, repeated messages are not sampled.
//! `RUST_LOG`, when set, filters by module instead of `--log-level`.

use std::fmt::Write as _;
use std::fs::File;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;

mod rotation;

pub use rotation::RotationConfig;

/// Why the log cannot be set up: etcd's words for each flag.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct LogError(pub String);

/// The filter a `--log-level` gives, as zap reads the level (either case).
pub fn level_filter(level: &str) -> Result<&'static str, LogError> {
    Ok(match level.to_ascii_lowercase().as_str() {
        "debug" => "debug",
        "" | "info" => "info",
        "warn" => "warn",
        "error" | "dpanic" | "panic" | "fatal" => "error",
        _ => return Err(LogError(format!("unrecognized level: {level:?}"))),
    })
}

/// One place lines go.
#[derive(Clone)]
enum Sink {
    Stderr,
    Stdout,
    File(Arc<Mutex<File>>),
    /// The file `--enable-log-rotation` rotates.
    Rotating(Arc<Mutex<rotation::Rotating>>),
    Discard,
}

/// Every place lines go (`--log-outputs`).
#[derive(Clone)]
pub struct Outputs {
    sinks: Vec<Sink>,
}

impl Outputs {
    /// The outputs `--log-outputs` names, opened, the file among them
    /// rotated when `rotation` (`--log-rotation-config-json`) is given;
    /// etcd's errors, in etcd's order.
    pub fn open(list: &str, rotation: Option<&str>) -> Result<Outputs, LogError> {
        let mut names: Vec<&str> = list.split(',').map(str::trim).filter(|name| !name.is_empty()).collect();
        names.sort_unstable();
        names.dedup();
        if names.is_empty() {
            names.push("default");
        }
        if names.len() > 1 && names.contains(&"default") {
            return Err(LogError("multi logoutput for \"default\" is not supported yet".into()));
        }
        let (rotated, rotation) = match rotation {
            Some(json) => {
                let target = RotationConfig::target(&names)?;
                (target, Some(RotationConfig::parse(json)?))
            }
            None => (None, None),
        };
        let mut sinks = Vec::with_capacity(names.len());
        for name in names {
            sinks.push(match name {
                "default" | "stderr" => Sink::Stderr,
                "stdout" => Sink::Stdout,
                "/dev/null" => Sink::Discard,
                "systemd/journal" => {
                    return Err(LogError(
                        "can't find journal (kv-server does not write to systemd's journal; its standard error does)"
                            .into(),
                    ))
                }
                path if Some(path) == rotated => {
                    let config = rotation
                        .clone()
                        .unwrap_or_else(|| unreachable!("a rotated file has a config"));
                    Sink::Rotating(Arc::new(Mutex::new(rotation::Rotating::open(path, config)?)))
                }
                path => {
                    let file = std::fs::OpenOptions::new()
                        .append(true)
                        .create(true)
                        .open(path)
                        .map_err(|error| LogError(format!("couldn't open sink {path:?}: open {path}: {error}")))?;
                    Sink::File(Arc::new(Mutex::new(file)))
                }
            });
        }
        Ok(Outputs { sinks })
    }
}

/// A line's way to every output.
pub struct OutputsWriter {
    sinks: Vec<Sink>,
}

impl std::io::Write for OutputsWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        for sink in &self.sinks {
            // A log line that cannot be written is dropped; the member
            // goes on, as zap's does.
            let _ = match sink {
                Sink::Stderr => std::io::stderr().write_all(bytes),
                Sink::Stdout => std::io::stdout().write_all(bytes),
                Sink::File(file) => file.lock().map_or(Ok(()), |mut file| file.write_all(bytes)),
                Sink::Rotating(file) => file.lock().map_or(Ok(()), |mut file| file.write_line(bytes)),
                Sink::Discard => Ok(()),
            };
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Outputs {
    type Writer = OutputsWriter;

    fn make_writer(&'a self) -> OutputsWriter {
        OutputsWriter {
            sinks: self.sinks.clone(),
        }
    }
}

/// The log flags: `--logger`, `--log-format`, `--log-level`,
/// `--log-outputs`, `--enable-log-rotation` and
/// `--log-rotation-config-json`.
pub struct LogFlags<'a> {
    pub logger: &'a str,
    pub format: &'a str,
    pub level: &'a str,
    pub outputs: &'a str,
    pub rotate: bool,
    pub rotation_config: &'a str,
}

/// Sets up the process's log from the member's flags.
pub fn init(flags: LogFlags<'_>) -> Result<(), LogError> {
    match flags.logger {
        "zap" => {}
        "capnslog" => return Err(LogError("--logger=capnslog is removed in v3.5".into())),
        other => return Err(LogError(format!("unknown logger option {other:?}"))),
    }
    let console = match flags.format {
        "json" => false,
        "console" => true,
        other => {
            return Err(LogError(format!(
                "unknown log format: {other}, supported values json, console"
            )))
        }
    };
    let level = level_filter(flags.level)?;
    // As etcd: the rotation config is read only when rotation is on.
    let outputs = Outputs::open(flags.outputs, flags.rotate.then_some(flags.rotation_config))?;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(outputs)
        .event_format(ZapFormat { console })
        .try_init()
        .map_err(|error| LogError(error.to_string()))
}

/// The console log of the offline tools (`kv-server snapshot restore`),
/// as etcdutl logs: zap's console lines on standard error, info and up.
pub fn init_console() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .with_writer(std::io::stderr)
        .event_format(ZapFormat { console: true })
        .try_init();
}

/// zap's lines: JSON, or etcd 3.6's console form.
pub struct ZapFormat {
    pub console: bool,
}

fn level_name(level: &Level) -> &'static str {
    match *level {
        Level::TRACE | Level::DEBUG => "debug",
        Level::INFO => "info",
        Level::WARN => "warn",
        Level::ERROR => "error",
    }
}

/// zap's short caller: the last directory, the file and the line.
fn caller(file: Option<&str>, line: Option<u32>) -> String {
    let file = file.unwrap_or("unknown");
    let mut parts = file.rsplit(['/', '\\']);
    let name = parts.next().unwrap_or(file);
    let short = match parts.next() {
        Some(dir) => format!("{dir}/{name}"),
        None => name.to_string(),
    };
    format!("{short}:{}", line.unwrap_or(0))
}

/// `2026-11-26T10:58:38.315326Z`: UTC, six fractional digits.
pub fn timestamp(now: SystemTime) -> String {
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let civil = Civil::utc(since.as_secs() as i64);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        civil.year,
        civil.month,
        civil.day,
        civil.hour,
        civil.minute,
        civil.second,
        since.subsec_micros()
    )
}

/// A calendar date and time of day, as the log's timestamps print it.
pub(crate) struct Civil {
    pub year: i64,
    pub month: i64,
    pub day: i64,
    pub hour: i64,
    pub minute: i64,
    pub second: i64,
}

impl Civil {
    /// The UTC date and time `seconds` after the Unix epoch.
    pub(crate) fn utc(seconds: i64) -> Civil {
        let (days, of_day) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
        // Days to a civil date (Howard Hinnant's algorithm).
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        Civil {
            year: yoe + era * 400 + i64::from(month <= 2),
            month,
            day,
            hour: of_day / 3600,
            minute: (of_day / 60) % 60,
            second: of_day % 60,
        }
    }
}

/// A list of strings as a field, written as a JSON array as zap writes
/// `[]string` fields (`"added-peer-peer-urls":["http://…"]`): record it
/// with `?JsonList(&urls)`.
pub struct JsonList<'a>(pub &'a [String]);

impl std::fmt::Debug for JsonList<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let items: Vec<String> = self.0.iter().map(|item| json_string(item)).collect();
        write!(f, "[{}]", items.join(","))
    }
}

/// Go's `time.Duration.String()`: `5s`, `1.893811ms`, `2h0m0s`, the
/// form etcd's log fields give durations in.
pub fn go_duration(duration: std::time::Duration) -> String {
    let nanos = duration.as_nanos();
    if nanos == 0 {
        return "0s".into();
    }
    if nanos < 1_000 {
        return format!("{nanos}ns");
    }
    let trim = |text: String| text.trim_end_matches('0').trim_end_matches('.').to_string();
    if nanos < 1_000_000 {
        return format!("{}µs", trim(format!("{:.3}", nanos as f64 / 1e3)));
    }
    if nanos < 1_000_000_000 {
        return format!("{}ms", trim(format!("{:.6}", nanos as f64 / 1e6)));
    }
    let seconds = nanos / 1_000_000_000;
    let fraction = nanos % 1_000_000_000;
    let secs = if fraction == 0 {
        format!("{}s", seconds % 60)
    } else {
        format!("{}.{}s", seconds % 60, format!("{fraction:09}").trim_end_matches('0'))
    };
    match (seconds / 3600, (seconds / 60) % 60) {
        (0, 0) => secs,
        (0, minutes) => format!("{minutes}m{secs}"),
        (hours, minutes) => format!("{hours}h{minutes}m{secs}"),
    }
}

/// go-humanize's `Bytes`, as etcd's log fields give sizes: `20 kB`,
/// `2.1 MB` (powers of 1000).
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "kB", "MB", "GB", "TB", "PB", "EB"];
    if bytes < 10 {
        return format!("{bytes} B");
    }
    let exponent = ((bytes as f64).ln() / 1000f64.ln()).floor() as usize;
    let exponent = exponent.min(UNITS.len() - 1);
    let value = (bytes as f64 / 1000f64.powi(exponent as i32) * 10.0 + 0.5).floor() / 10.0;
    if value < 10.0 {
        format!("{value:.1} {}", UNITS[exponent])
    } else {
        format!("{value:.0} {}", UNITS[exponent])
    }
}

/// go-humanize's `Time` of a moment `elapsed` ago, as etcd's snapshot
/// lines give how long a send took: `now`, `5 seconds ago`.
pub fn human_ago(elapsed: std::time::Duration) -> String {
    match elapsed.as_secs() {
        0 => "now".into(),
        1 => "1 second ago".into(),
        seconds @ 2..=59 => format!("{seconds} seconds ago"),
        60..=119 => "1 minute ago".into(),
        seconds => format!("{} minutes ago", seconds / 60),
    }
}

/// An event's message and its other fields, each already JSON.
#[derive(Default)]
struct Fields {
    message: String,
    rest: Vec<(String, String)>,
}

impl Fields {
    fn push(&mut self, field: &Field, json: String) {
        self.rest.push((field.name().to_string(), json));
    }
}

fn json_string(text: &str) -> String {
    let mut out = Vec::with_capacity(text.len() + 2);
    crate::api::gateway::gojson::write_string(&mut out, text);
    String::from_utf8(out).unwrap_or_default()
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_string();
        } else {
            self.push(field, json_string(value));
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.push(field, value.to_string());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.push(field, value.to_string());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.push(field, value.to_string());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.push(
            field,
            if value.is_finite() {
                value.to_string()
            } else {
                json_string(&value.to_string())
            },
        );
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.push(field, json_string(&value.to_string()));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let text = format!("{value:?}");
        if field.name() == "message" {
            self.message = text;
        } else if text.starts_with('[') && serde_json::from_str::<Vec<String>>(&text).is_ok() {
            // A `JsonList`: already a JSON array.
            self.push(field, text);
        } else {
            self.push(field, json_string(&text));
        }
    }
}

impl<S, N> FormatEvent<S, N> for ZapFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, _: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> std::fmt::Result {
        let meta = event.metadata();
        let mut fields = Fields::default();
        event.record(&mut fields);
        let raft = meta.target() == "raft";
        let (level, ts, caller) = (
            level_name(meta.level()),
            timestamp(SystemTime::now()),
            caller(meta.file(), meta.line()),
        );
        let mut line = String::with_capacity(160 + fields.message.len());
        if self.console {
            let _ = write!(line, "{ts}\t{level}\t");
            if raft {
                line.push_str("raft\t");
            }
            let _ = write!(line, "{caller}\t{}", fields.message);
            if !fields.rest.is_empty() {
                let members: Vec<String> = fields
                    .rest
                    .iter()
                    .map(|(key, value)| format!("{}: {value}", json_string(key)))
                    .collect();
                let _ = write!(line, "\t{{{}}}", members.join(", "));
            }
        } else {
            let _ = write!(line, "{{\"level\":\"{level}\",\"ts\":\"{ts}\"");
            if raft {
                line.push_str(",\"logger\":\"raft\"");
            }
            let _ = write!(
                line,
                ",\"caller\":{},\"msg\":{}",
                json_string(&caller),
                json_string(&fields.message)
            );
            for (key, value) in &fields.rest {
                let _ = write!(line, ",{}:{value}", json_string(key));
            }
            line.push('}');
        }
        line.push('\n');
        writer.write_str(&line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_and_callers_are_zaps() {
        let at = UNIX_EPOCH + std::time::Duration::new(1_795_000_000, 123_456_789);
        assert_eq!(timestamp(at), "2026-11-18T11:06:40.123456Z");
        assert_eq!(timestamp(UNIX_EPOCH), "1970-01-01T00:00:00.000000Z");
        assert_eq!(
            caller(Some("crates/kv-server/src/server/compactor.rs"), Some(134)),
            "server/compactor.rs:134"
        );
        assert_eq!(caller(Some("main.rs"), Some(7)), "main.rs:7");
    }

    #[test]
    fn durations_print_as_gos() {
        let cases = [
            (std::time::Duration::from_secs(5), "5s"),
            (std::time::Duration::from_secs(7200), "2h0m0s"),
            (std::time::Duration::from_secs(90), "1m30s"),
            (std::time::Duration::from_nanos(1_893_811), "1.893811ms"),
            (std::time::Duration::from_nanos(31_269), "31.269µs"),
            (std::time::Duration::from_nanos(3), "3ns"),
            (std::time::Duration::from_millis(1500), "1.5s"),
            (std::time::Duration::ZERO, "0s"),
        ];
        for (duration, text) in cases {
            assert_eq!(go_duration(duration), text);
        }
    }

    #[test]
    fn sizes_and_ages_read_as_go_humanize_writes_them() {
        assert_eq!(human_bytes(20_480), "20 kB");
        assert_eq!(human_bytes(2_134_016), "2.1 MB");
        assert_eq!(human_bytes(7), "7 B");
        assert_eq!(human_ago(std::time::Duration::from_millis(300)), "now");
        assert_eq!(human_ago(std::time::Duration::from_secs(5)), "5 seconds ago");
    }

    #[test]
    fn levels_and_outputs_refuse_as_etcd_does() {
        assert_eq!(level_filter("WARN").unwrap(), "warn");
        assert_eq!(level_filter("fatal").unwrap(), "error");
        assert_eq!(level_filter("xyz").unwrap_err().0, "unrecognized level: \"xyz\"");
        assert_eq!(
            Outputs::open("default,stderr", None).err().unwrap().0,
            "multi logoutput for \"default\" is not supported yet"
        );
        let refused = Outputs::open("/nonexistent/dir/x.log", None).err().unwrap().0;
        assert!(
            refused.starts_with("couldn't open sink \"/nonexistent/dir/x.log\": open /nonexistent/dir/x.log:"),
            "{refused}"
        );
        assert!(Outputs::open("stdout,stderr", None).is_ok());
    }
}
