//! Errors the pool reports. Every variant says what is wrong and what the operator can do.

use std::path::PathBuf;

/// Why a pool could not be created or opened.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum PoolError {
    /// The requested geometry is outside what the format allows.
    #[error("invalid pool geometry: {reason}")]
    InvalidGeometry {
        /// What is out of range.
        reason: &'static str,
    },
    /// The file does not start with the strata magic: it is not a strata pool (or its first
    /// bytes were destroyed). strata never overwrites such a file; move it away or pass the
    /// explicit fresh-start option.
    #[error("not a strata pool (bad magic); refusing to overwrite it — remove the file or start fresh explicitly")]
    BadMagic,
    /// The pool was written by another format version.
    #[error("pool format version {found} is not supported by this build (it reads version {supported}); use a matching strata release or start fresh explicitly")]
    UnsupportedVersion {
        /// Version found in the file.
        found: u32,
        /// Version this build reads.
        supported: u32,
    },
    /// The file is shorter or longer than its header says.
    #[error("pool file is {found_bytes} bytes but its header describes {expected_bytes} bytes (truncated or extended); refusing to open it")]
    Truncated {
        /// Size the header implies.
        expected_bytes: u64,
        /// Size found.
        found_bytes: u64,
    },
    /// A checksum or a consistency check of the header failed.
    #[error("pool header is corrupt ({what}); refusing to open it — restore the file or start fresh explicitly")]
    HeaderCorrupt {
        /// Which check failed.
        what: &'static str,
    },
    /// The pool exists with another shape than the one configured.
    #[error("pool geometry mismatch: the file has {file_segment_count} segments of {file_segment_size_bytes} bytes, the configuration asks for {segment_count} of {segment_size_bytes}; use the old settings or start fresh explicitly")]
    GeometryMismatch {
        /// Segment size in the file.
        file_segment_size_bytes: u64,
        /// Segment count in the file.
        file_segment_count: u64,
        /// Configured segment size.
        segment_size_bytes: u64,
        /// Configured segment count.
        segment_count: u64,
    },
    /// Another process holds the pool open.
    #[error("pool {path} is in use by another process (its lock is held)")]
    Locked {
        /// The pool file.
        path: PathBuf,
    },
    /// The file system could not reserve the file's blocks: writing through the mapping later
    /// would kill the process (SIGBUS) the moment the file system filled up, so strata does not
    /// start on such a file.
    #[error("cannot reserve {bytes} bytes for {path} ({message}): free space on its file system, or choose a smaller size (--memory for a pool, --flash-size for a flash file)")]
    NoSpace {
        /// The file.
        path: PathBuf,
        /// Bytes to reserve.
        bytes: u64,
        /// The OS error text.
        message: String,
    },
    /// An operating-system call failed.
    #[error("{op} failed for {path}: {message}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file, or "(anonymous)".
        path: PathBuf,
        /// The OS error text.
        message: String,
    },
}

/// A persist (flush + fence, or msync) failed: the bytes may not be durable.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("persist of {len_bytes} bytes at pool offset {offset} failed: {message}")]
pub struct PersistError {
    /// Pool byte offset of the range.
    pub offset: u64,
    /// Length of the range.
    pub len_bytes: u64,
    /// The OS error, or "injected fault".
    pub message: String,
}
