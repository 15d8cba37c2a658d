//! Reply encoders: each appends one RESP value (or aggregate header) to `out` and returns the
//! bytes written. Types RESP2 lacks are downgraded as Redis 7.0 does (`networking.c`): null is
//! `$-1`, a map is an array of keys and values, a set or push is an array, a double is a bulk
//! string of `%.17g`, a boolean is `:1`/`:0`, a verbatim string or big number is a bulk string.
//!
//! Nothing here allocates beyond growing `out`; integers and doubles are formatted on the stack.

use super::number::{format_double, DOUBLE_LEN_MAX, I64_LEN_MAX};
use super::Version;

const CRLF: &[u8] = b"\r\n";

/// Appends `prefix`, the decimal `value` and `\r\n`: the shape of every header line.
fn line_i64(out: &mut Vec<u8>, prefix: u8, value: i64) -> usize {
    // Assembled backwards on the stack (`\r\n`, digits, sign, prefix), then copied once.
    let mut line = [0u8; I64_LEN_MAX + 3];
    let end = line.len() - CRLF.len();
    line[end..].copy_from_slice(CRLF);
    let mut start = crate::digits::put_u64(&mut line, end, value.unsigned_abs());
    if value < 0 {
        start -= 1;
        line[start] = b'-';
    }
    start -= 1;
    line[start] = prefix;
    out.extend_from_slice(&line[start..]);
    line.len() - start
}

/// Appends `prefix`, the count and `\r\n`. Counts above `i64::MAX` cannot come from memory.
fn line_len(out: &mut Vec<u8>, prefix: u8, count: usize) -> usize {
    line_i64(
        out,
        prefix,
        i64::try_from(count).expect("a length fits in i64"),
    )
}

/// Appends `prefix`, `text` with `\r` and `\n` replaced by spaces (as Redis does for error
/// strings, so a reply can never break the framing) and `\r\n`.
fn line_text(out: &mut Vec<u8>, prefix: u8, text: &[u8]) -> usize {
    out.reserve(text.len() + 3);
    out.push(prefix);
    out.extend(
        text.iter()
            .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    out.extend_from_slice(CRLF);
    text.len() + 3
}

/// `+<text>\r\n`, e.g. `+OK`. `\r` and `\n` in `text` become spaces.
pub fn simple(out: &mut Vec<u8>, text: &[u8]) -> usize {
    line_text(out, b'+', text)
}

/// `+OK\r\n`.
pub fn ok(out: &mut Vec<u8>) -> usize {
    out.extend_from_slice(b"+OK\r\n");
    5
}

/// `-<message>\r\n`. `message` starts with the error code, e.g. `b"ERR syntax error"`; `\r` and
/// `\n` in it become spaces, as in Redis's `addReplyErrorLength`. See [`crate::resp::errors`] for
/// Redis's standard messages.
pub fn error(out: &mut Vec<u8>, message: &[u8]) -> usize {
    line_text(out, b'-', message)
}

/// `:<value>\r\n`.
pub fn integer(out: &mut Vec<u8>, value: i64) -> usize {
    line_i64(out, b':', value)
}

/// `$<len>\r\n<data>\r\n`; `data` is binary-safe.
pub fn bulk(out: &mut Vec<u8>, data: &[u8]) -> usize {
    let header = line_len(out, b'$', data.len());
    out.extend_from_slice(data);
    out.extend_from_slice(CRLF);
    header + data.len() + 2
}

/// A bulk string whose bytes are `pieces` in order (a large string's parts): the same bytes
/// as [`bulk`] of them joined, with the buffer grown once for the whole reply.
pub fn bulk_pieces(out: &mut Vec<u8>, pieces: &[&[u8]]) -> usize {
    let len: usize = pieces.iter().map(|piece| piece.len()).sum();
    let header = line_len(out, b'$', len);
    out.reserve(len + 2);
    for piece in pieces {
        out.extend_from_slice(piece);
    }
    out.extend_from_slice(CRLF);
    header + len + 2
}

/// The null reply (a missing key): RESP2 `$-1\r\n`, RESP3 `_\r\n`.
pub fn null(out: &mut Vec<u8>, version: Version) -> usize {
    let bytes: &[u8] = match version {
        Version::Resp2 => b"$-1\r\n",
        Version::Resp3 => b"_\r\n",
    };
    out.extend_from_slice(bytes);
    bytes.len()
}

/// The null array (e.g. `LPOP missing 2`): RESP2 `*-1\r\n`, RESP3 `_\r\n`.
pub fn null_array(out: &mut Vec<u8>, version: Version) -> usize {
    let bytes: &[u8] = match version {
        Version::Resp2 => b"*-1\r\n",
        Version::Resp3 => b"_\r\n",
    };
    out.extend_from_slice(bytes);
    bytes.len()
}

/// `*<count>\r\n`; the caller then encodes `count` values.
pub fn array_len(out: &mut Vec<u8>, count: usize) -> usize {
    line_len(out, b'*', count)
}

/// RESP3 `%<pairs>\r\n`, RESP2 `*<2 * pairs>\r\n`; the caller then encodes key, value, ...
pub fn map_len(out: &mut Vec<u8>, version: Version, pairs: usize) -> usize {
    match version {
        Version::Resp2 => line_len(
            out,
            b'*',
            pairs.checked_mul(2).expect("pairs fit in memory"),
        ),
        Version::Resp3 => line_len(out, b'%', pairs),
    }
}

/// RESP3 `~<count>\r\n`, RESP2 `*<count>\r\n`.
pub fn set_len(out: &mut Vec<u8>, version: Version, count: usize) -> usize {
    match version {
        Version::Resp2 => line_len(out, b'*', count),
        Version::Resp3 => line_len(out, b'~', count),
    }
}

/// RESP3 `><count>\r\n` (out-of-band data such as pub/sub messages), RESP2 `*<count>\r\n`.
pub fn push_len(out: &mut Vec<u8>, version: Version, count: usize) -> usize {
    match version {
        Version::Resp2 => line_len(out, b'*', count),
        Version::Resp3 => line_len(out, b'>', count),
    }
}

/// RESP3 `|<pairs>\r\n`, followed by `pairs` key/value pairs and then the reply they describe.
/// RESP2 has no attributes: callers must not send them to RESP2 clients.
pub fn attribute_len(out: &mut Vec<u8>, pairs: usize) -> usize {
    line_len(out, b'|', pairs)
}

/// A double as Redis 7.0's `addReplyDouble`: RESP3 `,<%.17g>\r\n` (`,inf`, `,-inf`), RESP2 the
/// same text as a bulk string.
pub fn double(out: &mut Vec<u8>, version: Version, value: f64) -> usize {
    let mut text = [0u8; DOUBLE_LEN_MAX];
    let text = format_double(value, &mut text);
    match version {
        Version::Resp2 => bulk(out, text),
        Version::Resp3 => {
            out.push(b',');
            out.extend_from_slice(text);
            out.extend_from_slice(CRLF);
            text.len() + 3
        }
    }
}

/// RESP3 `#t\r\n`/`#f\r\n`, RESP2 `:1\r\n`/`:0\r\n`.
pub fn boolean(out: &mut Vec<u8>, version: Version, value: bool) -> usize {
    let bytes: &[u8] = match (version, value) {
        (Version::Resp2, true) => b":1\r\n",
        (Version::Resp2, false) => b":0\r\n",
        (Version::Resp3, true) => b"#t\r\n",
        (Version::Resp3, false) => b"#f\r\n",
    };
    out.extend_from_slice(bytes);
    bytes.len()
}

/// RESP3 `=<len + 4>\r\n<format>:<text>\r\n` (format is e.g. `b"txt"` or `b"mkd"`), RESP2 a bulk
/// string of `text` alone.
pub fn verbatim(out: &mut Vec<u8>, version: Version, format: &[u8; 3], text: &[u8]) -> usize {
    match version {
        Version::Resp2 => bulk(out, text),
        Version::Resp3 => {
            let header = line_len(out, b'=', text.len() + 4);
            out.extend_from_slice(format);
            out.push(b':');
            out.extend_from_slice(text);
            out.extend_from_slice(CRLF);
            header + text.len() + 6
        }
    }
}

/// RESP3 `(<digits>\r\n`, RESP2 a bulk string of the digits. `digits` is an optionally signed
/// decimal integer of any size.
pub fn big_number(out: &mut Vec<u8>, version: Version, digits: &[u8]) -> usize {
    debug_assert!(digits
        .iter()
        .all(|&b| b.is_ascii_digit() || b == b'-' || b == b'+'));
    match version {
        Version::Resp2 => bulk(out, digits),
        Version::Resp3 => line_text(out, b'(', digits),
    }
}

/// RESP3 `!<len>\r\n<message>\r\n` (an error that may hold any bytes), RESP2 a simple error with
/// `\r` and `\n` replaced by spaces.
pub fn blob_error(out: &mut Vec<u8>, version: Version, message: &[u8]) -> usize {
    match version {
        Version::Resp2 => error(out, message),
        Version::Resp3 => {
            let header = line_len(out, b'!', message.len());
            out.extend_from_slice(message);
            out.extend_from_slice(CRLF);
            header + message.len() + 2
        }
    }
}

/// A request as clients send it: an array of bulk strings. Used by tests and the load generator.
pub fn encode_command(out: &mut Vec<u8>, args: &[&[u8]]) -> usize {
    let mut written = array_len(out, args.len());
    for arg in args {
        written += bulk(out, arg);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;
    use Version::{Resp2, Resp3};

    fn encoded(encode: impl FnOnce(&mut Vec<u8>) -> usize) -> Vec<u8> {
        let mut out = b"prefix".to_vec();
        let written = encode(&mut out);
        assert_eq!(written, out.len() - 6, "returned length");
        out.split_off(6)
    }

    #[test]
    fn bulk_of_pieces_is_bulk_of_them_joined() {
        for pieces in [&[][..], &[&b""[..]], &[b"ab", b"", b"cde"], &[b"x"]] {
            let joined = pieces.concat();
            assert_eq!(
                encoded(|out| bulk_pieces(out, pieces)),
                encoded(|out| bulk(out, &joined)),
                "{pieces:?}"
            );
        }
    }

    #[test]
    fn scalars() {
        let table: &[(Vec<u8>, &[u8])] = &[
            (encoded(ok), b"+OK\r\n"),
            (encoded(|o| simple(o, b"PONG")), b"+PONG\r\n"),
            (encoded(|o| simple(o, b"a\r\nb")), b"+a  b\r\n"),
            (
                encoded(|o| error(o, b"ERR syntax error")),
                b"-ERR syntax error\r\n",
            ),
            (encoded(|o| error(o, b"ERR x\ny")), b"-ERR x y\r\n"),
            (encoded(|o| integer(o, 0)), b":0\r\n"),
            (encoded(|o| integer(o, -42)), b":-42\r\n"),
            (
                encoded(|o| integer(o, i64::MIN)),
                b":-9223372036854775808\r\n",
            ),
            (encoded(|o| bulk(o, b"")), b"$0\r\n\r\n"),
            (encoded(|o| bulk(o, b"a\r\n\0")), b"$4\r\na\r\n\0\r\n"),
            (encoded(|o| null(o, Resp2)), b"$-1\r\n"),
            (encoded(|o| null(o, Resp3)), b"_\r\n"),
            (encoded(|o| null_array(o, Resp2)), b"*-1\r\n"),
            (encoded(|o| null_array(o, Resp3)), b"_\r\n"),
            (encoded(|o| boolean(o, Resp2, true)), b":1\r\n"),
            (encoded(|o| boolean(o, Resp2, false)), b":0\r\n"),
            (encoded(|o| boolean(o, Resp3, true)), b"#t\r\n"),
            (encoded(|o| boolean(o, Resp3, false)), b"#f\r\n"),
        ];
        for (actual, expected) in table {
            assert_eq!(actual, expected, "{}", expected.escape_ascii());
        }
    }

    #[test]
    fn versioned() {
        // Shapes checked against redis-server 7.0.15 (ZSCORE, HELLO, LOLWUT, LPOP).
        let table: &[(Vec<u8>, &[u8])] = &[
            (
                encoded(|o| double(o, Resp2, 0.1)),
                b"$19\r\n0.10000000000000001\r\n",
            ),
            (
                encoded(|o| double(o, Resp3, 0.1)),
                b",0.10000000000000001\r\n",
            ),
            (
                encoded(|o| double(o, Resp2, f64::INFINITY)),
                b"$3\r\ninf\r\n",
            ),
            (
                encoded(|o| double(o, Resp3, f64::NEG_INFINITY)),
                b",-inf\r\n",
            ),
            (encoded(|o| double(o, Resp3, 1.5)), b",1.5\r\n"),
            (encoded(|o| array_len(o, 3)), b"*3\r\n"),
            (encoded(|o| map_len(o, Resp2, 7)), b"*14\r\n"),
            (encoded(|o| map_len(o, Resp3, 7)), b"%7\r\n"),
            (encoded(|o| set_len(o, Resp2, 2)), b"*2\r\n"),
            (encoded(|o| set_len(o, Resp3, 2)), b"~2\r\n"),
            (encoded(|o| push_len(o, Resp2, 3)), b"*3\r\n"),
            (encoded(|o| push_len(o, Resp3, 3)), b">3\r\n"),
            (encoded(|o| attribute_len(o, 1)), b"|1\r\n"),
            (
                encoded(|o| verbatim(o, Resp2, b"txt", b"hi")),
                b"$2\r\nhi\r\n",
            ),
            (
                encoded(|o| verbatim(o, Resp3, b"txt", b"hi")),
                b"=6\r\ntxt:hi\r\n",
            ),
            (encoded(|o| big_number(o, Resp2, b"-12")), b"$3\r\n-12\r\n"),
            (encoded(|o| big_number(o, Resp3, b"-12")), b"(-12\r\n"),
            (
                encoded(|o| blob_error(o, Resp2, b"ERR a\r\nb")),
                b"-ERR a  b\r\n",
            ),
            (
                encoded(|o| blob_error(o, Resp3, b"ERR a\r\nb")),
                b"!8\r\nERR a\r\nb\r\n",
            ),
        ];
        for (actual, expected) in table {
            assert_eq!(actual, expected, "{}", expected.escape_ascii());
        }
    }

    #[test]
    fn commands() {
        let out = encoded(|o| encode_command(o, &[b"SET", b"k", b""]));
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n");
        assert_eq!(encoded(|o| encode_command(o, &[])), b"*0\r\n");
    }
}
