//! Tokens and numbers of a command line, split and parsed the way memcached 1.6 does.
//!
//! memcached's `tokenize_command` splits on single spaces only, skips runs of spaces and leading
//! spaces, and treats tabs as part of a token. Numbers go through `strtol`/`strtoul`/`strtoull`:
//! an optional sign, decimal digits, no trailing garbage; unsigned parsers refuse a `-`.

/// Space-separated tokens of a line, without allocation. Equality compares the tokens, not the
/// spacing between them.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tokens<'a> {
    rest: &'a [u8],
}

impl<'a> Tokens<'a> {
    /// Tokens of `line` (which must not contain the `\n`).
    pub fn new(line: &'a [u8]) -> Self {
        Self { rest: line }
    }

    /// The unsplit remainder, leading spaces removed.
    pub fn remainder(&self) -> &'a [u8] {
        if self.rest.first() != Some(&b' ') {
            return self.rest;
        }
        let start = self
            .rest
            .iter()
            .position(|&b| b != b' ')
            .unwrap_or(self.rest.len());
        &self.rest[start..]
    }

    /// Whether no token is left.
    pub fn is_empty(&self) -> bool {
        self.remainder().is_empty()
    }

    /// Number of tokens left (walks them).
    pub fn count_left(&self) -> usize {
        (*self).count()
    }
}

impl<'a> Iterator for Tokens<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let rest = self.remainder();
        if rest.is_empty() {
            self.rest = rest;
            return None;
        }
        let end = crate::scan::find_byte(rest, b' ').unwrap_or(rest.len());
        self.rest = &rest[end..];
        Some(&rest[..end])
    }
}

impl PartialEq for Tokens<'_> {
    fn eq(&self, other: &Self) -> bool {
        Iterator::eq(*self, *other)
    }
}

impl Eq for Tokens<'_> {}

/// Whether `key` is a usable key: non-empty, at most `key_len_max` bytes, no control characters
/// (bytes below 0x20, and DEL) and no spaces.
///
/// memcached's text parser itself lets control characters through (`set a\x01b` is stored);
/// strata refuses them as `doc/protocol.txt` asks, so keys stay printable in replies and logs.
pub fn key_is_valid(key: &[u8], key_len_max: usize) -> bool {
    !key.is_empty() && key.len() <= key_len_max && crate::scan::all_printable(key)
}

/// `strtoull`-style unsigned decimal: optional `+`, at least one digit, no overflow, nothing
/// after. memcached's `safe_strtoull` refuses a leading `-`.
pub fn parse_u64(token: &[u8]) -> Option<u64> {
    let digits = token.strip_prefix(b"+").unwrap_or(token);
    if digits.is_empty() || digits.len() > 40 {
        return None;
    }
    let mut value: u64 = 0;
    for &b in digits {
        if !b.is_ascii_digit() {
            return None;
        }
        value = value.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(value)
}

/// `strtol`-style signed decimal with the range of a 64-bit `long`.
pub fn parse_i64(token: &[u8]) -> Option<i64> {
    match token.split_first() {
        Some((b'-', digits)) if !digits.starts_with(b"+") => {
            0i64.checked_sub_unsigned(parse_u64(digits)?)
        }
        _ => i64::try_from(parse_u64(token)?).ok(),
    }
}

/// Client flags as memcached's `safe_strtoflags` reads them: an unsigned 64-bit number kept
/// modulo 2^32 (`set a 4294967296 0 1` stores flags 0 in memcached 1.6.18).
pub fn parse_client_flags(token: &[u8]) -> Option<u32> {
    parse_u64(token).map(|value| value as u32)
}

/// A data length as memcached's `safe_strtol` into an `int` reads it, refusing what memcached
/// refuses (negative) and what it would silently truncate (above `i32::MAX - 2`).
pub fn parse_data_len(token: &[u8]) -> Option<usize> {
    const DATA_LEN_MAX: i64 = i32::MAX as i64 - 2;
    let value = parse_i64(token)?;
    if (0..=DATA_LEN_MAX).contains(&value) {
        usize::try_from(value).ok()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_skip_runs_of_spaces() {
        let tokens: Vec<&[u8]> = Tokens::new(b"  get  a   b ").collect();
        assert_eq!(tokens, [&b"get"[..], b"a", b"b"]);
        assert_eq!(Tokens::new(b"a  b"), Tokens::new(b"a b "));
        assert_ne!(Tokens::new(b"a b"), Tokens::new(b"a b c"));
        assert!(Tokens::new(b"   ").is_empty());
        assert_eq!(Tokens::new(b"a\tb c").count_left(), 2);
    }

    #[test]
    fn numbers() {
        let u64_cases: &[(&[u8], Option<u64>)] = &[
            (b"0", Some(0)),
            (b"01", Some(1)),
            (b"+7", Some(7)),
            (b"18446744073709551615", Some(u64::MAX)),
            (b"18446744073709551616", None),
            (b"-1", None),
            (b"", None),
            (b"+", None),
            (b"1x", None),
            (b"0x10", None),
        ];
        for &(token, want) in u64_cases {
            assert_eq!(
                parse_u64(token),
                want,
                "{:?}",
                String::from_utf8_lossy(token)
            );
        }
        let i64_cases: &[(&[u8], Option<i64>)] = &[
            (b"-1", Some(-1)),
            (b"99999999999", Some(99_999_999_999)),
            (b"-9223372036854775808", Some(i64::MIN)),
            (b"9223372036854775808", None),
            (b"-9223372036854775809", None),
            (b"--1", None),
            (b"-+1", None),
            (b"-", None),
        ];
        for &(token, want) in i64_cases {
            assert_eq!(
                parse_i64(token),
                want,
                "{:?}",
                String::from_utf8_lossy(token)
            );
        }
        assert_eq!(parse_client_flags(b"4294967296"), Some(0));
        assert_eq!(parse_client_flags(b"4294967295"), Some(u32::MAX));
        assert_eq!(parse_data_len(b"-1"), None);
        assert_eq!(parse_data_len(b"2147483645"), Some(2_147_483_645));
        assert_eq!(parse_data_len(b"2147483646"), None);
    }

    #[test]
    fn keys() {
        assert!(key_is_valid(b"a", 250));
        assert!(key_is_valid(&[b'k'; 250], 250));
        assert!(!key_is_valid(&[b'k'; 251], 250));
        assert!(!key_is_valid(b"", 250));
        for bad in [&b"a\tb"[..], b"a\x01", b"a b", b"\x7f", b"a\r"] {
            assert!(!key_is_valid(bad, 250), "{bad:?}");
        }
        assert!(key_is_valid("ключ".as_bytes(), 250));
    }
}
