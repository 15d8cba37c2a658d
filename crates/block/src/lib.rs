//! `strata block`: serves block devices over NBD (issue 12). Each export is a backing store (a
//! file or block device, read and written with direct I/O) served to NBD clients (the kernel's
//! `nbd-client`, qemu, libnbd's tools, `nbdfuse`) over TCP or a Unix socket.
//!
//! So far every export is pass-through (`--mode pt`): the protocol, the backing store's I/O and
//! the bad-input handling the cache modes will build on. The cache itself (a strata pool in
//! front of the backing store: write-through, write-back, write-around, write-invalidate) is
//! the rest of issue 12.
//!
//! ```text
//!   listener (TCP, Unix) ─▶ thread per connection ─▶ handshake (nbd) ─▶ requests ─▶ Export ─▶ Backing
//! ```

pub mod backing;
pub mod export;
pub mod nbd;
pub mod server;

use std::net::TcpListener;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::Arc;

use export::{Export, Exports};
use server::Listener;

/// Default NBD listener: loopback, the IANA port.
pub const NBD_LISTEN_DEFAULT: &str = "127.0.0.1:10809";

/// `strata block`'s flags.
#[derive(clap::Args, Debug, Clone)]
pub struct BlockOptions {
    /// An export, `NAME=BACKING_PATH` (a file or block device); repeat for more. The first is
    /// also the default export (the empty name).
    #[arg(long = "export", value_name = "NAME=PATH", required = true)]
    pub exports: Vec<String>,
    /// Cache mode: `pt` (pass-through). The cache modes (`wt`, `wb`, `wa`, `wi`) are not built
    /// yet and are refused.
    #[arg(long, value_name = "MODE", default_value = "wt")]
    pub mode: String,
    /// Where to serve NBD: `unix:/path/to.sock` or `ADDR:PORT`; repeat for more [default:
    /// 127.0.0.1:10809].
    #[arg(long = "nbd-listen", value_name = "LISTEN")]
    pub nbd_listen: Vec<String>,
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
    listeners: Vec<(String, Listener)>,
    unix_paths: Vec<PathBuf>,
}

impl Block {
    /// Checks the flags, opens every backing store and binds every listener.
    pub fn start(options: &BlockOptions) -> Result<Block, StartError> {
        if options.mode != "pt" {
            return Err(StartError::Config(format!(
                "--mode {}: only pt (pass-through) is built so far; the cache modes (wt, wb, wa, \
                 wi) come with the cache",
                options.mode
            )));
        }
        let mut exports = Vec::new();
        for spec in &options.exports {
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
            if exports.iter().any(|e: &Export| e.name() == name) {
                return Err(StartError::Config(format!("--export {name}: given twice")));
            }
            let export = Export::open(name, path.as_ref()).map_err(|err| StartError::Io {
                what: format!("export {name}"),
                err,
            })?;
            if !export.backing().direct() {
                tracing::warn!(
                    export = name,
                    path,
                    "the file system does not take O_DIRECT: the backing store is read and \
                     written through the page cache"
                );
            }
            exports.push(export);
        }
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
        Ok(Block {
            exports: Arc::new(Exports::new(exports)),
            listeners,
            unix_paths,
        })
    }

    /// Serves until SIGTERM or SIGINT, then flushes every export and removes its Unix sockets.
    pub fn run(self) -> std::io::Result<()> {
        let mut signals = signal_hook::iterator::Signals::new([
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGINT,
        ])?;
        for export in self.exports.iter() {
            tracing::info!(
                export = export.name(),
                path = %export.backing().path().display(),
                size_bytes = export.size_bytes(),
                direct_io = export.backing().direct(),
                io_engine = export.backing().io_engine(),
                mode = "pt",
                "export"
            );
        }
        for (name, listener) in self.listeners {
            tracing::info!(nbd = %name, "listening");
            let exports = Arc::clone(&self.exports);
            std::thread::Builder::new()
                .name("strata-nbd-accept".into())
                .spawn(move || server::accept_loop(listener, exports))?;
        }
        let signal = signals.forever().next();
        tracing::info!(?signal, "stopping: flushing every export");
        for export in self.exports.iter() {
            if let Err(err) = export.flush() {
                tracing::error!(export = export.name(), error = %err.0, "flush at stop failed");
            }
        }
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
