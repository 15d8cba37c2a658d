//! `set|add|replace|append|prepend <key> <flags> <exptime> <bytes> [noreply]` and
//! `cas <key> <flags> <exptime> <bytes> <cas unique> [noreply]`, each followed by a data block.
//!
//! As memcached 1.6.18 answers (all verified against it):
//! - other token counts are `ERROR` (`set a 0 0`, `set a 0 0 1 noreply extra`);
//! - a bad key, flags, expiry, length or CAS value is `CLIENT_ERROR bad command line format`,
//!   and the data block is *not* skipped (memcached then reads it as a command);
//! - flags are kept modulo 2^32 (`set a 4294967296 0 1` stores flags 0);
//! - a value over the limit is [`Request::TooLarge`]; its data block is skipped unread;
//! - a data block not followed by `\r\n` is `CLIENT_ERROR bad data chunk`, consuming exactly
//!   `<bytes> + 2` bytes after the line;
//! - `noreply` suppresses every one of these error replies.

use super::encode::{
    CLIENT_ERROR_BAD_DATA_CHUNK, CLIENT_ERROR_BAD_FORMAT, ERROR, SERVER_ERROR_TOO_LARGE,
};
use super::token::{key_is_valid, parse_client_flags, parse_data_len, parse_i64, parse_u64};
use super::{noreply_last, split_args, Limits, Line, ParseError, Parsed, Request};

/// Which storage command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreCommand {
    /// Store unconditionally.
    Set,
    /// Store only if the key is absent.
    Add,
    /// Store only if the key is present.
    Replace,
    /// Append to an existing value (flags and expiry are ignored).
    Append,
    /// Prepend to an existing value (flags and expiry are ignored).
    Prepend,
    /// Store only if the CAS value still matches.
    Cas,
}

impl StoreCommand {
    /// The command as sent.
    pub fn name(self) -> &'static [u8] {
        match self {
            Self::Set => b"set",
            Self::Add => b"add",
            Self::Replace => b"replace",
            Self::Append => b"append",
            Self::Prepend => b"prepend",
            Self::Cas => b"cas",
        }
    }

    /// The command named `name`, if it is a storage command.
    pub fn from_name(name: &[u8]) -> Option<Self> {
        match name {
            b"set" => Some(Self::Set),
            b"add" => Some(Self::Add),
            b"replace" => Some(Self::Replace),
            b"append" => Some(Self::Append),
            b"prepend" => Some(Self::Prepend),
            b"cas" => Some(Self::Cas),
            _ => None,
        }
    }
}

/// A storage request with its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Store<'a> {
    /// Which command.
    pub command: StoreCommand,
    /// The key, valid by [`super::key_is_valid`].
    pub key: &'a [u8],
    /// Opaque client flags.
    pub flags: u32,
    /// Expiry as sent: 0 never, up to 30 days (2,592,000 s) relative, above that an absolute
    /// Unix time, negative already expired. The server converts it.
    pub exptime: i64,
    /// The value, without its trailing `\r\n`; at most [`Limits::value_len_max`] bytes.
    pub data: &'a [u8],
    /// The CAS value to compare: `Some` exactly for [`StoreCommand::Cas`].
    pub cas_unique: Option<u64>,
    /// Whether to suppress the reply.
    pub noreply: bool,
}

/// A store refused because its value exceeds [`Limits::value_len_max`].
///
/// The server sends `reply`, then discards `swallow_len` bytes (the data block and its `\r\n`)
/// as they arrive, and, when `remove_existing`, deletes the item under `key`: memcached unlinks
/// the old value when a `set` or an `ms` fails this way (but not for `add`, `replace`, `append`,
/// `prepend` or `cas`), so a reader never sees the value the client meant to replace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooLarge<'a> {
    /// The key of the refused store.
    pub key: &'a [u8],
    /// Whether `key` is base64 (an `ms` with the `b` flag); decode it with
    /// [`super::decode_key`] before deleting.
    pub key_base64: bool,
    /// Whether the existing item under `key` must be removed.
    pub remove_existing: bool,
    /// `SERVER_ERROR object too large for cache\r\n`, or empty under `noreply` (an `ms` reports
    /// it even with `q`, as memcached does).
    pub reply: &'static [u8],
    /// Bytes after the command line to discard: the announced length plus 2.
    pub swallow_len: usize,
}

pub(crate) fn parse<'a>(
    command: StoreCommand,
    line: Line<'a>,
    limits: &Limits,
) -> Result<Parsed<'a>, ParseError> {
    let (args, count) = split_args::<6>(line.args);
    let count_min = if command == StoreCommand::Cas { 5 } else { 4 };
    if count != count_min && count != count_min + 1 {
        return Err(line.refuse(ERROR, false));
    }
    let noreply = noreply_last(&args, count);
    let bad_format = line.refuse(CLIENT_ERROR_BAD_FORMAT, noreply);
    let key = args[0];
    if !key_is_valid(key, limits.key_len_max) {
        return Err(bad_format);
    }
    let (Some(flags), Some(exptime), Some(data_len)) = (
        parse_client_flags(args[1]),
        parse_i64(args[2]),
        parse_data_len(args[3]),
    ) else {
        return Err(bad_format);
    };
    let cas_unique = match command {
        StoreCommand::Cas => Some(parse_u64(args[4]).ok_or(bad_format)?),
        _ => None,
    };
    if data_len > limits.value_len_max {
        let reply = if noreply {
            &b""[..]
        } else {
            SERVER_ERROR_TOO_LARGE
        };
        let remove_existing = command == StoreCommand::Set;
        let too_large = TooLarge {
            key,
            key_base64: false,
            remove_existing,
            reply,
            swallow_len: data_len + 2,
        };
        return line.parsed(Request::TooLarge(too_large));
    }
    let (data, consumed) = data_block(line, data_len, noreply)?;
    let store = Store {
        command,
        key,
        flags,
        exptime,
        data,
        cas_unique,
        noreply,
    };
    Ok(Parsed {
        request: Request::Store(store),
        consumed,
    })
}

/// The `data_len` bytes after the line and the total consumed, once they and their `\r\n` have
/// arrived; `CLIENT_ERROR bad data chunk` (unless `noreply`) when the `\r\n` is wrong.
pub(crate) fn data_block<'a>(
    line: Line<'a>,
    data_len: usize,
    noreply: bool,
) -> Result<(&'a [u8], usize), ParseError> {
    let consumed = line.consumed + data_len + 2;
    let Some(block) = line.buf.get(line.consumed..consumed) else {
        return Err(ParseError::Incomplete);
    };
    let (data, terminator) = block.split_at(data_len);
    if terminator != b"\r\n" {
        return Err(ParseError::reply(
            CLIENT_ERROR_BAD_DATA_CHUNK,
            consumed,
            noreply,
        ));
    }
    Ok((data, consumed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memcache::parse;

    fn store(buf: &[u8]) -> (Store<'_>, usize) {
        match parse(buf, &Limits::default()) {
            Ok(Parsed {
                request: Request::Store(store),
                consumed,
            }) => (store, consumed),
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(buf)),
        }
    }

    #[test]
    fn accepted() {
        let (s, consumed) = store(b"set a 5 -1 3\r\nabc\r\nget a\r\n");
        assert_eq!(consumed, 19);
        let want = Store {
            command: StoreCommand::Set,
            key: b"a",
            flags: 5,
            exptime: -1,
            data: b"abc",
            cas_unique: None,
            noreply: false,
        };
        assert_eq!(s, want);
        let (s, _) = store(b"cas k 0 0 1 99 noreply\r\nx\r\n");
        assert_eq!(
            (s.command, s.cas_unique, s.noreply),
            (StoreCommand::Cas, Some(99), true)
        );
        let (s, _) = store(b"set a 4294967296 99999999999 +01 junk\nx\r\n");
        assert_eq!(
            (s.flags, s.exptime, s.data, s.noreply),
            (0, 99_999_999_999, &b"x"[..], false)
        );
        let (s, consumed) = store(b"append a 0 0 0\r\n\r\n");
        assert_eq!(
            (s.command, s.data, consumed),
            (StoreCommand::Append, &b""[..], 18)
        );
        for name in ["add", "replace", "prepend"] {
            let line = format!("{name} k 1 2 1\r\nz\r\n");
            assert_eq!(store(line.as_bytes()).0.command.name(), name.as_bytes());
        }
    }

    #[test]
    fn incomplete_until_data_block_arrives() {
        for input in [
            &b"set a 0 0 3\r\n"[..],
            b"set a 0 0 3\r\nab",
            b"set a 0 0 3\r\nabc\r",
        ] {
            assert_eq!(
                parse(input, &Limits::default()),
                Err(ParseError::Incomplete)
            );
        }
    }

    #[test]
    fn rejected() {
        let mut long_key = b"set ".to_vec();
        long_key.extend_from_slice(&[b'k'; 251]);
        long_key.extend_from_slice(b" 0 0 1\r\n");
        let bad_format: &[u8] = b"CLIENT_ERROR bad command line format\r\n";
        // (input, reply, consumed): memcached 1.6.18's answers.
        let cases: &[(&[u8], &[u8], usize)] = &[
            (b"set a 0 0\r\n", b"ERROR\r\n", 11),
            (b"set a 0 0 1 noreply extra\r\n", b"ERROR\r\n", 27),
            (b"cas a 0 0 1\r\nx\r\n", b"ERROR\r\n", 13),
            (b"set a x 0 1\r\nx\r\n", bad_format, 13),
            (b"set a -1 0 1\r\nx\r\n", bad_format, 14),
            (b"set a 0 x 1\r\nx\r\n", bad_format, 13),
            (b"set a 0 0 -1\r\nx\r\n", bad_format, 14),
            (b"set a 0 0 1x\r\nx\r\n", bad_format, 14),
            (b"set a 18446744073709551616 0 1\r\nx\r\n", bad_format, 32),
            (b"set a 0 99999999999999999999 1\r\nx\r\n", bad_format, 32),
            (b"set a 0 0 2147483648\r\n", bad_format, 22),
            (b"cas a 0 0 1 x\r\nx\r\n", bad_format, 15),
            (b"cas a 0 0 1 -1\r\nx\r\n", bad_format, 16),
            (&long_key, bad_format, long_key.len()),
            (b"set a\x01b 0 0 1\r\nx\r\n", bad_format, 15),
            (b"set a 0 0 -1 noreply\r\n", b"", 22),
            (
                b"set a 0 0 2\r\nxyz\r\n",
                b"CLIENT_ERROR bad data chunk\r\n",
                17,
            ),
            (
                b"set a 0 0 1\nx\nget a\n",
                b"CLIENT_ERROR bad data chunk\r\n",
                15,
            ),
            (b"set a 0 0 2 noreply\r\nxyz\r\n", b"", 25),
        ];
        for &(input, reply, consumed) in cases {
            let want = ParseError::Reply {
                reply,
                consumed,
                swallow_len: 0,
            };
            assert_eq!(
                parse(input, &Limits::default()),
                Err(want),
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn too_large_swallows_and_names_the_key() {
        let limits = Limits {
            value_len_max: 10,
            ..Limits::default()
        };
        let cases: &[(&[u8], bool, &[u8])] = &[
            (b"set k 0 0 11\r\n", true, SERVER_ERROR_TOO_LARGE),
            (b"set k 0 0 11 noreply\r\n", true, b""),
            (b"add k 0 0 11\r\n", false, SERVER_ERROR_TOO_LARGE),
            (b"cas k 0 0 11 5\r\n", false, SERVER_ERROR_TOO_LARGE),
        ];
        for &(input, remove_existing, reply) in cases {
            let want = TooLarge {
                key: b"k",
                key_base64: false,
                remove_existing,
                reply,
                swallow_len: 13,
            };
            let parsed = parse(input, &limits).unwrap();
            assert_eq!(
                parsed,
                Parsed {
                    request: Request::TooLarge(want),
                    consumed: input.len()
                }
            );
        }
        assert!(matches!(
            parse(b"set k 0 0 10\r\n", &limits),
            Err(ParseError::Incomplete)
        ));
    }
}
