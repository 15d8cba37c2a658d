//! The encodings of strata's typed values.
//!
//! The engine stores a key's value as one record whose *kind* (`strata_engine::Kind`) says what
//! the bytes are; this crate says how they are laid out and how to read and rebuild them. It
//! knows nothing of records, shards or the network: each type is a module with a read-only
//! view that validates the bytes once and a builder that writes a new encoding into a buffer
//! (the engine's write buffer, so an update costs no allocation); a read of one element by
//! name may instead check only the header and the entries its walk passes (`hash::Hash::open`
//! and `find`). Every view is safe on any bytes: a damaged or foreign encoding is refused
//! ([`Malformed`]), never read past its end.
//!
//! Formats are versioned by their first byte and documented in docs/POOL_FORMAT.md ("Typed
//! values"); a change adds a version and keeps reading the older ones.

pub mod hash;
pub mod hash_chunks;

/// Bytes that are not a valid encoding of the type they were read as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Malformed;

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the stored value is not a valid encoding of its type")
    }
}

impl std::error::Error for Malformed {}

/// Appends `value` as an unsigned LEB128 varint (7 bits per byte, low groups first).
pub(crate) fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Reads an unsigned LEB128 varint at `*at`, moving `*at` past it; `None` when it runs past
/// `bytes` or past 64 bits.
pub(crate) fn take_varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *bytes.get(*at)?;
        *at += 1;
        let group = u64::from(byte & 0x7F);
        if shift == 63 && group > 1 {
            return None;
        }
        value |= group << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_and_overlong_ones_are_refused() {
        for value in [0, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, value);
            let mut at = 0;
            assert_eq!(take_varint(&out, &mut at), Some(value));
            assert_eq!(at, out.len());
            let mut at = 0;
            assert_eq!(take_varint(&out[..out.len() - 1], &mut at), None);
        }
        let mut at = 0;
        assert_eq!(take_varint(&[0xFF; 10], &mut at), None, "past 64 bits");
        let mut at = 0;
        assert_eq!(take_varint(&[0x80; 11], &mut at), None);
    }
}
