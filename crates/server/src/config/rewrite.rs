//! `CONFIG REWRITE`: the settings CONFIG SET changes while running, written back to the
//! `--config` file so the next start keeps them.
//!
//! As Redis's, the rewrite is the smallest change that makes the file say what the server runs
//! with: a setting whose running value is what the file already gives (its line, or the
//! default when it has none) is left as it is; one that differs gets its line (replaced in
//! place, or added at the end); a `maxmemory` lifted back to the whole pool loses its line.
//! Comments, order and every other key stay as they were (`toml_edit`). Only the settings
//! CONFIG SET changes are written: flags given at start are the command line's, which the next
//! start repeats (Redis writes those too; strata leaves them to the command line or the unit
//! file).
//!
//! The file is replaced whole and atomically: the new text goes to a temporary file beside it
//! with the old one's permissions, is synced, and renamed over it (the directory synced after),
//! so a crash leaves the old file or the new one, never half of either.

use std::io::Write as _;
use std::path::Path;

use toml_edit::{value, DocumentMut};

use super::ServeOptions;
use crate::size::ByteSize;

/// The running values of the settings CONFIG SET changes.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveSettings {
    /// `slowlog-log-slower-than`, microseconds.
    pub slowlog_slower_than_us: i64,
    /// `slowlog-max-len`.
    pub slowlog_max_len: usize,
    /// `latency-monitor-threshold`, milliseconds.
    pub latency_monitor_threshold_ms: u64,
    /// `latency-tracking`.
    pub latency_tracking: bool,
    /// `latency-tracking-info-percentiles`, as CONFIG GET writes them.
    pub latency_percentiles: String,
    /// `maxmemory`, `None` for the whole pool.
    pub memory_limit_bytes: Option<u64>,
    /// The eviction policy's strata name (`--eviction`).
    pub eviction: &'static str,
    /// `timeout` (`--idle-timeout`), seconds.
    pub idle_timeout_secs: u64,
    /// `client-output-buffer-limit`'s hard limit (`--output-buffer-limit`), `usize::MAX` for
    /// none.
    pub output_bytes_hard: usize,
    /// `maxmemory-clients` (`--client-output-memory`), `usize::MAX` for none.
    pub client_output_bytes: usize,
}

/// One setting: its file key, whether the file already gives the running value (its line or
/// the default), and the running value as a file value (`None`: no line, as for the default
/// whole-pool maxmemory).
struct Line {
    key: &'static str,
    same: bool,
    running: Option<toml_edit::Value>,
}

/// Rewrites `path` to hold `live`; `memory_cap_for` says what cap a `maxmemory` of the file
/// sets (`Engine::memory_cap_for`: rounded to whole segments, `None` for the whole pool), so a
/// line that sets the running cap is left as it is. The error says what failed (Redis's reply
/// prefixes it with "Rewriting config file: ").
pub fn rewrite(
    path: &Path,
    live: &LiveSettings,
    memory_cap_for: impl Fn(u64) -> Option<u64>,
) -> Result<(), String> {
    // A link to the file is followed: the file it names is replaced, the link kept.
    let path = &std::fs::canonicalize(path).map_err(|error| error.to_string())?;
    let text = std::fs::read_to_string(path).map_err(|error| error.to_string())?;
    let no_longer_parses = |why: &str| format!("{} no longer parses: {why}", path.display());
    let file: ServeOptions =
        toml::from_str(&text).map_err(|error| no_longer_parses(error.message()))?;
    let mut in_file =
        LiveSettings::of(&file, &memory_cap_for).map_err(|why| no_longer_parses(&why))?;
    // Without a line client-output-memory follows output-buffer-limit, as the rewrite leaves
    // that one: what it gives is what the file gives once that line says the running limit.
    let hard_line = match live.output_bytes_hard {
        usize::MAX => 0,
        bytes => bytes as u64,
    };
    let rewritten = ServeOptions {
        output_buffer_limit: Some(ByteSize(hard_line)),
        ..file.clone()
    };
    in_file.client_output_bytes = rewritten.output_limits().1;
    let mut document: DocumentMut = text
        .parse()
        .map_err(|error: toml_edit::TomlError| error.to_string())?;
    for line in lines(&in_file, live) {
        if line.same {
            continue;
        }
        match line.running {
            Some(running) => set_keeping_comment(&mut document, line.key, running),
            None => {
                document.remove(line.key);
            }
        }
    }
    replace(path, document.to_string().as_bytes()).map_err(|error| error.to_string())
}

/// Sets `key` to `running`: in place (with the comment after it) when the file has it, as a
/// new line at the end when not.
fn set_keeping_comment(document: &mut DocumentMut, key: &str, mut running: toml_edit::Value) {
    if let Some(old) = document.get_mut(key).and_then(|item| item.as_value_mut()) {
        *running.decor_mut() = old.decor().clone();
        *old = running;
        return;
    }
    document[key] = value(running);
}

impl LiveSettings {
    /// What a server started from `file` alone runs with: its lines, or the defaults, read by
    /// the same functions the start-up reads them with (`memory_cap_for` as in [`rewrite`]).
    pub fn of(
        file: &ServeOptions,
        memory_cap_for: &dyn Fn(u64) -> Option<u64>,
    ) -> Result<LiveSettings, String> {
        let latency = file.latency_settings().map_err(|error| error.0)?;
        let percentiles = latency
            .percentiles
            .unwrap_or_else(|| crate::resp_exec::PERCENTILES_DEFAULT.to_vec());
        let (output_bytes_hard, client_output_bytes) = file.output_limits();
        let (slowlog_slower_than_us, slowlog_max_len) = file.slowlog();
        Ok(LiveSettings {
            slowlog_slower_than_us,
            slowlog_max_len,
            latency_monitor_threshold_ms: latency.monitor_threshold_ms,
            latency_tracking: latency.tracking,
            latency_percentiles: percentiles_text(percentiles),
            memory_limit_bytes: file.maxmemory.and_then(|size| memory_cap_for(size.0)),
            eviction: file.eviction_policy().name(),
            idle_timeout_secs: file.idle_timeout.unwrap_or(0),
            output_bytes_hard,
            client_output_bytes,
        })
    }
}

/// Every setting's line: whether the file gives the running value, and that value.
fn lines(in_file: &LiveSettings, live: &LiveSettings) -> Vec<Line> {
    let number = |n: u64| toml_edit::Value::from(i64::try_from(n).unwrap_or(i64::MAX));
    let line = |key, same, running| Line { key, same, running };
    vec![
        line(
            "slowlog-log-slower-than",
            in_file.slowlog_slower_than_us == live.slowlog_slower_than_us,
            Some(live.slowlog_slower_than_us.into()),
        ),
        line(
            "slowlog-max-len",
            in_file.slowlog_max_len == live.slowlog_max_len,
            Some(number(live.slowlog_max_len as u64)),
        ),
        line(
            "latency-monitor-threshold",
            in_file.latency_monitor_threshold_ms == live.latency_monitor_threshold_ms,
            Some(number(live.latency_monitor_threshold_ms)),
        ),
        line(
            "latency-tracking",
            in_file.latency_tracking == live.latency_tracking,
            Some(live.latency_tracking.into()),
        ),
        line(
            "latency-tracking-info-percentiles",
            in_file.latency_percentiles == live.latency_percentiles,
            Some(live.latency_percentiles.as_str().into()),
        ),
        line(
            "maxmemory",
            in_file.memory_limit_bytes == live.memory_limit_bytes,
            live.memory_limit_bytes
                .map(|bytes| size_value(bytes as usize)),
        ),
        line(
            "eviction",
            in_file.eviction == live.eviction,
            Some(live.eviction.into()),
        ),
        line(
            "idle-timeout",
            in_file.idle_timeout_secs == live.idle_timeout_secs,
            Some(number(live.idle_timeout_secs)),
        ),
        line(
            "output-buffer-limit",
            in_file.output_bytes_hard == live.output_bytes_hard,
            Some(size_value(live.output_bytes_hard)),
        ),
        line(
            "client-output-memory",
            in_file.client_output_bytes == live.client_output_bytes,
            Some(size_value(live.client_output_bytes)),
        ),
    ]
}

/// A size as the file takes it: `"64MiB"`, or 0 for none.
fn size_value(bytes: usize) -> toml_edit::Value {
    if bytes == usize::MAX {
        return 0.into();
    }
    ByteSize(bytes as u64).to_string().replace(' ', "").into()
}

/// Percentiles as CONFIG GET and the file write them: `50 99 99.9`.
pub fn percentiles_text(percentiles: Vec<f64>) -> String {
    percentiles
        .into_iter()
        .map(crate::resp_exec::format_percentile)
        .collect::<Vec<_>>()
        .join(" ")
}

impl Default for LiveSettings {
    /// What a server started without these options runs with.
    fn default() -> Self {
        LiveSettings::of(&ServeOptions::default(), &Some).expect("the defaults are valid")
    }
}

/// Replaces `path` with `contents` atomically (see the module's notes).
fn replace(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("the config path names no file"))?;
    let mut temporary_name = std::ffi::OsString::from(".");
    temporary_name.push(name);
    temporary_name.push(".rewrite");
    let temporary = path.with_file_name(temporary_name);
    let permissions = std::fs::metadata(path)?.permissions();
    let written = (|| {
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(contents)?;
        file.set_permissions(permissions)?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
        return written;
    }
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    std::fs::File::open(directory)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of its own, removed when dropped.
    struct Dir(std::path::PathBuf);

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn write(text: &str) -> (Dir, std::path::PathBuf) {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("strata-rewrite-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("strata.toml");
        std::fs::write(&path, text).unwrap();
        (Dir(dir), path)
    }

    #[test]
    fn unchanged_settings_leave_the_file_as_it_was() {
        let text = "# the cache\nmemory = \"64MiB\"  # budget\nslowlog-max-len = 10\n";
        let (_dir, path) = write(text);
        let live = LiveSettings {
            slowlog_max_len: 10,
            ..LiveSettings::default()
        };
        rewrite(&path, &live, Some).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    }

    #[test]
    fn changed_settings_are_replaced_in_place_or_added_and_comments_kept() {
        let text = "# the cache\nmemory = \"64MiB\"  # budget\nslowlog-max-len = 10 # short\n\
                    maxmemory = \"32MiB\"\neviction = \"merge\"\n";
        let (_dir, path) = write(text);
        let live = LiveSettings {
            slowlog_max_len: 20,
            latency_tracking: false,
            latency_percentiles: "50 99.9".into(),
            memory_limit_bytes: None,
            eviction: "random",
            ..LiveSettings::default()
        };
        rewrite(&path, &live, Some).unwrap();
        let written = std::fs::read_to_string(&path).unwrap();
        assert!(written.starts_with("# the cache\nmemory = \"64MiB\"  # budget\n"));
        assert!(
            written.contains("slowlog-max-len = 20 # short\n"),
            "{written}"
        );
        assert!(written.contains("eviction = \"random\"\n"), "{written}");
        assert!(!written.contains("maxmemory"), "the whole pool: {written}");
        assert!(written.contains("latency-tracking = false\n"), "{written}");
        assert!(written.contains("latency-tracking-info-percentiles = \"50 99.9\"\n"));
        assert!(
            !written.contains("slowlog-log-slower-than"),
            "at its default"
        );
        let options: ServeOptions = toml::from_str(&written).unwrap();
        assert_eq!(options.slowlog_max_len, Some(20));
        assert_eq!(options.latency_tracking, Some(false));
        let live = LiveSettings {
            memory_limit_bytes: Some(48 << 20),
            output_bytes_hard: usize::MAX,
            idle_timeout_secs: 30,
            ..live
        };
        rewrite(&path, &live, Some).unwrap();
        let options: ServeOptions =
            toml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(options.maxmemory, Some(ByteSize(48 << 20)));
        assert_eq!(options.output_buffer_limit, Some(ByteSize(0)), "none");
        assert_eq!(options.idle_timeout, Some(30));
        assert_eq!(
            options.client_output_memory,
            Some(ByteSize(
                crate::context::OUTPUT_BUFFERED_BYTES_HARD_DEFAULT as u64
            )),
            "its default followed the output limit: written so it stays"
        );
        let leftovers = std::fs::read_dir(path.parent().unwrap()).unwrap().count();
        assert_eq!(leftovers, 1, "no temporary file left");
    }

    /// A `maxmemory` line that sets the running cap once rounded to whole segments is the
    /// running cap: left as written.
    #[test]
    fn a_maxmemory_line_setting_the_running_cap_is_left_as_written() {
        let text = "maxmemory = \"64MiB\"\n";
        let (_dir, path) = write(text);
        let rounded = (64 << 20) / (1028 << 10) * (1028 << 10);
        let live = LiveSettings {
            memory_limit_bytes: Some(rounded),
            ..LiveSettings::default()
        };
        let round = |bytes: u64| Some(bytes / (1028 << 10) * (1028 << 10));
        rewrite(&path, &live, round).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    }

    /// A config file reached through a symbolic link: the file is rewritten, the link stays.
    #[test]
    fn a_linked_file_is_rewritten_through_its_link() {
        let (_dir, path) = write("slowlog-max-len = 10\n");
        let link = path.with_file_name("link.toml");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let live = LiveSettings {
            slowlog_max_len: 30,
            ..LiveSettings::default()
        };
        rewrite(&link, &live, Some).unwrap();
        assert!(link.symlink_metadata().unwrap().file_type().is_symlink());
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "slowlog-max-len = 30\n"
        );
    }

    /// A rewrite that cannot write its temporary file (a full disk; here a directory in its
    /// place) leaves the file as it was and says why; one that finds a stale temporary file
    /// (a crash mid-rewrite) writes over it.
    #[test]
    fn a_failed_write_leaves_the_file_and_a_stale_temporary_is_replaced() {
        let text = "slowlog-max-len = 10\n";
        let (_dir, path) = write(text);
        let temporary = path.with_file_name(".strata.toml.rewrite");
        std::fs::create_dir(&temporary).unwrap();
        let live = LiveSettings {
            slowlog_max_len: 40,
            ..LiveSettings::default()
        };
        assert!(rewrite(&path, &live, Some).is_err());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        std::fs::remove_dir(&temporary).unwrap();
        std::fs::write(&temporary, "half a file from a crash").unwrap();
        rewrite(&path, &live, Some).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "slowlog-max-len = 40\n"
        );
        assert!(!temporary.exists(), "renamed over the file");
    }

    #[test]
    fn a_file_that_no_longer_parses_is_left_alone() {
        let text = "memory = \"64MiB\"\nno-such-option = 1\n";
        let (_dir, path) = write(text);
        let error = rewrite(&path, &LiveSettings::default(), Some).unwrap_err();
        assert!(error.contains("no longer parses"), "{error}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    }
}
