//! memcached text and meta protocol: parsing requests and encoding replies.
//!
//! [`parse`] reads one request from the front of a byte buffer and returns it with the number of
//! bytes it used, or says that more bytes are needed, or says exactly what memcached 1.6 would
//! do with bad input: which reply to send, how many bytes to drop and whether to close the
//! connection. Requests borrow keys and values from the buffer; nothing is allocated. The
//! `encode` functions append replies to a caller-owned `Vec<u8>`.
//!
//! ```text
//!  read buffer ──► parse ──► Parsed { request, consumed } ──► server executes ──► encode ──► write
//!                    │
//!                    ├─► Err(Incomplete): read more and parse again from the same start
//!                    ├─► Err(Reply { reply, consumed, swallow_len }): send reply, drop bytes
//!                    └─► Err(Close): close the connection without a reply
//! ```
//!
//! # What is accepted, and where it follows memcached
//!
//! Behaviour was checked byte for byte against a running memcached 1.6.18; the test
//! `tests/memcache_vs_memcached.rs` repeats those checks whenever `memcached` is installed.
//!
//! - Commands are lower case and case-sensitive (`GET` is `ERROR`). Classic: `get gets gat gats
//!   set add replace append prepend cas delete incr decr touch flush_all version verbosity quit
//!   stats shutdown`. Meta: `mg ms md ma mn me`. Anything else is `ERROR\r\n`, including
//!   memcached's administrative commands (`slabs`, `lru_crawler`, `watch`, ...).
//! - Lines end in `\n`, with an optional `\r` before it, as memcached accepts. Tokens are split on
//!   spaces only; runs of spaces and leading spaces are skipped. A data block must end in exactly
//!   `\r\n`, or the reply is `CLIENT_ERROR bad data chunk` and exactly `<bytes> + 2` bytes are
//!   dropped (memcached does not resynchronise on the next newline).
//! - Wrong token counts are `ERROR`. Bad numbers and keys over [`Limits::key_len_max`] are
//!   `CLIENT_ERROR bad command line format`. A trailing token is `noreply` only if it is exactly
//!   that word; any other extra token in that position is ignored (`set a 0 0 1 junk` stores).
//!   With `noreply`, memcached suppresses the error replies of that command too, and so does
//!   this parser (the [`ParseError::Reply`] then carries an empty reply).
//! - A store larger than [`Limits::value_len_max`] is [`Request::TooLarge`]: the server replies
//!   `SERVER_ERROR object too large for cache` (unless `noreply`), discards the data block
//!   without buffering it, and, for `set` and `ms`, removes the existing item, as memcached does
//!   so a failed update leaves no stale value behind.
//! - An unknown command whose last token starts with `HTTP/` (`GET / HTTP/1.1`) is part of an
//!   HTTP request, and closes the connection without a reply ([`ParseError::CrossProtocol`]).
//! - Before a client authenticates (memcached's `-Y` auth file), lines are read by
//!   [`parse_auth_line`] instead, and an authentication token by [`split_auth_token`].
//! - A line longer than [`Limits::line_len_max`] (16,383 bytes: memcached's read buffer) closes
//!   the connection without a reply, unless up to 100 spaces and then `get ` or `gets ` begin
//!   it: a multiget may be up to [`Limits::get_line_len_max`] long and have any number of keys.
//!   Shorter lines are processed whatever they hold (`version` after 3,000 spaces answers).
//!
//! # Departures from memcached
//!
//! - memcached closes the connection once more than 2048 bytes are buffered without a newline
//!   (unless a multiget begins them), so a line of 2,049 to 16,383 bytes is processed if it
//!   arrives in one read and closed if a read ends inside it past byte 2,048. strata processes
//!   such a line however it arrives, so its outcome never depends on read boundaries: it
//!   accepts every line memcached can accept, and closes what memcached always closes.
//! - memcached's text parser accepts control characters and tabs inside keys; strata refuses
//!   them with `CLIENT_ERROR bad command line format`, as `doc/protocol.txt` asks.
//! - memcached has no bound on a multiget line; strata closes one longer than
//!   [`Limits::get_line_len_max`] (1 MiB by default), as memcached closes other long lines.
//! - memcached truncates data lengths to 32 bits (`set a 0 0 4294967296` reads 0 bytes); strata
//!   refuses lengths above `i32::MAX - 2` as malformed.
//! - The meta flags `E` (all commands) and `x` (`md`) are accepted as in later 1.6 releases;
//!   1.6.18 itself answers `CLIENT_ERROR invalid flag` to them.
//! - A `POST` or `Host:` line closes the connection as in Redis (memcached answers `ERROR`), and
//!   the `HTTP/` rule applies to every unknown command, not only to those memcached's dispatch
//!   leaves to it ([`crate::cross_protocol`]).

mod arith;
mod auth;
mod base64;
mod client;
mod delete;
pub mod encode;
mod limits;
mod meta;
mod misc;
mod retrieval;
mod storage;
mod token;

pub use arith::{Arith, ArithCommand};
pub use auth::{parse_auth_line, split_auth_token, AuthLine};
pub use base64::{decode_key, encode_base64};
pub use client::encode_request;
pub use delete::Delete;
pub use limits::{
    Limits, GET_LINE_LEN_MAX_DEFAULT, KEY_LEN_MAX_DEFAULT, LEADING_SPACES_MAX,
    LINE_LEN_MAX_DEFAULT, MEMCACHED_READ_BUFFER_BYTES, VALUE_LEN_MAX_DEFAULT,
};
pub use meta::{
    ArithMode, MetaArith, MetaCommand, MetaDebug, MetaDelete, MetaFlags, MetaGet, MetaSet, SetMode,
    META_TOKENS_MAX, OPAQUE_TOKEN_LEN_MAX,
};
pub use misc::{
    CacheMemlimit, FlushAll, LruCrawler, ShutdownMode, Stats, Touch, Verbosity, BADCLASS,
};
pub use retrieval::{Get, GetCommand, Keys};
pub use storage::{Store, StoreCommand, TooLarge};
pub use token::{key_is_valid, Tokens};

use encode::ERROR;

/// One parsed request. Keys and values borrow from the parsed buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Request<'a> {
    /// `get`, `gets`, `gat`, `gats`.
    Get(Get<'a>),
    /// `set`, `add`, `replace`, `append`, `prepend`, `cas` with their data block.
    Store(Store<'a>),
    /// A `set`-family or `ms` store whose value exceeds [`Limits::value_len_max`]; its data block
    /// has not been read.
    TooLarge(TooLarge<'a>),
    /// `delete <key> [0] [noreply]`.
    Delete(Delete<'a>),
    /// `incr` / `decr`.
    Arith(Arith<'a>),
    /// `touch <key> <exptime> [noreply]`.
    Touch(Touch<'a>),
    /// `flush_all [delay] [noreply]`.
    FlushAll(FlushAll),
    /// `version`; memcached ignores any arguments.
    Version,
    /// `verbosity <level> [noreply]`.
    Verbosity(Verbosity),
    /// `cache_memlimit <megabytes> [noreply]`.
    CacheMemlimit(CacheMemlimit),
    /// `lru_crawler metadump <all|hash|classes>`.
    LruCrawler(LruCrawler),
    /// `quit`: close the connection without a reply; arguments are ignored.
    Quit,
    /// `stats [args...]`.
    Stats(Stats<'a>),
    /// `shutdown [graceful]`.
    Shutdown(ShutdownMode),
    /// `mg <key> <flags>*`.
    MetaGet(MetaGet<'a>),
    /// `ms <key> <datalen> <flags>*` with its data block.
    MetaSet(MetaSet<'a>),
    /// `md <key> <flags>*`.
    MetaDelete(MetaDelete<'a>),
    /// `ma <key> <flags>*`.
    MetaArith(MetaArith<'a>),
    /// `mn`: reply `MN\r\n`; arguments are ignored.
    MetaNoop,
    /// `me <key> [b]`: debug dump of one item.
    MetaDebug(MetaDebug<'a>),
}

/// A request and the number of bytes of the buffer it occupied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parsed<'a> {
    /// The request.
    pub request: Request<'a>,
    /// Bytes to drop from the front of the buffer; never more than the buffer's length.
    pub consumed: usize,
}

/// Why [`parse`] returned no request, and what the server must do about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParseError {
    /// The line or its data block has not fully arrived. Read more and parse again from the same
    /// start; nothing was consumed.
    Incomplete,
    /// The request is malformed. Send `reply` (empty when the command asked for `noreply`, as
    /// memcached then suppresses its errors too), drop `consumed` bytes from the buffer, then
    /// discard the next `swallow_len` bytes as they arrive (the data block of a refused store,
    /// which may not be buffered yet), and continue with the connection.
    Reply {
        /// Exact reply bytes, `\r\n` included, or empty.
        reply: &'static [u8],
        /// Bytes to drop now; never more than the buffer's length.
        consumed: usize,
        /// Further bytes to discard after `consumed`, possibly not yet received.
        swallow_len: usize,
    },
    /// Close the connection without a reply: a command line grew past its limit without a
    /// newline, as memcached does in `try_read_command_ascii`.
    Close,
    /// Close the connection without a reply, dropping any reply not yet sent: the line is not
    /// a command but part of an HTTP request (see [`crate::cross_protocol`]), as memcached
    /// does in `process_command_ascii`.
    CrossProtocol,
    /// A binary-protocol request (its first byte is the request magic `0x80`), which strata
    /// does not speak: send [`encode::binary_not_supported`] for its opcode and opaque, then
    /// close the connection. A binary client reads a well-formed error instead of waiting
    /// for ever on a server that waits for a line end.
    Binary {
        /// The request's opcode (echoed in the response).
        opcode: u8,
        /// The request's opaque field (echoed in the response).
        opaque: u32,
    },
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Incomplete => f.write_str("incomplete memcached request"),
            Self::Reply { reply: [], .. } => {
                f.write_str("malformed memcached request (reply suppressed by noreply)")
            }
            Self::Reply { reply, .. } => {
                let text = String::from_utf8_lossy(reply);
                write!(f, "malformed memcached request: {}", text.trim_end())
            }
            Self::Close => f.write_str("memcached command line too long; closing the connection"),
            Self::CrossProtocol => {
                f.write_str("an HTTP request sent to the memcached port; closing the connection")
            }
            Self::Binary { opcode, .. } => write!(
                f,
                "a memcached binary-protocol request (opcode {opcode:#04x}): not supported; \
                 closing the connection"
            ),
        }
    }
}

impl std::error::Error for ParseError {}

impl ParseError {
    /// A reply for a malformed line of `consumed` bytes, suppressed when `noreply`.
    pub(crate) fn reply(reply: &'static [u8], consumed: usize, noreply: bool) -> Self {
        let reply = if noreply { &b""[..] } else { reply };
        Self::Reply {
            reply,
            consumed,
            swallow_len: 0,
        }
    }
}

/// The command line at the front of the buffer, split into its command and arguments.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Line<'a> {
    /// The whole buffer, for commands followed by a data block.
    pub buf: &'a [u8],
    /// Arguments after the command token.
    pub args: Tokens<'a>,
    /// Bytes through the line's `\n`.
    pub consumed: usize,
}

impl<'a> Line<'a> {
    /// `request`, which occupies just this line.
    pub fn parsed(&self, request: Request<'a>) -> Result<Parsed<'a>, ParseError> {
        Ok(Parsed {
            request,
            consumed: self.consumed,
        })
    }

    /// This line refused with `reply`, suppressed when `noreply` (see [`ParseError::reply`]).
    pub fn refuse(&self, reply: &'static [u8], noreply: bool) -> ParseError {
        ParseError::reply(reply, self.consumed, noreply)
    }
}

/// Parses one request from the front of `buf`.
///
/// Returns the request and the bytes it used, or [`ParseError::Incomplete`] when more input is
/// needed, or a [`ParseError`] that says exactly how memcached 1.6 answers the input. Never
/// panics and never reports more bytes consumed than `buf` holds.
pub fn parse<'a>(buf: &'a [u8], limits: &Limits) -> Result<Parsed<'a>, ParseError> {
    if buf.first() == Some(&encode::BINARY_REQUEST_MAGIC) {
        return Err(binary_request(buf));
    }
    let (text, consumed) = next_line(buf, limits)?;
    debug_assert!(consumed <= buf.len() && text.len() < consumed);
    if let Some(get) = retrieval::single_get(text, limits) {
        return Ok(Parsed {
            request: Request::Get(get),
            consumed,
        });
    }
    parse_line(buf, text, consumed, limits)
}

/// The bytes the storage request at the start of `buf` takes, its command line, data block and
/// the block's line end, once the command line has arrived: `set`, `add`, `replace`, `append`,
/// `prepend` and `cas` (`<bytes>` after key, flags and exptime) and `ms` (`<datalen>` after the
/// key). `None` for any other request, a length that is not a number, or before the line has
/// arrived. A connection grows its read buffer to this for a large value rather than past it.
#[must_use]
pub fn bytes_needed(buf: &[u8], limits: &Limits) -> Option<usize> {
    let (text, consumed) = next_line(buf, limits).ok()?;
    let mut tokens = Tokens::new(text);
    let before_length = match tokens.next()? {
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => 3,
        b"ms" => 1,
        _ => return None,
    };
    // Read as the storage parsers read it: what they would refuse says nothing.
    let length = token::parse_data_len(tokens.nth(before_length)?)?;
    consumed.checked_add(length)?.checked_add(2)
}

/// A binary-protocol request at the front of `buf` (its first byte is the magic): refused
/// once its 24-byte header has arrived, whose opcode and opaque the refusal echoes.
#[allow(clippy::big_endian_bytes)] // the binary protocol's byte order
fn binary_request(buf: &[u8]) -> ParseError {
    let Some(header) = buf.get(..encode::BINARY_HEADER_BYTES) else {
        return ParseError::Incomplete;
    };
    ParseError::Binary {
        opcode: header[1],
        opaque: u32::from_be_bytes([header[12], header[13], header[14], header[15]]),
    }
}

/// Parses the command line `text` (the first `consumed` bytes of `buf`, without its line end)
/// by splitting it into tokens: every command, and `get <key>` when its key is refused.
fn parse_line<'a>(
    buf: &'a [u8],
    text: &'a [u8],
    consumed: usize,
    limits: &Limits,
) -> Result<Parsed<'a>, ParseError> {
    let mut args = Tokens::new(text);
    let command = match args.next() {
        Some(command) if command.len() >= 2 => command,
        _ => return Err(ParseError::reply(ERROR, consumed, false)),
    };
    let line = Line {
        buf,
        args,
        consumed,
    };
    let parsed = dispatch(command, line, limits)?;
    debug_assert!(parsed.consumed >= consumed && parsed.consumed <= buf.len());
    Ok(parsed)
}

fn dispatch<'a>(command: &[u8], line: Line<'a>, limits: &Limits) -> Result<Parsed<'a>, ParseError> {
    if let Some(command) = GetCommand::from_name(command) {
        return retrieval::parse(command, line, limits);
    }
    if let Some(command) = StoreCommand::from_name(command) {
        return storage::parse(command, line, limits);
    }
    if let Some(command) = ArithCommand::from_name(command) {
        return arith::parse(command, line, limits);
    }
    match command {
        b"delete" => delete::parse(line, limits),
        b"touch" => misc::parse_touch(line, limits),
        b"flush_all" => misc::parse_flush_all(line),
        b"version" => line.parsed(Request::Version),
        b"verbosity" => misc::parse_verbosity(line),
        b"cache_memlimit" => misc::parse_cache_memlimit(line),
        b"lru_crawler" => misc::parse_lru_crawler(line),
        b"quit" => line.parsed(Request::Quit),
        b"stats" => misc::parse_stats(line),
        b"shutdown" => misc::parse_shutdown(line),
        [b'm', _] => meta::parse(command, line, limits),
        _ => Err(unknown(line)),
    }
}

/// The answer to a command memcached does not know: `ERROR`, or a hang-up when the line is
/// part of an HTTP request. Only unknown commands pay for the check.
#[cold]
fn unknown(line: Line<'_>) -> ParseError {
    let text = &line.buf[..line.consumed];
    let text = text.strip_suffix(b"\n").unwrap_or(text);
    let text = text.strip_suffix(b"\r").unwrap_or(text);
    if crate::cross_protocol::is_http_line(text) {
        return ParseError::CrossProtocol;
    }
    line.refuse(ERROR, false)
}

/// Finds the command line at the front of `buf`: its text without `\r\n`, and the bytes through
/// its `\n`. Applies memcached's line-length rule.
fn next_line<'a>(buf: &'a [u8], limits: &Limits) -> Result<(&'a [u8], usize), ParseError> {
    let get_line_len_max = limits.line_len_waited_max();
    let window = &buf[..buf.len().min(get_line_len_max + 1)];
    let Some(newline) = crate::scan::find_byte(window, b'\n') else {
        let too_long = buf.len() > limits.line_len_max
            && (buf.len() > get_line_len_max || !may_become_multiget(buf));
        return Err(if too_long {
            ParseError::Close
        } else {
            ParseError::Incomplete
        });
    };
    if newline > limits.line_len_max && !is_multiget(buf) {
        return Err(ParseError::Close);
    }
    let text = &buf[..newline];
    let text = text.strip_suffix(b"\r").unwrap_or(text);
    Ok((text, newline + 1))
}

/// Whether a long line may continue: memcached allows up to [`LEADING_SPACES_MAX`] spaces, then
/// `get ` or `gets `.
fn is_multiget(buf: &[u8]) -> bool {
    let spaces = buf.iter().take_while(|&&b| b == b' ').count();
    let rest = &buf[spaces..];
    spaces <= LEADING_SPACES_MAX && (rest.starts_with(b"get ") || rest.starts_with(b"gets "))
}

/// Whether a line whose end has not arrived may still turn out to be a multiget: it is one
/// already, or it is leading spaces and the start of `get `/`gets ` that the next read may
/// complete. Deciding on what has arrived alone would close a connection whose multiget arrives
/// split just there when `line_len_max` is below the allowance of leading spaces, which the
/// complete line would not.
fn may_become_multiget(buf: &[u8]) -> bool {
    let spaces = buf.iter().take_while(|&&b| b == b' ').count();
    let rest = &buf[spaces..];
    is_multiget(buf)
        || (spaces <= LEADING_SPACES_MAX
            && (b"get ".starts_with(rest) || b"gets ".starts_with(rest)))
}

/// Splits up to `N` arguments into an array and counts all of them, so a command can check its
/// arity without allocating.
pub(crate) fn split_args<const N: usize>(args: Tokens<'_>) -> ([&[u8]; N], usize) {
    let mut out: [&[u8]; N] = [&[]; N];
    let mut count = 0;
    for token in args {
        if count < N {
            out[count] = token;
        }
        count += 1;
    }
    (out, count)
}

/// Parses `<key> <number> [noreply]` (incr, decr, touch): checks the arity and the key and
/// parses the number token with `parse`, answering `number_error` when it does not parse.
/// Returns the key, the number and `noreply`.
pub(crate) fn key_and_number<'a, T>(
    line: &Line<'a>,
    limits: &Limits,
    parse: fn(&[u8]) -> Option<T>,
    number_error: &'static [u8],
) -> Result<(&'a [u8], T, bool), ParseError> {
    let (args, count) = split_args::<3>(line.args);
    if !(2..=3).contains(&count) {
        return Err(line.refuse(encode::ERROR, false));
    }
    let noreply = noreply_last(&args, count);
    let key = args[0];
    if !token::key_is_valid(key, limits.key_len_max) {
        return Err(line.refuse(encode::CLIENT_ERROR_BAD_FORMAT, noreply));
    }
    let number = parse(args[1]).ok_or(line.refuse(number_error, noreply))?;
    Ok((key, number, noreply))
}

/// Whether a classic command's last argument is exactly `noreply`, as memcached's
/// `set_noreply_maybe` decides.
pub(crate) fn noreply_last(args: &[&[u8]], count: usize) -> bool {
    count > 0 && count <= args.len() && args[count - 1] == b"noreply"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_default(buf: &[u8]) -> Result<Parsed<'_>, ParseError> {
        parse(buf, &Limits::default())
    }

    #[test]
    fn bytes_needed_reads_a_storage_commands_length() {
        let limits = Limits::default();
        let line = b"set k 0 0 1000000\r\n";
        assert_eq!(
            bytes_needed(b"set k 0 0 1000000\r\nvvv", &limits),
            Some(line.len() + 1_000_002)
        );
        for (line, data_len) in [
            (&b"cas k 1 2 40 77 noreply\r\n"[..], 40),
            (b"ms k 5000 T0 F1\r\n", 5000),
            (b"append  k  0 0 7\n", 7),
        ] {
            let needed = bytes_needed(line, &limits);
            assert_eq!(
                needed,
                Some(line.len() + data_len + 2),
                "{}",
                line.escape_ascii()
            );
        }
        // Not a storage command, no line yet, a length that is not a number.
        assert_eq!(bytes_needed(b"get k\r\n", &limits), None);
        assert_eq!(bytes_needed(b"set k 0 0 1000", &limits), None);
        assert_eq!(bytes_needed(b"set k 0 0 x\r\n", &limits), None);
        assert_eq!(bytes_needed(b"set k 0 0 -5\r\n", &limits), None);
        assert_eq!(
            bytes_needed(b"set k 0 0 18446744073709551615\r\n", &limits),
            None
        );
        assert_eq!(bytes_needed(b"set k 0\r\n", &limits), None);
    }

    /// Asserts that each input is refused whole with its reply (empty under `noreply`), with
    /// nothing further to swallow.
    pub(crate) fn assert_refused(cases: &[(&[u8], &'static [u8])]) {
        for &(input, reply) in cases {
            let want = ParseError::Reply {
                reply,
                consumed: input.len(),
                swallow_len: 0,
            };
            assert_eq!(parse_default(input), Err(want), "{input:?}");
        }
    }

    #[test]
    fn unknown_and_upper_case_commands_are_errors() {
        for input in [
            &b"GET a\r\n"[..],
            b"g\r\n",
            b"\r\n",
            b"\n",
            b"   \r\n",
            b"foo bar\r\n",
        ] {
            let want = ParseError::Reply {
                reply: b"ERROR\r\n",
                consumed: input.len(),
                swallow_len: 0,
            };
            assert_eq!(parse_default(input), Err(want), "{input:?}");
        }
        assert_eq!(
            parse_default(b"MG a\r\n").unwrap_err(),
            ParseError::reply(ERROR, 6, false)
        );
        assert_eq!(
            parse_default(b"mx a\r\n").unwrap_err(),
            ParseError::reply(ERROR, 6, false)
        );
    }

    #[test]
    fn http_request_lines_close_and_commands_that_look_alike_do_not() {
        for input in [
            &b"GET / HTTP/1.0\r\n"[..],
            b"PUT /x HTTP/1.1\r\n",
            b"DELETE HTTP/1.1\r\n",
            b"POST / HTTP/1.1\r\nHost: x\r\n\r\nset a 0 0 1\r\nx\r\n",
            b"HTTP/1.1\n",
            b"Host: example.com\r\n",
            b"bar HTTP/1.1\r\n",
        ] {
            assert_eq!(
                parse_default(input),
                Err(ParseError::CrossProtocol),
                "{input:?}"
            );
        }
        // Known commands, one-letter names and meta names run or fail as in memcached.
        let get = parse_default(b"get / HTTP/1.1\r\n").expect("a multiget");
        let Request::Get(get) = get.request else {
            panic!("{get:?}");
        };
        assert_eq!(
            get.keys.iter().collect::<Vec<_>>(),
            [&b"/"[..], b"HTTP/1.1"]
        );
        assert_refused(&[
            (b"X HTTP/1.1\r\n", ERROR),
            (b"mz HTTP/1.1\r\n", ERROR),
            (b"GET / http/1.1\r\n", ERROR),
            (b"FOO HTTP/1.1 x\r\n", ERROR),
        ]);
        assert_eq!(
            parse_default(b"GET / HTTP/1.1"),
            Err(ParseError::Incomplete)
        );
    }

    #[test]
    fn incomplete_until_newline() {
        for input in [&b""[..], b"ge", b"get a", b"get a\r", b"version"] {
            assert_eq!(
                parse_default(input),
                Err(ParseError::Incomplete),
                "{input:?}"
            );
        }
        assert_eq!(parse_default(b"version\n").unwrap().consumed, 8);
        assert_eq!(parse_default(b"version\r\nget").unwrap().consumed, 9);
    }

    #[test]
    fn lines_that_fill_memcacheds_read_buffer_are_processed_longer_ones_close() {
        let limits = Limits::default();
        // 16,375 spaces, `version` and `\r\n` fill memcached's 16 KiB read buffer exactly.
        let mut version = vec![b' '; 16375];
        version.extend_from_slice(b"version\r\n");
        assert_eq!(version.len(), MEMCACHED_READ_BUFFER_BYTES);
        let parsed = parse_default(&version).expect("processed");
        assert_eq!((parsed.request, parsed.consumed), (Request::Version, 16384));
        assert_eq!(
            parse_default(&version[..16000]),
            Err(ParseError::Incomplete),
            "waited for"
        );
        version.insert(0, b' ');
        assert_eq!(parse_default(&version), Err(ParseError::Close));
        assert_eq!(parse_default(&version[..16384]), Err(ParseError::Close));
        // Any command: a long `set` line stores.
        let mut set = b"set k 0 0 1".to_vec();
        set.resize(16382, b' ');
        set.extend_from_slice(b"\r\nx\r\n");
        assert!(matches!(
            parse_default(&set),
            Ok(Parsed {
                request: Request::Store(_),
                ..
            })
        ));
        for prefix in [&b"get "[..], b"gets ", b"   get "] {
            let mut get = prefix.to_vec();
            get.resize(20_000, b'a');
            assert_eq!(
                parse_default(&get),
                Err(ParseError::Incomplete),
                "{prefix:?}"
            );
        }
        for prefix in [&b"gat "[..], b"mg ", b"get"] {
            let mut line = prefix.to_vec();
            line.resize(20_000, b'a');
            assert_eq!(parse_default(&line), Err(ParseError::Close), "{prefix:?}");
        }
        let mut spaced = vec![b' '; 101];
        spaced.extend_from_slice(b"get");
        while spaced.len() < 20_000 {
            spaced.extend_from_slice(b" a");
        }
        assert_eq!(parse_default(&spaced), Err(ParseError::Close));
        spaced.truncate(3000);
        spaced.extend_from_slice(b"\r\n");
        assert!(parse_default(&spaced).is_ok(), "short enough: processed");
        let mut huge_get = b"get".to_vec();
        while huge_get.len() <= limits.get_line_len_max {
            huge_get.extend_from_slice(b" a");
        }
        assert_eq!(parse_default(&huge_get), Err(ParseError::Close));
    }

    /// Found by the memcache_parse fuzz target: with a line limit below the 100 leading spaces
    /// memcached allows before `get `, a multiget that arrived as far as its spaces (or part of
    /// `gets`) closed the connection, although the whole line is accepted. The outcome must not
    /// depend on where the reads split the line.
    #[test]
    fn a_multiget_split_in_its_leading_spaces_is_incomplete() {
        let limits = Limits {
            line_len_max: 64,
            ..Limits::default()
        };
        let mut line = vec![b' '; 90];
        line.extend_from_slice(b"gets a b\r\n");
        let whole = parse(&line, &limits);
        assert!(
            matches!(
                whole,
                Ok(Parsed {
                    request: Request::Get(_),
                    ..
                })
            ),
            "{whole:?}"
        );
        for end in 65..line.len() {
            assert_eq!(
                parse(&line[..end], &limits),
                Err(ParseError::Incomplete),
                "{end} bytes"
            );
        }
        // More spaces than memcached allows, or another command: no multiget can follow.
        let mut spaces = vec![b' '; LEADING_SPACES_MAX + 1];
        assert_eq!(parse(&spaces, &limits), Err(ParseError::Close));
        spaces.truncate(80);
        spaces.extend_from_slice(b"gat");
        assert_eq!(parse(&spaces, &limits), Err(ParseError::Close));
    }

    /// The general path alone, for comparison with [`parse`]'s shortcut.
    fn parse_general<'a>(buf: &'a [u8], limits: &Limits) -> Result<Parsed<'a>, ParseError> {
        let (text, consumed) = next_line(buf, limits)?;
        parse_line(buf, text, consumed, limits)
    }

    #[test]
    fn the_single_get_shortcut_agrees_with_the_general_parser() {
        let long_key = [b'k'; 251];
        let mut inputs: Vec<Vec<u8>> = [
            &b"get a\r\n"[..],
            b"get a\n",
            b"get a \r\n",
            b"get  a\r\n",
            b"get a b\r\n",
            b"get \r\n",
            b"get a\x01b\r\n",
            b"get a\x7f\r\n",
            b"get a\rb\r\n",
            b"get a\r\r\n",
            b"get a\tb\r\n",
            b"get key:000000000001\r\nget b\r\n",
        ]
        .iter()
        .map(|input| input.to_vec())
        .collect();
        let mut long = b"get ".to_vec();
        long.extend_from_slice(&long_key);
        long.extend_from_slice(b"\r\n");
        inputs.push(long.clone());
        long.remove(4);
        inputs.push(long);
        let short_keys = Limits {
            key_len_max: 1,
            ..Limits::default()
        };
        for input in &inputs {
            for limits in [Limits::default(), short_keys] {
                assert_eq!(
                    parse(input, &limits),
                    parse_general(input, &limits),
                    "{input:?}"
                );
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn gets_parse_as_the_general_parser_does(key in proptest::collection::vec(
            proptest::prelude::any::<u8>(), 0..300)) {
            let mut input = b"get ".to_vec();
            input.extend_from_slice(&key);
            input.extend_from_slice(b"\r\n");
            let limits = Limits::default();
            proptest::prop_assert_eq!(parse(&input, &limits), parse_general(&input, &limits));
        }
    }

    #[test]
    fn split_args_counts_beyond_capacity() {
        let (args, count) = split_args::<2>(Tokens::new(b"a b c"));
        assert_eq!((args, count), ([&b"a"[..], b"b"], 3));
        assert!(noreply_last(&[b"a", b"noreply"], 2));
        assert!(!noreply_last(&[b"a", b"noreply"], 3));
        assert!(!noreply_last(&[b"a"], 0));
    }
}
