//! An export: a name, a backing store and the cache mode between them (Open CAS's modes):
//! - `pt` pass-through: every request goes to the backing store;
//! - `wt` write-through: reads fill the cache, writes go to the store and then to the cache;
//! - `wa` write-around: writes go to the store and update only lines already cached;
//! - `wi` write-invalidate: writes go to the store and invalidate the lines they cover.
//!
//! In every mode the store holds each acknowledged write before the reply, so losing the cache
//! loses nothing. Write-back, where the cache holds dirty lines in its pool, is the next step
//! of issue 12.

use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use strata_pool::MediumError;

use crate::backing::Backing;
use crate::cache::{Cache, WriteTicket};
use crate::nbd;

/// How an export uses its cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// No cache.
    PassThrough,
    /// Write-through.
    WriteThrough,
    /// Write-around.
    WriteAround,
    /// Write-invalidate.
    WriteInvalidate,
}

impl Mode {
    /// `pt`, `wt`, `wa`, `wi`.
    pub fn parse(text: &str) -> Option<Mode> {
        Some(match text {
            "pt" => Mode::PassThrough,
            "wt" => Mode::WriteThrough,
            "wa" => Mode::WriteAround,
            "wi" => Mode::WriteInvalidate,
            _ => return None,
        })
    }

    fn code(self) -> u8 {
        match self {
            Mode::PassThrough => 0,
            Mode::WriteThrough => 1,
            Mode::WriteAround => 2,
            Mode::WriteInvalidate => 3,
        }
    }

    fn from_code(code: u8) -> Mode {
        match code {
            1 => Mode::WriteThrough,
            2 => Mode::WriteAround,
            3 => Mode::WriteInvalidate,
            _ => Mode::PassThrough,
        }
    }

    /// The flag's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Mode::PassThrough => "pt",
            Mode::WriteThrough => "wt",
            Mode::WriteAround => "wa",
            Mode::WriteInvalidate => "wi",
        }
    }
}

/// A failed request's cause.
#[derive(Debug)]
pub struct IoFailure(pub MediumError);

impl From<MediumError> for IoFailure {
    fn from(err: MediumError) -> Self {
        IoFailure(err)
    }
}

impl IoFailure {
    /// The NBD error value for it: a full disk (a sparse backing file) is `ENOSPC`, a read-only
    /// one `EPERM`, anything else `EIO`.
    pub fn nbd_error(&self) -> u32 {
        match self.0 {
            MediumError::Io {
                os_error: Some(libc::ENOSPC | libc::EDQUOT | libc::EFBIG),
                ..
            } => nbd::ENOSPC,
            MediumError::Io {
                os_error: Some(libc::EROFS | libc::EPERM | libc::EACCES),
                ..
            } => nbd::EPERM,
            _ => nbd::EIO,
        }
    }
}

/// One export.
#[derive(Debug)]
pub struct Export {
    name: String,
    backing: Backing,
    /// The current [`Mode`] (switchable at runtime).
    mode: AtomicU8,
    /// `None` when the export started in pass-through (it can then not switch to a cache mode).
    cache: Option<Cache>,
    /// A connection's run of consecutive bytes longer than this bypasses the cache (0: never).
    seq_cutoff_bytes: u64,
}

impl Export {
    /// Opens the backing store at `path` as export `name`, with `cache` (unused in
    /// pass-through until a switch to another mode) in `mode`.
    pub fn open(
        name: &str,
        path: &Path,
        mode: Mode,
        cache: Option<Cache>,
    ) -> Result<Export, String> {
        Export::new(name, Backing::open(path)?, mode, cache)
    }

    /// [`Export::open`] with the backing store opened already (a cache pool is made for it).
    pub fn new(
        name: &str,
        backing: Backing,
        mode: Mode,
        cache: Option<Cache>,
    ) -> Result<Export, String> {
        if mode != Mode::PassThrough && cache.is_none() {
            return Err(format!("export {name}: mode {} needs a cache", mode.name()));
        }
        Ok(Export {
            name: name.to_string(),
            backing,
            mode: AtomicU8::new(mode.code()),
            cache,
            seq_cutoff_bytes: 0,
        })
    }

    /// Sets the sequential cut-off: once a connection has read or written more than `bytes`
    /// consecutive bytes, its further requests of that stream bypass the cache (Open CAS's
    /// idea: a large sequential stream would only push the working set out). 0: never.
    pub fn with_seq_cutoff(mut self, bytes: u64) -> Export {
        self.seq_cutoff_bytes = bytes;
        self
    }

    /// The sequential cut-off, bytes (0: none).
    pub fn seq_cutoff_bytes(&self) -> u64 {
        self.seq_cutoff_bytes
    }

    /// The cache mode.
    pub fn mode(&self) -> Mode {
        Mode::from_code(self.mode.load(Ordering::Acquire))
    }

    /// Switches the cache mode; returns the previous one. Any switch keeps the cache consistent
    /// with the store: every mode, pass-through included, invalidates the lines a write covers,
    /// so a later switch back finds no stale line. An export started without a cache can only
    /// stay in pass-through.
    pub fn set_mode(&self, mode: Mode) -> Result<Mode, String> {
        if mode != Mode::PassThrough && self.cache.is_none() {
            return Err(format!(
                "export {} started in pass-through, without a cache: give --cache-size at start",
                self.name
            ));
        }
        Ok(Mode::from_code(
            self.mode.swap(mode.code(), Ordering::AcqRel),
        ))
    }

    /// The cache (`None` in pass-through).
    pub fn cache(&self) -> Option<&Cache> {
        self.cache.as_ref()
    }

    /// The export's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its size in bytes (the backing store's).
    pub fn size_bytes(&self) -> u64 {
        self.backing.size_bytes()
    }

    /// The backing store.
    pub fn backing(&self) -> &Backing {
        &self.backing
    }

    /// What the export supports, as NBD transmission flags. Multi-connection is safe: there is
    /// no per-connection state, and a flush reaches every connection's writes.
    pub fn transmission_flags(&self) -> u16 {
        nbd::TFLAG_HAS_FLAGS
            | nbd::TFLAG_SEND_FLUSH
            | nbd::TFLAG_SEND_FUA
            | nbd::TFLAG_SEND_TRIM
            | nbd::TFLAG_SEND_WRITE_ZEROES
            | nbd::TFLAG_CAN_MULTI_CONN
            | nbd::TFLAG_SEND_CACHE
    }

    /// Bytes of the store held in whole lines (the cacheable part), and the line size.
    fn cached_span(&self, cache: &Cache) -> (u64, u64) {
        let line = cache.line_bytes() as u64;
        (self.size_bytes() / line * line, line)
    }

    /// Reads `out.len()` bytes at `offset` (a range the caller checked): cached lines from the
    /// cache, each run of missing lines with one read of the store (which then fills them).
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), IoFailure> {
        self.read_with(offset, out, true)
    }

    /// [`Export::read`]; `fill`: misses fill the cache (false past the sequential cut-off:
    /// cached lines are still served, missing ones read from the store and left out).
    pub fn read_with(&self, offset: u64, out: &mut [u8], fill: bool) -> Result<(), IoFailure> {
        let Some(cache) = self
            .cache
            .as_ref()
            .filter(|_| self.mode() != Mode::PassThrough)
        else {
            return Ok(self.backing.read_at(offset, out)?);
        };
        let (cached_end, line) = self.cached_span(cache);
        let end = offset + out.len() as u64;
        let mut scratch = vec![0u8; line as usize];
        // Misses waiting to be read: (first line, generation of each).
        let mut run: Option<(u64, Vec<u64>)> = None;
        let mut at = offset;
        while at < end.min(cached_end) {
            let line_no = at / line;
            match cache.read(line_no, &mut scratch) {
                Ok(()) => {
                    if let Some((first, generations)) = run.take() {
                        self.read_missed(cache, first, &generations, offset, out, fill)?;
                    }
                    copy_part(&scratch, line_no * line, offset, out);
                }
                Err(generation) => match &mut run {
                    Some((_, generations)) => generations.push(generation),
                    None => run = Some((line_no, vec![generation])),
                },
            }
            at = (line_no + 1) * line;
        }
        if let Some((first, generations)) = run {
            self.read_missed(cache, first, &generations, offset, out, fill)?;
        }
        if end > cached_end {
            // The store's tail, shorter than a line: never cached.
            let from = offset.max(cached_end);
            let skip = (from - offset) as usize;
            self.backing.read_at(from, &mut out[skip..])?;
        }
        Ok(())
    }

    /// Reads `out.len()` bytes at `offset` (a range the caller checked) if the cache holds
    /// every line of it; false (and `out` unspecified) otherwise, counting no miss.
    pub fn read_cached(&self, offset: u64, out: &mut [u8]) -> bool {
        let Some(cache) = self
            .cache
            .as_ref()
            .filter(|_| self.mode() != Mode::PassThrough)
        else {
            return false;
        };
        let (cached_end, line) = self.cached_span(cache);
        let end = offset + out.len() as u64;
        if end > cached_end {
            return false;
        }
        // Every line first (so a read that will miss counts no hits here); then the copies.
        let lines = offset / line..end.div_ceil(line);
        if !lines.clone().all(|line_no| cache.holds(line_no)) {
            return false;
        }
        let mut at = offset;
        while at < end {
            let line_no = at / line;
            if !cache.read_part(line_no, line_no * line, offset, out) {
                return false;
            }
            at = (line_no + 1) * line;
        }
        true
    }

    /// Reads missed lines `first..first + generations.len()` from the store in one read, fills
    /// them, and copies the part of each the request wants into `out` (which starts at
    /// `offset`).
    fn read_missed(
        &self,
        cache: &Cache,
        first: u64,
        generations: &[u64],
        offset: u64,
        out: &mut [u8],
        fill: bool,
    ) -> Result<(), IoFailure> {
        let line = cache.line_bytes();
        let mut lines = vec![0u8; line * generations.len()];
        self.backing.read_at(first * line as u64, &mut lines)?;
        for (i, (bytes, &generation)) in lines.chunks(line).zip(generations).enumerate() {
            let line_no = first + i as u64;
            if fill {
                cache.fill(line_no, bytes, generation);
            } else {
                cache
                    .counters
                    .seq_cutoff_bypasses
                    .fetch_add(1, Ordering::Relaxed);
            }
            copy_part(bytes, line_no * line as u64, offset, out);
        }
        Ok(())
    }

    /// Writes `data` at `offset`; `fua`: durable before this returns. With a cache, the lines
    /// written are invalidated first and take the new bytes, as the mode says, once the store
    /// has them (see `cache`).
    pub fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<(), IoFailure> {
        self.write_with(offset, data, fua, true)
    }

    /// [`Export::write`]; `keep`: the mode may keep the written bytes in the cache (false past
    /// the sequential cut-off: the lines are only invalidated).
    pub fn write_with(
        &self,
        offset: u64,
        data: &[u8],
        fua: bool,
        keep: bool,
    ) -> Result<(), IoFailure> {
        let tickets = self.writes_begin(offset, data.len() as u64);
        let result = self
            .backing
            .write_at(offset, data)
            .map_err(IoFailure::from)
            .and_then(|()| self.durable_if(fua));
        if !keep {
            if let Some(cache) = &self.cache {
                cache
                    .counters
                    .seq_cutoff_bypasses
                    .fetch_add(tickets.len() as u64, Ordering::Relaxed);
            }
        }
        self.writes_end(
            tickets,
            offset,
            result.is_ok().then_some(data).filter(|_| keep),
        );
        result
    }

    /// Starts a write of `len` bytes at `offset` on the cached lines it touches.
    fn writes_begin(&self, offset: u64, len: u64) -> Vec<WriteTicket> {
        let Some(cache) = &self.cache else {
            return Vec::new();
        };
        let (cached_end, line) = self.cached_span(cache);
        let end = (offset + len).min(cached_end);
        if offset >= end {
            return Vec::new();
        }
        (offset / line..end.div_ceil(line))
            .map(|line_no| cache.write_begins(line_no))
            .collect()
    }

    /// Ends a write: each whole line it covered takes its bytes (`data`, which starts at
    /// `offset`; `None` after a failure, or for zeroes and trims: invalidate) as the mode says.
    fn writes_end(&self, tickets: Vec<WriteTicket>, offset: u64, data: Option<&[u8]>) {
        let Some(cache) = &self.cache else {
            return;
        };
        let line = cache.line_bytes() as u64;
        for ticket in tickets {
            let start = ticket_line(&ticket, line);
            let whole = data.and_then(|data| {
                let end = offset + data.len() as u64;
                (start >= offset && start + line <= end).then(|| {
                    let from = (start - offset) as usize;
                    &data[from..from + line as usize]
                })
            });
            let keep = match self.mode() {
                Mode::WriteThrough => whole,
                Mode::WriteAround => whole.filter(|_| ticket.was_cached),
                Mode::WriteInvalidate | Mode::PassThrough => None,
            };
            cache.write_ends(ticket, keep);
        }
    }

    /// Makes every completed write durable.
    pub fn flush(&self) -> Result<(), IoFailure> {
        Ok(self.backing.flush()?)
    }

    /// The range is no longer needed (its cached lines are invalidated).
    pub fn trim(&self, offset: u64, len: u64, fua: bool) -> Result<(), IoFailure> {
        self.invalidating(offset, len, fua, || self.backing.trim(offset, len))
    }

    /// Zeroes the range (its cached lines are invalidated).
    pub fn write_zeroes(&self, offset: u64, len: u64, fua: bool) -> Result<(), IoFailure> {
        self.invalidating(offset, len, fua, || self.backing.write_zeroes(offset, len))
    }

    /// Runs `change` on the store's range with the cached lines it covers invalidated (as a
    /// write that keeps nothing in the cache), durable first if `fua`.
    fn invalidating(
        &self,
        offset: u64,
        len: u64,
        fua: bool,
        change: impl FnOnce() -> Result<(), MediumError>,
    ) -> Result<(), IoFailure> {
        let tickets = self.writes_begin(offset, len);
        let result = change()
            .map_err(IoFailure::from)
            .and_then(|()| self.durable_if(fua));
        self.writes_end(tickets, offset, None);
        result
    }

    fn durable_if(&self, fua: bool) -> Result<(), IoFailure> {
        if fua {
            self.flush()?;
        }
        Ok(())
    }
}

/// The server's exports, in the order given; the first is the default (the empty name).
#[derive(Debug, Default)]
pub struct Exports(Vec<Arc<Export>>);

impl Exports {
    /// Exports in order.
    pub fn new(exports: Vec<Export>) -> Exports {
        Exports(exports.into_iter().map(Arc::new).collect())
    }

    /// The export named `name`; the empty name is the first export.
    pub fn find(&self, name: &str) -> Option<Arc<Export>> {
        if name.is_empty() {
            return self.0.first().cloned();
        }
        self.0.iter().find(|e| e.name == name).cloned()
    }

    /// Every export.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Export>> {
        self.0.iter()
    }
}

/// The store offset of a ticket's line.
fn ticket_line(ticket: &WriteTicket, line_bytes: u64) -> u64 {
    ticket.line() * line_bytes
}

/// Copies the part of a line (at store offset `line_start`) that falls inside the request
/// `[offset, offset + out.len())` into `out`.
fn copy_part(line: &[u8], line_start: u64, offset: u64, out: &mut [u8]) {
    let end = offset + out.len() as u64;
    let from = line_start.max(offset);
    let to = (line_start + line.len() as u64).min(end);
    if from < to {
        let src = (from - line_start) as usize..(to - line_start) as usize;
        let dst = (from - offset) as usize..(to - offset) as usize;
        out[dst].copy_from_slice(&line[src]);
    }
}
