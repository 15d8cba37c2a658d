//! The transaction log: what makes a group of writes all-or-nothing across a crash
//! ([`crate::Engine::atomically`]).
//!
//! Before a group's first write, the before-images of every key it may write (value, kind,
//! flags and expiry, or absence) are written to `<pool>.txlog`, marked *active*, and made
//! durable as the durability level makes writes durable. The group then writes through the
//! engine as usual; when it is done (and, under `interval` and `sync`, committed), the log is
//! marked *done*. An open that finds an active log puts every before-image back (a crash came
//! before the group ended, so its writes, whichever reached the pool, are undone) and marks it
//! done. A log torn while being written fails its checksum: the crash came before the group's
//! first write, and there is nothing to undo.
//!
//! ```text
//!  0          8         12       16        20         24              32      36     40
//!  +----------+---------+--------+---------+----------+---------------+-------+------+------+
//!  | STRATATX | version | state  | entries | group    | body_len u64  | crc32c| zero | body |
//!  |          | u32 = 2 | u32    | u32     | u32      |               | u32   | u32  |      |
//!  +----------+---------+--------+---------+----------+---------------+-------+------+------+
//!
//!  entry: | key_len u32 | key | state u8 | (if present:) kind u8 | client_flags u32 |
//!         | parts u32 | has_expiry u8 | expires_at_ms u64 | value_len u32 | value |
//!
//!  then, from byte 40 + body_len, appended entries, each:
//!         | entry_len u32 | group u32 | crc32c u32 | entry (as above) |
//! ```
//!
//! All integers little-endian. `state` is 1 (active) or 2 (done); the checksum covers every
//! byte from 0 to 36 except `state`, then the body, so marking the log done rewrites 4 bytes
//! and keeps it valid. `parts` is the item's part count (an owner's; 0 for a record that is
//! the whole item). An entry's `state` has bit 0 set when the key held an item (the rest
//! of the entry follows only then) and bit 1 when the key is a part's (its owner's key and
//! the part's number: `record`'s module docs) rather than an item's.
//!
//! An appended entry is the before-image of a key the group found it must write only once it
//! ran (a part of a large item: which ones a write touches is known only once the owner is
//! read), written, durably when the log is, before the group's first write to that key
//! ([`TxLog::append`]). Its checksum covers its `entry_len`, `group` and entry; `group`
//! numbers the log's groups (one more each time, from one more than the last the file held),
//! so the entries a longer earlier group left past this one's are not read as its own. The
//! appended entries end at the first that is torn, fails its checksum or names another group:
//! a crash during an append came before the write it guards.
//!
//! Version 1 (before parts) is read too: no `parts` field, no appended entries, `group` zero.
//!
//! A pool has one log per transaction running at once ([`TxLogs`]): `<pool>.txlog`, then
//! `<pool>.txlog.1`, `<pool>.txlog.2`, ..., each file made by the first group that uses its
//! lane (later lanes are used only while earlier ones are held), so logged
//! transactions on different shards write and sync their logs in parallel rather than one
//! after another. Transactions running together hold disjoint shards, so the active logs a
//! crash leaves name disjoint keys, and the open restores each.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::record::Kind;

const MAGIC: [u8; 8] = *b"STRATATX";
const VERSION: u32 = 2;
/// The format before parts (see the module docs), still read.
const VERSION_1: u32 = 1;
const STATE_ACTIVE: u32 = 1;
const STATE_DONE: u32 = 2;
const STATE_OFFSET: u64 = 12;
const HEADER_BYTES: usize = 40;
/// Bytes before an appended entry's entry.
const APPENDED_HEADER_BYTES: usize = 12;

/// A key's state before a group of writes: its item, or `None` when absent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    /// The key (a part's, its owner's key and the part's number, when `part`).
    pub key: Vec<u8>,
    /// The item, if the key held one.
    pub item: Option<ImageItem>,
    /// Whether the key names a part of an item, not an item (see the module docs).
    pub part: bool,
}

/// An item as a before-image keeps it (its CAS is not kept: a restored item gets a new one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageItem {
    /// The value.
    pub value: Vec<u8>,
    /// What the value is.
    pub kind: Kind,
    /// memcached client flags.
    pub client_flags: u32,
    /// Absolute expiry, Unix ms.
    pub expires_at_ms: Option<u64>,
    /// The parts it owned (0: the record was the whole item).
    pub parts: u32,
}

/// `<pool>.txlog`, open.
#[derive(Debug)]
pub(crate) struct TxLog {
    /// `None` until the first group: a pool that never runs one has no log file.
    file: Option<File>,
    path: PathBuf,
    /// Whether marks are made durable (`fdatasync`): under `interval` and `sync`.
    durable: bool,
    /// The log being built (its allocation kept from group to group).
    buffer: Vec<u8>,
    entries: u32,
    /// The running group's number, or the last group's (see the module docs).
    group: u32,
    /// Where the next appended entry goes (the end of what [`TxLog::begin`] wrote and of the
    /// entries appended since).
    append_at: u64,
}

/// An item's fields as an entry takes them, borrowed.
pub(crate) struct ItemFields<'a> {
    pub(crate) value: &'a [u8],
    pub(crate) kind: Kind,
    pub(crate) client_flags: u32,
    pub(crate) expires_at_ms: Option<u64>,
    pub(crate) parts: u32,
}

impl<'a> ItemFields<'a> {
    /// An image item's fields, borrowed.
    #[cfg(test)]
    pub(crate) fn of(item: &'a ImageItem) -> ItemFields<'a> {
        ItemFields {
            value: &item.value,
            kind: item.kind,
            client_flags: item.client_flags,
            expires_at_ms: item.expires_at_ms,
            parts: item.parts,
        }
    }
}

/// The log's path for the pool at `pool`.
pub(crate) fn path_for(pool: &Path) -> PathBuf {
    path_for_lane(pool, 0)
}

/// Where log `lane` of the pool at `pool` is: `<pool>.txlog`, then `<pool>.txlog.<lane>`.
fn path_for_lane(pool: &Path, lane: usize) -> PathBuf {
    let mut name = pool.as_os_str().to_owned();
    name.push(".txlog");
    if lane > 0 {
        name.push(format!(".{lane}"));
    }
    PathBuf::from(name)
}

/// Most logs a pool keeps, so most logged transactions running at once (the rest wait for a
/// log to come back).
pub(crate) const LANES_MAX: usize = 64;

/// A pool's transaction logs (see the module docs): the ones no transaction holds.
#[derive(Debug)]
pub(crate) struct TxLogs {
    free: parking_lot::Mutex<Vec<TxLog>>,
    returned: parking_lot::Condvar,
}

/// A log a transaction holds for its life, given back when dropped.
#[derive(Debug)]
pub(crate) struct Lane<'a> {
    logs: &'a TxLogs,
    log: Option<TxLog>,
}

impl std::ops::Deref for Lane<'_> {
    type Target = TxLog;

    fn deref(&self) -> &TxLog {
        self.log.as_ref().expect("held until dropped")
    }
}

impl std::ops::DerefMut for Lane<'_> {
    fn deref_mut(&mut self) -> &mut TxLog {
        self.log.as_mut().expect("held until dropped")
    }
}

impl Drop for Lane<'_> {
    fn drop(&mut self) {
        if let Some(log) = self.log.take() {
            self.logs.free.lock().push(log);
            self.logs.returned.notify_one();
        }
    }
}

impl TxLogs {
    /// Opens every log of the pool at `pool` (`<pool>.txlog` and `<pool>.txlog.1` to
    /// `.txlog.63`, those that exist: a file is made by its lane's first group, so any of them
    /// may be missing, a later one present, after a crash); returns them with the
    /// before-images of each group a crash interrupted. `fresh`: the pool was made empty, so
    /// what the logs hold is history, not something to undo (each is ended, unread).
    pub(crate) fn open(
        pool: &Path,
        durable: bool,
        fresh: bool,
    ) -> io::Result<(TxLogs, Vec<Vec<Image>>)> {
        let mut free = Vec::with_capacity(LANES_MAX);
        let mut pending = Vec::new();
        // Last lane first: transactions take from the end, so `<pool>.txlog` is used first.
        for lane in (0..LANES_MAX).rev() {
            let (mut log, images) = TxLog::open(path_for_lane(pool, lane), durable)?;
            match images {
                Some(_) if fresh => log.end()?,
                Some(images) => pending.push(images),
                None => {}
            }
            free.push(log);
        }
        let logs = TxLogs {
            free: parking_lot::Mutex::new(free),
            returned: parking_lot::Condvar::new(),
        };
        Ok((logs, pending))
    }

    /// A log for one transaction: a free one, or, with all [`LANES_MAX`] in use, the first to
    /// come back.
    pub(crate) fn take(&self) -> Lane<'_> {
        let mut free = self.free.lock();
        loop {
            if let Some(log) = free.pop() {
                return Lane {
                    logs: self,
                    log: Some(log),
                };
            }
            self.returned.wait(&mut free);
        }
    }

    /// Ends every log after an open restored what they held.
    pub(crate) fn end_all(&self) -> io::Result<()> {
        for log in self.free.lock().iter_mut() {
            if log.file.is_some() {
                log.end()?;
            }
        }
        Ok(())
    }
}

impl TxLog {
    fn new(path: PathBuf, file: Option<File>, durable: bool, group: u32) -> TxLog {
        TxLog {
            file,
            path,
            durable,
            buffer: Vec::new(),
            entries: 0,
            group,
            append_at: HEADER_BYTES as u64,
        }
    }

    /// Opens the log at `path` if there is one (it is created by its first group); returns it
    /// with the before-images of a group a crash interrupted, when it holds one.
    fn open(path: PathBuf, durable: bool) -> io::Result<(TxLog, Option<Vec<Image>>)> {
        let file = match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
        {
            Ok(file) => Some(file),
            Err(error) if error.kind() == io::ErrorKind::NotFound => None,
            Err(error) => return Err(error),
        };
        let mut bytes = Vec::new();
        if let Some(file) = &file {
            io::Read::read_to_end(&mut &*file, &mut bytes)?;
        }
        let pending = decode_active(&bytes);
        let last_group = bytes
            .get(20..24)
            .map_or(0, |group| u32::from_le_bytes(group.try_into().expect("4")));
        Ok((TxLog::new(path, file, durable, last_group), pending))
    }

    /// Starts building a group's log (then [`TxLog::push`] each key, then [`TxLog::begin`]).
    pub(crate) fn start(&mut self) {
        self.buffer.clear();
        self.buffer.resize(HEADER_BYTES, 0);
        self.entries = 0;
        self.group = self.group.wrapping_add(1);
    }

    /// Adds a key's before-image: its item's fields, or `None` when absent; `part`: the key
    /// is a part's.
    pub(crate) fn push(&mut self, key: &[u8], part: bool, item: Option<ItemFields<'_>>) {
        put_entry(&mut self.buffer, key, part, item);
        self.entries += 1;
    }

    /// Writes the group's log as the active one, durably when the log is. The file is written
    /// over, not truncated: `body_len` says where the body ends (and a truncate per group cost
    /// as much as the rest of it on tmpfs).
    pub(crate) fn begin(&mut self) -> io::Result<()> {
        let body_len = self.buffer.len() - HEADER_BYTES;
        let (header, body) = self.buffer.split_at_mut(HEADER_BYTES);
        write_header(header, self.entries, self.group, body_len, body);
        self.file()?;
        let file = self.file.as_ref().expect("opened above");
        file.write_all_at(&self.buffer, 0)?;
        if self.durable {
            file.sync_data()?;
        }
        self.append_at = self.buffer.len() as u64;
        Ok(())
    }

    /// Opens (or creates) the log file, so that a log that cannot be written refuses its group
    /// before [`TxLog::begin`] is due.
    pub(crate) fn ready(&mut self) -> io::Result<()> {
        self.file().map(|_| ())
    }

    /// Appends a key's before-image to the running group (see the module docs), durably when
    /// the log is: the caller writes the key only after this returns.
    pub(crate) fn append(
        &mut self,
        key: &[u8],
        part: bool,
        item: Option<ItemFields<'_>>,
    ) -> io::Result<()> {
        debug_assert!(
            self.buffer.len() as u64 == self.append_at,
            "after begin, at the end of what was written"
        );
        let start = self.buffer.len();
        self.buffer.resize(start + APPENDED_HEADER_BYTES, 0);
        put_entry(&mut self.buffer, key, part, item);
        let entry_len = (self.buffer.len() - start - APPENDED_HEADER_BYTES) as u32;
        let appended = &mut self.buffer[start..];
        appended[..4].copy_from_slice(&entry_len.to_le_bytes());
        appended[4..8].copy_from_slice(&self.group.to_le_bytes());
        let crc = appended_checksum(appended);
        appended[8..12].copy_from_slice(&crc.to_le_bytes());
        let at = self.append_at;
        let durable = self.durable;
        self.file()?;
        let file = self.file.as_ref().expect("opened above");
        file.write_all_at(&self.buffer[start..], at)?;
        if durable {
            file.sync_data()?;
        }
        self.append_at = self.buffer.len() as u64;
        Ok(())
    }

    /// The log file, created (and, when durable, its directory entry made durable) the first
    /// time a group needs it.
    fn file(&mut self) -> io::Result<&File> {
        if self.file.is_none() {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&self.path)?;
            if self.durable {
                if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    File::open(dir)?.sync_all()?;
                }
            }
            self.file = Some(file);
        }
        Ok(self.file.as_ref().expect("opened above"))
    }

    /// Marks the active group done, durably when the log is.
    pub(crate) fn end(&mut self) -> io::Result<()> {
        let durable = self.durable;
        let file = self.file()?;
        file.write_all_at(&STATE_DONE.to_le_bytes(), STATE_OFFSET)?;
        if durable {
            file.sync_data()?;
        }
        Ok(())
    }

    /// Where the log is.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The before-images of the group being run (the one [`TxLog::begin`] wrote).
    pub(crate) fn running_images(&self) -> Option<Vec<Image>> {
        decode_active(&self.buffer)
    }
}

/// An entry's `state` bit: the key held an item.
const STATE_PRESENT: u8 = 1;
/// An entry's `state` bit: the key is a part's.
const STATE_PART: u8 = 2;

/// Appends one entry (see the module docs).
fn put_entry(body: &mut Vec<u8>, key: &[u8], part: bool, item: Option<ItemFields<'_>>) {
    put_u32(body, key.len() as u32);
    body.extend_from_slice(key);
    let part_bit = if part { STATE_PART } else { 0 };
    let Some(item) = item else {
        body.push(part_bit);
        return;
    };
    body.push(STATE_PRESENT | part_bit);
    body.push(item.kind.code());
    put_u32(body, item.client_flags);
    put_u32(body, item.parts);
    body.push(u8::from(item.expires_at_ms.is_some()));
    body.extend_from_slice(&item.expires_at_ms.unwrap_or(0).to_le_bytes());
    put_u32(body, item.value.len() as u32);
    body.extend_from_slice(item.value);
}

/// Fills the 40-byte `header` of group `group`'s active log of `entries` entries whose body
/// is `body`.
fn write_header(header: &mut [u8], entries: u32, group: u32, body_len: usize, body: &[u8]) {
    header[..8].copy_from_slice(&MAGIC);
    header[8..12].copy_from_slice(&VERSION.to_le_bytes());
    header[12..16].copy_from_slice(&STATE_ACTIVE.to_le_bytes());
    header[16..20].copy_from_slice(&entries.to_le_bytes());
    header[20..24].copy_from_slice(&group.to_le_bytes());
    header[24..32].copy_from_slice(&(body_len as u64).to_le_bytes());
    let crc = checksum(header, body);
    header[32..36].copy_from_slice(&crc.to_le_bytes());
    header[36..40].fill(0);
}

/// A whole active log of `images` (tests).
#[cfg(test)]
fn encode(images: &[Image]) -> Vec<u8> {
    let mut out = vec![0; HEADER_BYTES];
    for image in images {
        put_entry(
            &mut out,
            &image.key,
            image.part,
            image.item.as_ref().map(ItemFields::of),
        );
    }
    let body_len = out.len() - HEADER_BYTES;
    let (header, body) = out.split_at_mut(HEADER_BYTES);
    write_header(header, images.len() as u32, 1, body_len, body);
    out
}

fn put_u32(out: &mut Vec<u8>, value: u32) {
    out.extend_from_slice(&value.to_le_bytes());
}

/// The checksum of a header's first 32 bytes (`state` left out) and the body.
fn checksum(header: &[u8], body: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&header[..STATE_OFFSET as usize]);
    let crc = crc32c::crc32c_append(crc, &header[STATE_OFFSET as usize + 4..32]);
    crc32c::crc32c_append(crc, body)
}

/// The checksum of an appended entry (`appended`: its 12-byte header, then the entry), its
/// own checksum field left out.
fn appended_checksum(appended: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&appended[..8]), &appended[12..])
}

/// The before-images of an active, valid log, appended ones last; `None` for an empty, done,
/// torn or foreign one.
fn decode_active(bytes: &[u8]) -> Option<Vec<Image>> {
    let header = bytes.get(..HEADER_BYTES)?;
    let u32_at = |at: usize| u32::from_le_bytes(header[at..at + 4].try_into().expect("4"));
    let version = u32_at(8);
    if header[..8] != MAGIC
        || !(version == VERSION || version == VERSION_1)
        || u32_at(12) != STATE_ACTIVE
        || (version == VERSION_1 && u32_at(20) != 0)
        || u32_at(36) != 0
    {
        return None;
    }
    let body_len = usize::try_from(u64::from_le_bytes(header[24..32].try_into().ok()?)).ok()?;
    let body_end = HEADER_BYTES.checked_add(body_len)?;
    let body = bytes.get(HEADER_BYTES..body_end)?;
    if checksum(header, body) != u32_at(32) {
        return None;
    }
    let entries = u32_at(16) as usize;
    let mut reader = Reader {
        bytes: body,
        at: 0,
        version,
    };
    let mut images = (0..entries)
        .map(|_| reader.image())
        .collect::<Option<Vec<Image>>>()?;
    if reader.at != body.len() {
        return None;
    }
    if version == VERSION {
        images.extend(appended_images(&bytes[body_end..], u32_at(20)));
    }
    Some(images)
}

/// The appended entries of group `group` at the start of `bytes` (see the module docs).
fn appended_images(mut bytes: &[u8], group: u32) -> Vec<Image> {
    let mut images = Vec::new();
    while let Some(head) = bytes.get(..APPENDED_HEADER_BYTES) {
        let u32_at = |at: usize| u32::from_le_bytes(head[at..at + 4].try_into().expect("4"));
        let Some(len) = APPENDED_HEADER_BYTES.checked_add(u32_at(0) as usize) else {
            break;
        };
        let Some(appended) = bytes.get(..len) else {
            break;
        };
        if u32_at(4) != group || appended_checksum(appended) != u32_at(8) {
            break;
        }
        let mut reader = Reader {
            bytes: &appended[APPENDED_HEADER_BYTES..],
            at: 0,
            version: VERSION,
        };
        match reader.image() {
            Some(image) if reader.at == reader.bytes.len() => images.push(image),
            _ => break,
        }
        bytes = &bytes[len..];
    }
    images
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    version: u32,
}

impl Reader<'_> {
    fn take(&mut self, len: usize) -> Option<&[u8]> {
        let slice = self.bytes.get(self.at..self.at.checked_add(len)?)?;
        self.at += len;
        Some(slice)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    fn image(&mut self) -> Option<Image> {
        let key_len = self.u32()? as usize;
        let key = self.take(key_len)?.to_vec();
        let state = self.u8()?;
        let part = state & STATE_PART != 0;
        if state & !(STATE_PRESENT | STATE_PART) != 0 || (part && self.version == VERSION_1) {
            return None;
        }
        let item = match state & STATE_PRESENT {
            0 => None,
            _ => {
                let kind = Kind::from_code(self.u8()?)?;
                let client_flags = self.u32()?;
                let parts = if self.version == VERSION_1 {
                    0
                } else {
                    self.u32()?
                };
                let has_expiry = self.u8()?;
                let expires_at = self.u64()?;
                let value_len = self.u32()? as usize;
                let value = self.take(value_len)?.to_vec();
                Some(ImageItem {
                    value,
                    kind,
                    client_flags,
                    expires_at_ms: (has_expiry == 1).then_some(expires_at),
                    parts,
                })
            }
        };
        Some(Image { key, item, part })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn images() -> Vec<Image> {
        vec![
            Image {
                key: b"absent".to_vec(),
                item: None,
                part: false,
            },
            Image {
                key: b"hash\0\0\0\0".to_vec(),
                item: Some(ImageItem {
                    value: vec![4, 5],
                    kind: Kind::Part,
                    client_flags: 0,
                    expires_at_ms: None,
                    parts: 0,
                }),
                part: true,
            },
            Image {
                key: b"hash\x07\0\0\0".to_vec(),
                item: None,
                part: true,
            },
            Image {
                key: b"hash".to_vec(),
                item: Some(ImageItem {
                    value: vec![1, 2, 3],
                    kind: Kind::Hash,
                    client_flags: 7,
                    expires_at_ms: Some(1_800_000_000_000),
                    parts: 3,
                }),
                part: false,
            },
            Image {
                key: b"string".to_vec(),
                item: Some(ImageItem {
                    value: b"v".to_vec(),
                    kind: Kind::String,
                    client_flags: 0,
                    expires_at_ms: None,
                    parts: 0,
                }),
                part: false,
            },
        ]
    }

    #[test]
    fn an_active_log_round_trips_and_a_done_one_is_nothing() {
        let bytes = encode(&images());
        assert_eq!(decode_active(&bytes), Some(images()));
        let mut done = bytes.clone();
        done[12..16].copy_from_slice(&STATE_DONE.to_le_bytes());
        assert_eq!(decode_active(&done), None);
        assert_eq!(decode_active(&encode(&[])), Some(Vec::new()));
    }

    #[test]
    fn a_torn_or_damaged_log_is_nothing_to_undo() {
        let bytes = encode(&images());
        for cut in 0..bytes.len() {
            assert_eq!(decode_active(&bytes[..cut]), None, "cut at {cut}");
        }
        for at in (0..bytes.len()).filter(|&at| !(12..16).contains(&at)) {
            let mut bad = bytes.clone();
            bad[at] ^= 0x40;
            assert_eq!(decode_active(&bad), None, "byte {at}");
        }
    }

    #[test]
    fn the_log_file_begins_ends_and_reopens() {
        let dir = std::env::temp_dir().join(format!("strata-txlog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pool = dir.join("pool");
        let (mut log, pending) = TxLog::open(path_for(&pool), true).unwrap();
        assert_eq!(pending, None);
        assert!(!path_for(&pool).exists(), "no file until a group runs");
        // A longer log first: the next one is written over it, not truncated.
        log.start();
        log.push(&[b'x'; 500], false, None);
        log.begin().unwrap();
        log.end().unwrap();
        log.start();
        for image in images() {
            log.push(
                &image.key,
                image.part,
                image.item.as_ref().map(ItemFields::of),
            );
        }
        log.begin().unwrap();
        drop(log);
        let (mut log, pending) = TxLog::open(path_for(&pool), false).unwrap();
        assert_eq!(
            pending,
            Some(images()),
            "a crash before end leaves it active"
        );
        log.end().unwrap();
        assert_eq!(TxLog::open(path_for(&pool), false).unwrap().1, None);
        assert_eq!(log.path(), path_for(&pool));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Before-images appended after `begin` (a part's, found once the group ran) come back
    /// after the body's, durably written one by one; a torn or damaged one ends them, and
    /// the appended entries a longer earlier group left past a later group's are not read as
    /// the later group's.
    #[test]
    fn appended_images_come_back_until_one_is_torn_or_another_groups() {
        let dir = std::env::temp_dir().join(format!("strata-txappend-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pool = dir.join("pool");
        let path = path_for(&pool);
        let (mut log, _) = TxLog::open(path.clone(), false).unwrap();
        let all = images();
        log.start();
        log.push(&all[0].key, false, None);
        log.begin().unwrap();
        for image in &all[1..] {
            log.append(
                &image.key,
                image.part,
                image.item.as_ref().map(ItemFields::of),
            )
            .unwrap();
        }
        assert_eq!(log.running_images(), Some(all.clone()));
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(decode_active(&bytes), Some(all.clone()));
        // Torn anywhere in the appended entries: the whole ones before the cut come back.
        let body_end = HEADER_BYTES + 4 + all[0].key.len() + 1; // The first image is absent.
        let mut ends = vec![body_end];
        for image in &all[1..] {
            let mut entry = Vec::new();
            put_entry(
                &mut entry,
                &image.key,
                image.part,
                image.item.as_ref().map(ItemFields::of),
            );
            ends.push(ends.last().unwrap() + APPENDED_HEADER_BYTES + entry.len());
        }
        assert_eq!(*ends.last().unwrap(), bytes.len());
        for cut in body_end..bytes.len() {
            let kept = ends.iter().filter(|&&end| end <= cut).count();
            assert_eq!(
                decode_active(&bytes[..cut]),
                Some(all[..kept].to_vec()),
                "cut at {cut}"
            );
        }
        for at in body_end..bytes.len() {
            let mut bad = bytes.clone();
            bad[at] ^= 0x08;
            let kept = decode_active(&bad).expect("the body is whole").len();
            assert!(
                kept < all.len(),
                "byte {at} flipped: the damaged entry is dropped"
            );
        }
        // The next group is shorter: the last one's appended entries lie past its body.
        log.end().unwrap();
        log.start();
        log.push(&all[0].key, false, None);
        log.begin().unwrap();
        drop(log);
        let (_, pending) = TxLog::open(path.clone(), false).unwrap();
        assert_eq!(
            pending,
            Some(all[..1].to_vec()),
            "an earlier group's entries are not its"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A version-1 log (before parts) a crash left active is still undone.
    #[test]
    fn a_version_1_log_is_read() {
        let mut entry = Vec::new();
        put_u32(&mut entry, 1);
        entry.extend_from_slice(b"k");
        entry.push(1);
        entry.push(Kind::String.code());
        put_u32(&mut entry, 9);
        entry.push(0);
        entry.extend_from_slice(&0u64.to_le_bytes());
        put_u32(&mut entry, 2);
        entry.extend_from_slice(b"v1");
        let mut bytes = vec![0; HEADER_BYTES];
        bytes.extend_from_slice(&entry);
        let (header, body) = bytes.split_at_mut(HEADER_BYTES);
        write_header(header, 1, 0, entry.len(), body);
        bytes[8..12].copy_from_slice(&VERSION_1.to_le_bytes());
        let crc = checksum(&bytes[..HEADER_BYTES], &bytes[HEADER_BYTES..]);
        bytes[32..36].copy_from_slice(&crc.to_le_bytes());
        let expected = Image {
            key: b"k".to_vec(),
            item: Some(ImageItem {
                value: b"v1".to_vec(),
                kind: Kind::String,
                client_flags: 9,
                expires_at_ms: None,
                parts: 0,
            }),
            part: false,
        };
        assert_eq!(decode_active(&bytes), Some(vec![expected]));
    }

    /// A crash can leave a later lane's log without an earlier lane's file (a lane's file is
    /// made by its first group, and the third transaction may begin before the second): the
    /// open finds it all the same.
    #[test]
    fn an_active_log_past_a_missing_lane_is_found() {
        let dir = std::env::temp_dir().join(format!("strata-txgap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pool = dir.join("pool");
        let (logs, _) = TxLogs::open(&pool, false, false).unwrap();
        let (first, second, mut third) = (logs.take(), logs.take(), logs.take());
        third.start();
        third.push(b"c", false, None);
        third.begin().unwrap();
        assert!(!path_for_lane(&pool, 1).exists() && path_for_lane(&pool, 2).exists());
        drop((first, second, third));
        let (_, pending) = TxLogs::open(&pool, false, false).unwrap();
        assert_eq!(pending.len(), 1, "the third lane's group is undone");
        assert_eq!(pending[0][0].key, b"c");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Two transactions at once take two logs (the second a new file), each kept active by
    /// a crash is found by the next open, and a fresh pool ends them unread.
    #[test]
    fn logs_are_lanes_taken_given_back_and_all_reopened() {
        let dir = std::env::temp_dir().join(format!("strata-txlanes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pool = dir.join("pool");
        let (logs, pending) = TxLogs::open(&pool, false, false).unwrap();
        assert!(pending.is_empty());
        let write = |lane: &mut Lane<'_>, key: &[u8]| {
            lane.start();
            lane.push(key, false, None);
            lane.begin().unwrap();
        };
        let mut first = logs.take();
        let mut second = logs.take();
        write(&mut first, b"a");
        write(&mut second, b"b");
        assert_eq!(first.path(), path_for(&pool));
        assert_eq!(second.path(), path_for_lane(&pool, 1));
        drop((first, second));
        let again = logs.take();
        assert!(again.path() == path_for(&pool) || again.path() == path_for_lane(&pool, 1));
        drop(again);
        let (_, pending) = TxLogs::open(&pool, false, false).unwrap();
        let mut keys: Vec<Vec<u8>> = pending.iter().flatten().map(|i| i.key.clone()).collect();
        keys.sort();
        assert_eq!(
            keys,
            [b"a".to_vec(), b"b".to_vec()],
            "both active logs found"
        );
        let (logs, pending) = TxLogs::open(&pool, false, true).unwrap();
        assert!(pending.is_empty(), "a fresh pool undoes nothing");
        drop(logs);
        let (_, pending) = TxLogs::open(&pool, false, false).unwrap();
        assert!(pending.is_empty(), "and the logs were ended");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
