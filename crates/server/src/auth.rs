//! Secrets: the memcached auth file (`--memcache-auth-file`, memcached's `-Y`) and the
//! constant-time comparison both protocols check passwords with.
//!
//! # The auth file
//!
//! One `user:password` entry per line, as memcached reads it (`authfile.c`): the user is what
//! comes before the first `:`, the password everything after it up to the line end (`\n`, or
//! `\r\n`); a password may hold further `:`. The file is read once, at startup, into memory
//! ([`Credentials`]); a change takes effect at the next start.
//!
//! strata refuses to start on a file memcached would load with surprises, naming the file and
//! the line, rather than run with credentials that cannot work:
//!
//! - An empty file (no entry): memcached starts and no client can authenticate; strata
//!   refuses.
//! - A line without `:`, a blank line too: both refuse (memcached: "malformed entry"); strata
//!   names the line.
//! - More than [`AUTH_ENTRIES_MAX`] entries: memcached keeps the first 8 and ignores the rest;
//!   strata refuses.
//! - A line over [`AUTH_ENTRY_LEN_MAX`] bytes: memcached splits it in two at 255 bytes; strata
//!   refuses.
//! - An empty user or password, or a space in either: memcached loads the entry, which can
//!   never match (a token is split on spaces); strata refuses.
//! - A NUL byte, or a `\r` not ending the line: memcached cuts the entry there; strata
//!   refuses.
//! - A last line without `\n`: memcached 1.6.18 drops its last byte (fixed in 1.6.32); strata
//!   reads it whole.
//!
//! # Comparing secrets
//!
//! [`constant_time_eq`] takes a time that depends on the lengths of the two inputs but not on
//! their contents, so a client cannot learn a password byte by byte from reply timings, and
//! [`Credentials::check`] compares every entry whichever matches. A dozen lines do this; the
//! `subtle` crate would add a dependency for the same loop.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Most entries in an auth file (memcached's `MAX_ENTRIES`: "Not supposed to be a huge
/// database!"). Authentication compares every entry, so its cost grows with this.
pub const AUTH_ENTRIES_MAX: usize = 8;
/// Longest entry, `user:password` without its line end: memcached reads a line with
/// `fgets` into 256 bytes, so 254 bytes and the `\n` (and the C string's NUL) fit.
pub const AUTH_ENTRY_LEN_MAX: usize = 254;
/// Largest auth file read: every entry at its longest with a `\r\n` line end. A larger file
/// cannot be valid, so it is refused without being read further.
pub const AUTH_FILE_BYTES_MAX: usize = AUTH_ENTRIES_MAX * (AUTH_ENTRY_LEN_MAX + 2);

/// Why an auth file was refused at startup. Each message names the file (and the line, where
/// there is one) and says what a valid file holds.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuthFileError {
    /// The file could not be opened or read.
    #[error(
        "cannot read the memcached auth file {path}: {source}; check the path and that strata \
         may read it"
    )]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Larger than any valid file.
    #[error(
        "the memcached auth file {path} is larger than {bytes_max} bytes, more than \
         {AUTH_ENTRIES_MAX} lines of user:password can be; is it the right file?"
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// [`AUTH_FILE_BYTES_MAX`].
        bytes_max: usize,
    },
    /// The file holds no entry, so no client could ever authenticate.
    #[error(
        "the memcached auth file {path} is empty: no client could authenticate; add a line \
         user:password"
    )]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// A line that is not a usable `user:password` entry.
    #[error(
        "the memcached auth file {path}, line {line}: {problem}; each line must be user:password"
    )]
    Malformed {
        /// The file.
        path: PathBuf,
        /// The line, counted from 1.
        line: usize,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// More entries than [`AUTH_ENTRIES_MAX`].
    #[error(
        "the memcached auth file {path}, line {line}: more than {entries_max} entries (memcached \
         ignores the rest, strata refuses them); keep at most {entries_max} users"
    )]
    TooManyEntries {
        /// The file.
        path: PathBuf,
        /// The first line over the limit.
        line: usize,
        /// [`AUTH_ENTRIES_MAX`].
        entries_max: usize,
    },
}

/// One `user:password` entry.
#[derive(Clone, PartialEq, Eq)]
struct Entry {
    user: Box<[u8]>,
    password: Box<[u8]>,
}

/// The entries of a memcached auth file, held in memory for the life of the server.
///
/// Invariants: 1 ..= [`AUTH_ENTRIES_MAX`] entries; every user and password is non-empty and
/// holds no space, NUL, `\r` or `\n` (so a client can send it as `user password`).
/// `Debug` shows the file and the number of entries, never a secret. `PartialEq` compares the
/// secrets in variable time: it serves configuration tests, never authentication.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    path: PathBuf,
    entries: Vec<Entry>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("path", &self.path)
            .field("entries", &self.entries.len())
            .finish()
    }
}

impl Credentials {
    /// Reads and checks the auth file at `path`.
    pub fn load(path: &Path) -> Result<Credentials, AuthFileError> {
        let unreadable = |source| AuthFileError::Unreadable {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::File::open(path).map_err(unreadable)?;
        let mut bytes = Vec::new();
        // One byte more than the limit tells a file at the limit from a larger one.
        file.take(AUTH_FILE_BYTES_MAX as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(unreadable)?;
        if bytes.len() > AUTH_FILE_BYTES_MAX {
            return Err(AuthFileError::TooLarge {
                path: path.to_path_buf(),
                bytes_max: AUTH_FILE_BYTES_MAX,
            });
        }
        Self::parse(path, &bytes)
    }

    /// Checks the contents of an auth file; `path` is only named in errors.
    pub fn parse(path: &Path, bytes: &[u8]) -> Result<Credentials, AuthFileError> {
        let malformed = |line, problem| AuthFileError::Malformed {
            path: path.to_path_buf(),
            line,
            problem,
        };
        // A final `\n` ends the last line; it does not start an empty one.
        let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        let mut entries = Vec::new();
        if body.is_empty() {
            return Err(AuthFileError::Empty {
                path: path.to_path_buf(),
            });
        }
        for (index, line) in body.split(|&b| b == b'\n').enumerate() {
            let number = index + 1;
            if entries.len() == AUTH_ENTRIES_MAX {
                return Err(AuthFileError::TooManyEntries {
                    path: path.to_path_buf(),
                    line: number,
                    entries_max: AUTH_ENTRIES_MAX,
                });
            }
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            entries.push(entry(line).map_err(|problem| malformed(number, problem))?);
        }
        assert!((1..=AUTH_ENTRIES_MAX).contains(&entries.len()));
        Ok(Credentials {
            path: path.to_path_buf(),
            entries,
        })
    }

    /// The file the entries came from (memcached's `stats settings` shows it).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many entries there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Never true: a file without entries is refused. (For clippy's `len_without_is_empty`.)
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether some entry has this user and password. Every entry is compared, in constant time
    /// for its lengths, whether or not an earlier one matched.
    pub fn check(&self, user: &[u8], password: &[u8]) -> bool {
        let mut matched = false;
        for entry in &self.entries {
            let user_eq = constant_time_eq(user, &entry.user);
            let password_eq = constant_time_eq(password, &entry.password);
            matched |= user_eq & password_eq;
        }
        matched
    }
}

/// One line's entry, or what is wrong with it.
fn entry(line: &[u8]) -> Result<Entry, &'static str> {
    if line.is_empty() {
        return Err("empty line");
    }
    if line.len() > AUTH_ENTRY_LEN_MAX {
        return Err("longer than 254 bytes (memcached reads at most 254 and the newline)");
    }
    if line.contains(&0) {
        return Err("a NUL byte, which memcached takes as the end of the line");
    }
    if line.contains(&b'\r') {
        return Err("a carriage return inside the line, which memcached takes as its end");
    }
    let colon = line
        .iter()
        .position(|&b| b == b':')
        .ok_or("no ':' between the user and the password")?;
    let (user, password) = (&line[..colon], &line[colon + 1..]);
    if user.is_empty() || password.is_empty() {
        return Err("an empty user or password, with which no client can authenticate");
    }
    if line.contains(&b' ') {
        return Err(
            "a space in the user or password, which a client cannot send: the authentication \
             token is split on spaces",
        );
    }
    Ok(Entry {
        user: user.into(),
        password: password.into(),
    })
}

/// Whether `given` equals `secret`, in a time that depends on both lengths but not on the
/// bytes: every byte of `secret` is compared, and differences are gathered without a branch.
pub fn constant_time_eq(given: &[u8], secret: &[u8]) -> bool {
    let mut difference = u8::from(given.len() != secret.len());
    for (at, &byte) in secret.iter().enumerate() {
        // A missing byte compares as 0; the length difference already counts.
        let offered = given.get(at).copied().unwrap_or(0);
        // `black_box` keeps the optimiser from ending the loop once a difference is found.
        difference = std::hint::black_box(difference | (byte ^ offered));
    }
    difference == 0
}

#[cfg(test)]
mod tests;
