//! Byte searches over request buffers, a word (8 bytes) at a time.
//!
//! Parsers look for line ends in every request; a byte-at-a-time loop costs about three
//! instructions per byte, the word-at-a-time search below about one per four bytes. Safe code
//! only: words are read with `u64::from_le_bytes`, which compiles to one unaligned load.

const LOW_BITS: u64 = 0x0101_0101_0101_0101;
const HIGH_BITS: u64 = 0x8080_8080_8080_8080;

/// Marks the zero bytes of `word`: the lowest marked byte is exactly the first zero byte (bytes
/// above it may be marked falsely, which the callers never look at).
#[inline]
fn zero_bytes(word: u64) -> u64 {
    word.wrapping_sub(LOW_BITS) & !word & HIGH_BITS
}

#[inline]
fn word_at(chunk: &[u8]) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(chunk);
    u64::from_le_bytes(bytes)
}

/// Offset of the first `needle` in `haystack`.
#[inline]
#[must_use]
pub fn find_byte(haystack: &[u8], needle: u8) -> Option<usize> {
    let pattern = LOW_BITS * u64::from(needle);
    let mut chunks = haystack.chunks_exact(8);
    let mut offset = 0;
    for chunk in &mut chunks {
        let found = zero_bytes(word_at(chunk) ^ pattern);
        if found != 0 {
            return Some(offset + (found.trailing_zeros() / 8) as usize);
        }
        offset += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&b| b == needle)
        .map(|at| offset + at)
}

/// Offset of the first byte of `haystack` that is `first` or `second`.
#[inline]
#[must_use]
pub fn find_either(haystack: &[u8], first: u8, second: u8) -> Option<usize> {
    let pattern_first = LOW_BITS * u64::from(first);
    let pattern_second = LOW_BITS * u64::from(second);
    let mut chunks = haystack.chunks_exact(8);
    let mut offset = 0;
    for chunk in &mut chunks {
        let word = word_at(chunk);
        let found = zero_bytes(word ^ pattern_first) | zero_bytes(word ^ pattern_second);
        if found != 0 {
            return Some(offset + (found.trailing_zeros() / 8) as usize);
        }
        offset += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&b| b == first || b == second)
        .map(|at| offset + at)
}

/// Whether every byte of `bytes` is printable and not a space: above `0x20` and not `0x7f`
/// (bytes from `0x80` up count as printable).
#[inline]
#[must_use]
pub fn all_printable(bytes: &[u8]) -> bool {
    const SPACE: u64 = LOW_BITS * 0x21;
    const DEL: u64 = LOW_BITS * 0x7f;
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let word = word_at(chunk);
        // `word - 0x21..` borrows into the high bit of a byte below 0x21 (exact for any such
        // byte when none below it borrows first, and a borrow only comes from such a byte).
        let below_space = word.wrapping_sub(SPACE) & !word & HIGH_BITS;
        if below_space | zero_bytes(word ^ DEL) != 0 {
            return false;
        }
    }
    chunks.remainder().iter().all(|&b| b > b' ' && b != 0x7f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn finds_the_first_match_at_every_offset() {
        for len in 0..40 {
            for at in 0..len {
                let mut buf = vec![b'a'; len];
                buf[at] = b'\n';
                if at + 1 < len {
                    buf[at + 1] = b'\n';
                }
                assert_eq!(find_byte(&buf, b'\n'), Some(at), "{len} {at}");
                assert_eq!(find_either(&buf, b'\r', b'\n'), Some(at), "{len} {at}");
                assert_eq!(find_either(&buf, b'\n', b'\r'), Some(at), "{len} {at}");
            }
            assert_eq!(find_byte(&vec![b'a'; len], b'\n'), None);
        }
    }

    #[test]
    fn borrows_across_bytes_do_not_report_false_matches() {
        // 0x01 after a match byte and 0x80/0x81/0xff bytes are the SWAR edge cases.
        let buf = [0x81, 0x00, 0x01, 0xff, 0x80, 0x0b, 0x0a, 0x01, 0x0a];
        assert_eq!(find_byte(&buf, 0x0a), Some(6));
        assert_eq!(find_byte(&buf, 0x00), Some(1));
        assert_eq!(find_either(&buf, 0x0b, 0x00), Some(1));
        assert_eq!(find_byte(&buf, 0x7f), None);
    }

    #[test]
    fn printable_checks_every_byte_at_every_offset() {
        for len in 0..24 {
            assert!(all_printable(&vec![b'k'; len]));
            for at in 0..len {
                for bad in [0u8, 0x01, 0x1f, b' ', 0x7f] {
                    let mut key = vec![b'k'; len];
                    key[at] = bad;
                    assert!(!all_printable(&key), "{len} {at} {bad}");
                }
                for good in [0x21u8, 0x7e, 0x80, 0xa0, 0xff] {
                    let mut key = vec![b'k'; len];
                    key[at] = good;
                    assert!(all_printable(&key), "{len} {at} {good}");
                }
            }
        }
    }

    proptest! {
        #[test]
        fn printable_agrees_with_a_byte_loop(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            prop_assert_eq!(all_printable(&bytes), bytes.iter().all(|&b| b > b' ' && b != 0x7f));
        }

        #[test]
        fn agrees_with_position(buf in proptest::collection::vec(any::<u8>(), 0..80),
                                a in any::<u8>(), b in any::<u8>()) {
            prop_assert_eq!(find_byte(&buf, a), buf.iter().position(|&x| x == a));
            prop_assert_eq!(find_either(&buf, a, b), buf.iter().position(|&x| x == a || x == b));
        }
    }
}
