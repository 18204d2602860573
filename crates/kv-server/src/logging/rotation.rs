//! `--enable-log-rotation`: the one file of `--log-outputs` rotated by
//! size, as etcd rotates it, so that an operator's retention settings and
//! the tools that collect the rotated files work unchanged.
//!
//! The rules are those of the rotating writer etcd uses
//! (`--log-rotation-config-json`, default
//! `{"maxsize": 100, "maxage": 0, "maxbackups": 0, "localtime": false, "compress": false}`):
//! - a line that would take the file past `maxsize` MiB (0: 100) first
//!   renames it to `<stem>-<2006-01-02T15-04-05.000><.ext>` beside it (UTC
//!   unless `localtime`), and a new file of the same mode takes its name;
//!   a line longer than `maxsize` alone is dropped;
//! - after each rotation, and once at start, a background thread removes
//!   the backups past the newest `maxbackups` (0: all kept) and those
//!   older than `maxage` days (0: none removed by age; the stamp in the
//!   name is read as UTC), then gzips the rest to `<backup>.gz` when
//!   `compress` is set;
//! - the config is read only when rotation is enabled, with the same
//!   refusals, in the same order: a single output that is not a file, or
//!   more than one file, then a config that is not JSON or whose fields
//!   have the wrong type, stop the member at start. (Outputs that name no
//!   file at all, such as `stderr,stdout`, start with nothing to rotate,
//!   as etcd's do.)
//! - a new file gets mode 0644, as etcd 3.5's writer makes it (3.7's
//!   makes 0600); a rotated file's successor keeps its mode.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{Civil, LogError};

/// `maxsize` when the config gives 0: etcd's writer's default, in MiB.
const DEFAULT_MAX_SIZE_MB: i64 = 100;

/// Bytes in the config's "megabyte".
const MEGABYTE: i64 = 1024 * 1024;

/// The backup name's stamp, as Go writes `2006-01-02T15-04-05.000`.
const STAMP_LEN: usize = "2006-01-02T15-04-05.000".len();

/// etcd's refusal when rotation has no single file to rotate.
const INVALID_OUTPUT: &str = "--log-outputs requires a single file path when --log-rotate-config-json is defined";

/// `--log-rotation-config-json`, read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RotationConfig {
    /// `maxsize`: MiB before a rotation (0: 100).
    pub max_size_mb: i64,
    /// `maxage`: days a backup is kept (0: no limit).
    pub max_age_days: i64,
    /// `maxbackups`: backups kept (0: no limit).
    pub max_backups: i64,
    /// `localtime`: the backup's stamp in local time instead of UTC.
    pub local_time: bool,
    /// `compress`: backups gzipped.
    pub compress: bool,
}

impl RotationConfig {
    /// The config's JSON, read as etcd reads it: keys match fields in any
    /// case, unknown keys and nulls are ignored, and a wrong type is
    /// refused with Go's words.
    pub fn parse(json: &str) -> Result<RotationConfig, LogError> {
        let value: serde_json::Value = serde_json::from_str(json).map_err(|error| {
            let words = if error.is_eof() {
                "unexpected end of JSON input".to_string()
            } else {
                error.to_string()
            };
            LogError(format!("improperly formatted log rotation config: {words}"))
        })?;
        let serde_json::Value::Object(fields) = value else {
            return Err(LogError(format!(
                "invalid log rotation config: json: cannot unmarshal {} into Go value of type embed.logRotationConfig",
                go_kind(&value)
            )));
        };
        let mut config = RotationConfig {
            max_size_mb: 0,
            max_age_days: 0,
            max_backups: 0,
            local_time: false,
            compress: false,
        };
        for (key, value) in &fields {
            let name = key.to_ascii_lowercase();
            if value.is_null() {
                continue;
            }
            let wrong = |of_type: &str| {
                LogError(format!(
                    "invalid log rotation config: json: cannot unmarshal {} into Go struct field logRotationConfig.Logger.{name} of type {of_type}",
                    go_kind(value)
                ))
            };
            match name.as_str() {
                "maxsize" | "maxage" | "maxbackups" => {
                    let number = value.as_i64().ok_or_else(|| wrong("int"))?;
                    match name.as_str() {
                        "maxsize" => config.max_size_mb = number,
                        "maxage" => config.max_age_days = number,
                        _ => config.max_backups = number,
                    }
                }
                "localtime" | "compress" => {
                    let flag = value.as_bool().ok_or_else(|| wrong("bool"))?;
                    if name == "localtime" {
                        config.local_time = flag;
                    } else {
                        config.compress = flag;
                    }
                }
                "filename" if !value.is_string() => return Err(wrong("string")),
                _ => {}
            }
        }
        Ok(config)
    }

    /// The file rotation applies to among `--log-outputs` (already
    /// deduplicated), None when they name no file, or etcd's refusal: a
    /// single output that is not a file, or more than one file.
    pub fn target<'a>(outputs: &[&'a str]) -> Result<Option<&'a str>, LogError> {
        let files: Vec<&str> = outputs
            .iter()
            .copied()
            .filter(|name| !matches!(*name, "default" | "stderr" | "stdout"))
            .collect();
        match files.as_slice() {
            [] if outputs.len() == 1 => Err(LogError(INVALID_OUTPUT.into())),
            [] => Ok(None),
            [one] => Ok(Some(one)),
            _ => Err(LogError(INVALID_OUTPUT.into())),
        }
    }

    fn max_bytes(&self) -> i64 {
        if self.max_size_mb == 0 {
            DEFAULT_MAX_SIZE_MB * MEGABYTE
        } else {
            self.max_size_mb.saturating_mul(MEGABYTE)
        }
    }
}

/// How Go's JSON decoder names a value it cannot store.
fn go_kind(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::Null => "null".into(),
        serde_json::Value::Bool(_) => "bool".into(),
        serde_json::Value::Number(number) => format!("number {number}"),
        serde_json::Value::String(_) => "string".into(),
        serde_json::Value::Array(_) => "array".into(),
        serde_json::Value::Object(_) => "object".into(),
    }
}

/// The rotated log file: the open file, its size, and the way to the
/// background thread that prunes and compresses backups.
pub struct Rotating {
    path: PathBuf,
    config: RotationConfig,
    file: File,
    size: i64,
    mill: SyncSender<()>,
}

impl Rotating {
    /// Opens `path` for appending, and starts the backup thread, which
    /// runs once now. A file already full, or one that cannot be opened
    /// for appending, is rotated first (renamed to a backup, never
    /// truncated), as etcd's writer does.
    pub fn open(path: &str, config: RotationConfig) -> Result<Rotating, LogError> {
        let refused = |error: std::io::Error| LogError(format!("couldn't open sink {path:?}: open {path}: {error}"));
        let path = PathBuf::from(path);
        let (file, size) = match std::fs::metadata(&path) {
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => (open_new(&path).map_err(refused)?, 0),
            Err(error) => return Err(refused(error)),
            Ok(meta) if (meta.len() as i64) < config.max_bytes() => match OpenOptions::new().append(true).open(&path) {
                Ok(file) => (file, meta.len() as i64),
                Err(_) => (rotate(&path, config.local_time).map_err(refused)?, 0),
            },
            Ok(_) => (rotate(&path, config.local_time).map_err(refused)?, 0),
        };
        let (wake_mill, wake) = sync_channel::<()>(1);
        let (dir, name, settings) = (parent(&path), file_name(&path), config.clone());
        std::thread::Builder::new()
            .name("log-mill".into())
            .spawn(move || {
                while wake.recv().is_ok() {
                    // A backup that cannot be pruned or compressed stays
                    // as it is; the log goes on, as etcd's does.
                    let _ = mill(&dir, &name, &settings);
                }
            })
            .map_err(|error| LogError(format!("log rotation: {error}")))?;
        let _ = wake_mill.try_send(());
        Ok(Rotating {
            path,
            config,
            file,
            size,
            mill: wake_mill,
        })
    }

    /// Writes one whole line, rotating first if it would not fit.
    pub fn write_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        let len = line.len() as i64;
        let max = self.config.max_bytes();
        if len > max {
            return Err(std::io::Error::other(format!(
                "write length {len} exceeds maximum file size {max}"
            )));
        }
        if self.size + len > max {
            self.file = rotate(&self.path, self.config.local_time)?;
            self.size = 0;
            let _ = self.mill.try_send(());
        }
        self.file.write_all(line)?;
        self.size += len;
        Ok(())
    }
}

fn parent(path: &Path) -> PathBuf {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// `name` split as Go's `filepath.Ext` splits it: the stem, and the
/// extension from the last dot (empty when there is none).
fn stem_and_ext(name: &str) -> (&str, &str) {
    match name.rfind('.') {
        Some(dot) => (&name[..dot], &name[dot..]),
        None => (name, ""),
    }
}

/// A new, empty log file at `path` (its directories made), mode 0644.
fn open_new(path: &Path) -> std::io::Result<File> {
    std::fs::create_dir_all(parent(path))?;
    OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o644)
        .open(path)
}

/// Renames the full file to its backup name and opens a new one with its
/// mode.
fn rotate(path: &Path, local_time: bool) -> std::io::Result<File> {
    let name = file_name(path);
    let (stem, ext) = stem_and_ext(&name);
    let backup = parent(path).join(format!("{stem}-{}{ext}", stamp(SystemTime::now(), local_time)));
    let mode = std::fs::metadata(path).map(|meta| meta.permissions().mode()).ok();
    std::fs::rename(path, &backup)?;
    let file = open_new(path)?;
    if let Some(mode) = mode {
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
    }
    Ok(file)
}

/// `2006-01-02T15-04-05.000` for `now`, in UTC or local time.
fn stamp(now: SystemTime, local_time: bool) -> String {
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let seconds = since.as_secs() as i64;
    let offset = if local_time { local_offset(seconds) } else { 0 };
    let civil = Civil::utc(seconds + offset);
    format!(
        "{:04}-{:02}-{:02}T{:02}-{:02}-{:02}.{:03}",
        civil.year,
        civil.month,
        civil.day,
        civil.hour,
        civil.minute,
        civil.second,
        since.subsec_millis()
    )
}

/// Seconds east of UTC of the system's local time zone at `seconds`.
fn local_offset(seconds: i64) -> i64 {
    let time = seconds as libc::time_t;
    // SAFETY: `localtime_r` only writes the `tm` it is given, which lives
    // on this stack frame; a null return leaves it unread.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&time, &mut tm).is_null() {
            0
        } else {
            tm.tm_gmtoff
        }
    }
}

/// Whether `text` has the shape of a backup stamp.
fn is_stamp(text: &str) -> bool {
    text.len() == STAMP_LEN
        && text.bytes().enumerate().all(|(at, byte)| match at {
            4 | 7 => byte == b'-',
            10 => byte == b'T',
            13 | 16 => byte == b'-',
            19 => byte == b'.',
            _ => byte.is_ascii_digit(),
        })
}

/// One pass over the backups of `name` in `dir`: prune by count and age,
/// then compress.
fn mill(dir: &Path, name: &str, config: &RotationConfig) -> std::io::Result<()> {
    if config.max_backups == 0 && config.max_age_days == 0 && !config.compress {
        return Ok(());
    }
    let (stem, ext) = stem_and_ext(name);
    let prefix = format!("{stem}-");
    let gz_ext = format!("{ext}.gz");
    // (stamp, file name), newest first.
    let mut backups: Vec<(String, String)> = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            continue;
        }
        let file = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = file.strip_prefix(&prefix) else {
            continue;
        };
        let stamp = [ext, gz_ext.as_str()]
            .into_iter()
            .filter_map(|suffix| rest.strip_suffix(suffix))
            .find(|stamp| is_stamp(stamp));
        if let Some(stamp) = stamp {
            backups.push((stamp.to_string(), file));
        }
    }
    backups.sort_by(|a, b| b.0.cmp(&a.0));
    let mut remove = Vec::new();
    if config.max_backups > 0 {
        // A backup and its compressed copy count once.
        let mut kept: Vec<String> = Vec::new();
        let mut remaining = Vec::new();
        for backup in backups {
            let base = backup.1.strip_suffix(".gz").unwrap_or(&backup.1).to_string();
            if !kept.contains(&base) {
                kept.push(base);
            }
            if kept.len() as i64 > config.max_backups {
                remove.push(backup);
            } else {
                remaining.push(backup);
            }
        }
        backups = remaining;
    }
    if config.max_age_days > 0 {
        let age = Duration::from_secs(86_400u64.saturating_mul(config.max_age_days as u64));
        let cutoff = stamp(SystemTime::now().checked_sub(age).unwrap_or(UNIX_EPOCH), false);
        let (old, young): (Vec<_>, Vec<_>) = backups.into_iter().partition(|(stamp, _)| *stamp < cutoff);
        remove.extend(old);
        backups = young;
    }
    // Each file on its own: one that cannot be removed or compressed
    // leaves the others to be, and the first error is returned.
    let mut first_error = None;
    for (_, file) in &remove {
        if let Err(error) = std::fs::remove_file(dir.join(file)) {
            first_error.get_or_insert(error);
        }
    }
    if config.compress {
        for (_, file) in backups.iter().filter(|(_, file)| !file.ends_with(".gz")) {
            if let Err(error) = compress(&dir.join(file)) {
                first_error.get_or_insert(error);
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Gzips `source` to `<source>.gz` with its mode, then removes it.
fn compress(source: &Path) -> std::io::Result<()> {
    let mut target_name = source.as_os_str().to_owned();
    target_name.push(".gz");
    let target = PathBuf::from(target_name);
    let mode = std::fs::metadata(source)?.permissions().mode();
    let written = (|| {
        let mut input = File::open(source)?;
        let output = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(mode)
            .open(&target)?;
        let mut encoder = flate2::write::GzEncoder::new(output, flate2::Compression::default());
        std::io::copy(&mut input, &mut encoder)?;
        encoder.finish()?.sync_all()
    })();
    if let Err(error) = written {
        let _ = std::fs::remove_file(&target);
        return Err(error);
    }
    std::fs::remove_file(source)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_are_read_and_refused_as_etcd_reads_them() {
        let default = r#"{"maxsize": 100, "maxage": 0, "maxbackups": 0, "localtime": false, "compress": false}"#;
        assert_eq!(RotationConfig::parse(default).unwrap().max_size_mb, 100);
        let mixed = RotationConfig::parse(r#"{"MaxSize": 1, "maxBackups": 2, "compress": true, "other": 1}"#).unwrap();
        assert_eq!((mixed.max_size_mb, mixed.max_backups, mixed.compress), (1, 2, true));
        assert_eq!(
            RotationConfig::parse(r#"{"maxsize": true}"#).unwrap_err().0,
            "invalid log rotation config: json: cannot unmarshal bool into Go struct field logRotationConfig.Logger.maxsize of type int"
        );
        assert_eq!(
            RotationConfig::parse(r#"{"maxsize": true"#).unwrap_err().0,
            "improperly formatted log rotation config: unexpected end of JSON input"
        );
        assert_eq!(
            RotationConfig::target(&["stderr"]).unwrap_err().0,
            "--log-outputs requires a single file path when --log-rotate-config-json is defined"
        );
        assert!(RotationConfig::target(&["/tmp/a", "/tmp/b"]).is_err());
        assert_eq!(RotationConfig::target(&["stderr", "/tmp/a"]).unwrap(), Some("/tmp/a"));
        assert_eq!(RotationConfig::target(&["stderr", "stdout"]).unwrap(), None);
    }

    #[test]
    fn stamps_and_names_are_the_writers() {
        let at = UNIX_EPOCH + Duration::from_millis(1_764_154_718_315);
        assert_eq!(stamp(at, false), "2025-11-26T10-58-38.315");
        assert!(is_stamp("2025-11-26T10-58-38.315"));
        assert!(!is_stamp("2025-11-26T10:58:38.315"));
        assert_eq!(stem_and_ext("member.log"), ("member", ".log"));
        assert_eq!(stem_and_ext("member"), ("member", ""));
    }

    #[test]
    fn a_full_file_rotates_and_backups_are_pruned_and_compressed() {
        let dir = std::env::temp_dir().join(format!("kv-rotation-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("member.log");
        let config = RotationConfig {
            max_size_mb: 1,
            max_age_days: 0,
            max_backups: 1,
            local_time: false,
            compress: true,
        };
        let mut log = Rotating::open(path.to_str().unwrap(), config.clone()).unwrap();
        let line = [b'x'; 1000];
        // 1,048 lines fill a file: three rotations.
        for _ in 0..3_200 {
            if log.size + line.len() as i64 > MEGABYTE {
                // Backups a millisecond apart at least, so that their
                // stamps differ.
                std::thread::sleep(Duration::from_millis(2));
            }
            log.write_line(&line).unwrap();
        }
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 56_000);
        // The background thread prunes to one backup and compresses it.
        let listing = || {
            let mut names: Vec<String> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        };
        let mut names = listing();
        for _ in 0..500 {
            if names.len() == 2 && names[0].ends_with(".gz") {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
            names = listing();
        }
        assert_eq!(names.len(), 2, "{names:?}");
        assert_eq!(names[1], "member.log");
        let backup = &names[0];
        assert!(backup.starts_with("member-") && backup.ends_with(".log.gz"), "{backup}");
        assert!(is_stamp(&backup["member-".len()..backup.len() - ".log.gz".len()]));
        let mut text = Vec::new();
        std::io::Read::read_to_end(
            &mut flate2::read::GzDecoder::new(File::open(dir.join(backup)).unwrap()),
            &mut text,
        )
        .unwrap();
        assert_eq!(text.len(), 1_048_000);
        assert!(log.write_line(&vec![b'y'; MEGABYTE as usize + 1]).is_err());
        drop(log);

        // A file already full when the member starts is rotated, not
        // truncated.
        let full = dir.join("full.log");
        std::fs::write(&full, vec![b'z'; MEGABYTE as usize]).unwrap();
        let plain = RotationConfig {
            compress: false,
            max_backups: 0,
            ..config
        };
        let reopened = Rotating::open(full.to_str().unwrap(), plain).unwrap();
        assert_eq!(reopened.size, 0);
        assert_eq!(std::fs::metadata(&full).unwrap().len(), 0);
        let kept: Vec<u64> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap())
            .filter(|entry| entry.file_name().to_string_lossy().starts_with("full-"))
            .map(|entry| entry.metadata().unwrap().len())
            .collect();
        assert_eq!(kept, [MEGABYTE as u64], "the full file became a backup");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
