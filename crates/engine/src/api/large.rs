//! Strings longer than one record holds (up to `EngineConfig::value_len_max`, Redis's 512 MiB
//! `proto-max-bulk-len`): kept as an owner and parts (`record`'s module docs, `shard::parts`),
//! all in the owner's shard, so whoever holds the shard reads or writes the whole string.
//!
//! The owner is a string record whose value is a header (docs/POOL_FORMAT.md, "Strings of
//! several records"): `version u8 = 1 | len_bytes u64 LE | part_len_bytes u32 LE | crc32c
//! u32 LE` (of the whole string); part `i` holds bytes `i × part_len .. min((i + 1) ×
//! part_len, len)` of the string, and the owner owns `ceil(len / part_len)` parts. Readers
//! get the string joined (`ItemRef::value`; the header is `ItemRef::record_value`), or as its
//! parts' values unjoined ([`Engine::get_pieces`], what a reply copies from); a family
//! whose parts do not make its header's length and checksum (a part missing after damage was
//! found, or a power cut that kept parts of two writes where no log could put the old ones
//! back) reads as absent, never as other bytes.
//!
//! Only a transaction writes one ([`WriteError::NeedsTransaction`] otherwise): parts first,
//! each part's before-image in the transaction's log first where the pool has one (so a crash
//! puts the old string back whole), then the owner. A part the write cannot place (out of
//! memory under `--eviction none`, a failed persist) leaves the key's item dropped whole,
//! never half old and half new; a segment freed by the write's own eviction that took part
//! of the family drops it too (the item was evicted right after its write, as a cache may).

use super::*;
use crate::record::Kind;

/// The header's version byte.
const HEADER_VERSION: u8 = 1;
/// The header's length.
pub(crate) const HEADER_LEN_BYTES: usize = 17;
/// The longest part: two fit a default segment (1 MiB + 4 KiB).
const PART_LEN_BYTES_MAX: usize = 512 << 10;

/// Logs part `part`'s before-image (a transaction's log), before the part is written.
pub(crate) type PartLog<'a> = &'a dyn Fn(&Shard, u32) -> Result<(), WriteError>;

/// A large string's header fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Header {
    len_bytes: usize,
    part_len_bytes: usize,
    crc: u32,
}

impl Header {
    fn encode(self) -> [u8; HEADER_LEN_BYTES] {
        let mut header = [0u8; HEADER_LEN_BYTES];
        header[0] = HEADER_VERSION;
        header[1..9].copy_from_slice(&(self.len_bytes as u64).to_le_bytes());
        let part_len = u32::try_from(self.part_len_bytes).expect("parts are under 4 GiB");
        header[9..13].copy_from_slice(&part_len.to_le_bytes());
        header[13..17].copy_from_slice(&self.crc.to_le_bytes());
        header
    }

    /// The fields, if `bytes` is a header.
    fn parse(bytes: &[u8]) -> Option<Header> {
        let bytes: &[u8; HEADER_LEN_BYTES] = bytes.try_into().ok()?;
        if bytes[0] != HEADER_VERSION {
            return None;
        }
        let len = u64::from_le_bytes(bytes[1..9].try_into().expect("8 bytes"));
        let part_len = u32::from_le_bytes(bytes[9..13].try_into().expect("4 bytes"));
        let crc = u32::from_le_bytes(bytes[13..17].try_into().expect("4 bytes"));
        (part_len > 0).then_some(Header {
            len_bytes: usize::try_from(len).ok()?,
            part_len_bytes: part_len as usize,
            crc,
        })
    }
}

/// Whether `found` is the owner of a string of several records.
pub(crate) fn is_large_string(found: &Found<'_>) -> bool {
    found.view.meta.kind == Kind::String && found.view.meta.parts > 0
}

/// The string `found` (a large string's owner, of `key` with hash `hash`) holds, as its
/// parts' values in order (the pieces, borrowing the shard's memory); `None` when they do not
/// make the length and checksum its header says.
pub(crate) fn pieces<'s>(
    inner: &Inner,
    shard: &'s Shard,
    key: &[u8],
    hash: u64,
    found: &Found<'_>,
) -> Option<Vec<&'s [u8]>> {
    debug_assert!(is_large_string(found));
    let header = Header::parse(found.view.value)?;
    let (len, part_len) = (header.len_bytes, header.part_len_bytes);
    let parts = found.view.meta.parts as usize;
    if len.div_ceil(part_len) != parts {
        return None;
    }
    let mut pieces = Vec::with_capacity(parts);
    let (mut name, mut taken, mut crc) = (Vec::new(), 0, 0);
    for part in 0..found.view.meta.parts {
        let part_hash = inner.part_name(key, hash, part, &mut name);
        let record = shard.lookup(inner, &name, part_hash)?;
        let expected = part_len.min(len - taken);
        if record.view.value.len() != expected {
            return None;
        }
        crc = crc32c::crc32c_append(crc, record.view.value);
        taken += expected;
        pieces.push(record.view.value);
    }
    debug_assert_eq!(taken, len);
    (crc == header.crc).then_some(pieces)
}

/// The string `found` holds, its [`pieces`] joined into one buffer.
pub(crate) fn join(
    inner: &Inner,
    shard: &Shard,
    key: &[u8],
    hash: u64,
    found: &Found<'_>,
) -> Option<Vec<u8>> {
    pieces(inner, shard, key, hash, found).map(|pieces| pieces.concat())
}

/// What a reader of `found` (of `key`, hash `hash`) is shown besides its record: a large
/// string's joined bytes (`Some(Some(_))`), nothing for one record (`Some(None)`), or `None`
/// for a large string that cannot be joined (see [`join`]), which reads as absent.
pub(crate) fn joined(
    inner: &Inner,
    shard: &Shard,
    (key, hash): (&[u8], u64),
    found: &Found<'_>,
) -> Option<Option<Vec<u8>>> {
    if !is_large_string(found) {
        return Some(None);
    }
    join(inner, shard, key, hash, found).map(Some)
}

/// The item `found` as readers see it, its value the `joined` bytes when it has them.
pub(crate) fn seen<'a>(found: &Found<'a>, joined: Option<&'a [u8]>) -> ItemRef<'a> {
    let mut item = item(found);
    if let Some(joined) = joined {
        item.value = joined;
    }
    item
}

/// Calls `f` with the item `found` (of `key`, hash `hash`) as readers see it: a large
/// string joined. `None` for a large string that cannot be joined (see [`join`]).
pub(crate) fn with_item<R>(
    inner: &Inner,
    shard: &Shard,
    key: (&[u8], u64),
    found: &Found<'_>,
    f: impl FnOnce(ItemRef<'_>) -> R,
) -> Option<R> {
    let joined = joined(inner, shard, key, found)?;
    Some(f(seen(found, joined.as_deref())))
}

/// Calls `f` with the item `found` (of `key`, hash `hash`) and its value in pieces: a large
/// string's parts, unjoined (the item's `value` then empty), else the one record's value. `None`
/// for a large string whose parts do not make its header's length and checksum (see [`join`]):
/// no piece is handed over before all were checked.
pub(crate) fn with_pieces<R>(
    inner: &Inner,
    shard: &Shard,
    (key, hash): (&[u8], u64),
    found: &Found<'_>,
    f: impl FnOnce(ItemRef<'_>, &[&[u8]]) -> R,
) -> Option<R> {
    let mut item = item(found);
    if !is_large_string(found) {
        return Some(f(item, &[item.value]));
    }
    let pieces = pieces(inner, shard, key, hash, found)?;
    item.value = &[];
    Some(f(item, &pieces))
}

impl Engine {
    /// The length of each part of a large string at `key`: half of what a segment holds for
    /// a part's key (two parts to a segment), in whole 4 KiB pages, at most 512 KiB (all a
    /// segment holds when that is under 8 KiB); `None` when a part's key would be too long.
    fn part_len_bytes(&self, key: &[u8]) -> Option<usize> {
        let part_key_len = key.len() + record::PART_NUMBER_BYTES;
        if part_key_len > KEY_LEN_MAX {
            return None;
        }
        let fits = record::value_len_fitting(self.inner.segment_size_bytes, part_key_len);
        let half = fits / 2 / 4096 * 4096;
        let len = if half >= 4096 {
            half.min(PART_LEN_BYTES_MAX)
        } else {
            fits
        };
        (len > 0).then_some(len)
    }

    /// Whether a string value of `len` bytes for `key` is kept in several records.
    pub(crate) fn takes_parts(&self, key: &[u8], len: usize) -> bool {
        len > self.record_value_len_max(key.len())
    }

    /// Writes `value` (longer than one record holds) as a large string at `key` (hash `hash`)
    /// in `shard`, held by a transaction whose log `log` keeps the parts' before-images:
    /// parts, then the owner (`meta`, its part count set here). Returns the new CAS, or 0 when
    /// the write's own eviction took part of the family and it was dropped.
    pub(crate) fn write_large(
        &self,
        shard: &mut Shard,
        (key, hash): (&[u8], u64),
        value: &[u8],
        mut meta: RecordMeta,
        log: PartLog<'_>,
    ) -> Result<u64, WriteError> {
        let inner: &Inner = &self.inner;
        assert!(
            value.len() <= inner.value_len_max,
            "callers check the limit"
        );
        let part_len =
            (self.part_len_bytes(key)).ok_or_else(|| self.too_large(key, value.len()))?;
        let parts = value.len().div_ceil(part_len);
        meta.parts = u32::try_from(parts).expect("under 4 GiB in parts of 4 KiB or more");
        let part_meta = RecordMeta {
            kind: Kind::Part,
            ..RecordMeta::default()
        };
        let old_parts = shard
            .lookup(inner, key, hash)
            .map_or(0, |found| found.view.meta.parts);
        shard.begin_building(key);
        let freed_before = shard.freed_when_building_began(key);
        let mut name = Vec::new();
        for (part, bytes) in (0u32..).zip(value.chunks(part_len)) {
            let written = log(shard, part).and_then(|()| {
                let part_hash = inner.part_name(key, hash, part, &mut name);
                shard.write(inner, &name, part_hash, bytes, part_meta, false)
            });
            if let Err(error) = written {
                // An old family's parts may be replaced already: it goes whole, not half new.
                // A single record's item is untouched (the parts written are orphans).
                if old_parts > 0 {
                    let _ = shard.evict_family(inner, key);
                }
                return Err(error);
            }
        }
        let header = Header {
            len_bytes: value.len(),
            part_len_bytes: part_len,
            crc: crc32c::crc32c(value),
        };
        let cas = shard.write(inner, key, hash, &header.encode(), meta, false)?;
        if shard.segments_freed() != freed_before && !shard.family_is_whole(inner, key) {
            shard.evict_family(inner, key)?;
            return Ok(0);
        }
        Ok(cas)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_and_foreign_bytes_are_refused() {
        let header = Header {
            len_bytes: 3 << 20,
            part_len_bytes: 512 << 10,
            crc: 0xDEAD_BEEF,
        };
        let bytes = header.encode();
        assert_eq!(Header::parse(&bytes), Some(header));
        let mut other = bytes;
        other[0] = 2;
        assert_eq!(Header::parse(&other), None, "an unknown version");
        assert_eq!(Header::parse(&bytes[..16]), None, "short");
        let empty_parts = Header {
            part_len_bytes: 0,
            ..header
        };
        assert_eq!(
            Header::parse(&empty_parts.encode()),
            None,
            "parts of no bytes"
        );
    }
}
