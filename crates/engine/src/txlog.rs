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
//!  | STRATATX | version | state  | entries | zero     | body_len u64  | crc32c| zero | body |
//!  |          | u32 = 1 | u32    | u32     | u32      |               | u32   | u32  |      |
//!  +----------+---------+--------+---------+----------+---------------+-------+------+------+
//!
//!  entry: | key_len u32 | key | present u8 | (if present:) kind u8 | client_flags u32 |
//!         | has_expiry u8 | expires_at_ms u64 | value_len u32 | value |
//! ```
//!
//! All integers little-endian. `state` is 1 (active) or 2 (done); the checksum covers every
//! byte from 0 to 36 except `state`, then the body, so marking the log done rewrites 4 bytes
//! and keeps it valid.
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
const VERSION: u32 = 1;
const STATE_ACTIVE: u32 = 1;
const STATE_DONE: u32 = 2;
const STATE_OFFSET: u64 = 12;
const HEADER_BYTES: usize = 40;

/// A key's state before a group of writes: its item, or `None` when absent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    /// The key.
    pub key: Vec<u8>,
    /// The item, if the key held one.
    pub item: Option<ImageItem>,
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
}

/// An item's fields as an entry takes them, borrowed.
pub(crate) struct ItemFields<'a> {
    pub(crate) value: &'a [u8],
    pub(crate) kind: Kind,
    pub(crate) client_flags: u32,
    pub(crate) expires_at_ms: Option<u64>,
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
    fn new(path: PathBuf, file: Option<File>, durable: bool) -> TxLog {
        TxLog {
            file,
            path,
            durable,
            buffer: Vec::new(),
            entries: 0,
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
        Ok((TxLog::new(path, file, durable), pending))
    }

    /// Starts building a group's log (then [`TxLog::push`] each key, then [`TxLog::begin`]).
    pub(crate) fn start(&mut self) {
        self.buffer.clear();
        self.buffer.resize(HEADER_BYTES, 0);
        self.entries = 0;
    }

    /// Adds a key's before-image: its item's fields, or `None` when absent.
    pub(crate) fn push(&mut self, key: &[u8], item: Option<ItemFields<'_>>) {
        put_entry(&mut self.buffer, key, item);
        self.entries += 1;
    }

    /// Writes the group's log as the active one, durably when the log is. The file is written
    /// over, not truncated: `body_len` says where the body ends (and a truncate per group cost
    /// as much as the rest of it on tmpfs).
    pub(crate) fn begin(&mut self) -> io::Result<()> {
        let body_len = self.buffer.len() - HEADER_BYTES;
        let (header, body) = self.buffer.split_at_mut(HEADER_BYTES);
        write_header(header, self.entries, body_len, body);
        self.file()?;
        let file = self.file.as_ref().expect("opened above");
        file.write_all_at(&self.buffer, 0)?;
        if self.durable {
            file.sync_data()?;
        }
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

/// Appends one entry (see the module docs).
fn put_entry(body: &mut Vec<u8>, key: &[u8], item: Option<ItemFields<'_>>) {
    put_u32(body, key.len() as u32);
    body.extend_from_slice(key);
    let Some(item) = item else {
        body.push(0);
        return;
    };
    body.push(1);
    body.push(item.kind.code());
    put_u32(body, item.client_flags);
    body.push(u8::from(item.expires_at_ms.is_some()));
    body.extend_from_slice(&item.expires_at_ms.unwrap_or(0).to_le_bytes());
    put_u32(body, item.value.len() as u32);
    body.extend_from_slice(item.value);
}

/// Fills the 40-byte `header` of an active log of `entries` entries whose body is `body`.
fn write_header(header: &mut [u8], entries: u32, body_len: usize, body: &[u8]) {
    header[..8].copy_from_slice(&MAGIC);
    header[8..12].copy_from_slice(&VERSION.to_le_bytes());
    header[12..16].copy_from_slice(&STATE_ACTIVE.to_le_bytes());
    header[16..20].copy_from_slice(&entries.to_le_bytes());
    header[20..24].fill(0);
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
        let item = image.item.as_ref().map(|item| ItemFields {
            value: &item.value,
            kind: item.kind,
            client_flags: item.client_flags,
            expires_at_ms: item.expires_at_ms,
        });
        put_entry(&mut out, &image.key, item);
    }
    let body_len = out.len() - HEADER_BYTES;
    let (header, body) = out.split_at_mut(HEADER_BYTES);
    write_header(header, images.len() as u32, body_len, body);
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

/// The before-images of an active, valid log; `None` for an empty, done, torn or foreign one.
fn decode_active(bytes: &[u8]) -> Option<Vec<Image>> {
    let header = bytes.get(..HEADER_BYTES)?;
    let u32_at = |at: usize| u32::from_le_bytes(header[at..at + 4].try_into().expect("4"));
    if header[..8] != MAGIC
        || u32_at(8) != VERSION
        || u32_at(12) != STATE_ACTIVE
        || u32_at(20) != 0
        || u32_at(36) != 0
    {
        return None;
    }
    let body_len = usize::try_from(u64::from_le_bytes(header[24..32].try_into().ok()?)).ok()?;
    let body = bytes.get(HEADER_BYTES..HEADER_BYTES.checked_add(body_len)?)?;
    if checksum(header, body) != u32_at(32) {
        return None;
    }
    let entries = u32_at(16) as usize;
    let mut reader = Reader { bytes: body, at: 0 };
    let images = (0..entries)
        .map(|_| reader.image())
        .collect::<Option<Vec<Image>>>()?;
    (reader.at == body.len()).then_some(images)
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
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
        let item = match self.u8()? {
            0 => None,
            1 => {
                let kind = Kind::from_code(self.u8()?)?;
                let client_flags = self.u32()?;
                let has_expiry = self.u8()?;
                let expires_at = self.u64()?;
                let value_len = self.u32()? as usize;
                let value = self.take(value_len)?.to_vec();
                Some(ImageItem {
                    value,
                    kind,
                    client_flags,
                    expires_at_ms: (has_expiry == 1).then_some(expires_at),
                })
            }
            _ => return None,
        };
        Some(Image { key, item })
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
            },
            Image {
                key: b"hash".to_vec(),
                item: Some(ImageItem {
                    value: vec![1, 2, 3],
                    kind: Kind::Hash,
                    client_flags: 7,
                    expires_at_ms: Some(1_800_000_000_000),
                }),
            },
            Image {
                key: b"string".to_vec(),
                item: Some(ImageItem {
                    value: b"v".to_vec(),
                    kind: Kind::String,
                    client_flags: 0,
                    expires_at_ms: None,
                }),
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
        log.push(&[b'x'; 500], None);
        log.begin().unwrap();
        log.end().unwrap();
        log.start();
        for image in images() {
            let item = image.item.as_ref().map(|item| ItemFields {
                value: &item.value,
                kind: item.kind,
                client_flags: item.client_flags,
                expires_at_ms: item.expires_at_ms,
            });
            log.push(&image.key, item);
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
        third.push(b"c", None);
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
            lane.push(key, None);
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
