//! Splitting an inline request line into arguments, as Redis 7.0's `sdssplitargs` (`sds.c`) does.
//!
//! * Arguments are separated by C `isspace` bytes; inside an unquoted argument only space, `\t`,
//!   `\r` and `\n` end it, so `\v` and `\f` are argument bytes there.
//! * `"..."` understands `\xHH`, `\n`, `\r`, `\t`, `\b`, `\a` and `\<any>` (that byte).
//! * `'...'` understands only `\'`.
//! * A quote may start inside an argument (`a"b c"` is `ab c`), but a closing quote must be
//!   followed by a space or the line end, else the request is "unbalanced quotes".
//!
//! The line never contains NUL: the line search stops there (see `request.rs`).

use super::error::ProtocolError;
use super::number::is_c_space;
use super::request::Args;

/// Appends the arguments of `line` (a request line without its `\r\n`) to `args`. Plain
/// arguments point into `line`, whose offsets equal the request buffer's; quoted ones are
/// unescaped into the scratch buffer.
pub(crate) fn split_inline(line: &[u8], args: &mut Args) -> Result<(), ProtocolError> {
    debug_assert!(!line.contains(&0), "line search stops at NUL");
    let mut index = 0;
    loop {
        while index < line.len() && is_c_space(line[index]) {
            index += 1;
        }
        if index == line.len() {
            return Ok(());
        }
        index = split_one(line, index, args)?;
    }
}

/// Quoting state inside one argument.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Quote {
    None,
    Double,
    Single,
}

/// Reads the argument starting at `start` (not a space) and returns the offset after it.
fn split_one(line: &[u8], start: usize, args: &mut Args) -> Result<usize, ProtocolError> {
    let mut index = start;
    let mut quote = Quote::None;
    // Set once a quote opens: from then on the argument's bytes are copied to scratch.
    let mut scratch_start: Option<usize> = None;
    loop {
        let byte = line.get(index).copied();
        match quote {
            Quote::None => match byte {
                None | Some(b' ' | b'\n' | b'\r' | b'\t') => {
                    match scratch_start {
                        Some(scratch) => args.push_scratch_from(scratch),
                        None => args.push_input(start, index - start),
                    }
                    return Ok(if byte.is_some() { index + 1 } else { index });
                }
                Some(b'"' | b'\'') => {
                    if scratch_start.is_none() {
                        scratch_start = Some(args.scratch_len());
                        args.scratch_push(&line[start..index]);
                    }
                    quote = if byte == Some(b'"') {
                        Quote::Double
                    } else {
                        Quote::Single
                    };
                    index += 1;
                }
                Some(plain) => {
                    if scratch_start.is_some() {
                        args.scratch_push(&[plain]);
                    }
                    index += 1;
                }
            },
            Quote::Double | Quote::Single => {
                let (unescaped, advance, closed) = quoted_step(line, index, quote)?;
                if closed {
                    args.push_scratch_from(scratch_start.expect("a quote opened scratch"));
                    // The closing quote is followed by a space (skipped) or the line end.
                    return Ok((index + advance + 1).min(line.len()));
                }
                args.scratch_push(&[unescaped]);
                index += advance;
            }
        }
    }
}

/// One step inside quotes at `index`: the byte to append, how far to advance, and whether the
/// quote closed (then nothing is appended).
fn quoted_step(
    line: &[u8],
    index: usize,
    quote: Quote,
) -> Result<(u8, usize, bool), ProtocolError> {
    let Some(&byte) = line.get(index) else {
        return Err(ProtocolError::UnbalancedQuotes);
    };
    let next = line.get(index + 1).copied();
    let closing = if quote == Quote::Double { b'"' } else { b'\'' };
    if quote == Quote::Double && byte == b'\\' && next == Some(b'x') {
        let high = line.get(index + 2).and_then(|&b| (b as char).to_digit(16));
        let low = line.get(index + 3).and_then(|&b| (b as char).to_digit(16));
        if let (Some(high), Some(low)) = (high, low) {
            return Ok(((high * 16 + low) as u8, 4, false));
        }
    }
    if quote == Quote::Double && byte == b'\\' {
        if let Some(escaped) = next {
            let unescaped = match escaped {
                b'n' => b'\n',
                b'r' => b'\r',
                b't' => b'\t',
                b'b' => b'\x08',
                b'a' => b'\x07',
                other => other,
            };
            return Ok((unescaped, 2, false));
        }
    }
    if quote == Quote::Single && byte == b'\\' && next == Some(b'\'') {
        return Ok((b'\'', 2, false));
    }
    if byte == closing {
        if next.is_some_and(|b| !is_c_space(b)) {
            return Err(ProtocolError::UnbalancedQuotes);
        }
        return Ok((0, 1, true));
    }
    Ok((byte, 1, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(line: &[u8]) -> Result<Vec<Vec<u8>>, ProtocolError> {
        let mut args = Args::new();
        split_inline(line, &mut args)?;
        Ok(args.iter(line).map(<[u8]>::to_vec).collect())
    }

    #[test]
    fn accepted() {
        // Each case checked against redis-server 7.0.15 with ECHO or an unknown command.
        let table: &[(&[u8], &[&[u8]])] = &[
            (b"", &[]),
            (b" \t\x0b\x0c ", &[]),
            (b"GET k", &[b"GET", b"k"]),
            (b"  GET   k  ", &[b"GET", b"k"]),
            (b"\x0ba", &[b"a"]),
            (b"a\x0bb", &[b"a\x0bb"]),
            (b"a\rb", &[b"a", b"b"]),
            (b"\"a b\"", &[b"a b"]),
            (b"\"\"", &[b""]),
            (b"''", &[b""]),
            (b"a\"b c\"", &[b"ab c"]),
            (b"\"\\x41\\n\\q\"", &[b"A\nq"]),
            (b"\"\\x4\"", &[b"x4"]),
            (b"\"\\xZZ\"", &[b"xZZ"]),
            (b"\"\\r\\t\\b\\a\\\\\\\"\"", &[b"\r\t\x08\x07\\\""]),
            (b"'a\\'b'", &[b"a'b"]),
            (b"'a\\nb'", &[b"a\\nb"]),
            (b"'a\"b'", &[b"a\"b"]),
            (b"\"a\"\x0bb", &[b"a", b"b"]),
            (b"'x' \"y\" z", &[b"x", b"y", b"z"]),
            (b"\xff\xfe", &[b"\xff\xfe"]),
        ];
        for &(line, expected) in table {
            let expected: Vec<Vec<u8>> = expected.iter().map(|a| a.to_vec()).collect();
            assert_eq!(split(line), Ok(expected), "{}", line.escape_ascii());
        }
    }

    #[test]
    fn rejected() {
        let table: &[&[u8]] = &[
            b"\"a",
            b"'a",
            b"\"a\"b",
            b"'a'b",
            b"a\"b\"\"",
            b"\"a\\\"",
            b"\"\\",
            b"'\\'",
            b"x \"a\\x4",
        ];
        for &line in table {
            assert_eq!(
                split(line),
                Err(ProtocolError::UnbalancedQuotes),
                "{}",
                line.escape_ascii()
            );
        }
    }

    #[test]
    fn plain_arguments_point_into_the_line() {
        let mut args = Args::new();
        split_inline(b"SET 'k' v", &mut args).unwrap();
        assert_eq!(
            args.as_slice()[0],
            crate::resp::Arg::Input { start: 0, len: 3 }
        );
        assert_eq!(
            args.as_slice()[2],
            crate::resp::Arg::Input { start: 8, len: 1 }
        );
    }
}
