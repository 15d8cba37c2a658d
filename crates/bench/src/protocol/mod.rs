//! Request encoders and response parsers for the three wire protocols the generator speaks.
//!
//! These are deliberately small and separate from `strata-protocol`: a load generator must not
//! share parsing bugs with the server it measures. Each parser takes the bytes received so far
//! and returns the first complete reply with the bytes it consumed, `Ok(None)` when the reply
//! is still incomplete, or `Err` when the bytes cannot be a valid reply (the connection is then
//! unusable, since request/reply pairing is lost).

mod memcache_meta;
mod memcache_text;
mod resp;

use serde::{Deserialize, Serialize};

use crate::workload::{KeyBatch, OpKind};

/// A wire protocol.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    /// memcached's classic text protocol: `set`, `get k1 ... kN`.
    MemcacheText,
    /// memcached's meta protocol: `ms`, `mg ... v` (batches end with `mn`).
    MemcacheMeta,
    /// Redis RESP2: `SET`, `GET`, `MGET`.
    Resp,
}

impl Protocol {
    /// The name used on the command line and in reports.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Protocol::MemcacheText => "memcache-text",
            Protocol::MemcacheMeta => "memcache-meta",
            Protocol::Resp => "resp",
        }
    }

    /// Appends a request reading every key of `keys`.
    pub fn encode_get(self, out: &mut Vec<u8>, keys: &KeyBatch) {
        debug_assert!(!keys.is_empty());
        match self {
            Protocol::MemcacheText => memcache_text::encode_get(out, keys),
            Protocol::MemcacheMeta => memcache_meta::encode_get(out, keys),
            Protocol::Resp => resp::encode_get(out, keys),
        }
    }

    /// Appends a request storing `value` under `key`, expiring after `ttl_secs` (0: never).
    pub fn encode_set(self, out: &mut Vec<u8>, key: &[u8], value: &[u8], ttl_secs: u32) {
        match self {
            Protocol::MemcacheText => memcache_text::encode_set(out, key, value, ttl_secs),
            Protocol::MemcacheMeta => memcache_meta::encode_set(out, key, value, ttl_secs),
            Protocol::Resp => resp::encode_set(out, key, value, ttl_secs),
        }
    }

    /// Parses the reply to a request of kind `op` for `keys` keys from the start of `input`.
    ///
    /// # Errors
    /// When `input` cannot start a valid reply to that request.
    pub fn parse_reply(self, op: OpKind, keys: usize, input: &[u8]) -> ParseResult {
        let reply = match (self, op) {
            (Protocol::MemcacheText, OpKind::Get) => memcache_text::parse_get(input),
            (Protocol::MemcacheText, OpKind::Set) => memcache_text::parse_set(input),
            (Protocol::MemcacheMeta, OpKind::Get) => memcache_meta::parse_get(input, keys),
            (Protocol::MemcacheMeta, OpKind::Set) => memcache_meta::parse_set(input),
            (Protocol::Resp, OpKind::Get) => resp::parse_get(input, keys),
            (Protocol::Resp, OpKind::Set) => resp::parse_set(input),
        }?;
        if let Some(reply) = &reply {
            if reply.hits as usize > keys {
                return Err(format!("{} hits for a {keys}-key request", reply.hits));
            }
            debug_assert!(reply.consumed > 0 && reply.consumed <= input.len());
        }
        Ok(reply)
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A complete reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reply {
    /// Bytes of input the reply took.
    pub consumed: usize,
    /// For reads: keys found.
    pub hits: u32,
    /// For writes: the server stored the value.
    pub stored: bool,
    /// The server answered with an error (`ERROR`, `CLIENT_ERROR`, `SERVER_ERROR`, `-ERR`).
    pub error: bool,
}

/// A reply, `None` while incomplete, or why the bytes are not a reply.
pub type ParseResult = Result<Option<Reply>, String>;

/// The position just past the next `\r\n` at or after `from`, with the line's end.
fn line_end(input: &[u8], from: usize) -> Option<(usize, usize)> {
    let newline = from + input.get(from..)?.iter().position(|&b| b == b'\n')?;
    if newline > from && input[newline - 1] == b'\r' {
        Some((newline - 1, newline + 1))
    } else {
        // A bare '\n' is not valid in these protocols; report it as an unparseable line by
        // returning it whole, so the caller's prefix checks reject it.
        Some((newline, newline + 1))
    }
}

/// Parses an ASCII decimal.
fn parse_decimal(text: &[u8]) -> Option<usize> {
    if text.is_empty() || text.len() > 19 || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(
        text.iter()
            .fold(0usize, |n, &d| n * 10 + usize::from(d - b'0')),
    )
}

/// Skips `len` bytes of data at `start` and the CRLF that must follow them: the position past
/// the CRLF, `None` while incomplete, or `error` when other bytes follow the data.
fn skip_data(input: &[u8], start: usize, len: usize, error: &str) -> Result<Option<usize>, String> {
    let data_end = start + len;
    if input.len() < data_end + 2 {
        return Ok(None);
    }
    if &input[data_end..data_end + 2] != b"\r\n" {
        return Err(error.into());
    }
    Ok(Some(data_end + 2))
}

/// Parses a one-line store reply: `stored` counts as stored, any of `not_stored` as a refusal,
/// lines `is_error` accepts as errors; `what` names the command in the error message.
fn parse_store_line(
    input: &[u8],
    stored: &[u8],
    not_stored: &[&[u8]],
    is_error: fn(&[u8]) -> bool,
    what: &str,
) -> ParseResult {
    let Some((line_stop, next)) = line_end(input, 0) else {
        return Ok(None);
    };
    let line = &input[..line_stop];
    let reply = Reply {
        consumed: next,
        ..Reply::default()
    };
    if line == stored {
        Ok(Some(Reply {
            stored: true,
            ..reply
        }))
    } else if not_stored.contains(&line) {
        Ok(Some(reply))
    } else if is_error(line) {
        Ok(Some(Reply {
            error: true,
            ..reply
        }))
    } else {
        Err(format!(
            "unexpected {what} reply {:?}",
            String::from_utf8_lossy(line)
        ))
    }
}

/// True for memcached's error lines.
fn is_memcache_error(line: &[u8]) -> bool {
    line == b"ERROR" || line.starts_with(b"CLIENT_ERROR") || line.starts_with(b"SERVER_ERROR")
}

#[cfg(test)]
pub(crate) mod test_support {
    use super::*;

    /// A reply that found nothing, stored nothing and was no error (a miss, or a refused
    /// store); [`check_prefixes`] fills in the bytes it took.
    pub const NOTHING: Reply = Reply {
        consumed: 0,
        hits: 0,
        stored: false,
        error: false,
    };
    /// A store acknowledged.
    pub const STORED: Reply = Reply {
        stored: true,
        ..NOTHING
    };
    /// An error reply.
    pub const ERROR: Reply = Reply {
        error: true,
        ..NOTHING
    };

    /// A read that found `hits` keys.
    pub fn hits(hits: u32) -> Reply {
        Reply { hits, ..NOTHING }
    }

    /// Checks that every strict prefix of `input` parses as incomplete, and the whole as the
    /// reply `says` taking all of `input`.
    pub fn check_prefixes(protocol: Protocol, op: OpKind, keys: usize, input: &[u8], says: Reply) {
        assert_eq!(says.consumed, 0, "the length comes from the input");
        for end in 0..input.len() {
            assert_eq!(
                protocol.parse_reply(op, keys, &input[..end]),
                Ok(None),
                "prefix {:?}",
                String::from_utf8_lossy(&input[..end])
            );
        }
        let mut extended = input.to_vec();
        extended.extend_from_slice(b"trailing bytes of the next reply");
        let want = Reply {
            consumed: input.len(),
            ..says
        };
        assert_eq!(protocol.parse_reply(op, keys, &extended), Ok(Some(want)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers() {
        assert_eq!(line_end(b"ab\r\ncd", 0), Some((2, 4)));
        assert_eq!(line_end(b"ab\r\ncd\r\n", 4), Some((6, 8)));
        assert_eq!(line_end(b"ab\r", 0), None);
        assert_eq!(parse_decimal(b"0"), Some(0));
        assert_eq!(parse_decimal(b"4096"), Some(4096));
        assert_eq!(parse_decimal(b"-1"), None);
        assert_eq!(parse_decimal(b""), None);
        assert!(is_memcache_error(
            b"SERVER_ERROR out of memory storing object"
        ));
        assert!(!is_memcache_error(b"END"));
    }
}
