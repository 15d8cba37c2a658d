//! An export: a name, a backing store and the cache mode between them (Open CAS's modes):
//! - `pt` pass-through: every request goes to the backing store;
//! - `wt` write-through: reads fill the cache, writes go to the store and then to the cache;
//! - `wa` write-around: writes go to the store and update only lines already cached;
//! - `wi` write-invalidate: writes go to the store and invalidate the lines they cover;
//! - `wb` write-back: writes go to the cache as dirty lines, which reach the store later (the
//!   cleaner, a flush, a switch out of write-back, or a write that needs room).
//!
//! In the write-through modes the store holds each acknowledged write before the reply, so
//! losing the cache loses nothing. In write-back a write is acknowledged (NBD's rule: FUA, or a
//! later FLUSH returned) once its line is durable in the cache's pool; in a DRAM cache, once it
//! is durable in the store (a FLUSH writes every dirty line back).
//!
//! Writes take a gate shared; a mode switch, and in write-back a trim or a write of zeroes (which
//! go to the store around the cache), take it alone, so no write of one mode runs beside another
//! mode's or beside a store change the cache did not see.

use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use strata_pool::MediumError;

use crate::backing::Backing;
use crate::cache::{Cache, CleanScope, DirtyWriteError, WriteTicket};
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
    /// Write-back.
    WriteBack,
}

impl Mode {
    /// `pt`, `wt`, `wa`, `wi`, `wb`.
    pub fn parse(text: &str) -> Option<Mode> {
        Some(match text {
            "wb" => Mode::WriteBack,
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
            Mode::WriteBack => 4,
        }
    }

    fn from_code(code: u8) -> Mode {
        match code {
            1 => Mode::WriteThrough,
            2 => Mode::WriteAround,
            3 => Mode::WriteInvalidate,
            4 => Mode::WriteBack,
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
            Mode::WriteBack => "wb",
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
    /// Taken shared by writes, alone by mode switches and write-back's store changes.
    gate: RwLock<()>,
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
            gate: RwLock::new(()),
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
    /// so a later switch back finds no stale line; a switch out of write-back first writes every
    /// dirty line back (with writes held). An export started without a cache can only stay in
    /// pass-through.
    pub fn set_mode(&self, mode: Mode) -> Result<Mode, String> {
        if mode != Mode::PassThrough && self.cache.is_none() {
            return Err(format!(
                "export {} started in pass-through, without a cache: give --cache-size at start",
                self.name
            ));
        }
        let _alone = self.gate_alone();
        self.switch_with_writes_held(mode)
    }

    /// [`Export::set_mode`] with the gate held alone.
    fn switch_with_writes_held(&self, mode: Mode) -> Result<Mode, String> {
        let previous = self.mode();
        if previous == Mode::WriteBack && mode != Mode::WriteBack {
            let cleaned = self
                .clean_all()
                .map_err(|e| format!("writing dirty lines back before the switch: {}", e.0))?;
            tracing::info!(
                export = self.name,
                lines = cleaned,
                "dirty lines written back before leaving write-back"
            );
        }
        Ok(Mode::from_code(
            self.mode.swap(mode.code(), Ordering::AcqRel),
        ))
    }

    /// Detaches the cache: every dirty line written back, the export switched to pass-through,
    /// every cached line dropped (a pool's entries emptied, then persisted). A switch to a
    /// cache mode later starts the cache cold. Returns the lines dropped.
    pub fn detach(&self) -> Result<usize, String> {
        let Some(cache) = &self.cache else {
            return Err(format!("export {} has no cache", self.name));
        };
        let _alone = self.gate_alone();
        self.switch_with_writes_held(Mode::PassThrough)?;
        let dropped = cache.drop_clean_lines();
        cache
            .persist_pool()
            .map_err(|e| format!("persisting the emptied cache: {e}"))?;
        tracing::info!(export = self.name, lines = dropped, "cache detached");
        Ok(dropped)
    }

    /// Writes every dirty line back to the store, durably (an explicit flush, a switch out of
    /// write-back, a stop with a DRAM cache): the lines written back.
    pub fn clean_all(&self) -> Result<usize, IoFailure> {
        let Some(cache) = &self.cache else {
            return Ok(0);
        };
        let line = cache.line_bytes() as u64;
        Ok(cache.clean_all(
            &|line_no, bytes| self.backing.write_at(line_no * line, bytes),
            &|| self.backing.flush(),
        )?)
    }

    /// Writes back up to `max` of the least recently written dirty lines written before
    /// `before` (the cleaner): the lines written back.
    pub fn clean_oldest(
        &self,
        max: usize,
        before: Option<std::time::Instant>,
    ) -> Result<usize, IoFailure> {
        self.clean_scope(&CleanScope::Oldest {
            shard: None,
            max,
            before,
        })
    }

    fn clean_scope(&self, scope: &CleanScope) -> Result<usize, IoFailure> {
        let Some(cache) = &self.cache else {
            return Ok(0);
        };
        let line = cache.line_bytes() as u64;
        Ok(cache.clean(
            scope,
            &|line_no, bytes| self.backing.write_at(line_no * line, bytes),
            &|| self.backing.flush(),
        )?)
    }

    fn gate_shared(&self) -> RwLockReadGuard<'_, ()> {
        self.gate.read().unwrap_or_else(|e| e.into_inner())
    }

    fn gate_alone(&self) -> RwLockWriteGuard<'_, ()> {
        self.gate.write().unwrap_or_else(|e| e.into_inner())
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
    /// the sequential cut-off: the lines are only invalidated; write-back keeps them anyway,
    /// as its cache may hold the only copy of a line's other bytes).
    pub fn write_with(
        &self,
        offset: u64,
        data: &[u8],
        fua: bool,
        keep: bool,
    ) -> Result<(), IoFailure> {
        let _shared = self.gate_shared();
        if let Some(cache) = self
            .cache
            .as_ref()
            .filter(|_| self.mode() == Mode::WriteBack)
        {
            return self.write_back(cache, offset, data, fua);
        }
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

    /// Write-back: each line the write covers takes its bytes as a new dirty version (cleaning
    /// lines of its shard first when every slot there is dirty); the store's tail past the last
    /// whole line is written directly. `fua`: the lines are persisted in the pool (written back
    /// to the store, for a DRAM cache) before this returns.
    fn write_back(
        &self,
        cache: &Cache,
        offset: u64,
        data: &[u8],
        fua: bool,
    ) -> Result<(), IoFailure> {
        let (cached_end, line) = self.cached_span(cache);
        let end = offset + data.len() as u64;
        let durable_in_pool = fua && cache.persistent();
        for (line_no, in_line, at, part) in line_parts(offset, data, line, cached_end) {
            loop {
                let mut read_line = |out: &mut [u8]| self.backing.read_at(line_no * line, out);
                match cache.write_dirty(line_no, in_line, part, durable_in_pool, &mut read_line) {
                    Ok(()) => break,
                    Err(DirtyWriteError::NoRoom(shard)) => {
                        cache.counters.room_waits.fetch_add(1, Ordering::Relaxed);
                        self.clean_scope(&CleanScope::Oldest {
                            shard: Some(shard),
                            max: 16,
                            before: None,
                        })?;
                    }
                    Err(DirtyWriteError::NoSlots) => {
                        self.backing.write_at(at, part)?;
                        break;
                    }
                    Err(DirtyWriteError::Store(err)) => return Err(err.into()),
                }
            }
        }
        if end > cached_end {
            let from = offset.max(cached_end);
            self.backing
                .write_at(from, &data[(from - offset) as usize..])?;
        }
        if fua {
            if !cache.persistent() && offset < cached_end {
                let lines = offset / line..end.min(cached_end).div_ceil(line);
                self.clean_scope(&CleanScope::Lines(lines))?;
            }
            self.backing.flush()?;
        }
        Ok(())
    }

    /// A write-back write done at once if it needs nothing but the cache (every line it covers
    /// whole or cached, a free slot for each, not FUA, inside the cached lines, no mode switch
    /// under way): the connection's reader runs it without handing it to a worker. False when
    /// it could not (some of its lines may be written: a retry by [`Export::write_with`] writes
    /// the same bytes again).
    pub fn write_back_without_waiting(&self, offset: u64, data: &[u8]) -> bool {
        let Some(cache) = &self.cache else {
            return false;
        };
        let Ok(_shared) = self.gate.try_read() else {
            return false;
        };
        if self.mode() != Mode::WriteBack {
            return false;
        }
        let (cached_end, line) = self.cached_span(cache);
        let Some(end) = offset.checked_add(data.len() as u64) else {
            return false;
        };
        if end > cached_end || data.is_empty() {
            return false;
        }
        let mut not_cached = |_: &mut [u8]| {
            Err(MediumError::Io {
                op: "read",
                path: "(not waited for)".into(),
                message: String::new(),
                os_error: None,
            })
        };
        for (line_no, in_line, _, part) in line_parts(offset, data, line, end) {
            if cache
                .write_dirty(line_no, in_line, part, false, &mut not_cached)
                .is_err()
            {
                return false;
            }
        }
        true
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
                // Write-back's writes do not come here; its trims and zeroes do.
                Mode::WriteInvalidate | Mode::PassThrough | Mode::WriteBack => None,
            };
            cache.write_ends(ticket, keep);
        }
    }

    /// Makes every completed write durable: the store's, and in write-back the dirty lines (a
    /// settle of the pool; in DRAM, every line dirty now is written back).
    pub fn flush(&self) -> Result<(), IoFailure> {
        self.backing.flush()?;
        if let Some(cache) = &self.cache {
            if cache.persistent() {
                cache.settle()?;
            } else {
                self.clean_all()?;
            }
        }
        Ok(())
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
        // The mode is read with the gate held (a switch takes it alone).
        let mut shared = Some(self.gate_shared());
        let mut _alone = None;
        if let Some(cache) = self
            .cache
            .as_ref()
            .filter(|_| self.mode() == Mode::WriteBack)
        {
            // Alone: no write may dirty a line of the range between its write-back and the
            // store's change.
            shared = None;
            _alone = Some(self.gate_alone());
            let (cached_end, line) = self.cached_span(cache);
            let end = (offset + len).min(cached_end);
            if offset < end {
                let lines = offset / line..end.div_ceil(line);
                while self.clean_scope(&CleanScope::Lines(lines.clone()))? > 0 {}
            }
        }
        let _shared = shared;
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

/// The pieces of a write of `data` at `offset` up to `until` (exclusive), one per line of
/// `line_bytes`: (line number, offset in the line, offset in the store, bytes).
fn line_parts(
    offset: u64,
    data: &[u8],
    line_bytes: u64,
    until: u64,
) -> impl Iterator<Item = (u64, usize, u64, &[u8])> {
    let end = (offset + data.len() as u64).min(until);
    let mut at = offset;
    std::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let line_no = at / line_bytes;
        let line_start = line_no * line_bytes;
        let to = (line_start + line_bytes).min(end);
        let part = &data[(at - offset) as usize..(to - offset) as usize];
        let piece = (line_no, (at - line_start) as usize, at, part);
        at = to;
        Some(piece)
    })
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
