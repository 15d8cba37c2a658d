//! Base64 for meta-protocol binary keys (the `b` flag), decoding exactly as memcached's
//! `base64_decode` (Jouni Malinen's) does.
//!
//! memcached's decoder skips bytes outside the alphabet, requires the remaining count to be a
//! non-zero multiple of four, stops after the first padded block (so `YQ==YQ==` decodes to `a`),
//! and refuses a block with three or four `=`. Verified against memcached 1.6.18: `YQ` and
//! `Y===` and `====` fail, `Y!Q==` and `YW=j` decode.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Marks a byte outside the alphabet in [`DECODE_TABLE`].
const INVALID: u8 = 0x80;

const DECODE_TABLE: [u8; 256] = {
    let mut table = [INVALID; 256];
    let mut index = 0;
    while index < ALPHABET.len() {
        table[ALPHABET[index] as usize] = index as u8;
        index += 1;
    }
    table[b'=' as usize] = 0;
    table
};

/// Decodes `src` into `out` as memcached does; returns the decoded length, or `None` when
/// memcached would answer `CLIENT_ERROR error decoding key` or `out` is too small (it needs
/// `src.len() * 3 / 4` bytes at most). A decoded key is never empty.
pub fn decode_key(src: &[u8], out: &mut [u8]) -> Option<usize> {
    decode_into(src, |index, byte| {
        if let Some(slot) = out.get_mut(index) {
            *slot = byte;
        }
    })
    .filter(|&len| len <= out.len())
}

/// Decoded length of `src`, or `None` when it does not decode.
pub(crate) fn decoded_len(src: &[u8]) -> Option<usize> {
    decode_into(src, |_, _| {})
}

fn decode_into(src: &[u8], mut emit: impl FnMut(usize, u8)) -> Option<usize> {
    let count = src
        .iter()
        .filter(|&&b| DECODE_TABLE[usize::from(b)] != INVALID)
        .count();
    if count == 0 || count % 4 != 0 {
        return None;
    }
    let mut block = [0u8; 4];
    let mut filled = 0;
    let mut pad = 0;
    let mut len = 0;
    for &byte in src {
        let value = DECODE_TABLE[usize::from(byte)];
        if value == INVALID {
            continue;
        }
        pad += usize::from(byte == b'=');
        block[filled] = value;
        filled += 1;
        if filled < 4 {
            continue;
        }
        let bytes = [
            block[0] << 2 | block[1] >> 4,
            block[1] << 4 | block[2] >> 2,
            block[2] << 6 | block[3],
        ];
        let kept = match pad {
            0 => 3,
            1 | 2 => 3 - pad,
            _ => return None,
        };
        for &decoded in &bytes[..kept] {
            emit(len, decoded);
            len += 1;
        }
        if pad > 0 {
            break;
        }
        filled = 0;
    }
    debug_assert!(len > 0);
    Some(len)
}

/// Appends the standard padded base64 encoding of `src` to `out`; returns the bytes written.
pub fn encode_base64(out: &mut Vec<u8>, src: &[u8]) -> usize {
    let start = out.len();
    for chunk in src.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let sextets = [
            b[0] >> 2,
            (b[0] & 0x03) << 4 | b[1] >> 4,
            (b[1] & 0x0f) << 2 | b[2] >> 6,
            b[2] & 0x3f,
        ];
        for (index, &sextet) in sextets.iter().enumerate() {
            let byte = if index <= chunk.len() {
                ALPHABET[usize::from(sextet)]
            } else {
                b'='
            };
            out.push(byte);
        }
    }
    out.len() - start
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(src: &[u8]) -> Option<Vec<u8>> {
        let mut out = [0u8; 64];
        decode_key(src, &mut out).map(|len| out[..len].to_vec())
    }

    #[test]
    fn decodes_like_memcached() {
        let cases: &[(&[u8], Option<&[u8]>)] = &[
            (b"YQ==", Some(b"a")),
            (b"YWI=", Some(b"ab")),
            (b"YWJj", Some(b"abc")),
            (b"Y!Q==", Some(b"a")),
            (b"YW=j", Some(b"a`")),
            (b"YQ==YQ==", Some(b"a")),
            (b"YQ", None),
            (b"YQ===", None),
            (b"Y===", None),
            (b"====", None),
            (b"!!!!", None),
            (b"", None),
        ];
        for &(src, want) in cases {
            assert_eq!(
                decode(src).as_deref(),
                want,
                "{:?}",
                String::from_utf8_lossy(src)
            );
            assert_eq!(decoded_len(src), want.map(<[u8]>::len));
        }
        assert_eq!(decode_key(b"YWJj", &mut [0u8; 2]), None);
    }

    #[test]
    fn encode_round_trips() {
        for src in [&b"a"[..], b"ab", b"abc", b"abcd", b"\x00\xff\x10binary"] {
            let mut out = Vec::new();
            let len = encode_base64(&mut out, src);
            assert_eq!(len, out.len());
            assert_eq!(decode(&out).as_deref(), Some(src));
        }
        let mut out = Vec::new();
        encode_base64(&mut out, b"a");
        assert_eq!(out, b"YQ==");
    }
}
