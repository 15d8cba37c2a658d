//! The slow log (Redis's `SLOWLOG`): commands that ran for at least
//! `slowlog-log-slower-than` microseconds (10,000 by default; 0 logs every command, a negative
//! value none), the newest `slowlog-max-len` (128) kept. Both are set with `--slowlog-*` at
//! start and with `CONFIG SET` at run time. As in Redis, an entry keeps at most 32 arguments
//! (the last saying how many more there were) of at most 128 bytes each (the rest counted),
//! so a slow `MSET` of huge values costs the log a few kilobytes at most; `AUTH` and `HELLO`
//! are never logged (their arguments hold passwords).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

/// Default `slowlog-log-slower-than`, in microseconds (Redis's).
pub const SLOWER_THAN_US_DEFAULT: i64 = 10_000;
/// Default `slowlog-max-len` (Redis's).
pub const MAX_LEN_DEFAULT: usize = 128;
/// Most arguments an entry keeps (Redis's `SLOWLOG_ENTRY_MAX_ARGC`).
pub const ENTRY_ARGS_MAX: usize = 32;
/// Most bytes of one argument an entry keeps (Redis's `SLOWLOG_ENTRY_MAX_STRING`).
pub const ENTRY_ARG_BYTES_MAX: usize = 128;

/// One slow command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Unique, increasing from 0 (a reset does not restart it).
    pub id: u64,
    /// When it started, Unix seconds.
    pub unix_secs: u64,
    /// How long it ran, microseconds.
    pub duration_us: u64,
    /// The command and its arguments, shortened as the module says.
    pub args: Vec<Vec<u8>>,
    /// The client's address (empty when unknown).
    pub client_addr: String,
    /// The client's name (`CLIENT SETNAME`; empty when none).
    pub client_name: Vec<u8>,
}

/// The log, shared by every worker.
#[derive(Debug)]
pub struct SlowLog {
    entries: Mutex<VecDeque<Entry>>,
    next_id: AtomicU64,
    slower_than_us: AtomicI64,
    max_len: AtomicUsize,
}

impl SlowLog {
    /// A log with these settings.
    pub fn new(slower_than_us: i64, max_len: usize) -> Self {
        SlowLog {
            entries: Mutex::new(VecDeque::new()),
            next_id: AtomicU64::new(0),
            slower_than_us: AtomicI64::new(slower_than_us),
            max_len: AtomicUsize::new(max_len),
        }
    }

    /// `slowlog-log-slower-than`, microseconds.
    pub fn slower_than_us(&self) -> i64 {
        self.slower_than_us.load(Ordering::Relaxed)
    }

    /// Sets `slowlog-log-slower-than`.
    pub fn set_slower_than_us(&self, us: i64) {
        self.slower_than_us.store(us, Ordering::Relaxed);
    }

    /// `slowlog-max-len`.
    pub fn max_len(&self) -> usize {
        self.max_len.load(Ordering::Relaxed)
    }

    /// Sets `slowlog-max-len`, dropping the oldest entries past it.
    pub fn set_max_len(&self, len: usize) {
        self.max_len.store(len, Ordering::Relaxed);
        let mut entries = self.entries.lock();
        while entries.len() > len {
            entries.pop_back();
        }
    }

    /// Whether a command that ran `duration_us` is logged.
    pub fn is_slow(&self, duration_us: u64) -> bool {
        let threshold = self.slower_than_us();
        threshold >= 0 && duration_us >= threshold.unsigned_abs()
    }

    /// Logs a command (`args` as sent), newest first, keeping at most `max_len`.
    pub fn push<'a>(
        &self,
        args: impl ExactSizeIterator<Item = &'a [u8]>,
        unix_secs: u64,
        duration_us: u64,
        client_addr: Option<SocketAddr>,
        client_name: &[u8],
    ) {
        let argc = args.len();
        let kept = if argc > ENTRY_ARGS_MAX {
            ENTRY_ARGS_MAX - 1
        } else {
            argc
        };
        let mut stored: Vec<Vec<u8>> = args.take(kept).map(shortened).collect();
        if argc > kept {
            stored.push(format!("... ({} more arguments)", argc - kept).into_bytes());
        }
        let entry = Entry {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            unix_secs,
            duration_us,
            args: stored,
            client_addr: client_addr.map(|a| a.to_string()).unwrap_or_default(),
            client_name: client_name.to_vec(),
        };
        let max_len = self.max_len();
        let mut entries = self.entries.lock();
        entries.push_front(entry);
        while entries.len() > max_len {
            entries.pop_back();
        }
    }

    /// The newest `count` entries (all for `None`), newest first.
    pub fn newest(&self, count: Option<usize>) -> Vec<Entry> {
        let entries = self.entries.lock();
        let count = count.unwrap_or(entries.len()).min(entries.len());
        entries.iter().take(count).cloned().collect()
    }

    /// How many entries the log holds.
    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    /// Whether the log is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Empties the log.
    pub fn reset(&self) {
        self.entries.lock().clear();
    }
}

/// An argument as an entry keeps it: whole up to [`ENTRY_ARG_BYTES_MAX`] bytes, else that many
/// and how many more there were.
fn shortened(arg: &[u8]) -> Vec<u8> {
    if arg.len() <= ENTRY_ARG_BYTES_MAX {
        return arg.to_vec();
    }
    let mut out = arg[..ENTRY_ARG_BYTES_MAX].to_vec();
    out.extend_from_slice(
        format!("... ({} more bytes)", arg.len() - ENTRY_ARG_BYTES_MAX).as_bytes(),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_newest_first_bounded_and_shortened() {
        let log = SlowLog::new(0, 2);
        let long = vec![b'x'; 200];
        for i in 0..3u64 {
            let args: Vec<&[u8]> = vec![b"set", b"k", &long];
            log.push(args.into_iter(), i, 10 + i, None, b"");
        }
        let entries = log.newest(None);
        assert_eq!(entries.len(), 2, "max_len keeps the newest");
        assert_eq!((entries[0].id, entries[1].id), (2, 1));
        assert_eq!(entries[0].args[2].len(), 128 + "... (72 more bytes)".len());
        assert!(entries[0].args[2].ends_with(b"... (72 more bytes)"));
        let many: Vec<Vec<u8>> = (0..40).map(|i| format!("a{i}").into_bytes()).collect();
        log.push(many.iter().map(Vec::as_slice), 0, 1, None, b"");
        let entry = &log.newest(Some(1))[0];
        assert_eq!(entry.args.len(), 32);
        assert_eq!(entry.args[31], b"... (9 more arguments)");
        log.set_max_len(1);
        assert_eq!(log.len(), 1);
        log.reset();
        assert!(log.is_empty());
        assert_eq!(log.newest(None), Vec::new());
    }

    #[test]
    fn the_threshold_follows_redis() {
        let log = SlowLog::new(10_000, 128);
        assert!(!log.is_slow(9_999));
        assert!(log.is_slow(10_000));
        log.set_slower_than_us(0);
        assert!(log.is_slow(0));
        log.set_slower_than_us(-1);
        assert!(!log.is_slow(u64::MAX));
    }
}
