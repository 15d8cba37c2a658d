//! Glob-style matching for `KEYS`, `SCAN MATCH` and friends, as Redis 7.0's `stringmatchlen`
//! (`util.c`), quirks included:
//!
//! * `*` matches any run of bytes, `?` any one byte, `\x` the byte `x`.
//! * `[abc]`, `[^abc]`, `[a-z]` (reversed ranges like `[z-a]` work), `\` escapes inside a class.
//!   An unterminated class ends at the pattern end, so `[^` matches any single byte.
//! * Bytes are C `char`s, signed on x86-64: in ranges, bytes >= 0x80 sort below `\0`.
//! * `nocase` lowers ASCII letters only (C locale `tolower`).
//! * The empty string matches only the empty pattern: even `*` fails, which is why Redis's
//!   `KEYS` and `SCAN` treat a lone `*` as "everything" before matching.
//! * As in Redis, a failed `*` tells every enclosing `*` to stop trying longer matches, and
//!   recursion stops at [`GLOB_NESTING_MAX`] nested stars, counting as no match.

/// Nested `*` expansions after which Redis gives up and reports no match.
pub const GLOB_NESTING_MAX: usize = 1000;

/// True when `string` matches the Redis glob `pattern`.
#[must_use]
pub fn glob_match(pattern: &[u8], string: &[u8], nocase: bool) -> bool {
    let mut skip_longer_matches = false;
    match_impl(pattern, string, nocase, &mut skip_longer_matches, 0)
}

fn lower(byte: u8, nocase: bool) -> u8 {
    if nocase {
        byte.to_ascii_lowercase()
    } else {
        byte
    }
}

/// A byte as C's signed `char`, for range comparisons.
fn signed(byte: u8) -> i32 {
    i32::from(byte as i8)
}

fn match_impl(
    mut pattern: &[u8],
    mut string: &[u8],
    nocase: bool,
    skip_longer_matches: &mut bool,
    nesting: usize,
) -> bool {
    if nesting > GLOB_NESTING_MAX {
        return false;
    }
    while let (Some(&token), Some(&byte)) = (pattern.first(), string.first()) {
        match token {
            b'*' => {
                while pattern.get(1) == Some(&b'*') {
                    pattern = &pattern[1..];
                }
                if pattern.len() == 1 {
                    return true;
                }
                while !string.is_empty() {
                    if match_impl(
                        &pattern[1..],
                        string,
                        nocase,
                        skip_longer_matches,
                        nesting + 1,
                    ) {
                        return true;
                    }
                    if *skip_longer_matches {
                        return false;
                    }
                    string = &string[1..];
                }
                *skip_longer_matches = true;
                return false;
            }
            b'?' => {
                pattern = &pattern[1..];
                string = &string[1..];
            }
            b'[' => {
                let (matched, rest) = match_class(&pattern[1..], byte, nocase);
                if !matched {
                    return false;
                }
                pattern = rest;
                string = &string[1..];
            }
            _ => {
                if token == b'\\' && pattern.len() >= 2 {
                    pattern = &pattern[1..];
                }
                if lower(pattern[0], nocase) != lower(byte, nocase) {
                    return false;
                }
                pattern = &pattern[1..];
                string = &string[1..];
            }
        }
        if string.is_empty() {
            while pattern.first() == Some(&b'*') {
                pattern = &pattern[1..];
            }
            break;
        }
    }
    pattern.is_empty() && string.is_empty()
}

/// Matches `byte` against the class whose body starts at `pattern` (just after `[`). Returns the
/// outcome and the pattern after the closing `]`, or the empty rest when the class is
/// unterminated (Redis then treats the pattern end as the class end).
fn match_class(mut pattern: &[u8], byte: u8, nocase: bool) -> (bool, &[u8]) {
    let not = pattern.first() == Some(&b'^');
    if not {
        pattern = &pattern[1..];
    }
    let mut matched = false;
    loop {
        match pattern {
            [b'\\', escaped, ..] => {
                matched |= *escaped == byte;
                pattern = &pattern[2..];
            }
            [b']', rest @ ..] => return (matched != not, rest),
            [] => return (matched != not, pattern),
            [start, b'-', end, ..] => {
                let (mut low, mut high) = (signed(*start), signed(*end));
                if low > high {
                    core::mem::swap(&mut low, &mut high);
                }
                let mut c = signed(byte);
                if nocase {
                    low = signed(lower(low as u8, true));
                    high = signed(lower(high as u8, true));
                    c = signed(lower(byte, true));
                }
                matched |= (low..=high).contains(&c);
                pattern = &pattern[3..];
            }
            [literal, rest @ ..] => {
                matched |= lower(*literal, nocase) == lower(byte, nocase);
                pattern = rest;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        // (pattern, string, nocase, matches); quirks checked against redis-server 7.0.15 KEYS.
        let table: &[(&[u8], &[u8], bool, bool)] = &[
            // The loop never runs for an empty string, so a lone `*` does not match it; KEYS and
            // SCAN special-case the pattern `*` before calling stringmatchlen.
            (b"*", b"", false, false),
            (b"a*", b"a", false, true),
            (b"*", b"anything", false, true),
            (b"", b"", false, true),
            (b"", b"a", false, false),
            (b"h?llo", b"hello", false, true),
            (b"h?llo", b"hllo", false, false),
            (b"h*llo", b"heeeello", false, true),
            (b"h*llo", b"hllo", false, true),
            (b"h[ae]llo", b"hallo", false, true),
            (b"h[ae]llo", b"hillo", false, false),
            (b"h[^e]llo", b"hallo", false, true),
            (b"h[^e]llo", b"hello", false, false),
            (b"h[a-b]llo", b"hbllo", false, true),
            (b"h[b-a]llo", b"hbllo", false, true),
            (b"h[a-b]llo", b"hcllo", false, false),
            (b"h\\*llo", b"h*llo", false, true),
            (b"h\\*llo", b"hello", false, false),
            (b"[\\]]", b"]", false, true),
            // `a-]` is a range from 'a' to ']', which leaves the class unterminated.
            (b"[a-]", b"-", false, false),
            (b"[a-]", b"a", false, true),
            (b"[^", b"x", false, true),
            (b"[", b"x", false, false),
            (b"[abc", b"c", false, true),
            (b"\\", b"\\", false, true),
            (b"a\\", b"a", false, false),
            (b"HELLO", b"hello", true, true),
            (b"HELLO", b"hello", false, false),
            (b"[A-Z]", b"q", true, true),
            (b"[a-z]", b"Q", true, true),
            (b"a*", b"a", false, true),
            (b"a**b", b"ab", false, true),
            (b"*a*b*", b"xxaxxbxx", false, true),
            (b"*a*b", b"xxaxxbxc", false, false),
            (b"[\x01-\xff]", b"a", false, false), // 0xff is -1: the range is [-1, 1].
            (b"[\x01-\xff]", b"\x00", false, true),
            (b"[\x80-\x7f]", b"\xc3", false, true),
        ];
        for &(pattern, string, nocase, expected) in table {
            let label = format!(
                "{} ~ {} nocase={nocase}",
                pattern.escape_ascii(),
                string.escape_ascii()
            );
            assert_eq!(glob_match(pattern, string, nocase), expected, "{label}");
        }
    }

    #[test]
    fn nesting_is_bounded_like_redis() {
        // redis-server 7.0.15: KEYS (a*)^1001 finds a^1001, KEYS (a*)^1002 does not find a^1002.
        for (stars, expected) in [(1001, true), (1002, false)] {
            let pattern = b"a*".repeat(stars);
            assert_eq!(
                glob_match(&pattern, &vec![b'a'; stars], false),
                expected,
                "{stars}"
            );
        }
    }

    #[test]
    fn many_stars_do_not_take_exponential_time() {
        let pattern = b"a*".repeat(30);
        let string = vec![b'a'; 100];
        assert!(!glob_match(&[&pattern[..], b"b"].concat(), &string, false));
    }
}
