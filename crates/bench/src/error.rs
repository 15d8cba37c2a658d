//! The one error type of the load generator and the comparison runner.

use std::io;
use std::path::PathBuf;

/// What can stop a benchmark run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// The arguments or a scenario file describe an impossible workload; fix them and rerun.
    #[error("invalid benchmark configuration: {0}")]
    Config(String),
    /// Could not connect to the target; check that the server is running and the address.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// The target address.
        addr: String,
        /// The socket error.
        source: io::Error,
    },
    /// The server closed a connection or sent bytes that are not a valid response.
    #[error("protocol failure on a connection to {addr}: {detail}")]
    Protocol {
        /// The target address.
        addr: String,
        /// What was wrong.
        detail: String,
    },
    /// Responses stopped arriving before the drain deadline.
    #[error("{outstanding} requests still unanswered {drain_secs} s after the run ended")]
    Stalled {
        /// Requests sent but never answered.
        outstanding: u64,
        /// How long the generator waited.
        drain_secs: u64,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    File {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// A server needed by the comparison could not be started.
    #[error("cannot start {server}: {detail}")]
    Server {
        /// The server's name.
        server: String,
        /// What went wrong, with a hint.
        detail: String,
    },
    /// Any other I/O error (sockets, the event loop, /proc).
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
}
