//! `strata block`: serves block devices over NBD (issue 12). Each export is a backing store (a
//! file or block device, read and written with direct I/O) served to NBD clients (the kernel's
//! `nbd-client`, qemu, libnbd's tools, `nbdfuse`) over TCP or a Unix socket.
//!
//! Between each export and its store, a cache of whole lines (`cache`) in DRAM or in a strata
//! pool that restarts warm (`slots`, `pool_cache`), in the mode asked for: pass-through,
//! write-through, write-around, write-invalidate or write-back (`export`); in write-back a
//! cleaner thread per export writes dirty lines back (`cleaner`).
//!
//! ```text
//!   listener (TCP, Unix) ─▶ thread per connection ─▶ handshake (nbd) ─▶ requests
//!       ─▶ Export (mode) ─▶ Cache (lines: DRAM or pool) ─▶ Backing (pool DirectFile)
//! ```

#![forbid(unsafe_code)]

pub mod admin;
pub mod backing;
pub mod cache;
pub mod cleaner;
pub mod export;
pub mod nbd;
pub mod pool_cache;
pub mod server;
pub mod slots;

use std::net::TcpListener;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::Arc;

use cache::Cache;
use export::{Export, Exports, Mode};
use server::Listener;

/// Default sequential cut-off: 1 MiB (Open CAS's default threshold too).
pub const SEQ_CUTOFF_BYTES_DEFAULT: u64 = 1 << 20;

/// Default cache line: 4 KiB (Open CAS's default too).
pub const CACHE_LINE_BYTES_DEFAULT: usize = 4096;

/// Parses a size as every strata command does ([`strata_pool::ByteSize`]: `1GiB`, `64mb`,
/// `4096`; `k`, `m`, `g` are powers of 1000, as in Redis's configuration).
pub fn parse_size(text: &str) -> Option<u64> {
    text.parse::<strata_pool::ByteSize>()
        .ok()
        .map(|size| size.0)
}

/// Default NBD listener: loopback, the IANA port.
pub const NBD_LISTEN_DEFAULT: &str = "127.0.0.1:10809";

/// `strata block`'s flags, and the keys of the `[block]` table of its `--config` TOML file (a
/// key is the flag's long name: `cache-size = "1GiB"`, `export = ["disk=/dev/sdb"]`). A flag
/// given on the command line overrides the file's key.
#[derive(clap::Args, serde::Deserialize, Debug, Clone, Default)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct BlockOptions {
    /// A TOML file whose `[block]` table holds any of these options.
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// An export, `NAME=BACKING_PATH` (a file or block device); repeat for more. The first is
    /// also the default export (the empty name).
    #[arg(long = "export", value_name = "NAME=PATH")]
    #[serde(default, rename = "export")]
    pub exports: Vec<String>,
    /// Cache mode: `wt` (write-through), `wb` (write-back: writes are acknowledged from the
    /// cache; with `--cache PATH` they survive a crash once FUA or a FLUSH returned), `wa`
    /// (write-around), `wi` (write-invalidate) or `pt` (pass-through) [default: wt].
    #[arg(long, value_name = "MODE")]
    pub mode: Option<String>,
    /// Write-back: a dirty line is written back once it has been dirty this many seconds (`0`:
    /// at the cleaner's next round, every 100 ms) [default: 5].
    #[arg(long, value_name = "SECS")]
    pub clean_staleness: Option<u64>,
    /// Write-back: the cleaner writes back at most this many lines a second (`0`: no limit);
    /// writes that find their shard full of dirty lines write some back themselves
    /// [default: 16384].
    #[arg(long, value_name = "LINES")]
    pub clean_rate: Option<u64>,
    /// DRAM for the cache, shared evenly by the exports (e.g. `1GiB`); needed unless `--mode pt`.
    #[arg(long, value_name = "SIZE")]
    pub cache_size: Option<String>,
    /// Cache line: 4KiB to 64KiB, a multiple of 4KiB [default: 4KiB].
    #[arg(long, value_name = "SIZE")]
    pub cache_line_size: Option<String>,
    /// Once a connection has read or written more than this many consecutive bytes, the rest
    /// of that sequential run bypasses the cache; `0` turns it off [default: 1MiB].
    #[arg(long, value_name = "SIZE")]
    pub seq_cutoff: Option<String>,
    /// A line is filled on its N-th miss (1: on every miss) [default: 1].
    #[arg(long, value_name = "N")]
    pub promote_after: Option<u32>,
    /// A cache pool (a file, a file on tmpfs, or DAX) of `--cache-size` for the one export: its
    /// lines survive a clean stop and a process crash, so the export restarts warm [default:
    /// the cache is in DRAM].
    #[arg(long, value_name = "PATH")]
    pub cache: Option<PathBuf>,
    /// Where to serve NBD: `unix:/path/to.sock` or `ADDR:PORT`; repeat for more [default:
    /// 127.0.0.1:10809].
    #[arg(long = "nbd-listen", value_name = "LISTEN")]
    #[serde(default)]
    pub nbd_listen: Vec<String>,
    /// HTTP admin port (`/metrics`, `/stats`, `/health`, mode switch, flush), or `off`
    /// [default: off].
    #[arg(long, value_name = "ADDR")]
    pub admin_listen: Option<String>,
}

/// The file's shape: `strata block`'s keys under `[block]`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct BlockFile {
    #[serde(default)]
    block: BlockOptions,
}

impl BlockOptions {
    /// The options with `--config`'s file read and merged under the flags (a flag wins; a list
    /// given on the command line replaces the file's).
    pub fn with_config_file(self) -> Result<BlockOptions, StartError> {
        let Some(path) = &self.config else {
            return Ok(self);
        };
        let text = std::fs::read_to_string(path).map_err(|err| StartError::Io {
            what: format!("--config {}", path.display()),
            err: err.to_string(),
        })?;
        let file: BlockFile = toml::from_str(&text)
            .map_err(|err| StartError::Config(format!("--config {}: {err}", path.display())))?;
        let file = file.block;
        let list = |flags: Vec<String>, file: Vec<String>| {
            if flags.is_empty() {
                file
            } else {
                flags
            }
        };
        Ok(BlockOptions {
            config: self.config,
            exports: list(self.exports, file.exports),
            mode: self.mode.or(file.mode),
            clean_staleness: self.clean_staleness.or(file.clean_staleness),
            clean_rate: self.clean_rate.or(file.clean_rate),
            cache_size: self.cache_size.or(file.cache_size),
            cache_line_size: self.cache_line_size.or(file.cache_line_size),
            seq_cutoff: self.seq_cutoff.or(file.seq_cutoff),
            promote_after: self.promote_after.or(file.promote_after),
            cache: self.cache.or(file.cache),
            nbd_listen: list(self.nbd_listen, file.nbd_listen),
            admin_listen: self.admin_listen.or(file.admin_listen),
        })
    }
}

/// Why `strata block` could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A flag's value is wrong.
    #[error("{0}")]
    Config(String),
    /// A backing store or listener could not be opened.
    #[error("{what}: {err}")]
    Io {
        /// What was being opened.
        what: String,
        /// The cause.
        err: String,
    },
}

/// Opens the exports and binds the listeners; `run` then serves them.
pub struct Block {
    exports: Arc<Exports>,
    cleaning: cleaner::Policy,
    listeners: Vec<(String, Listener)>,
    unix_paths: Vec<PathBuf>,
    admin: Option<TcpListener>,
}

impl Block {
    /// Checks the flags, opens every backing store and binds every listener.
    pub fn start(options: &BlockOptions) -> Result<Block, StartError> {
        let options = &options.clone().with_config_file()?;
        let settings = CacheSettings::of(options)?;
        let mut exports = Vec::new();
        for spec in &options.exports {
            let export = open_export(spec, options, &settings, &exports)?;
            exports.push(export);
        }
        let (listeners, unix_paths) = bind_listeners(options)?;
        let admin = match options.admin_listen.as_deref() {
            None | Some("off") => None,
            Some(addr) => Some(TcpListener::bind(addr).map_err(|err| StartError::Io {
                what: format!("--admin-listen {addr}"),
                err: err.to_string(),
            })?),
        };
        let cleaning = cleaner::Policy {
            staleness: std::time::Duration::from_secs(options.clean_staleness.unwrap_or(5)),
            lines_per_sec: options.clean_rate.unwrap_or(16384),
        };
        Ok(Block {
            cleaning,
            exports: Arc::new(Exports::new(exports)),
            listeners,
            unix_paths,
            admin,
        })
    }

    /// Serves until SIGTERM or SIGINT, then flushes every export and removes its Unix sockets.
    pub fn run(self) -> std::io::Result<()> {
        let mut signals = signal_hook::iterator::Signals::new([
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGINT,
        ])?;
        log_exports(&self.exports);
        for (name, listener) in self.listeners {
            tracing::info!(nbd = %name, "listening");
            let exports = Arc::clone(&self.exports);
            std::thread::Builder::new()
                .name("strata-nbd-accept".into())
                .spawn(move || server::accept_loop(listener, exports))?;
        }
        let cleaners: Vec<_> = self
            .exports
            .iter()
            .filter(|e| e.cache().is_some())
            .map(|e| cleaner::Cleaner::start(Arc::clone(e), self.cleaning))
            .collect::<std::io::Result<_>>()?;
        if let Some(admin) = self.admin {
            tracing::info!(admin = %admin.local_addr()?, "listening");
            let exports = Arc::clone(&self.exports);
            std::thread::Builder::new()
                .name("strata-block-admin".into())
                .spawn(move || admin::serve(admin, exports))?;
        }
        let signal = signals.forever().next();
        tracing::info!(?signal, "stopping: flushing every export");
        for cleaner in cleaners {
            cleaner.stop();
        }
        stop_exports(&self.exports);
        for path in &self.unix_paths {
            let _ = std::fs::remove_file(path);
        }
        Ok(())
    }
}

/// Removes a Unix socket left by a process that is gone (nothing accepts on it); refuses to
/// touch anything else, or a socket in use.
fn remove_stale_socket(path: &std::path::Path) -> std::io::Result<()> {
    let Ok(metadata) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !metadata.file_type().is_socket() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            "exists and is not a socket",
        ));
    }
    if UnixStream::connect(path).is_ok() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            "another process serves this socket",
        ));
    }
    std::fs::remove_file(path)
}

/// What the flags say of every export's cache.
struct CacheSettings {
    mode: Mode,
    line_bytes: usize,
    /// The whole cache's DRAM (or pool) budget; 0 for pass-through with none given.
    cache_bytes: u64,
    seq_cutoff_bytes: u64,
    promote_after: u32,
}

impl CacheSettings {
    /// Checks the cache flags.
    fn of(options: &BlockOptions) -> Result<CacheSettings, StartError> {
        let config = |message: String| StartError::Config(message);
        if options.exports.is_empty() {
            return Err(config(
                "no export: give --export NAME=PATH (or `export` in the file's [block] table)"
                    .to_string(),
            ));
        }
        let mode_text = options.mode.as_deref().unwrap_or("wt");
        let mode = Mode::parse(mode_text)
            .ok_or_else(|| config(format!("--mode {mode_text}: expected wt, wb, wa, wi or pt")))?;
        if options.cache.is_some() && options.exports.len() > 1 {
            return Err(config(
                "--cache PATH: a cache pool serves one export (give one --export, or leave \
                 --cache out for DRAM caches)"
                    .to_string(),
            ));
        }
        let line_bytes = match &options.cache_line_size {
            None => CACHE_LINE_BYTES_DEFAULT,
            Some(text) => parse_size(text)
                .filter(|&n| (4096..=65536).contains(&n) && n.is_multiple_of(4096))
                .ok_or_else(|| {
                    config(format!(
                        "--cache-line-size {text}: expected 4KiB to 64KiB, a multiple of 4KiB"
                    ))
                })? as usize,
        };
        let cache_bytes = cache_bytes(options, mode)?;
        let seq_cutoff_bytes = match &options.seq_cutoff {
            None => SEQ_CUTOFF_BYTES_DEFAULT,
            Some(text) => parse_size(text).ok_or_else(|| {
                config(format!(
                    "--seq-cutoff {text}: expected a size such as 1MiB, or 0"
                ))
            })?,
        };
        let promote_after = match options.promote_after {
            None => 1,
            Some(0) => return Err(config("--promote-after 0: expected 1 or more".to_string())),
            Some(n) => n,
        };
        Ok(CacheSettings {
            mode,
            line_bytes,
            cache_bytes,
            seq_cutoff_bytes,
            promote_after,
        })
    }
}

/// The cache budget `--cache-size` gives. Pass-through needs no cache, but one given at start
/// lets the export switch to a cache mode later.
fn cache_bytes(options: &BlockOptions, mode: Mode) -> Result<u64, StartError> {
    let config = |message: String| StartError::Config(message);
    match (&options.cache_size, mode) {
        (None, Mode::PassThrough) => Ok(0),
        (None, _) => Err(config(format!(
            "--mode {}: give the cache's DRAM with --cache-size (or use --mode pt)",
            mode.name()
        ))),
        (Some(text), _) => {
            let bytes = parse_size(text).filter(|&n| n > 0).ok_or_else(|| {
                config(format!("--cache-size {text}: expected a size such as 1GiB"))
            })?;
            strata_pool::size::parse_budget(text)
                .map_err(|why| config(format!("--cache-size {why}")))?;
            Ok(bytes)
        }
    }
}

/// Opens export `spec` (`NAME=PATH`): its backing store and its cache (a pool with
/// `--cache`, else its share of the DRAM budget); dirty lines a mode other than write-back
/// found are written back before it serves.
fn open_export(
    spec: &str,
    options: &BlockOptions,
    settings: &CacheSettings,
    exports: &[Export],
) -> Result<Export, StartError> {
    let Some((name, path)) = spec.split_once('=') else {
        return Err(StartError::Config(format!(
            "--export {spec:?}: expected NAME=PATH"
        )));
    };
    if name.is_empty() || name.len() > 4096 || name.contains('\0') {
        return Err(StartError::Config(format!(
            "--export {spec:?}: a name is 1 to 4096 bytes, without NUL"
        )));
    }
    if exports.iter().any(|e| e.name() == name) {
        return Err(StartError::Config(format!("--export {name}: given twice")));
    }
    let io_err = |err: String| StartError::Io {
        what: format!("export {name}"),
        err,
    };
    let backing = backing::Backing::open(path.as_ref()).map_err(io_err)?;
    let (line_bytes, promote_after) = (settings.line_bytes, settings.promote_after);
    let cache = match (&options.cache, settings.cache_bytes) {
        (_, 0) => None,
        (Some(pool_path), cache_bytes) => {
            let store = pool_cache::StoreIdentity::of(path.as_ref(), backing.size_bytes())
                .map_err(io_err)?;
            let cache = pool_cache::open(pool_path, cache_bytes, line_bytes, promote_after, store)
                .map_err(io_err)?;
            Some(cache)
        }
        (None, cache_bytes) => {
            let per_export_bytes = cache_bytes / options.exports.len().max(1) as u64;
            Some(Cache::new(per_export_bytes, line_bytes, promote_after))
        }
    };
    let mode = settings.mode;
    let export = Export::new(name, backing, mode, cache)
        .map_err(io_err)?
        .with_seq_cutoff(settings.seq_cutoff_bytes);
    let recovered_dirty = export.cache().map_or(0, |c| c.dirty_lines());
    if recovered_dirty > 0 && mode != Mode::WriteBack {
        // Only write-back may hold dirty lines: the store gets them before serving.
        let cleaned = export.clean_all().map_err(|e| io_err(e.0.to_string()))?;
        tracing::info!(
            export = name,
            lines = cleaned,
            mode = mode.name(),
            "dirty lines from the last run written back before serving"
        );
    }
    if !export.backing().direct() {
        tracing::warn!(
            export = name,
            path,
            "the file system does not take O_DIRECT: the backing store is read and \
             written through the page cache"
        );
    }
    Ok(export)
}

/// The NBD listeners, by the address they are bound to, and the Unix socket paths to remove
/// at stop.
type Bound = (Vec<(String, Listener)>, Vec<PathBuf>);

/// Binds every `--nbd-listen` address (TCP, or `unix:PATH`, removing a stale socket first).
fn bind_listeners(options: &BlockOptions) -> Result<Bound, StartError> {
    let listens = if options.nbd_listen.is_empty() {
        vec![NBD_LISTEN_DEFAULT.to_string()]
    } else {
        options.nbd_listen.clone()
    };
    let mut listeners = Vec::new();
    let mut unix_paths = Vec::new();
    for listen in listens {
        let io_err = |err: std::io::Error| StartError::Io {
            what: format!("--nbd-listen {listen}"),
            err: err.to_string(),
        };
        if let Some(path) = listen.strip_prefix("unix:") {
            let path = PathBuf::from(path);
            remove_stale_socket(&path).map_err(io_err)?;
            let listener = UnixListener::bind(&path).map_err(io_err)?;
            unix_paths.push(path.clone());
            listeners.push((format!("unix:{}", path.display()), Listener::Unix(listener)));
        } else {
            let listener = TcpListener::bind(&listen).map_err(io_err)?;
            let bound = listener.local_addr().map_err(io_err)?;
            listeners.push((bound.to_string(), Listener::Tcp(listener)));
        }
    }
    Ok((listeners, unix_paths))
}

/// Logs each export's settings at start.
fn log_exports(exports: &Exports) {
    for export in exports.iter() {
        tracing::info!(
            export = export.name(),
            path = %export.backing().path().display(),
            size_bytes = export.size_bytes(),
            direct_io = export.backing().direct(),
            io_engine = export.backing().io_engine(),
            mode = export.mode().name(),
            cache_lines = export.cache().map_or(0, |c| c.capacity_lines()),
            cache_line_bytes = export.cache().map_or(0, |c| c.line_bytes()),
            seq_cutoff_bytes = export.seq_cutoff_bytes(),
            "export"
        );
    }
}

/// At stop: writes a DRAM cache's dirty lines back (they would die with the process), flushes
/// every export and closes its cache.
fn stop_exports(exports: &Exports) {
    for export in exports.iter() {
        let volatile_dirty = export
            .cache()
            .is_some_and(|c| !c.persistent() && c.dirty_lines() > 0);
        if volatile_dirty {
            // A DRAM cache's dirty lines would die with the process.
            match export.clean_all() {
                Ok(lines) => tracing::info!(export = export.name(), lines, "written back"),
                Err(err) => tracing::error!(
                    export = export.name(),
                    error = %err.0,
                    "writing dirty lines back at stop failed: they are lost"
                ),
            }
        }
        if let Err(err) = export.flush() {
            tracing::error!(export = export.name(), error = %err.0, "flush at stop failed");
        }
        if let Some(cache) = export.cache() {
            if let Err(err) = cache.close() {
                tracing::error!(export = export.name(), %err, "closing the cache pool failed");
            }
            tracing::info!("cache lines at stop: {}", admin::stats_line(export));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{parse_size, BlockOptions, StartError};

    fn with_file(text: &str, flags: BlockOptions) -> Result<BlockOptions, StartError> {
        let path = std::env::temp_dir().join(format!(
            "strata-block-config-{}-{}",
            std::process::id(),
            text.len()
        ));
        std::fs::write(&path, text).unwrap();
        let merged = BlockOptions {
            config: Some(path.clone()),
            ..flags
        }
        .with_config_file();
        let _ = std::fs::remove_file(&path);
        merged
    }

    #[test]
    fn the_file_s_block_table_fills_in_what_the_flags_leave_out() {
        let file = r#"
[block]
export = ["disk=/tmp/a.img", "two=/tmp/b.img"]
mode = "wa"
cache-size = "1GiB"
promote-after = 2
nbd-listen = ["unix:/tmp/s.sock"]
"#;
        let flags = BlockOptions {
            mode: Some("wi".into()),
            nbd_listen: vec!["127.0.0.1:0".into()],
            ..BlockOptions::default()
        };
        let merged = with_file(file, flags).unwrap();
        assert_eq!(merged.exports, ["disk=/tmp/a.img", "two=/tmp/b.img"]);
        assert_eq!(merged.mode.as_deref(), Some("wi"), "the flag wins");
        assert_eq!(merged.cache_size.as_deref(), Some("1GiB"));
        assert_eq!(merged.promote_after, Some(2));
        assert_eq!(
            merged.nbd_listen,
            ["127.0.0.1:0"],
            "a list on the command line replaces the file's"
        );
    }

    #[test]
    fn an_unknown_key_or_a_wrong_type_is_refused_with_its_name() {
        for (text, says) in [
            ("[block]\ncache-sise = \"1GiB\"\n", "cache-sise"),
            ("[block]\npromote-after = \"two\"\n", "promote-after"),
            ("[blocks]\nmode = \"wt\"\n", "blocks"),
        ] {
            let err = with_file(text, BlockOptions::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains(says), "{text}: {err}");
        }
    }

    #[test]
    fn sizes_mean_what_they_mean_to_strata_serve() {
        for text in ["4096", "4KiB", "64k", "64kb", "1GiB", "2G", "16MiB"] {
            assert_eq!(
                parse_size(text),
                text.parse::<strata_pool::ByteSize>().ok().map(|s| s.0)
            );
        }
        assert_eq!(
            parse_size("64k"),
            Some(64_000),
            "k is 1000, as in Redis and strata serve"
        );
        assert_eq!(parse_size("4KiB"), Some(4096));
        for bad in ["", "KiB", "1.5GiB", "-1", "1XB", "99999999999999999999T"] {
            assert_eq!(parse_size(bad), None, "{bad}");
        }
    }
}
