//! The `hash_decode` target: a Redis hash's stored encoding (`strata_types::hash`, the value of
//! a record of kind `Hash`), read as the hash commands read it.
//!
//! The input's first byte picks the mode. [`MODE_CHUNKED`]: the rest is a large hash's owner
//! encoding (`strata_types::hash_chunks`) followed by field names (see [`check_chunked`]).
//! [`MODE_FIELDS`]: the rest is a list of fields
//! ([`fields_of`]) that the check encodes with the `Builder`, checks as written, then damages
//! (one byte, chosen by the input) and reads again; any other byte: the whole input is the
//! encoding. Hand-written encodings are mostly refused at the header; built ones reach the
//! entries, where the damage lands.
//!
//! Invariants checked, on any bytes:
//! - No reader panics or reads past the bytes: `parse`, `open`, `find`, `try_stored`,
//!   `try_stored_spans`, `get`, `live`, `len`, `stored_spans`, `redis_encoding`,
//!   `fields_gone_ms`.
//! - `parse` accepts exactly what `open` accepts and `try_stored` then walks without damage.
//! - On a validated hash: `stored` yields `stored_len` fields; `stored_spans` tile the entries
//!   from 0 to their end, and the checked `try_stored_spans` walks the same; `find` of every
//!   stored name (and of a name not there) agrees with `get`; encoding the stored fields again
//!   parses back to the same fields, and copying the spans as runs (`push_encoded`) gives the
//!   same bytes as the original entries.
//! - On a hash only `open` accepted: a field `find` returns has the name asked for, and where
//!   the hash is valid too, it is `get`'s answer.
//! - An encoding the `Builder` wrote parses, with the fields it was given.

use strata_types::hash::{Builder, Field, Hash};
use strata_types::hash_chunks::{Chunked, OWNER_BYTES, OWNER_BYTES_V2, VERSION_2};

/// First byte: the rest lists fields to encode, check and damage.
pub const MODE_FIELDS: u8 = 0xF1;

/// First byte: the rest is a large hash's owner, then field names.
pub const MODE_CHUNKED: u8 = 0xC2;

/// The time the checks read at, Unix ms: fields expiring before it are expired.
const NOW_MS: u64 = 1_000_000;

/// Runs every invariant on `data` (see the module docs); panics when one fails.
pub fn check(data: &[u8]) {
    match data.split_first() {
        Some((&MODE_FIELDS, rest)) => check_built(rest),
        Some((&MODE_CHUNKED, rest)) => check_chunked(rest),
        _ => check_encoding(data),
    }
}

/// A large hash's owner (its first [`OWNER_BYTES`], or [`OWNER_BYTES_V2`] when its first byte
/// says version 2) and names (the rest, in pieces of `len u8, bytes`). On any bytes
/// `Chunked::parse` neither panics nor accepts a state whose split pointer is past its level;
/// on an accepted one: the encoding round-trips (a version 2 owner's as the state it reads
/// as, written as version 3), the hash is gone with its fields only when every one
/// expires, every name
/// routes to a chunk that exists, and the next split moves a name only from the split chunk
/// to the chunk it makes, which is the next number.
pub fn check_chunked(data: &[u8]) {
    let owner_bytes = if data.first() == Some(&VERSION_2) {
        OWNER_BYTES_V2
    } else {
        OWNER_BYTES
    };
    let (owner, mut names) = data.split_at(data.len().min(owner_bytes));
    let Ok(state) = Chunked::parse(owner) else {
        return;
    };
    let mut encoded = Vec::new();
    state.encode(&mut encoded);
    if owner_bytes == OWNER_BYTES {
        assert_eq!(encoded, owner, "the owner round-trips");
    } else {
        assert_eq!(
            encoded.len(),
            OWNER_BYTES,
            "a version 2 owner is written as 3"
        );
        assert_eq!(
            Chunked::parse(&encoded),
            Ok(state),
            "and reads back the same"
        );
    }
    assert!(state.expiring() <= state.count());
    if state.fields_gone_ms().is_some() {
        assert!(state.count() > 0 && state.expiring() == state.count());
    }
    let (from, to, next) = state.split_next();
    assert_eq!(to, state.chunks());
    while let Some((&len, rest)) = names.split_first() {
        let (name, rest) = rest.split_at(rest.len().min(usize::from(len)));
        names = rest;
        let chunk = state.chunk_of(name);
        assert!(
            chunk < state.chunks(),
            "a name routes to a chunk that exists"
        );
        assert!(state.owns(chunk, name));
        if state.can_split() {
            let after = next.chunk_of(name);
            if chunk == from {
                assert!(
                    after == from || after == to,
                    "a split moves only into its new chunk"
                );
            } else {
                assert_eq!(after, chunk, "a split moves only the split chunk's fields");
            }
        }
    }
}

/// Fields from `data`: repeated `name_len u8, value_len u8, has_expiry u8, [expiry u16 in
/// seconds], name, value`, until the bytes run out; names kept unique (later duplicates
/// dropped, as the hash commands keep them).
pub fn fields_of(data: &[u8]) -> Vec<Field<'_>> {
    let mut fields: Vec<Field<'_>> = Vec::new();
    let mut at = 0;
    while let Some(&[name_len, value_len, has_expiry]) = data.get(at..at + 3) {
        at += 3;
        let expires_at_ms = if has_expiry & 1 == 1 {
            let Some(&[lo, hi]) = data.get(at..at + 2) else {
                break;
            };
            at += 2;
            Some(u64::from(u16::from_le_bytes([lo, hi])) * 1_000)
        } else {
            None
        };
        let (name_len, value_len) = (usize::from(name_len), usize::from(value_len));
        let Some(name) = data.get(at..at + name_len) else {
            break;
        };
        let Some(value) = data.get(at + name_len..at + name_len + value_len) else {
            break;
        };
        at += name_len + value_len;
        if fields.iter().all(|field| field.name != name) {
            fields.push(Field {
                name,
                value,
                expires_at_ms,
            });
        }
    }
    fields
}

fn check_built(data: &[u8]) {
    let fields = fields_of(data);
    let mut encoded = Vec::new();
    let mut builder = Builder::new(&mut encoded);
    for &field in &fields {
        builder.push(field);
    }
    let key_expiry = data
        .first()
        .map(|&b| u64::from(b) * 1_000)
        .filter(|&at| at > 0);
    assert_eq!(builder.finish(key_expiry), fields.len());
    if fields.is_empty() {
        assert!(encoded.is_empty(), "no field, no encoding");
        return;
    }
    let hash = Hash::parse(&encoded).expect("what the builder writes parses");
    assert_eq!(hash.stored().collect::<Vec<_>>(), fields);
    assert_eq!(hash.key_expiry_ms(), key_expiry);
    check_encoding(&encoded);
    // One byte damaged, where and how the input says.
    let seed = data.iter().fold(0usize, |h, &b| {
        h.wrapping_mul(31).wrapping_add(usize::from(b))
    });
    let at = seed % encoded.len();
    encoded[at] ^= (seed >> 8) as u8 | 1;
    check_encoding(&encoded);
}

fn check_encoding(bytes: &[u8]) {
    let opened = Hash::open(bytes);
    let parsed = Hash::parse(bytes);
    assert_eq!(
        parsed.is_ok(),
        opened.is_ok_and(|hash| hash.try_stored(|_| {}).is_ok()),
        "parse accepts what open and a checked walk accept"
    );
    if let Ok(hash) = opened {
        check_opened(&hash, parsed.ok().as_ref());
    }
    if let Ok(hash) = parsed {
        check_valid(&hash);
    }
}

/// A hash `open` accepted, its entries unchecked; `valid` when `parse` accepted it too.
fn check_opened(hash: &Hash<'_>, valid: Option<&Hash<'_>>) {
    let mut names = Vec::new();
    let _ = hash.try_stored(|field| {
        if names.len() < 4 {
            names.push(field.name);
        }
    });
    names.push(b"\xFFnot-a-field-name");
    for name in names {
        let found = hash.find(name, NOW_MS);
        if let Ok(Some(field)) = found {
            assert_eq!(field.name, name, "find returns the field asked for");
        }
        if let Some(valid) = valid {
            assert_eq!(found, Ok(valid.get(name, NOW_MS)), "find agrees with get");
        }
    }
}

fn check_valid(hash: &Hash<'_>) {
    let stored: Vec<Field<'_>> = hash.stored().collect();
    assert_eq!(stored.len(), hash.stored_len());
    let _ = (
        hash.len(NOW_MS),
        hash.redis_encoding(NOW_MS),
        hash.fields_gone_ms(),
    );
    assert!(hash.live(NOW_MS).all(|field| field.is_live(NOW_MS)));
    let mut end = 0;
    let mut by_runs = Vec::new();
    let mut runs = Builder::new(&mut by_runs);
    for (field, span) in hash.stored_spans() {
        assert_eq!(span.start, end, "spans tile the entries");
        end = span.end;
        let expiring = u32::from(field.expires_at_ms.is_some());
        let latest = field.expires_at_ms.unwrap_or(0);
        runs.push_encoded(&hash.entries()[span], 1, expiring, latest);
    }
    assert_eq!(end, hash.entries().len());
    let mut checked = Vec::new();
    hash.try_stored_spans(|field, span| checked.push((field, span)))
        .expect("a validated hash walks without damage");
    assert_eq!(checked, hash.stored_spans().collect::<Vec<_>>());
    runs.finish(hash.key_expiry_ms());
    assert_eq!(&by_runs[strata_types::hash::HEADER_BYTES..], hash.entries());
    let mut again = Vec::new();
    let mut builder = Builder::new(&mut again);
    for &field in &stored {
        builder.push(field);
    }
    builder.finish(hash.key_expiry_ms());
    let rebuilt = Hash::parse(&again).expect("a rebuilt hash parses");
    assert_eq!(rebuilt.stored().collect::<Vec<_>>(), stored);
}
