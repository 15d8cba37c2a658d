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
    file: File,
    path: PathBuf,
    /// Whether marks are made durable (`fdatasync`): under `interval` and `sync`.
    durable: bool,
}

/// The log's path for the pool at `pool`.
pub(crate) fn path_for(pool: &Path) -> PathBuf {
    let mut name = pool.as_os_str().to_owned();
    name.push(".txlog");
    PathBuf::from(name)
}

impl TxLog {
    /// Opens (or creates) the log of the pool at `pool`; returns it with the before-images of
    /// a group a crash interrupted, when the log holds one.
    pub(crate) fn open(pool: &Path, durable: bool) -> io::Result<(TxLog, Option<Vec<Image>>)> {
        let path = path_for(pool);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        let mut bytes = Vec::new();
        io::Read::read_to_end(&mut &file, &mut bytes)?;
        let pending = decode_active(&bytes);
        Ok((
            TxLog {
                file,
                path,
                durable,
            },
            pending,
        ))
    }

    /// Writes `images` as the active group, durably when the log is.
    pub(crate) fn begin(&mut self, images: &[Image]) -> io::Result<()> {
        let bytes = encode(images);
        self.file.set_len(0)?;
        self.file.write_all_at(&bytes, 0)?;
        if self.durable {
            self.file.sync_data()?;
        }
        Ok(())
    }

    /// Marks the active group done, durably when the log is.
    pub(crate) fn end(&mut self) -> io::Result<()> {
        self.file
            .write_all_at(&STATE_DONE.to_le_bytes(), STATE_OFFSET)?;
        if self.durable {
            self.file.sync_data()?;
        }
        Ok(())
    }

    /// Where the log is.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

fn encode(images: &[Image]) -> Vec<u8> {
    let mut body = Vec::new();
    for image in images {
        put_u32(&mut body, image.key.len() as u32);
        body.extend_from_slice(&image.key);
        let Some(item) = &image.item else {
            body.push(0);
            continue;
        };
        body.push(1);
        body.push(item.kind.code());
        put_u32(&mut body, item.client_flags);
        body.push(u8::from(item.expires_at_ms.is_some()));
        body.extend_from_slice(&item.expires_at_ms.unwrap_or(0).to_le_bytes());
        put_u32(&mut body, item.value.len() as u32);
        body.extend_from_slice(&item.value);
    }
    let mut out = Vec::with_capacity(HEADER_BYTES + body.len());
    out.extend_from_slice(&MAGIC);
    put_u32(&mut out, VERSION);
    put_u32(&mut out, STATE_ACTIVE);
    put_u32(&mut out, images.len() as u32);
    put_u32(&mut out, 0);
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    let crc = checksum(&out, &body);
    put_u32(&mut out, crc);
    put_u32(&mut out, 0);
    debug_assert_eq!(out.len(), HEADER_BYTES);
    out.extend_from_slice(&body);
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
    if header[..8] != MAGIC || u32_at(8) != VERSION || u32_at(12) != STATE_ACTIVE {
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
        let (mut log, pending) = TxLog::open(&pool, true).unwrap();
        assert_eq!(pending, None);
        log.begin(&images()).unwrap();
        drop(log);
        let (mut log, pending) = TxLog::open(&pool, false).unwrap();
        assert_eq!(
            pending,
            Some(images()),
            "a crash before end leaves it active"
        );
        log.end().unwrap();
        assert_eq!(TxLog::open(&pool, false).unwrap().1, None);
        assert_eq!(log.path(), path_for(&pool));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
