//! The two pieces of memcached's text-protocol authentication (`memcached -Y <authfile>`) that
//! are parsing: the command line of an authentication `set`, and its token.
//!
//! A client authenticates with an ordinary-looking `set` whose data is `user password`:
//! `set <any key> <any flags> <any exptime> <bytes>\r\n<user> <password>\r\n`. Before that,
//! memcached 1.6.18 reads every command line with these rules (`try_read_command_asciiauth`
//! in `proto_text.c`), which [`parse_auth_line`] and [`split_auth_token`] reproduce:
//!
//! - The line is cut at its first NUL byte (memcached handles it as a C string) and split on
//!   spaces, runs of spaces counting as one. The `\r` before the `\n` stays in the last token.
//! - It is an authentication `set` when its first token is exactly `set` (lower case) and it has
//!   at least five tokens, the fifth being a number as `safe_strtoul` reads it: leading white
//!   space, an optional sign, digits, then white space or the end of the token; a negative
//!   number other than zero is refused. Key, flags, exptime and any `noreply` are ignored.
//! - The token (the data block without its `\r\n`) is cut at its first NUL byte and split on
//!   spaces like a line; its first two words are the user and the password, and any further
//!   words are ignored.
//!
//! The server decides what follows (`strata_server::memcache_exec::auth`).

/// What an unauthenticated client's command line is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthLine {
    /// An authentication `set`: its token of `token_len` bytes and `\r\n` follow the line.
    Set {
        /// The `<bytes>` field: the token's length, without its `\r\n`.
        token_len: u64,
    },
    /// Anything else: answered `CLIENT_ERROR unauthenticated`.
    Other,
}

/// Reads one command line of an unauthenticated client: `line` is the bytes before its `\n`
/// (a `\r` before the `\n` included, as memcached leaves it).
pub fn parse_auth_line(line: &[u8]) -> AuthLine {
    let mut tokens = words(line);
    if tokens.next() != Some(b"set".as_slice()) {
        return AuthLine::Other;
    }
    // Key, flags and exptime, then the length.
    match tokens.nth(3).and_then(c_strtoul) {
        Some(token_len) => AuthLine::Set { token_len },
        None => AuthLine::Other,
    }
}

/// The user and password of an authentication token (its data block without the `\r\n`), or
/// `None` when it holds fewer than two words (`CLIENT_ERROR bad authentication token format`).
pub fn split_auth_token(token: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut words = words(token);
    Some((words.next()?, words.next()?))
}

/// The space-separated words of `text` up to its first NUL byte, as memcached's
/// `tokenize_command` finds them in a C string.
fn words(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    let text = text.split(|&b| b == 0).next().unwrap_or_default();
    text.split(|&b| b == b' ').filter(|word| !word.is_empty())
}

/// White space as C's `isspace` sees it in the "C" locale.
fn is_c_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// A number as memcached's `safe_strtoul` reads it with `strtoul` on a 64-bit system: leading
/// white space, an optional `+` or `-`, at least one digit, then white space or the end. An
/// overflow is refused (`ERANGE`), and so is a `-` whose negated value is negative as a signed
/// number (every negative number but `-0`). memcached then stores the value in 32 bits; the
/// caller refuses anything that large instead, so the full value is returned.
fn c_strtoul(token: &[u8]) -> Option<u64> {
    let start = token.iter().position(|&b| !is_c_space(b))?;
    let (negative, digits) = match token[start] {
        b'-' => (true, &token[start + 1..]),
        b'+' => (false, &token[start + 1..]),
        _ => (false, &token[start..]),
    };
    let digits_len = digits.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits_len == 0 {
        return None;
    }
    if digits.get(digits_len).is_some_and(|&b| !is_c_space(b)) {
        return None;
    }
    let mut value: u64 = 0;
    for digit in &digits[..digits_len] {
        value = value
            .checked_mul(10)?
            .checked_add(u64::from(digit - b'0'))?;
    }
    if !negative {
        return Some(value);
    }
    let negated = value.wrapping_neg();
    // `(long) l < 0` with a `-` in the text: refused.
    if i64::try_from(negated).is_err() {
        return None;
    }
    Some(negated)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authentication_sets_are_recognised_as_memcached_recognises_them() {
        for (line, token_len) in [
            (&b"set foo 0 0 7\r"[..], 7),
            (b"set foo 0 0 7", 7),
            (b"set a b c 7\r", 7),
            (b"set  foo   0 0 7 noreply\r", 7),
            (b" set foo 0 0 7\r", 7),
            (b"set foo 0 0 +7\r", 7),
            (b"set foo 0 0 -0\r", 0),
            (b"set foo 0 0 7\tx\r", 7),
            (b"set foo 0 0 \t7\r", 7),
            (b"set foo 0 0 7 \r", 7),
            (b"set foo 0 0 7\0junk", 7),
            (b"set foo 0 0 99999999999\r", 99_999_999_999),
        ] {
            assert_eq!(
                parse_auth_line(line),
                AuthLine::Set { token_len },
                "{}",
                line.escape_ascii()
            );
        }
    }

    #[test]
    fn every_other_line_is_unauthenticated() {
        for line in [
            &b""[..],
            b"\r",
            b"get foo\r",
            b"version\r",
            b"quit\r",
            b"mn\r",
            b"ms foo 2\r",
            b"SET foo 0 0 7\r",
            b"sets foo 0 0 7\r",
            b"set foo 0 0\r",
            b"set foo 0 0 \r",
            b"set foo 0 0 -1\r",
            b"set foo 0 0 7x\r",
            b"set foo 0 0 x\r",
            b"set foo 0 0 -\r",
            b"set foo 0\0 0 7\r",
            b"set foo 0 0 99999999999999999999\r",
        ] {
            assert_eq!(
                parse_auth_line(line),
                AuthLine::Other,
                "{}",
                line.escape_ascii()
            );
        }
    }

    #[test]
    fn a_token_is_its_first_two_words() {
        for (token, words) in [
            (&b"foo bar"[..], Some((&b"foo"[..], &b"bar"[..]))),
            (b" foo  bar ", Some((b"foo", b"bar"))),
            (b"foo bar xyz", Some((b"foo", b"bar"))),
            (b"foo bar\0xyz", Some((b"foo", b"bar"))),
            (b"foo\tx bar\r", Some((b"foo\tx", b"bar\r"))),
            (b"foo", None),
            (b"foo ", None),
            (b"", None),
            (b"foo\0 bar", None),
        ] {
            assert_eq!(split_auth_token(token), words, "{}", token.escape_ascii());
        }
    }
}
