//! The item record: how one key/value is laid down in a segment.
//!
//! Records are appended at 8-byte aligned offsets. All integers are little-endian. The short
//! form (keys ≤ 255 bytes, values ≤ 65535 bytes: nearly every cache item) has an 8-byte header:
//!
//! ```text
//!  0        1        2                 4                                   8
//!  +--------+--------+--------+--------+--------+--------+--------+--------+
//!  | state  |key_len | value_len (u16) | crc32c (u32)                      |
//!  | flags  |  (u8)  |                 |                                   |
//!  +--------+--------+-----------------+-----------------------------------+
//!  | [WIDE: key_len u32, value_len u32]           (8 bytes, only if WIDE)   |
//!  | [EXPIRY: expires_at unix ms u64]             (8 bytes, only if EXPIRY) |
//!  | [CAS: explicit cas u64]                      (8 bytes, only if CAS)    |
//!  | [CLIENT_FLAGS: u32]                          (4 bytes, only if FLAGS)  |
//!  | [PARTS: part count u32]                      (4 bytes, only if PARTS)  |
//!  | key bytes | value bytes | zero padding to the next multiple of 8       |
//!  +-----------------------------------------------------------------------+
//! ```
//!
//! Byte 0 holds the record state in its high nibble — `0x0` (never written: the end of the
//! segment's log), `0xA` (live), `0xB` (superseded: overwritten, its dead mark waiting for the
//! commit that makes the replacement durable) or `0xD` (dead: deleted or overwritten) — and the
//! optional-field flags in its low nibble. Changing the state rewrites only the high nibble of
//! that one byte, which is atomic on every medium, so the checksum covers everything except
//! that nibble: `crc32c(flags nibble, bytes 1..4, bytes 8..end of value)`.
//!
//! A superseded record is not live for the process that marked it. After a crash it is dead
//! when every store of the crashed process was kept (a process crash on the same boot: its
//! replacement is in the pool too) and live otherwise (after a power loss the mark may have
//! reached the media without the replacement, so it may be the key's newest durable copy).
//!
//! In the wide form byte 1 holds the record's *kind* (what its value is and how it is
//! encoded, [`Kind`]), byte 2 more optional-field flags (bit 0: PARTS, the record owns parts)
//! and byte 3 is zero. A string has kind 0; any other kind, and any record with parts, is
//! always written in the wide form, so a short record is a string and strings cost nothing
//! more. (Before engine format 3 byte 1 of a wide record was zero, so every older record reads
//! as a string; before format 4 byte 2 was zero too.)
//!
//! An item larger than one record is an *owner* record (PARTS set: its part count) and that
//! many *part* records (kind [`Kind::Part`]) numbered `0..count`, each keyed by the owner's key
//! followed by its number (u32 little-endian); what the owner's and the parts' values hold is
//! the owner's kind's business. A part is never a user's item (see `Inner::part_hash`).
//!
//! So a 16-byte key with a 32-byte value and no TTL or flags costs 56 bytes in the segment.

/// Records start at multiples of this.
pub const RECORD_ALIGN_BYTES: usize = 8;
/// Size of the fixed header.
pub const HEADER_SIZE_BYTES: usize = 8;
/// Longest key the record format can hold (and the engine accepts), 64 KiB.
pub const KEY_LEN_MAX: usize = 64 * 1024;
/// Bytes a part's number adds to its owner's key.
pub const PART_NUMBER_BYTES: usize = 4;

const STATE_MASK: u8 = 0xF0;
const STATE_EMPTY: u8 = 0x00;
const STATE_LIVE: u8 = 0xA0;
const STATE_SUPERSEDED: u8 = 0xB0;
const STATE_DEAD: u8 = 0xD0;

/// Whether `state` (a high nibble) is one a record can be in.
fn is_record_state(state: u8) -> bool {
    matches!(state, STATE_LIVE | STATE_SUPERSEDED | STATE_DEAD)
}

const FLAG_WIDE: u8 = 0x01;
const FLAG_EXPIRY: u8 = 0x02;
const FLAG_CAS: u8 = 0x04;
const FLAG_CLIENT_FLAGS: u8 = 0x08;
/// In byte 2 of a wide record.
const FLAG2_PARTS: u8 = 0x01;

const KEY_LEN_SHORT_MAX: usize = u8::MAX as usize;
const VALUE_LEN_SHORT_MAX: usize = u16::MAX as usize;

/// What a record's value is, and how it is encoded (byte 1 of a wide record).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Opaque bytes: memcached items and Redis strings.
    #[default]
    String,
    /// A Redis hash in the compact encoding (`strata-types`' hash format, version 1).
    Hash,
    /// One part of a larger item: its key is the owner's followed by the part's number (see
    /// the module docs). Never a user's item.
    Part,
}

impl Kind {
    /// The byte that stands for it in a record.
    pub const fn code(self) -> u8 {
        match self {
            Kind::String => 0,
            Kind::Hash => 1,
            Kind::Part => 2,
        }
    }

    /// The kind a record's byte stands for; `None` for a byte no kind has.
    pub const fn from_code(code: u8) -> Option<Kind> {
        match code {
            0 => Some(Kind::String),
            1 => Some(Kind::Hash),
            2 => Some(Kind::Part),
            _ => None,
        }
    }
}

/// The fields of a record other than its key and value bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordMeta {
    /// Absolute expiry, Unix milliseconds; `None` never expires.
    pub expires_at_ms: Option<u64>,
    /// A CAS value that overrides the location-derived one (kept across touch).
    pub cas: Option<u64>,
    /// memcached client flags (0 is not stored).
    pub client_flags: u32,
    /// What the value is; anything but a string takes the wide form.
    pub kind: Kind,
    /// How many parts the record owns (0: none; see the module docs); takes the wide form.
    pub parts: u32,
}

/// Makes `key` part `part`'s key: its owner's key followed by the part's number.
pub fn set_part_key(key: &mut Vec<u8>, owner: &[u8], part: u32) {
    key.clear();
    key.extend_from_slice(owner);
    key.extend_from_slice(&part.to_le_bytes());
}

/// The longest owner key whose part keys [`PartKey`] holds on the stack; most keys are far
/// shorter, and a longer one takes the heap.
const PART_KEY_INLINE_OWNER_BYTES_MAX: usize = 60;

/// A part's key ([`set_part_key`]'s bytes) built where a command reads or writes one part: on
/// the stack when its owner's key is short, so the lookup of a large hash's chunk allocates
/// nothing.
pub enum PartKey {
    /// The key's bytes are `bytes[..len]`.
    Inline {
        bytes: [u8; PART_KEY_INLINE_OWNER_BYTES_MAX + PART_NUMBER_BYTES],
        len: usize,
    },
    Heap(Vec<u8>),
}

impl PartKey {
    /// Part `part`'s key of the owner `owner`.
    pub fn new(owner: &[u8], part: u32) -> PartKey {
        if owner.len() > PART_KEY_INLINE_OWNER_BYTES_MAX {
            let mut key = Vec::with_capacity(owner.len() + PART_NUMBER_BYTES);
            set_part_key(&mut key, owner, part);
            return PartKey::Heap(key);
        }
        let mut bytes = [0; PART_KEY_INLINE_OWNER_BYTES_MAX + PART_NUMBER_BYTES];
        let len = owner.len() + PART_NUMBER_BYTES;
        bytes[..owner.len()].copy_from_slice(owner);
        bytes[owner.len()..len].copy_from_slice(&part.to_le_bytes());
        PartKey::Inline { bytes, len }
    }

    pub fn as_bytes(&self) -> &[u8] {
        match self {
            PartKey::Inline { bytes, len } => &bytes[..*len],
            PartKey::Heap(key) => key,
        }
    }
}

/// A part's key split into its owner's key and its number; the key must be a part's (longer
/// than a part number: `decode` refuses a part record with a shorter one).
pub fn split_part_key(key: &[u8]) -> (&[u8], u32) {
    let (owner, number) = key.split_at(key.len() - PART_NUMBER_BYTES);
    (
        owner,
        u32::from_le_bytes(number.try_into().expect("4 bytes")),
    )
}

/// A record as decoded from segment bytes, borrowing its key and value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordView<'a> {
    /// The key.
    pub key: &'a [u8],
    /// The value.
    pub value: &'a [u8],
    /// Optional fields.
    pub meta: RecordMeta,
    /// True unless the record was marked dead or superseded.
    pub live: bool,
    /// Marked superseded: dead unless a crash may have lost its replacement (module docs).
    pub superseded: bool,
    /// Total bytes the record occupies, padding included.
    pub size_bytes: usize,
}

/// What is at an offset of a segment.
#[derive(Debug, PartialEq, Eq)]
pub enum Scan<'a> {
    /// A record that passed its checksum.
    Record(RecordView<'a>),
    /// Zeroes: the end of the segment's log.
    End,
    /// Bytes that are not a valid record (torn write or corruption), and why.
    Invalid(Damage),
}

/// Why stored bytes are not a valid record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Damage {
    /// The state nibble is neither live nor dead, or a zero header (end of log) is followed by
    /// more records.
    State,
    /// The key or value length is impossible or runs past the segment's log.
    Lengths,
    /// The checksum (or the zero padding it implies) does not match.
    Checksum,
    /// An index entry points where no valid record of its key starts.
    Location,
}

impl Damage {
    /// Every cause, in the order stats list them.
    pub const ALL: [Damage; 4] = [
        Damage::State,
        Damage::Lengths,
        Damage::Checksum,
        Damage::Location,
    ];

    /// The cause's name in stats, INFO, metrics and logs.
    pub const fn name(self) -> &'static str {
        match self {
            Damage::State => "state",
            Damage::Lengths => "lengths",
            Damage::Checksum => "checksum",
            Damage::Location => "location",
        }
    }
}

fn optional_fields_size(key_len: usize, value_len: usize, meta: &RecordMeta) -> (u8, usize) {
    let mut flags = 0u8;
    let mut size = 0;
    if key_len > KEY_LEN_SHORT_MAX
        || value_len > VALUE_LEN_SHORT_MAX
        || meta.kind != Kind::String
        || meta.parts != 0
    {
        flags |= FLAG_WIDE;
        size += 8;
    }
    if meta.expires_at_ms.is_some() {
        flags |= FLAG_EXPIRY;
        size += 8;
    }
    if meta.cas.is_some() {
        flags |= FLAG_CAS;
        size += 8;
    }
    if meta.client_flags != 0 {
        flags |= FLAG_CLIENT_FLAGS;
        size += 4;
    }
    if meta.parts != 0 {
        size += 4;
    }
    (flags, size)
}

/// Bytes a record with a key of `key_len` and a value of `value_len` bytes occupies at most:
/// with the wide form and every optional field, padding included.
pub const fn record_size_max(key_len: usize, value_len: usize) -> usize {
    (HEADER_SIZE_BYTES + 8 + 8 + 8 + 4 + 4 + key_len + value_len)
        .next_multiple_of(RECORD_ALIGN_BYTES)
}

/// The largest value whose record, with a key of `key_len` bytes and every optional field,
/// fits in `capacity` bytes.
pub const fn value_len_fitting(capacity: usize, key_len: usize) -> usize {
    (capacity / RECORD_ALIGN_BYTES * RECORD_ALIGN_BYTES)
        .saturating_sub(HEADER_SIZE_BYTES + 8 + 8 + 8 + 4 + 4 + key_len)
}

/// Bytes a record with these sizes and fields occupies, padding included.
pub fn record_size(key_len: usize, value_len: usize, meta: &RecordMeta) -> usize {
    let (_, optional) = optional_fields_size(key_len, value_len, meta);
    (HEADER_SIZE_BYTES + optional + key_len + value_len).next_multiple_of(RECORD_ALIGN_BYTES)
}

/// Writes a live record into `out`, which must be exactly `record_size(..)` bytes: every byte
/// of it, the padding zeroed (a DRAM segment is not zeroed before reuse). Returns the bytes
/// written.
pub fn write(out: &mut [u8], key: &[u8], value: &[u8], meta: &RecordMeta) -> usize {
    write_with(out, key, value.len(), meta, |into| {
        into.copy_from_slice(value)
    })
}

/// [`write`] of a value of `value_len` bytes that `fill` writes in place (every byte of the
/// slice it is given), so a value built of pieces is copied once.
pub fn write_with(
    out: &mut [u8],
    key: &[u8],
    value_len: usize,
    meta: &RecordMeta,
    fill: impl FnOnce(&mut [u8]),
) -> usize {
    let size = record_size(key.len(), value_len, meta);
    assert_eq!(out.len(), size, "record buffer sized by record_size");
    assert!(!key.is_empty() && key.len() <= KEY_LEN_MAX);
    let (flags, _) = optional_fields_size(key.len(), value_len, meta);
    let mut at = HEADER_SIZE_BYTES;
    if flags & FLAG_WIDE == 0 {
        out[1] = key.len() as u8;
        out[2..4].copy_from_slice(&(value_len as u16).to_le_bytes());
    } else {
        out[1] = meta.kind.code();
        out[2] = if meta.parts != 0 { FLAG2_PARTS } else { 0 };
        out[3] = 0;
        out[at..at + 4].copy_from_slice(&(key.len() as u32).to_le_bytes());
        out[at + 4..at + 8].copy_from_slice(&(value_len as u32).to_le_bytes());
        at += 8;
    }
    if let Some(expires_at_ms) = meta.expires_at_ms {
        out[at..at + 8].copy_from_slice(&expires_at_ms.to_le_bytes());
        at += 8;
    }
    if let Some(cas) = meta.cas {
        out[at..at + 8].copy_from_slice(&cas.to_le_bytes());
        at += 8;
    }
    if meta.client_flags != 0 {
        out[at..at + 4].copy_from_slice(&meta.client_flags.to_le_bytes());
        at += 4;
    }
    if meta.parts != 0 {
        out[at..at + 4].copy_from_slice(&meta.parts.to_le_bytes());
        at += 4;
    }
    out[at..at + key.len()].copy_from_slice(key);
    at += key.len();
    fill(&mut out[at..at + value_len]);
    at += value_len;
    out[at..].fill(0);
    out[0] = STATE_LIVE | flags;
    let crc = checksum(out, at);
    out[4..8].copy_from_slice(&crc.to_le_bytes());
    size
}

fn checksum(record: &[u8], end: usize) -> u32 {
    // The flags nibble and bytes 1..4 as one 4-byte piece: one call fewer than two pieces.
    let head = [record[0] & !STATE_MASK, record[1], record[2], record[3]];
    crc32c::crc32c_append(crc32c::crc32c(&head), &record[HEADER_SIZE_BYTES..end])
}

/// Decodes the record at the start of `bytes` (the rest of the segment from an offset).
pub fn read(bytes: &[u8]) -> Scan<'_> {
    if bytes.len() < HEADER_SIZE_BYTES {
        return if bytes.iter().all(|&b| b == 0) {
            Scan::End
        } else {
            Scan::Invalid(Damage::Lengths)
        };
    }
    let state = bytes[0] & STATE_MASK;
    let flags = bytes[0] & !STATE_MASK;
    if state == STATE_EMPTY && bytes[..HEADER_SIZE_BYTES].iter().all(|&b| b == 0) {
        return Scan::End;
    }
    if !is_record_state(state) {
        return Scan::Invalid(Damage::State);
    }
    match decode(bytes, flags, state) {
        Ok(view) => Scan::Record(view),
        Err(damage) => Scan::Invalid(damage),
    }
}

/// The lengths and optional fields after the 8-byte header: `(key_len, value_len, meta, offset
/// of the key)`, or `None` when they run past `bytes`. Shared by the checked and the trusted
/// read; always inlined, since as a call it cost the read path ~40 instructions per GET.
#[inline(always)]
fn fields(bytes: &[u8], flags: u8) -> Option<(usize, usize, RecordMeta, usize)> {
    let mut at = HEADER_SIZE_BYTES;
    let (key_len, value_len) = if flags & FLAG_WIDE == 0 {
        (
            bytes[1] as usize,
            u16::from_le_bytes([bytes[2], bytes[3]]) as usize,
        )
    } else {
        let lens = bytes.get(at..at + 8)?;
        at += 8;
        (
            u32::from_le_bytes(lens[..4].try_into().ok()?) as usize,
            u32::from_le_bytes(lens[4..].try_into().ok()?) as usize,
        )
    };
    let mut meta = RecordMeta::default();
    if flags & FLAG_WIDE != 0 {
        meta.kind = Kind::from_code(bytes[1])?;
    }
    if flags & FLAG_EXPIRY != 0 {
        meta.expires_at_ms = Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?));
        at += 8;
    }
    if flags & FLAG_CAS != 0 {
        meta.cas = Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?));
        at += 8;
    }
    if flags & FLAG_CLIENT_FLAGS != 0 {
        meta.client_flags = u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?);
        at += 4;
    }
    if flags & FLAG_WIDE != 0 && bytes[2] & FLAG2_PARTS != 0 {
        meta.parts = u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?);
        at += 4;
    }
    Some((key_len, value_len, meta, at))
}

fn decode(bytes: &[u8], flags: u8, state: u8) -> Result<RecordView<'_>, Damage> {
    let (key_len, value_len, meta, at) = fields(bytes, flags).ok_or(Damage::Lengths)?;
    let wide = flags & FLAG_WIDE != 0;
    if key_len == 0
        || key_len > KEY_LEN_MAX
        || (wide && (bytes[2] & !FLAG2_PARTS != 0 || bytes[3] != 0))
        || (wide && bytes[2] & FLAG2_PARTS != 0 && meta.parts == 0)
        || (wide
            && key_len <= KEY_LEN_SHORT_MAX
            && value_len <= VALUE_LEN_SHORT_MAX
            && meta.kind == Kind::String
            && meta.parts == 0)
        || (meta.kind == Kind::Part && (key_len <= PART_NUMBER_BYTES || meta.parts != 0))
    {
        return Err(Damage::Lengths);
    }
    let end = at
        .checked_add(key_len)
        .and_then(|end| end.checked_add(value_len))
        .ok_or(Damage::Lengths)?;
    let size_bytes = end.next_multiple_of(RECORD_ALIGN_BYTES);
    if size_bytes > bytes.len() {
        return Err(Damage::Lengths);
    }
    let stored_crc = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
    if bytes[end..size_bytes].iter().any(|&b| b != 0) || checksum(bytes, end) != stored_crc {
        return Err(Damage::Checksum);
    }
    Ok(RecordView {
        key: &bytes[at..at + key_len],
        value: &bytes[at + key_len..end],
        meta,
        live: state == STATE_LIVE,
        superseded: state == STATE_SUPERSEDED,
        size_bytes,
    })
}

/// Decodes a record known to be valid (validated or written since this process opened the
/// pool) without checking its checksum: the read path. `None` if the bytes cannot be a record
/// at all, which would be a bug; it never panics on any bytes.
#[inline]
pub fn read_trusted(bytes: &[u8]) -> Option<RecordView<'_>> {
    if bytes.len() < HEADER_SIZE_BYTES {
        return None;
    }
    let state = bytes[0] & STATE_MASK;
    if !is_record_state(state) {
        return None;
    }
    let (key_len, value_len, meta, at) = fields(bytes, bytes[0] & !STATE_MASK)?;
    let end = at.checked_add(key_len)?.checked_add(value_len)?;
    Some(RecordView {
        key: bytes.get(at..at + key_len)?,
        value: bytes.get(at + key_len..end)?,
        meta,
        live: state == STATE_LIVE,
        superseded: state == STATE_SUPERSEDED,
        size_bytes: end.next_multiple_of(RECORD_ALIGN_BYTES),
    })
}

/// The size a record at the start of `bytes` declares (header and optional fields decoded,
/// nothing checked): enough of a record's first bytes to know how many to read. `None` when
/// they cannot start a record.
pub fn declared_size(bytes: &[u8]) -> Option<usize> {
    if bytes.len() < HEADER_SIZE_BYTES {
        return None;
    }
    let state = bytes[0] & STATE_MASK;
    if !is_record_state(state) {
        return None;
    }
    let (key_len, value_len, _, at) = fields(bytes, bytes[0] & !STATE_MASK)?;
    let end = at.checked_add(key_len)?.checked_add(value_len)?;
    Some(end.next_multiple_of(RECORD_ALIGN_BYTES))
}

/// One step of a [`walk`] over a segment's log.
#[derive(Debug, PartialEq, Eq)]
pub enum Step<'a> {
    /// A valid record at `offset`.
    Record {
        /// Where it starts.
        offset: usize,
        /// The record.
        view: RecordView<'a>,
    },
    /// `len` bytes at `offset` that are not valid records, followed by a valid record.
    Damaged {
        /// Where the damage starts.
        offset: usize,
        /// Bytes up to the next valid record.
        len: usize,
        /// What was wrong at `offset`.
        cause: Damage,
    },
    /// Bytes at `offset` that are not a valid record and after which no valid record follows:
    /// the log ends in them (a write torn by a crash, or damage at the log's end).
    Tail {
        /// Where the invalid bytes start.
        offset: usize,
        /// What was wrong at `offset`.
        cause: Damage,
    },
}

/// Walks the records of a log (`data`, a segment's bytes up to where its records may lie),
/// validating each. Unlike a plain scan it does not give up at the first invalid record: it
/// looks for the next valid record at each later 8-byte boundary (zero words are skipped
/// fast), so damage costs only the damaged bytes. The walk ends at a zero header followed only
/// by zeros (the end of the log) or at the end of `data`.
pub fn walk(data: &[u8]) -> Walk<'_> {
    Walk { data, offset: 0 }
}

/// The iterator of [`walk`].
#[derive(Debug)]
pub struct Walk<'a> {
    data: &'a [u8],
    offset: usize,
}

impl<'a> Walk<'a> {
    /// Where the walk stands: after the last record or damage it returned, or, once it has
    /// ended, the end of the log (where a zero tail starts).
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The first offset at or after `from` (8-byte aligned) where a valid record starts.
    fn resync(&self, from: usize) -> Option<usize> {
        let mut at = from;
        while at + HEADER_SIZE_BYTES <= self.data.len() {
            if self.data[at..at + HEADER_SIZE_BYTES] == [0; HEADER_SIZE_BYTES] {
                at += RECORD_ALIGN_BYTES;
                continue;
            }
            if let Scan::Record(_) = read(&self.data[at..]) {
                return Some(at);
            }
            at += RECORD_ALIGN_BYTES;
        }
        None
    }
}

impl<'a> Iterator for Walk<'a> {
    type Item = Step<'a>;

    fn next(&mut self) -> Option<Step<'a>> {
        let data: &'a [u8] = self.data;
        let offset = self.offset;
        if offset >= data.len() {
            return None;
        }
        let cause = match read(&data[offset..]) {
            Scan::Record(view) => {
                self.offset += view.size_bytes;
                return Some(Step::Record { offset, view });
            }
            Scan::End if data[offset..].iter().all(|&b| b == 0) => return None,
            Scan::End => Damage::State,
            Scan::Invalid(cause) => cause,
        };
        match self.resync(offset + RECORD_ALIGN_BYTES) {
            Some(next) => {
                self.offset = next;
                Some(Step::Damaged {
                    offset,
                    len: next - offset,
                    cause,
                })
            }
            None => {
                self.offset = data.len();
                Some(Step::Tail { offset, cause })
            }
        }
    }
}

/// Whether the record starting at `bytes[0]` is marked superseded.
pub fn is_superseded(bytes: &[u8]) -> bool {
    bytes[0] & STATE_MASK == STATE_SUPERSEDED
}

/// Marks the live or superseded record starting at `bytes[0]` dead. Only byte 0's high nibble
/// changes.
pub fn mark_dead(bytes: &mut [u8]) {
    let state = bytes[0] & STATE_MASK;
    assert!(
        state == STATE_LIVE || state == STATE_SUPERSEDED,
        "only live or superseded records are marked dead"
    );
    bytes[0] = STATE_DEAD | (bytes[0] & !STATE_MASK);
}

/// Marks the superseded record starting at `bytes[0]` live again: recovery, when a crash may
/// have lost its replacement (see the module docs). Only byte 0's high nibble changes.
pub fn mark_live(bytes: &mut [u8]) {
    assert_eq!(
        bytes[0] & STATE_MASK,
        STATE_SUPERSEDED,
        "only superseded records are marked live again"
    );
    bytes[0] = STATE_LIVE | (bytes[0] & !STATE_MASK);
}

/// Marks the live record starting at `bytes[0]` superseded (see the module docs). Only byte 0's
/// high nibble changes.
pub fn mark_superseded(bytes: &mut [u8]) {
    assert_eq!(
        bytes[0] & STATE_MASK,
        STATE_LIVE,
        "only live records are marked superseded"
    );
    bytes[0] = STATE_SUPERSEDED | (bytes[0] & !STATE_MASK);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_key_on_the_stack_or_the_heap_is_set_part_keys_bytes() {
        let mut expected = Vec::new();
        for owner_len in [1, 59, 60, 61, 250, KEY_LEN_MAX] {
            let owner: Vec<u8> = (0..owner_len).map(|i| (i % 251) as u8).collect();
            for part in [0, 1, 0x0102_0304, u32::MAX] {
                set_part_key(&mut expected, &owner, part);
                let key = PartKey::new(&owner, part);
                assert_eq!(key.as_bytes(), &expected[..]);
                assert_eq!(split_part_key(key.as_bytes()), (&owner[..], part));
                let inline = owner_len <= PART_KEY_INLINE_OWNER_BYTES_MAX;
                assert_eq!(matches!(key, PartKey::Inline { .. }), inline);
            }
        }
    }

    fn encode(key: &[u8], value: &[u8], meta: RecordMeta) -> Vec<u8> {
        let mut out = vec![0u8; record_size(key.len(), value.len(), &meta)];
        write(&mut out, key, value, &meta);
        out
    }

    #[test]
    fn a_small_item_costs_56_bytes() {
        assert_eq!(record_size(16, 32, &RecordMeta::default()), 56);
        let with_ttl = RecordMeta {
            expires_at_ms: Some(1),
            ..RecordMeta::default()
        };
        assert_eq!(record_size(16, 32, &with_ttl), 64);
    }

    #[test]
    fn records_round_trip_in_every_form() {
        let metas = [
            RecordMeta::default(),
            RecordMeta {
                expires_at_ms: Some(1_700_000_000_123),
                cas: None,
                client_flags: 0,
                kind: Kind::String,
                parts: 0,
            },
            RecordMeta {
                expires_at_ms: None,
                cas: Some(u64::MAX),
                client_flags: 0xDEAD_BEEF,
                kind: Kind::String,
                parts: 0,
            },
            RecordMeta {
                expires_at_ms: Some(5),
                cas: Some(6),
                client_flags: 7,
                kind: Kind::String,
                parts: 0,
            },
            RecordMeta {
                kind: Kind::Hash,
                ..RecordMeta::default()
            },
            RecordMeta {
                expires_at_ms: Some(9),
                kind: Kind::Hash,
                ..RecordMeta::default()
            },
            RecordMeta {
                parts: 1,
                ..RecordMeta::default()
            },
            RecordMeta {
                expires_at_ms: Some(9),
                cas: Some(10),
                client_flags: 11,
                kind: Kind::Hash,
                parts: u32::MAX,
            },
        ];
        let long_key = vec![b'k'; 300];
        let long_value = vec![b'v'; 70_000];
        for meta in metas {
            for (key, value) in [
                (&b"k"[..], &b""[..]),
                (b"key", b"value"),
                (&long_key, b"v"),
                (b"k", &long_value),
            ] {
                let bytes = encode(key, value, meta);
                assert_eq!(bytes.len() % RECORD_ALIGN_BYTES, 0);
                let Scan::Record(view) = read(&bytes) else {
                    panic!("valid record refused")
                };
                assert_eq!((view.key, view.value, view.meta), (key, value, meta));
                assert!(view.live);
                assert_eq!(view.size_bytes, bytes.len());
                assert_eq!(read_trusted(&bytes), Some(view));
            }
        }
    }

    #[test]
    fn a_typed_record_takes_the_wide_form_and_an_unknown_kind_is_damage() {
        let hash = RecordMeta {
            kind: Kind::Hash,
            ..RecordMeta::default()
        };
        assert_eq!(record_size(16, 32, &hash), 64, "8 bytes of wide lengths");
        let mut bytes = encode(b"key", b"fields", hash);
        assert_eq!(bytes[0] & FLAG_WIDE, FLAG_WIDE);
        assert_eq!(bytes[1], Kind::Hash.code());
        // A kind no build knows, with a checksum that holds: refused, never read as a string.
        bytes[1] = 0x7F;
        let end = HEADER_SIZE_BYTES + 8 + 3 + 6;
        let crc = checksum(&bytes, end);
        bytes[4..8].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(read(&bytes), Scan::Invalid(Damage::Lengths));
        assert_eq!(read_trusted(&bytes), None);
        // A short string written in the wide form is not one this format writes.
        let mut string = encode(b"key", b"fields", hash);
        string[1] = Kind::String.code();
        let crc = checksum(&string, end);
        string[4..8].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(read(&string), Scan::Invalid(Damage::Lengths));
    }

    #[test]
    fn parts_and_owners_round_trip_and_their_impossible_forms_are_damage() {
        let part = RecordMeta {
            kind: Kind::Part,
            ..RecordMeta::default()
        };
        let mut key = Vec::new();
        set_part_key(&mut key, b"owner", 7);
        assert_eq!(split_part_key(&key), (&b"owner"[..], 7));
        let bytes = encode(&key, b"chunk", part);
        let Scan::Record(view) = read(&bytes) else {
            panic!("valid part refused")
        };
        assert_eq!(
            (view.key, view.value, view.meta),
            (&key[..], &b"chunk"[..], part)
        );
        let owner = RecordMeta {
            kind: Kind::Hash,
            parts: 3,
            ..RecordMeta::default()
        };
        assert_eq!(
            record_size(16, 32, &owner),
            72,
            "wide lengths and the part count"
        );
        let bytes = encode(b"owner", b"directory", owner);
        assert_eq!(bytes[2], FLAG2_PARTS);
        let Scan::Record(view) = read(&bytes) else {
            panic!("valid owner refused")
        };
        assert_eq!(view.meta.parts, 3);
        // Each with a checksum that holds: a part whose key cannot hold a number, a part that
        // owns parts, an owner of zero parts, a flag no build knows.
        let reseal = |mut bytes: Vec<u8>| {
            let end = bytes.len() - bytes.iter().rev().take_while(|&&b| b == 0).count();
            let crc = checksum(&bytes, end);
            bytes[4..8].copy_from_slice(&crc.to_le_bytes());
            bytes
        };
        let short = encode(b"abcd", b"chunk", part);
        assert_eq!(read(&short), Scan::Invalid(Damage::Lengths));
        let mut owning_part = encode(b"owner", b"directory", owner);
        owning_part[1] = Kind::Part.code();
        assert_eq!(read(&reseal(owning_part)), Scan::Invalid(Damage::Lengths));
        let mut zero = encode(b"owner", b"directory", owner);
        zero[HEADER_SIZE_BYTES + 8..HEADER_SIZE_BYTES + 12].fill(0);
        assert_eq!(read(&reseal(zero)), Scan::Invalid(Damage::Lengths));
        let mut unknown = encode(b"owner", b"directory", owner);
        unknown[2] |= 0x02;
        assert_eq!(read(&reseal(unknown)), Scan::Invalid(Damage::Lengths));
    }

    #[test]
    fn marking_superseded_or_dead_keeps_the_checksum_valid() {
        let mut bytes = encode(
            b"key",
            b"value",
            RecordMeta {
                client_flags: 3,
                ..Default::default()
            },
        );
        mark_superseded(&mut bytes);
        let Scan::Record(view) = read(&bytes) else {
            panic!("superseded record must still decode")
        };
        assert!(!view.live && view.superseded);
        mark_dead(&mut bytes);
        let Scan::Record(view) = read(&bytes) else {
            panic!("dead record must still decode")
        };
        assert!(!view.live && !view.superseded);
        assert_eq!(view.meta.client_flags, 3);
    }

    #[test]
    fn every_bit_flip_is_detected() {
        let mut part_name = Vec::new();
        set_part_key(&mut part_name, b"some key", 3);
        let records = [
            encode(
                b"some key",
                b"some value!",
                RecordMeta {
                    expires_at_ms: Some(9),
                    ..Default::default()
                },
            ),
            // An owner (its part count in the wide header) and a part.
            encode(
                b"some key",
                b"some value!",
                RecordMeta {
                    kind: Kind::Hash,
                    parts: 4,
                    ..Default::default()
                },
            ),
            encode(
                &part_name,
                b"some value!",
                RecordMeta {
                    kind: Kind::Part,
                    ..Default::default()
                },
            ),
        ];
        for bytes in records {
            every_bit_flip_of_is_detected(&bytes);
        }
    }

    fn every_bit_flip_of_is_detected(bytes: &[u8]) {
        for byte in 0..bytes.len() {
            for bit in 0..8 {
                let mut bad = bytes.to_vec();
                bad[byte] ^= 1 << bit;
                if byte == 0 && matches!(bad[0] & STATE_MASK, STATE_DEAD | STATE_SUPERSEDED) {
                    continue; // a flip of the state nibble to dead or superseded is legal
                }
                if let Scan::Record(view) = read(&bad) {
                    panic!("flip of byte {byte} bit {bit} accepted: {view:?}");
                }
            }
        }
    }

    #[test]
    fn zeroes_are_the_end_and_garbage_is_invalid() {
        assert_eq!(read(&[0u8; 64]), Scan::End);
        assert_eq!(read(&[0u8; 3]), Scan::End);
        assert_eq!(read(&[0x55u8; 64]), Scan::Invalid(Damage::State));
        let mut torn = encode(b"key", b"value", RecordMeta::default());
        let last = torn.len() - 4;
        torn[last..].fill(0xFF);
        assert_eq!(read(&torn), Scan::Invalid(Damage::Checksum));
        let mut long = encode(b"key", b"value", RecordMeta::default());
        long[2] = 0xFF; // value length past the bytes
        assert_eq!(read(&long), Scan::Invalid(Damage::Lengths));
    }

    #[test]
    fn the_trusted_read_never_panics() {
        let mut rng = 0x1234_5678_9ABC_DEF0u64;
        for len in 0..80 {
            for _ in 0..200 {
                let bytes: Vec<u8> = (0..len)
                    .map(|_| {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        rng as u8
                    })
                    .collect();
                let _ = read_trusted(&bytes);
                let _ = read(&bytes);
            }
        }
    }

    /// A log of `records` records of increasing size, as a segment holds them, zero-padded to
    /// `len` bytes; returns it and each record's offset.
    fn log(records: usize, len: usize) -> (Vec<u8>, Vec<usize>) {
        let mut out = Vec::new();
        let mut offsets = Vec::new();
        for i in 0..records {
            offsets.push(out.len());
            let value = vec![b'a' + (i % 26) as u8; 10 + 7 * i];
            out.extend(encode(
                format!("key{i}").as_bytes(),
                &value,
                RecordMeta::default(),
            ));
        }
        out.resize(len, 0);
        (out, offsets)
    }

    fn offsets_walked(data: &[u8]) -> (Vec<usize>, Vec<(usize, Damage)>, usize) {
        let mut records = Vec::new();
        let mut damage = Vec::new();
        let mut walk = walk(data);
        for step in walk.by_ref() {
            match step {
                Step::Record { offset, .. } => records.push(offset),
                Step::Damaged { offset, cause, .. } | Step::Tail { offset, cause } => {
                    damage.push((offset, cause))
                }
            }
        }
        (records, damage, walk.offset())
    }

    #[test]
    fn a_walk_skips_damage_and_keeps_every_record_after_it() {
        let (clean, offsets) = log(20, 4096);
        let log_end = (clean.iter().rposition(|&b| b != 0).unwrap() + 1).next_multiple_of(8);
        let (records, damage, end) = offsets_walked(&clean);
        assert_eq!((records, damage), (offsets.clone(), vec![]));
        assert_eq!(end, log_end, "a walk ends where the zero tail starts");
        // One flipped value byte in record 5: only record 5 is lost.
        let mut flipped = clean.clone();
        flipped[offsets[5] + 20] ^= 0x01;
        let (records, damage, _) = offsets_walked(&flipped);
        let expected: Vec<usize> = offsets
            .iter()
            .copied()
            .filter(|&o| o != offsets[5])
            .collect();
        assert_eq!(records, expected);
        assert_eq!(damage, vec![(offsets[5], Damage::Checksum)]);
        // Records 7..9 zeroed: the zeros are damage (records follow), not the end of the log.
        let mut zeroed = clean.clone();
        zeroed[offsets[7]..offsets[10]].fill(0);
        let (records, damage, _) = offsets_walked(&zeroed);
        assert_eq!(records.len(), 17);
        assert_eq!(damage, vec![(offsets[7], Damage::State)]);
        // A torn last record: its bytes are the tail, nothing is found after it.
        let mut torn = clean.clone();
        let last = offsets[19];
        torn[last + 12..last + 20].fill(0);
        let (records, damage, _) = offsets_walked(&torn);
        assert_eq!(records, offsets[..19].to_vec());
        assert_eq!(damage, vec![(last, Damage::Checksum)]);
    }
}
