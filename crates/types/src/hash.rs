//! A Redis hash: fields with values, each field with an optional expiry (Redis 7.4's HEXPIRE).
//!
//! The compact encoding, version 1 (all integers little-endian):
//!
//! ```text
//!  0         1                 5                 9                      17
//!  +---------+-----------------+-----------------+----------------------+----------------+
//!  | version | count (u32)     | expiring (u32)  | key_expiry (u64)     | count entries, |
//!  |         |                 |                 | Unix ms, 0: none     | in field order |
//!  +---------+-----------------+-----------------+----------------------+----------------+
//!
//!  entry:  | varint name_len << 1 | has_expiry | [expires_at unix ms u64] | name |
//!          | varint value_len | value |
//! ```
//!
//! `count` is the number of entries, `expiring` how many of them carry an expiry (so a hash
//! with none answers HLEN without a walk). `key_expiry` is the key's own TTL, as EXPIRE set it
//! (what TTL reports): the record's expiry is the earlier of it and, when every field has an
//! expiry, the latest of those ([`Hash::record_expiry`]), so the key goes with its last
//! field, as in Redis. Varints are unsigned LEB128. Fields keep the order
//! they were first set in (an update keeps its place), as Redis's listpack does, so small
//! hashes list their fields in the order Redis lists them. A field is expired at and after its
//! expiry; expired fields are invisible to every read and are dropped by the next rewrite.
//! An encoding holds at least one entry: the last field's removal deletes the key.
//!
//! Names and values are opaque bytes of any length the record holds; a field name is unique
//! within a hash.

use crate::{put_varint, take_varint, Malformed};

/// The first byte of this encoding.
pub const VERSION: u8 = 1;
/// Bytes before the first entry.
pub const HEADER_BYTES: usize = 17;
/// Redis's `hash-max-listpack-entries` default: OBJECT ENCODING says `listpack` up to it.
pub const LISTPACK_ENTRIES_MAX: usize = 128;
/// Redis's `hash-max-listpack-value` default: OBJECT ENCODING says `listpack` while every name
/// and value is at most this long.
pub const LISTPACK_VALUE_BYTES_MAX: usize = 64;

/// One field of a hash, borrowing the encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field<'a> {
    /// The field's name.
    pub name: &'a [u8],
    /// Its value.
    pub value: &'a [u8],
    /// When it expires, Unix ms; `None` never.
    pub expires_at_ms: Option<u64>,
}

impl Field<'_> {
    /// Whether it has not expired at `now_ms`.
    pub fn is_live(&self, now_ms: u64) -> bool {
        self.expires_at_ms.is_none_or(|at| at > now_ms)
    }
}

/// A validated hash encoding.
#[derive(Clone, Copy, Debug)]
pub struct Hash<'a> {
    entries: &'a [u8],
    count: u32,
    expiring: u32,
    key_expiry_ms: Option<u64>,
}

/// The record's expiry for a hash whose key expires at `key_expiry_ms` and whose fields, if
/// every one of them expires, are gone at `fields_gone_ms`: the earlier.
pub fn record_expiry(key_expiry_ms: Option<u64>, fields_gone_ms: Option<u64>) -> Option<u64> {
    match (key_expiry_ms, fields_gone_ms) {
        (Some(key), Some(fields)) => Some(key.min(fields)),
        (key, fields) => key.or(fields),
    }
}

/// Sets the key's own expiry in an encoding (bytes 9..17; see the module docs).
pub fn set_key_expiry(bytes: &mut [u8], key_expiry_ms: Option<u64>) {
    bytes[9..17].copy_from_slice(&key_expiry_ms.unwrap_or(0).to_le_bytes());
}

impl<'a> Hash<'a> {
    /// Validates `bytes` as a hash encoding: the header, every entry within the bytes, and
    /// nothing after the last one.
    pub fn parse(bytes: &'a [u8]) -> Result<Hash<'a>, Malformed> {
        let hash = Hash::open(bytes)?;
        hash.try_stored(|_| {})?;
        Ok(hash)
    }

    /// Calls `f` with every stored field, expired ones included, in order, checking each
    /// entry as it walks and, at the end, that the entries are what the header counts: `Err`
    /// at the first damage, after `f` may have seen the fields before it (the caller drops
    /// what it made of them). A reader of every field of a hash [`Hash::open`] did not
    /// validate walks it this way, once.
    pub fn try_stored(&self, mut f: impl FnMut(Field<'a>)) -> Result<(), Malformed> {
        self.try_stored_spans(|field, _| f(field))
    }

    /// [`Hash::try_stored`], with where each entry lies in [`Hash::entries`] (as
    /// [`Hash::stored_spans`] gives it).
    pub fn try_stored_spans(
        &self,
        mut f: impl FnMut(Field<'a>, std::ops::Range<usize>),
    ) -> Result<(), Malformed> {
        let (mut at, mut seen, mut seen_expiring) = (0, 0u32, 0u32);
        while at < self.entries.len() {
            let start = at;
            let field = next_entry(self.entries, &mut at).ok_or(Malformed)?;
            seen = seen.checked_add(1).ok_or(Malformed)?;
            seen_expiring += u32::from(field.expires_at_ms.is_some());
            f(field, start..at);
        }
        if seen != self.count || seen_expiring != self.expiring {
            return Err(Malformed);
        }
        Ok(())
    }

    /// Checks `bytes`' header only, for a read of a few fields by name ([`Hash::find`], which
    /// checks the entries its walk passes): a point read of a large hash then costs one walk
    /// to its field, not a validation of every entry first; [`Hash::try_stored`] walks every
    /// field the same way. Every other use takes [`Hash::parse`]: the other readers here
    /// (`get`, `stored`, `live`, `len` with expiring fields) trust the entries they walk and
    /// stop silently at damage.
    pub fn open(bytes: &'a [u8]) -> Result<Hash<'a>, Malformed> {
        if bytes.len() < HEADER_BYTES || bytes[0] != VERSION {
            return Err(Malformed);
        }
        let count = u32::from_le_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]);
        let expiring = u32::from_le_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]);
        let key_expiry = u64::from_le_bytes(bytes[9..17].try_into().map_err(|_| Malformed)?);
        if count == 0 || expiring > count {
            return Err(Malformed);
        }
        Ok(Hash {
            entries: &bytes[HEADER_BYTES..],
            count,
            expiring,
            key_expiry_ms: (key_expiry != 0).then_some(key_expiry),
        })
    }

    /// The live field named `name`, walking to it and checking every entry the walk passes:
    /// `Err` when one of them (all of them, for a name not there) is damaged, or, for a name
    /// not there, when the entries are not the header's count. Safe on a hash [`Hash::open`]
    /// did not validate; on one [`Hash::parse`] did, it is [`Hash::get`].
    pub fn find(&self, name: &[u8], now_ms: u64) -> Result<Option<Field<'a>>, Malformed> {
        let found = self.find_entry(name)?;
        Ok(found
            .map(|(field, _, _)| field)
            .filter(|field| field.is_live(now_ms)))
    }

    /// The field named `name`, expired or not, with where its entry lies in [`Hash::entries`]
    /// and how many entries come before it, checked as [`Hash::find`] checks: what a write
    /// that replaces one field needs to copy the entries around it as they are.
    pub fn find_entry(
        &self,
        name: &[u8],
    ) -> Result<Option<(Field<'a>, std::ops::Range<usize>, u32)>, Malformed> {
        let (mut at, mut seen) = (0, 0u32);
        while at < self.entries.len() {
            let start = at;
            let field = next_entry(self.entries, &mut at).ok_or(Malformed)?;
            if same_name(field.name, name) {
                return Ok(Some((field, start..at, seen)));
            }
            seen = seen.checked_add(1).ok_or(Malformed)?;
        }
        if seen != self.count {
            return Err(Malformed);
        }
        Ok(None)
    }

    /// Every stored field, expired ones included, in order.
    pub fn stored(&self) -> Fields<'a> {
        Fields {
            entries: self.entries,
            at: 0,
        }
    }

    /// Every stored field with where its entry lies in [`Hash::entries`], in order: a rewrite
    /// copies runs of entries it keeps as they are ([`Builder::push_encoded`]).
    pub fn stored_spans(&self) -> impl Iterator<Item = (Field<'a>, std::ops::Range<usize>)> {
        let mut fields = self.stored();
        std::iter::from_fn(move || {
            let start = fields.at;
            let field = fields.next()?;
            Some((field, start..fields.at))
        })
    }

    /// The encoded entries (after the header).
    pub fn entries(&self) -> &'a [u8] {
        self.entries
    }

    /// The fields live at `now_ms`, in order.
    pub fn live(&self, now_ms: u64) -> impl Iterator<Item = Field<'a>> {
        self.stored().filter(move |field| field.is_live(now_ms))
    }

    /// The live field named `name`.
    pub fn get(&self, name: &[u8], now_ms: u64) -> Option<Field<'a>> {
        self.stored()
            .find(|field| same_name(field.name, name))
            .filter(|field| field.is_live(now_ms))
    }

    /// How many fields are live at `now_ms`.
    pub fn len(&self, now_ms: u64) -> usize {
        if self.expiring == 0 {
            self.count as usize
        } else {
            self.live(now_ms).count()
        }
    }

    /// Whether no field is live at `now_ms` (the key then reads as absent).
    pub fn is_empty(&self, now_ms: u64) -> bool {
        self.len(now_ms) == 0
    }

    /// Entries stored, expired ones included.
    pub fn stored_len(&self) -> usize {
        self.count as usize
    }

    /// Whether any field carries an expiry.
    pub fn has_expiring(&self) -> bool {
        self.expiring > 0
    }

    /// Entries stored that carry an expiry (expired ones included).
    pub fn expiring_len(&self) -> usize {
        self.expiring as usize
    }

    /// The key's own expiry (EXPIRE's; what TTL reports), Unix ms.
    pub fn key_expiry_ms(&self) -> Option<u64> {
        self.key_expiry_ms
    }

    /// When the last field goes, if every field has an expiry.
    pub fn fields_gone_ms(&self) -> Option<u64> {
        if self.expiring != self.count {
            return None;
        }
        self.latest_expiry_ms()
    }

    /// The latest expiry of a stored field (`None` when none has one): a walk of the entries
    /// only when some field expires.
    pub fn latest_expiry_ms(&self) -> Option<u64> {
        if self.expiring == 0 {
            return None;
        }
        self.stored().filter_map(|field| field.expires_at_ms).max()
    }

    /// The name Redis's OBJECT ENCODING gives a hash like this one: `listpack` while it has
    /// at most [`LISTPACK_ENTRIES_MAX`] fields, none longer than [`LISTPACK_VALUE_BYTES_MAX`]
    /// bytes (name or value), and `hashtable` past that. strata has one encoding for both.
    pub fn redis_encoding(&self, now_ms: u64) -> &'static str {
        let small = self.len(now_ms) <= LISTPACK_ENTRIES_MAX
            && self.live(now_ms).all(|field| {
                field.name.len() <= LISTPACK_VALUE_BYTES_MAX
                    && field.value.len() <= LISTPACK_VALUE_BYTES_MAX
            });
        if small {
            "listpack"
        } else {
            "hashtable"
        }
    }
}

/// The iterator of [`Hash::stored`].
#[derive(Clone, Debug)]
pub struct Fields<'a> {
    entries: &'a [u8],
    at: usize,
}

impl<'a> Iterator for Fields<'a> {
    type Item = Field<'a>;

    fn next(&mut self) -> Option<Field<'a>> {
        next_entry(self.entries, &mut self.at)
    }
}

/// Decodes the entry at `*at`, moving past it; `None` at the end or when it runs past.
fn next_entry<'a>(entries: &'a [u8], at: &mut usize) -> Option<Field<'a>> {
    if *at >= entries.len() {
        return None;
    }
    let head = take_varint(entries, at)?;
    let expires_at_ms = if head & 1 == 1 {
        let bytes = entries.get(*at..*at + 8)?;
        *at += 8;
        Some(u64::from_le_bytes(bytes.try_into().ok()?))
    } else {
        None
    };
    let name = take(entries, at, head >> 1)?;
    let value_len = take_varint(entries, at)?;
    let value = take(entries, at, value_len)?;
    Some(Field {
        name,
        value,
        expires_at_ms,
    })
}

/// Whether two field names are the same, comparing their lengths and last bytes before the
/// rest: a walk compares the name it looks for with every name it passes, and names of one
/// hash often share their length and first bytes (`field1`, `field2`, ...), where a whole
/// comparison is a call into `memcmp` per entry.
#[inline]
pub fn same_name(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.last() == b.last() && a == b
}

fn take<'a>(bytes: &'a [u8], at: &mut usize, len: u64) -> Option<&'a [u8]> {
    let len = usize::try_from(len).ok()?;
    let slice = bytes.get(*at..at.checked_add(len)?)?;
    *at += len;
    Some(slice)
}

/// Writes a hash encoding into a buffer, one field at a time. The caller keeps names unique.
#[derive(Debug)]
pub struct Builder<'o> {
    out: &'o mut Vec<u8>,
    start: usize,
    count: u32,
    expiring: u32,
    latest_expiry_ms: u64,
}

impl<'o> Builder<'o> {
    /// Starts an encoding at the end of `out`.
    pub fn new(out: &'o mut Vec<u8>) -> Builder<'o> {
        let start = out.len();
        out.push(VERSION);
        out.extend_from_slice(&[0; HEADER_BYTES - 1]);
        Builder {
            out,
            start,
            count: 0,
            expiring: 0,
            latest_expiry_ms: 0,
        }
    }

    /// Appends a field.
    pub fn push(&mut self, field: Field<'_>) {
        let has_expiry = u64::from(field.expires_at_ms.is_some());
        put_varint(self.out, (field.name.len() as u64) << 1 | has_expiry);
        if let Some(at) = field.expires_at_ms {
            self.out.extend_from_slice(&at.to_le_bytes());
        }
        self.out.extend_from_slice(field.name);
        put_varint(self.out, field.value.len() as u64);
        self.out.extend_from_slice(field.value);
        self.count += 1;
        self.expiring += has_expiry as u32;
        self.latest_expiry_ms = self.latest_expiry_ms.max(field.expires_at_ms.unwrap_or(0));
    }

    /// Appends entries already encoded, as they are: `encoded` is a run of whole entries of
    /// another encoding ([`Hash::stored_spans`]), holding `fields` fields of which `expiring`
    /// carry an expiry, the latest at `latest_expiry_ms` (0 when none).
    pub fn push_encoded(
        &mut self,
        encoded: &[u8],
        fields: u32,
        expiring: u32,
        latest_expiry_ms: u64,
    ) {
        debug_assert!(expiring <= fields && (fields > 0 || encoded.is_empty()));
        self.out.extend_from_slice(encoded);
        self.count += fields;
        self.expiring += expiring;
        self.latest_expiry_ms = self.latest_expiry_ms.max(latest_expiry_ms);
    }

    /// Fields pushed so far.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Whether no field was pushed.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// When the last field pushed goes, if every one has an expiry.
    pub fn fields_gone_ms(&self) -> Option<u64> {
        (self.count > 0 && self.expiring == self.count).then_some(self.latest_expiry_ms)
    }

    /// Writes the header, with the key's own expiry; returns the fields written. With none,
    /// the buffer is left as it was found (an empty hash is no encoding: the key is deleted).
    pub fn finish(self, key_expiry_ms: Option<u64>) -> usize {
        if self.count == 0 {
            self.out.truncate(self.start);
            return 0;
        }
        let header = &mut self.out[self.start..self.start + HEADER_BYTES];
        header[1..5].copy_from_slice(&self.count.to_le_bytes());
        header[5..9].copy_from_slice(&self.expiring.to_le_bytes());
        set_key_expiry(header, key_expiry_ms);
        self.count as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn field<'a>(name: &'a [u8], value: &'a [u8], expires_at_ms: Option<u64>) -> Field<'a> {
        Field {
            name,
            value,
            expires_at_ms,
        }
    }

    fn build(fields: &[Field<'_>]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut builder = Builder::new(&mut out);
        for &f in fields {
            builder.push(f);
        }
        builder.finish(None);
        out
    }

    #[test]
    fn fields_come_back_in_order_and_expired_ones_are_invisible() {
        let long = vec![b'v'; 300];
        let bytes = build(&[
            field(b"a", b"1", None),
            field(b"b", &long, Some(1_000)),
            field(b"", b"", Some(5_000)),
        ]);
        let hash = Hash::parse(&bytes).expect("valid");
        assert_eq!(hash.stored_len(), 3);
        assert!(hash.has_expiring());
        assert_eq!(hash.len(999), 3);
        assert_eq!(hash.len(1_000), 2, "expired at its expiry");
        assert_eq!(hash.get(b"b", 999).map(|f| f.value.len()), Some(300));
        assert_eq!(hash.get(b"b", 1_000), None);
        let names: Vec<&[u8]> = hash.live(1_000).map(|f| f.name).collect();
        assert_eq!(names, [&b"a"[..], b""]);
        assert_eq!(hash.redis_encoding(0), "hashtable", "a 300-byte value");
        assert_eq!(hash.redis_encoding(1_000), "listpack");
        assert!(!hash.is_empty(5_000) && hash.len(5_000) == 1);
        assert_eq!(hash.fields_gone_ms(), None, "field a never expires");
        assert_eq!(hash.key_expiry_ms(), None);
    }

    #[test]
    fn the_key_goes_with_its_last_field_or_its_own_ttl_whichever_comes_first() {
        let mut out = Vec::new();
        let mut builder = Builder::new(&mut out);
        builder.push(field(b"a", b"1", Some(5_000)));
        builder.push(field(b"b", b"2", Some(9_000)));
        assert_eq!(builder.fields_gone_ms(), Some(9_000));
        builder.finish(Some(20_000));
        let hash = Hash::parse(&out).unwrap();
        assert_eq!(
            (hash.key_expiry_ms(), hash.fields_gone_ms()),
            (Some(20_000), Some(9_000))
        );
        assert_eq!(record_expiry(Some(20_000), Some(9_000)), Some(9_000));
        assert_eq!(record_expiry(Some(3_000), Some(9_000)), Some(3_000));
        assert_eq!(record_expiry(None, Some(9_000)), Some(9_000));
        assert_eq!(record_expiry(Some(3_000), None), Some(3_000));
        assert_eq!(record_expiry(None, None), None);
        set_key_expiry(&mut out, None);
        assert_eq!(Hash::parse(&out).unwrap().key_expiry_ms(), None);
    }

    /// Runs of entries copied as they are and fields pushed one by one make the same encoding
    /// as pushing every field.
    #[test]
    fn encoded_runs_copy_as_pushed_fields_would() {
        let fields = [
            field(b"a", b"1", None),
            field(b"b", b"22", Some(7_000)),
            field(b"c", b"333", None),
            field(b"d", b"4", Some(9_000)),
        ];
        let bytes = build(&fields);
        let hash = Hash::parse(&bytes).unwrap();
        let spans: Vec<_> = hash.stored_spans().collect();
        assert_eq!(spans.len(), 4);
        assert_eq!(spans[0].1.start, 0);
        assert_eq!(spans[3].1.end, hash.entries().len());
        let mut out = Vec::new();
        let mut builder = Builder::new(&mut out);
        builder.push_encoded(
            &hash.entries()[spans[0].1.start..spans[1].1.end],
            2,
            1,
            7_000,
        );
        builder.push(spans[2].0);
        builder.push_encoded(&hash.entries()[spans[3].1.clone()], 1, 1, 9_000);
        assert_eq!(builder.fields_gone_ms(), None);
        builder.finish(None);
        assert_eq!(out, bytes);
    }

    #[test]
    fn an_empty_builder_leaves_the_buffer_as_it_was() {
        let mut out = b"prefix".to_vec();
        assert_eq!(Builder::new(&mut out).finish(None), 0);
        assert_eq!(out, b"prefix");
    }

    #[test]
    fn damaged_encodings_are_refused() {
        let bytes = build(&[field(b"name", b"value", Some(7)), field(b"x", b"y", None)]);
        assert!(Hash::parse(&bytes).is_ok());
        assert!(Hash::parse(&bytes[..bytes.len() - 1]).is_err(), "truncated");
        assert!(
            Hash::parse(&[bytes.clone(), vec![0]].concat()).is_err(),
            "trailing"
        );
        for (at, value) in [(0, 2), (1, 3), (5, 0), (5, 2)] {
            let mut bad = bytes.clone();
            bad[at] = value;
            assert!(Hash::parse(&bad).is_err(), "byte {at} = {value}");
        }
        assert!(
            Hash::parse(&[VERSION, 0, 0, 0, 0, 0, 0, 0, 0]).is_err(),
            "no field"
        );
    }

    /// A point read of a hash whose entries were not validated checks those it walks: a field
    /// before the damage is found, one past it (or absent) is refused.
    #[test]
    fn a_find_checks_the_entries_it_walks() {
        let bytes = build(&[
            field(b"a", b"1", None),
            field(b"b", b"22", Some(9_000)),
            field(b"c", b"333", None),
        ]);
        let hash = Hash::open(&bytes).expect("a valid header");
        assert_eq!(
            hash.find(b"c", 0).unwrap().map(|f| f.value),
            Some(&b"333"[..])
        );
        assert_eq!(hash.find(b"b", 9_000), Ok(None), "expired");
        assert_eq!(hash.find(b"zz", 0), Ok(None));
        let (field, span, before) = hash.find_entry(b"b").unwrap().unwrap();
        assert_eq!((field.value, before), (&b"22"[..], 1));
        assert_eq!(
            &hash.entries()[span],
            &bytes[HEADER_BYTES + 4..HEADER_BYTES + 4 + 13]
        );
        // The last entry cut short: the first is still found; past it, refused.
        let cut = &bytes[..bytes.len() - 1];
        let hash = Hash::open(cut).expect("the header is intact");
        assert_eq!(
            hash.find(b"a", 0).unwrap().map(|f| f.value),
            Some(&b"1"[..])
        );
        assert_eq!(hash.find(b"c", 0), Err(Malformed));
        assert_eq!(hash.find(b"zz", 0), Err(Malformed));
        // A header that counts more entries than there are: an absent name is refused.
        let mut miscounted = bytes.clone();
        miscounted[1] = 4;
        let hash = Hash::open(&miscounted).expect("a header");
        assert_eq!(hash.find(b"zz", 0), Err(Malformed));
        assert!(Hash::parse(&miscounted).is_err());
        // Headers open refuses: no entry, more expiring than entries, another version.
        for (at, value) in [(1, 0), (5, 9), (0, 2)] {
            let mut bad = bytes.clone();
            bad[at] = value;
            assert!(Hash::open(&bad).is_err(), "byte {at} = {value}");
        }
    }

    /// A walk of every field checks each entry and the header's counts, and stops at the
    /// first damage.
    #[test]
    fn a_checked_walk_of_every_field_stops_at_damage() {
        let bytes = build(&[field(b"a", b"1", None), field(b"b", b"22", Some(7))]);
        let mut names = Vec::new();
        let hash = Hash::open(&bytes).unwrap();
        assert_eq!(hash.try_stored(|f| names.push(f.name)), Ok(()));
        assert_eq!(names, [&b"a"[..], b"b"]);
        let cut = &bytes[..bytes.len() - 1];
        let mut seen = 0;
        assert_eq!(
            Hash::open(cut).unwrap().try_stored(|_| seen += 1),
            Err(Malformed)
        );
        assert_eq!(seen, 1, "the field before the damage");
        let mut miscounted = bytes.clone();
        miscounted[5] = 0; // No field expiring, says the header: one does.
        assert_eq!(
            Hash::open(&miscounted).unwrap().try_stored(|_| {}),
            Err(Malformed)
        );
    }

    proptest! {
        /// On any bytes, a find either agrees with a validated read or refuses; it refuses only
        /// what validation refuses, and never panics.
        #[test]
        fn a_find_agrees_with_a_validated_get_or_refuses(
            bytes in proptest::collection::vec(any::<u8>(), 0..64),
            name in proptest::collection::vec(any::<u8>(), 0..3),
        ) {
            let mut with_header = vec![VERSION, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
            with_header.extend_from_slice(&bytes);
            let built = build(&[field(&name, &bytes, None), field(b"x", b"", None)]);
            for candidate in [&bytes[..], &with_header[..], &built[..]] {
                let Ok(opened) = Hash::open(candidate) else {
                    prop_assert!(Hash::parse(candidate).is_err());
                    continue;
                };
                let found = opened.find(&name, 0);
                match Hash::parse(candidate) {
                    Ok(valid) => prop_assert_eq!(found, Ok(valid.get(&name, 0))),
                    Err(_) => {
                        if let Ok(Some(field)) = found {
                            prop_assert_eq!(field.name, &name[..]);
                        }
                    }
                }
            }
        }

        #[test]
        fn any_bytes_parse_or_are_refused_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut with_header = vec![VERSION, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
            with_header.extend_from_slice(&bytes);
            for candidate in [&bytes[..], &with_header[..]] {
                if let Ok(hash) = Hash::parse(candidate) {
                    prop_assert_eq!(hash.stored().count(), hash.stored_len());
                }
            }
        }

        #[test]
        fn built_hashes_round_trip(
            fields in proptest::collection::vec(
                (proptest::collection::vec(any::<u8>(), 0..20),
                 proptest::collection::vec(any::<u8>(), 0..200),
                 proptest::option::of(any::<u64>())),
                1..40),
        ) {
            let fields: Vec<Field<'_>> = fields
                .iter()
                .map(|(name, value, at)| field(name, value, *at))
                .collect();
            let bytes = build(&fields);
            let hash = Hash::parse(&bytes).expect("what the builder writes parses");
            let back: Vec<Field<'_>> = hash.stored().collect();
            prop_assert_eq!(back, fields);
        }

        /// Any subset of a hash's entries, copied in runs of neighbours (as a rewrite keeps
        /// them), makes the encoding that pushing those fields one by one makes.
        #[test]
        fn kept_runs_copy_as_pushing_the_kept_fields(
            fields in proptest::collection::vec(
                (proptest::collection::vec(any::<u8>(), 0..12),
                 proptest::collection::vec(any::<u8>(), 0..60),
                 proptest::option::of(1..u64::MAX),
                 any::<bool>()),
                1..30),
        ) {
            let all: Vec<Field<'_>> = fields
                .iter()
                .map(|(name, value, at, _)| field(name, value, *at))
                .collect();
            let bytes = build(&all);
            let hash = Hash::parse(&bytes).expect("what the builder writes parses");
            let kept: Vec<Field<'_>> = all
                .iter()
                .zip(&fields)
                .filter(|(_, f)| f.3)
                .map(|(field, _)| *field)
                .collect();
            let mut by_runs = Vec::new();
            let mut builder = Builder::new(&mut by_runs);
            let mut run: Option<(std::ops::Range<usize>, u32, u32, u64)> = None;
            for ((field, span), keep) in hash.stored_spans().zip(fields.iter().map(|f| f.3)) {
                let continues = run.as_ref().is_some_and(|r| r.0.end == span.start);
                if !keep || !continues {
                    if let Some((span, n, expiring, latest)) = run.take() {
                        builder.push_encoded(&hash.entries()[span], n, expiring, latest);
                    }
                }
                if keep {
                    let r = run.get_or_insert((span.start..span.start, 0, 0, 0));
                    r.0.end = span.end;
                    r.1 += 1;
                    r.2 += u32::from(field.expires_at_ms.is_some());
                    r.3 = r.3.max(field.expires_at_ms.unwrap_or(0));
                }
            }
            if let Some((span, n, expiring, latest)) = run.take() {
                builder.push_encoded(&hash.entries()[span], n, expiring, latest);
            }
            builder.finish(None);
            let by_fields = if kept.is_empty() { Vec::new() } else { build(&kept) };
            prop_assert_eq!(by_runs, by_fields);
        }
    }
}
