//! Replies as owned values: a parser for the client side (tests, the load generator, tooling)
//! and an encoder that writes any [`Reply`] with the encoders of [`crate::resp::encode`].
//!
//! The parser accepts every RESP2 and RESP3 type and is strict where Redis's request parser is
//! lenient: every line must end in `\r\n`. It allocates the values it returns, so it is not for
//! the server's hot path. Aggregates are parsed recursively down to [`REPLY_DEPTH_MAX`] levels, and
//! a declared count or length never reserves more than the bytes actually present.

use super::encode;
use super::number::{parse_i64, split_sign};
use super::Version;

/// Deepest aggregate nesting [`parse_reply`] accepts, which bounds its recursion.
pub const REPLY_DEPTH_MAX: usize = 64;

/// One RESP2 or RESP3 value.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// `+<text>`: a status such as `OK`.
    Simple(Vec<u8>),
    /// `-<code> <message>`, without the `-`.
    Error(Vec<u8>),
    /// `:<n>`.
    Integer(i64),
    /// `$<len>` and bytes.
    Bulk(Vec<u8>),
    /// RESP2 `$-1` or RESP3 `_`.
    Null,
    /// RESP2 `*-1`. RESP3 has only [`Reply::Null`].
    NullArray,
    /// `*<count>` and values.
    Array(Vec<Reply>),
    /// RESP3 `%<pairs>` and keys and values.
    Map(Vec<(Reply, Reply)>),
    /// RESP3 `~<count>` and values.
    Set(Vec<Reply>),
    /// RESP3 `><count>` and values: out-of-band data such as pub/sub messages.
    Push(Vec<Reply>),
    /// RESP3 `|<pairs>` key/value pairs describing the reply that follows them.
    Attribute {
        /// The attribute pairs.
        attributes: Vec<(Reply, Reply)>,
        /// The reply they describe.
        reply: Box<Reply>,
    },
    /// RESP3 `,<double>`, including `inf`, `-inf` and `nan`.
    Double(f64),
    /// RESP3 `#t` or `#f`.
    Boolean(bool),
    /// RESP3 `=<len>` and `<format>:<text>`, e.g. format `txt`.
    Verbatim {
        /// Three-byte format, e.g. `txt` or `mkd`.
        format: [u8; 3],
        /// The text after `<format>:`.
        text: Vec<u8>,
    },
    /// RESP3 `(<digits>`: an integer of any size, as decimal text.
    BigNumber(Vec<u8>),
    /// RESP3 `!<len>` and bytes: an error that may hold any bytes.
    BlobError(Vec<u8>),
}

/// Why [`parse_reply`] returned no reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReplyError {
    /// The buffer holds only part of a reply: read more and parse again from the same start.
    Incomplete,
    /// The bytes are not RESP; the stream cannot be resynchronised.
    Invalid {
        /// Offset of the offending byte or line.
        offset: usize,
        /// What was wrong.
        reason: &'static str,
    },
}

impl core::fmt::Display for ReplyError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Incomplete => f.write_str("incomplete reply: read more bytes"),
            Self::Invalid { offset, reason } => {
                write!(f, "invalid reply at byte {offset}: {reason}")
            }
        }
    }
}

impl std::error::Error for ReplyError {}

/// Parses one reply from the start of `buf`, returning it and the bytes consumed.
pub fn parse_reply(buf: &[u8]) -> Result<(Reply, usize), ReplyError> {
    let mut cursor = Cursor { buf, position: 0 };
    let reply = cursor.value(0)?;
    debug_assert!(cursor.position <= buf.len());
    Ok((reply, cursor.position))
}

struct Cursor<'a> {
    buf: &'a [u8],
    position: usize,
}

impl<'a> Cursor<'a> {
    fn invalid<T>(&self, offset: usize, reason: &'static str) -> Result<T, ReplyError> {
        Err(ReplyError::Invalid { offset, reason })
    }

    /// The rest of the current line, without `\r\n`; moves past it.
    fn line(&mut self) -> Result<&'a [u8], ReplyError> {
        let rest = &self.buf[self.position..];
        let Some(carriage_return) = rest.iter().position(|&b| b == b'\r') else {
            if rest.contains(&b'\n') {
                return self.invalid(self.position, "line feed without carriage return");
            }
            return Err(ReplyError::Incomplete);
        };
        match rest.get(carriage_return + 1) {
            None => Err(ReplyError::Incomplete),
            Some(b'\n') => {
                self.position += carriage_return + 2;
                Ok(&rest[..carriage_return])
            }
            Some(_) => self.invalid(self.position + carriage_return, "carriage return alone"),
        }
    }

    /// A length or count line: `None` for `-1`.
    fn length(&mut self) -> Result<Option<usize>, ReplyError> {
        let start = self.position;
        match parse_i64(self.line()?) {
            Some(-1) => Ok(None),
            Some(n) if n >= 0 => usize::try_from(n)
                .map(Some)
                .or(self.invalid(start, "length")),
            _ => self.invalid(start, "length is not an integer of at least -1"),
        }
    }

    /// `len` bytes followed by `\r\n`.
    fn blob(&mut self, len: usize) -> Result<&'a [u8], ReplyError> {
        let start = self.position;
        let end = start.checked_add(len).ok_or(ReplyError::Incomplete)?;
        if self.buf.len() < end.saturating_add(2) {
            return Err(ReplyError::Incomplete);
        }
        if &self.buf[end..end + 2] != b"\r\n" {
            return self.invalid(end, "blob not followed by \\r\\n");
        }
        self.position = end + 2;
        Ok(&self.buf[start..end])
    }

    fn value(&mut self, depth: usize) -> Result<Reply, ReplyError> {
        let start = self.position;
        let Some(&kind) = self.buf.get(start) else {
            return Err(ReplyError::Incomplete);
        };
        self.position += 1;
        match kind {
            b'+' => Ok(Reply::Simple(self.line()?.to_vec())),
            b'-' => Ok(Reply::Error(self.line()?.to_vec())),
            b':' => match parse_i64(self.line()?) {
                Some(n) => Ok(Reply::Integer(n)),
                None => self.invalid(start, "integer"),
            },
            b'$' => match self.length()? {
                None => Ok(Reply::Null),
                Some(len) => Ok(Reply::Bulk(self.blob(len)?.to_vec())),
            },
            b'!' => match self.length()? {
                None => self.invalid(start, "null blob error"),
                Some(len) => Ok(Reply::BlobError(self.blob(len)?.to_vec())),
            },
            b'=' => self.verbatim(start),
            b'_' => match self.line()? {
                b"" => Ok(Reply::Null),
                _ => self.invalid(start, "null with content"),
            },
            b'#' => match self.line()? {
                b"t" => Ok(Reply::Boolean(true)),
                b"f" => Ok(Reply::Boolean(false)),
                _ => self.invalid(start, "boolean is not t or f"),
            },
            b',' => self.double(start),
            b'(' => self.big_number(start),
            b'*' | b'~' | b'>' | b'%' | b'|' => self.aggregate(kind, start, depth),
            _ => self.invalid(start, "unknown type byte"),
        }
    }

    fn verbatim(&mut self, start: usize) -> Result<Reply, ReplyError> {
        let Some(len) = self.length()? else {
            return self.invalid(start, "null verbatim string");
        };
        let data = self.blob(len)?;
        if data.len() < 4 || data[3] != b':' {
            return self.invalid(start, "verbatim string without <format>:");
        }
        let format = [data[0], data[1], data[2]];
        Ok(Reply::Verbatim {
            format,
            text: data[4..].to_vec(),
        })
    }

    fn double(&mut self, start: usize) -> Result<Reply, ReplyError> {
        let text = self.line()?;
        let (negative, magnitude) = split_sign(text);
        let parsed = if magnitude.eq_ignore_ascii_case(b"nan") {
            Some(f64::NAN)
        } else if magnitude
            .first()
            .is_some_and(|&b| b.is_ascii_digit() || b == b'.')
            || magnitude.eq_ignore_ascii_case(b"inf")
        {
            core::str::from_utf8(magnitude)
                .ok()
                .and_then(|s| s.parse::<f64>().ok())
        } else {
            None
        };
        match parsed {
            Some(value) => Ok(Reply::Double(if negative { -value } else { value })),
            None => self.invalid(start, "double"),
        }
    }

    fn big_number(&mut self, start: usize) -> Result<Reply, ReplyError> {
        let text = self.line()?;
        let digits = text
            .strip_prefix(b"-")
            .or(text.strip_prefix(b"+"))
            .unwrap_or(text);
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return self.invalid(start, "big number");
        }
        Ok(Reply::BigNumber(text.to_vec()))
    }

    fn aggregate(&mut self, kind: u8, start: usize, depth: usize) -> Result<Reply, ReplyError> {
        if depth >= REPLY_DEPTH_MAX {
            return self.invalid(start, "nesting deeper than REPLY_DEPTH_MAX");
        }
        let Some(count) = self.length()? else {
            return match kind {
                b'*' => Ok(Reply::NullArray),
                _ => self.invalid(start, "null aggregate other than *-1"),
            };
        };
        // Every value takes at least 3 bytes, so the input bounds the capacity.
        let capacity = count.min((self.buf.len() - self.position) / 3);
        if kind == b'%' || kind == b'|' {
            let mut pairs = Vec::with_capacity(capacity / 2);
            for _ in 0..count {
                pairs.push((self.value(depth + 1)?, self.value(depth + 1)?));
            }
            if kind == b'%' {
                return Ok(Reply::Map(pairs));
            }
            let reply = Box::new(self.value(depth + 1)?);
            return Ok(Reply::Attribute {
                attributes: pairs,
                reply,
            });
        }
        let mut items = Vec::with_capacity(capacity);
        for _ in 0..count {
            items.push(self.value(depth + 1)?);
        }
        Ok(match kind {
            b'*' => Reply::Array(items),
            b'~' => Reply::Set(items),
            _ => Reply::Push(items),
        })
    }
}

impl Reply {
    /// Appends this reply as a server speaking `version` would send it and returns the bytes
    /// written. RESP2 downgrades as the [`crate::resp::encode`] functions do and drops attributes.
    pub fn encode(&self, version: Version, out: &mut Vec<u8>) -> usize {
        match self {
            Self::Simple(text) => encode::simple(out, text),
            Self::Error(message) => encode::error(out, message),
            Self::Integer(n) => encode::integer(out, *n),
            Self::Bulk(data) => encode::bulk(out, data),
            Self::Null => encode::null(out, version),
            Self::NullArray => encode::null_array(out, version),
            Self::Array(items) => {
                encode::array_len(out, items.len()) + encode_all(items, version, out)
            }
            Self::Set(items) => {
                encode::set_len(out, version, items.len()) + encode_all(items, version, out)
            }
            Self::Push(items) => {
                encode::push_len(out, version, items.len()) + encode_all(items, version, out)
            }
            Self::Map(pairs) => {
                encode::map_len(out, version, pairs.len()) + encode_pairs(pairs, version, out)
            }
            Self::Attribute { attributes, reply } => match version {
                Version::Resp2 => reply.encode(version, out),
                Version::Resp3 => {
                    encode::attribute_len(out, attributes.len())
                        + encode_pairs(attributes, version, out)
                        + reply.encode(version, out)
                }
            },
            Self::Double(value) => encode::double(out, version, *value),
            Self::Boolean(value) => encode::boolean(out, version, *value),
            Self::Verbatim { format, text } => encode::verbatim(out, version, format, text),
            Self::BigNumber(digits) => encode::big_number(out, version, digits),
            Self::BlobError(message) => encode::blob_error(out, version, message),
        }
    }
}

fn encode_all(items: &[Reply], version: Version, out: &mut Vec<u8>) -> usize {
    items.iter().map(|item| item.encode(version, out)).sum()
}

fn encode_pairs(pairs: &[(Reply, Reply)], version: Version, out: &mut Vec<u8>) -> usize {
    pairs
        .iter()
        .map(|(key, value)| key.encode(version, out) + value.encode(version, out))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(data: &[u8]) -> Reply {
        Reply::Bulk(data.to_vec())
    }

    #[test]
    fn accepted() {
        let table: Vec<(&[u8], Reply)> = vec![
            (b"+OK\r\n", Reply::Simple(b"OK".to_vec())),
            (b"-ERR x\r\n", Reply::Error(b"ERR x".to_vec())),
            (b":-5\r\n", Reply::Integer(-5)),
            (b"$3\r\na\r\n\r\n", bulk(b"a\r\n")),
            (b"$0\r\n\r\n", bulk(b"")),
            (b"$-1\r\n", Reply::Null),
            (b"_\r\n", Reply::Null),
            (b"*-1\r\n", Reply::NullArray),
            (b"*0\r\n", Reply::Array(vec![])),
            (
                b"*2\r\n:1\r\n$1\r\nx\r\n",
                Reply::Array(vec![Reply::Integer(1), bulk(b"x")]),
            ),
            (
                b"%1\r\n+k\r\n:1\r\n",
                Reply::Map(vec![(Reply::Simple(b"k".to_vec()), Reply::Integer(1))]),
            ),
            (b"~1\r\n#t\r\n", Reply::Set(vec![Reply::Boolean(true)])),
            (b">1\r\n#f\r\n", Reply::Push(vec![Reply::Boolean(false)])),
            (b",1.5\r\n", Reply::Double(1.5)),
            (b",-inf\r\n", Reply::Double(f64::NEG_INFINITY)),
            (b",1e+20\r\n", Reply::Double(1e20)),
            (
                b"=6\r\ntxt:hi\r\n",
                Reply::Verbatim {
                    format: *b"txt",
                    text: b"hi".to_vec(),
                },
            ),
            (
                b"(-123456789012345678901234567890\r\n",
                Reply::BigNumber(b"-123456789012345678901234567890".to_vec()),
            ),
            (b"!3\r\nE\r\n\r\n", Reply::BlobError(b"E\r\n".to_vec())),
            (
                b"|1\r\n+ttl\r\n:3\r\n$1\r\nv\r\n",
                Reply::Attribute {
                    attributes: vec![(Reply::Simple(b"ttl".to_vec()), Reply::Integer(3))],
                    reply: Box::new(bulk(b"v")),
                },
            ),
        ];
        for (buf, reply) in table {
            let mut extended = buf.to_vec();
            extended.extend_from_slice(b"+next\r\n");
            assert_eq!(
                parse_reply(&extended),
                Ok((reply, buf.len())),
                "{}",
                buf.escape_ascii()
            );
        }
        let (nan, _) = parse_reply(b",nan\r\n").unwrap();
        assert!(matches!(nan, Reply::Double(x) if x.is_nan()));
    }

    #[test]
    fn incomplete() {
        for buf in [
            &b""[..],
            b"+OK",
            b"+OK\r",
            b"$3\r\nab",
            b"$3\r\nabc\r",
            b"*2\r\n:1\r\n",
            b"%1\r\n:1\r\n",
            b"|1\r\n:1\r\n:2\r\n",
            b"$9223372036854775807\r\n",
        ] {
            assert_eq!(
                parse_reply(buf),
                Err(ReplyError::Incomplete),
                "{}",
                buf.escape_ascii()
            );
        }
    }

    #[test]
    fn rejected() {
        for buf in [
            &b"x\r\n"[..],
            b"+OK\n",
            b"+O\rK\r\n",
            b":1.5\r\n",
            b":\r\n",
            b"$-2\r\n",
            b"$1\r\nab\r\n",
            b"*-2\r\n",
            b"%-1\r\n",
            b"_x\r\n",
            b"#x\r\n",
            b",abc\r\n",
            b",\r\n",
            b"=2\r\nab\r\n",
            b"(12a\r\n",
            b"!-1\r\n",
        ] {
            assert!(
                matches!(parse_reply(buf), Err(ReplyError::Invalid { .. })),
                "{}",
                buf.escape_ascii()
            );
        }
    }

    #[test]
    fn depth_is_bounded() {
        let deep = b"*1\r\n".repeat(REPLY_DEPTH_MAX + 1);
        assert!(matches!(
            parse_reply(&deep),
            Err(ReplyError::Invalid { .. })
        ));
        let mut ok = b"*1\r\n".repeat(REPLY_DEPTH_MAX);
        ok.extend_from_slice(b":1\r\n");
        assert!(parse_reply(&ok).is_ok());
    }

    #[test]
    fn huge_counts_do_not_allocate() {
        assert_eq!(
            parse_reply(b"*9223372036854775807\r\n:1\r\n"),
            Err(ReplyError::Incomplete)
        );
    }

    #[test]
    fn encode_downgrades_for_resp2() {
        let reply = Reply::Map(vec![(bulk(b"k"), Reply::Double(0.5))]);
        let mut out = Vec::new();
        reply.encode(Version::Resp2, &mut out);
        assert_eq!(out, b"*2\r\n$1\r\nk\r\n$3\r\n0.5\r\n");
        out.clear();
        reply.encode(Version::Resp3, &mut out);
        assert_eq!(out, b"%1\r\n$1\r\nk\r\n,0.5\r\n");
    }
}
