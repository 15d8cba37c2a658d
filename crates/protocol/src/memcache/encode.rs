//! Replies: exact byte strings and writers that append to a caller-owned buffer.
//!
//! Every writer appends to `out` and returns the bytes it wrote. Numbers are formatted through a
//! stack buffer, so the only allocation is `out` growing, which a reused buffer stops doing.
//! Strings are memcached 1.6's, `\r\n` included.

use super::base64::encode_base64;
use super::meta::MetaFlags;

/// Unknown command or wrong number of tokens.
pub const ERROR: &[u8] = b"ERROR\r\n";

/// The first byte of a memcached binary-protocol request.
pub const BINARY_REQUEST_MAGIC: u8 = 0x80;
/// The first byte of a binary-protocol response.
pub const BINARY_RESPONSE_MAGIC: u8 = 0x81;
/// Bytes of a binary-protocol header, request or response.
pub const BINARY_HEADER_BYTES: usize = 24;
/// The binary protocol's status "Not supported".
pub const BINARY_STATUS_NOT_SUPPORTED: u16 = 0x0083;
/// The text of [`binary_not_supported`]'s body.
pub const BINARY_NOT_SUPPORTED_TEXT: &[u8] =
    b"strata speaks the memcached text and meta protocols, not the binary protocol";

/// A binary-protocol response refusing a request: magic `0x81`, the request's `opcode`, no key
/// or extras, status `Not supported` (0x0083), the body [`BINARY_NOT_SUPPORTED_TEXT`], the
/// request's `opaque`, CAS 0. All integers big-endian, as the binary protocol has them.
#[allow(clippy::big_endian_bytes)] // the binary protocol's byte order
pub fn binary_not_supported(opcode: u8, opaque: u32, out: &mut Vec<u8>) {
    let body = BINARY_NOT_SUPPORTED_TEXT;
    out.push(BINARY_RESPONSE_MAGIC);
    out.push(opcode);
    out.extend_from_slice(&0u16.to_be_bytes()); // key length
    out.push(0); // extras length
    out.push(0); // data type
    out.extend_from_slice(&BINARY_STATUS_NOT_SUPPORTED.to_be_bytes());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&opaque.to_be_bytes());
    out.extend_from_slice(&0u64.to_be_bytes()); // CAS
    out.extend_from_slice(body);
}
/// The most common client error: bad number, key too long, bad length.
pub const CLIENT_ERROR_BAD_FORMAT: &[u8] = b"CLIENT_ERROR bad command line format\r\n";
/// `delete <key> <x>` where `<x>` is neither the legacy `0` nor `noreply`.
pub const CLIENT_ERROR_DELETE_USAGE: &[u8] =
    b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n";
/// A data block not followed by `\r\n`.
pub const CLIENT_ERROR_BAD_DATA_CHUNK: &[u8] = b"CLIENT_ERROR bad data chunk\r\n";
/// A bad expiry in `touch`, `gat`, `gats` or `flush_all`.
pub const CLIENT_ERROR_INVALID_EXPTIME: &[u8] = b"CLIENT_ERROR invalid exptime argument\r\n";
/// A bad delta in `incr`/`decr`.
pub const CLIENT_ERROR_INVALID_DELTA: &[u8] = b"CLIENT_ERROR invalid numeric delta argument\r\n";
/// `incr`/`decr`/`ma` on a value that is not a decimal number (sent by the server).
pub const CLIENT_ERROR_NON_NUMERIC: &[u8] =
    b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n";
/// `shutdown` with an argument other than `graceful`, when shutdown is enabled.
pub const CLIENT_ERROR_INVALID_SHUTDOWN_MODE: &[u8] = b"CLIENT_ERROR invalid shutdown mode\r\n";
/// `shutdown` when the server was not started with shutdown enabled (memcached's `-A`).
pub const ERROR_SHUTDOWN_NOT_ENABLED: &[u8] = b"ERROR: shutdown not enabled\r\n";
/// `flush_all` when flushing is disabled (memcached's `-F`).
pub const CLIENT_ERROR_FLUSH_NOT_ALLOWED: &[u8] = b"CLIENT_ERROR flush_all not allowed\r\n";
/// A store whose value exceeds the item size limit.
pub const SERVER_ERROR_TOO_LARGE: &[u8] = b"SERVER_ERROR object too large for cache\r\n";
/// A store that could not get memory.
pub const SERVER_ERROR_OUT_OF_MEMORY: &[u8] = b"SERVER_ERROR out of memory storing object\r\n";

/// Meta: a flag letter that no meta command knows.
pub const CLIENT_ERROR_INVALID_FLAG: &[u8] = b"CLIENT_ERROR invalid flag\r\n";
/// Meta: a flag given twice (also memcached's answer to a flag byte of 127 or more).
pub const CLIENT_ERROR_DUPLICATE_FLAG: &[u8] = b"CLIENT_ERROR duplicate flag\r\n";
/// `md`/`ma`: any flag error; memcached does not say which.
pub const CLIENT_ERROR_INVALID_OR_DUPLICATE_FLAG: &[u8] =
    b"CLIENT_ERROR invalid or duplicate flag\r\n";
/// Meta: a bad number after `C`, `E`, `N`, `R` or `T`.
pub const CLIENT_ERROR_BAD_TOKEN: &[u8] = b"CLIENT_ERROR bad token in command line format\r\n";
/// Meta: an `O` token longer than 32 bytes (the `O` included).
pub const CLIENT_ERROR_OPAQUE_TOO_LONG: &[u8] = b"CLIENT_ERROR opaque token too long\r\n";
/// `mg` with more tokens than memcached's `MFLAG_MAX_OPT_LENGTH` allows.
pub const CLIENT_ERROR_MG_OPTIONS_TOO_LONG: &[u8] = b"CLIENT_ERROR options flags are too long\r\n";
/// `ms`, `md`, `ma` with too many tokens (memcached words it without "are").
pub const CLIENT_ERROR_OPTIONS_TOO_LONG: &[u8] = b"CLIENT_ERROR options flags too long\r\n";
/// `ms` with an `M` mode other than `E A P R S`.
pub const CLIENT_ERROR_INVALID_MS_MODE: &[u8] = b"CLIENT_ERROR invalid mode for ms M token\r\n";
/// `ma` with an `M` mode other than `I + D -`.
pub const CLIENT_ERROR_INVALID_MA_MODE: &[u8] = b"CLIENT_ERROR invalid mode for ma M token\r\n";
/// Meta: an `M` token that is not exactly one letter after the `M`.
pub const CLIENT_ERROR_M_TOKEN_LENGTH: &[u8] = b"CLIENT_ERROR incorrect length for M token\r\n";
/// Meta: a bad number after `J`.
pub const CLIENT_ERROR_INVALID_INITIAL: &[u8] = b"CLIENT_ERROR invalid numeric initial value\r\n";
/// Meta: a bad number after `D`.
pub const CLIENT_ERROR_INVALID_DELTA_VALUE: &[u8] = b"CLIENT_ERROR invalid numeric delta value\r\n";
/// Meta: a `b` key that is not valid base64.
pub const CLIENT_ERROR_DECODING_KEY: &[u8] = b"CLIENT_ERROR error decoding key\r\n";

/// Authentication (`--memcache-auth-file`): any command line of an unauthenticated client
/// other than an authentication `set`.
pub const CLIENT_ERROR_UNAUTHENTICATED: &[u8] = b"CLIENT_ERROR unauthenticated\r\n";
/// Authentication: a `set` announcing a token longer than the server reads (memcached 1.6.42's
/// reply; 1.6.18 has no bound).
pub const CLIENT_ERROR_AUTH_TOKEN_TOO_LONG: &[u8] = b"CLIENT_ERROR auth token too long\r\n";
/// Authentication: a token not followed by `\r\n`.
pub const CLIENT_ERROR_BAD_TERMINATION: &[u8] = b"CLIENT_ERROR bad command line termination\r\n";
/// Authentication: a token without two words (`user password`).
pub const CLIENT_ERROR_BAD_AUTH_TOKEN: &[u8] = b"CLIENT_ERROR bad authentication token format\r\n";
/// Authentication: no entry of the auth file has this user and password.
pub const CLIENT_ERROR_AUTH_FAILURE: &[u8] = b"CLIENT_ERROR authentication failure\r\n";

/// Store succeeded.
pub const STORED: &[u8] = b"STORED\r\n";
/// `add`/`replace`/`append`/`prepend` condition not met.
pub const NOT_STORED: &[u8] = b"NOT_STORED\r\n";
/// `cas` lost: the item changed since it was fetched.
pub const EXISTS: &[u8] = b"EXISTS\r\n";
/// The key does not exist.
pub const NOT_FOUND: &[u8] = b"NOT_FOUND\r\n";
/// `delete` succeeded.
pub const DELETED: &[u8] = b"DELETED\r\n";
/// `touch` succeeded.
pub const TOUCHED: &[u8] = b"TOUCHED\r\n";
/// `flush_all`, `verbosity` succeeded.
pub const OK: &[u8] = b"OK\r\n";
/// `stats reset` succeeded.
pub const RESET: &[u8] = b"RESET\r\n";
/// End of a `get` or `stats` reply.
pub const END: &[u8] = b"END\r\n";
/// Reply to `mn`.
pub const MN: &[u8] = b"MN\r\n";

/// Longest decimal `u64` or `i64`, sign included.
const DIGITS_LEN_MAX: usize = crate::U64_LEN_MAX;

/// Appends `value` in decimal; returns the bytes written.
pub fn write_u64(out: &mut Vec<u8>, value: u64) -> usize {
    let mut digits = [0u8; DIGITS_LEN_MAX];
    let start = crate::digits::put_u64(&mut digits, DIGITS_LEN_MAX, value);
    out.extend_from_slice(&digits[start..]);
    DIGITS_LEN_MAX - start
}

/// Appends `value` in decimal with a leading `-` when negative; returns the bytes written.
pub fn write_i64(out: &mut Vec<u8>, value: i64) -> usize {
    if value < 0 {
        out.push(b'-');
        1 + write_u64(out, value.unsigned_abs())
    } else {
        write_u64(out, value.unsigned_abs())
    }
}

fn write_parts(out: &mut Vec<u8>, parts: &[&[u8]]) -> usize {
    parts
        .iter()
        .map(|part| {
            out.extend_from_slice(part);
            part.len()
        })
        .sum()
}

/// Appends `VALUE <key> <flags> <bytes>[ <cas>]\r\n`, the header of one `get`/`gets` hit.
pub fn write_value_header(
    out: &mut Vec<u8>,
    key: &[u8],
    flags: u32,
    data_len: usize,
    cas: Option<u64>,
) -> usize {
    // ` <flags> <bytes>[ <cas>]\r\n` is assembled backwards on the stack and copied once.
    let mut tail = [0u8; 3 * DIGITS_LEN_MAX + 5];
    let end = tail.len() - 2;
    tail[end..].copy_from_slice(b"\r\n");
    let mut start = end;
    if let Some(cas) = cas {
        start = crate::digits::put_u64(&mut tail, start, cas) - 1;
        tail[start] = b' ';
    }
    start = crate::digits::put_u64(&mut tail, start, data_len as u64) - 1;
    tail[start] = b' ';
    start = crate::digits::put_u64(&mut tail, start, u64::from(flags)) - 1;
    tail[start] = b' ';
    let tail = &tail[start..];
    out.reserve(b"VALUE ".len() + key.len() + tail.len() + data_len + 2);
    out.extend_from_slice(b"VALUE ");
    out.extend_from_slice(key);
    out.extend_from_slice(tail);
    b"VALUE ".len() + key.len() + tail.len()
}

/// Appends a whole `get`/`gets` hit: header, data and `\r\n`.
pub fn write_value(
    out: &mut Vec<u8>,
    key: &[u8],
    flags: u32,
    data: &[u8],
    cas: Option<u64>,
) -> usize {
    write_value_pieces(out, key, flags, &[data], cas)
}

/// [`write_value`] of data in pieces (a large string's parts), copied one after another into
/// `out`: the same bytes as of them joined, the buffer grown once.
pub fn write_value_pieces(
    out: &mut Vec<u8>,
    key: &[u8],
    flags: u32,
    pieces: &[&[u8]],
    cas: Option<u64>,
) -> usize {
    let data_len = pieces.iter().map(|piece| piece.len()).sum();
    write_value_header(out, key, flags, data_len, cas) + write_data(out, pieces, data_len)
}

/// Appends a value's data, `pieces` of `data_len` bytes in all, and its `\r\n`.
fn write_data(out: &mut Vec<u8>, pieces: &[&[u8]], data_len: usize) -> usize {
    debug_assert_eq!(data_len, pieces.iter().map(|piece| piece.len()).sum());
    out.reserve(data_len + 2);
    for piece in pieces {
        out.extend_from_slice(piece);
    }
    out.extend_from_slice(b"\r\n");
    data_len + 2
}

/// Appends `END\r\n`.
pub fn write_end(out: &mut Vec<u8>) -> usize {
    write_parts(out, &[END])
}

/// Appends the reply to a successful `incr`/`decr`: the new value and `\r\n`.
pub fn write_number(out: &mut Vec<u8>, value: u64) -> usize {
    write_u64(out, value) + write_parts(out, &[b"\r\n"])
}

/// Appends `STAT <name> <value>\r\n`.
pub fn write_stat(out: &mut Vec<u8>, name: &[u8], value: &[u8]) -> usize {
    write_parts(out, &[b"STAT ", name, b" ", value, b"\r\n"])
}

/// Appends `STAT <name> <value>\r\n` for a numeric value.
pub fn write_stat_u64(out: &mut Vec<u8>, name: &[u8], value: u64) -> usize {
    let written = write_parts(out, &[b"STAT ", name, b" "]);
    written + write_u64(out, value) + write_parts(out, &[b"\r\n"])
}

/// Appends `VERSION <version>\r\n`.
pub fn write_version(out: &mut Vec<u8>, version: &[u8]) -> usize {
    write_parts(out, &[b"VERSION ", version, b"\r\n"])
}

/// Two-letter meta status codes (besides `VA`, written by [`write_meta_value`], and `MN`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaStatus {
    /// `HD`: success without a value.
    Hd,
    /// `EN`: `mg` miss.
    En,
    /// `NF`: not found (`md`, `ma`, `ms` with a mode that needs the item).
    Nf,
    /// `NS`: not stored.
    Ns,
    /// `EX`: CAS mismatch.
    Ex,
}

impl MetaStatus {
    /// The two code letters.
    pub fn code(self) -> &'static [u8; 2] {
        match self {
            Self::Hd => b"HD",
            Self::En => b"EN",
            Self::Nf => b"NF",
            Self::Ns => b"NS",
            Self::Ex => b"EX",
        }
    }
}

/// The item facts a meta reply may return. Each is written only when the request asked for it
/// and it is `Some` (or `true`); see [`write_meta_flags`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetaReturn<'a> {
    /// `k`: the key as stored (decoded when it came base64-encoded).
    pub key: Option<&'a [u8]>,
    /// Whether the key is binary; `k` then writes it base64-encoded followed by ` b`.
    pub key_binary: bool,
    /// `c`: the CAS value.
    pub cas: Option<u64>,
    /// `f`: client flags.
    pub client_flags: Option<u32>,
    /// `s`: value size in bytes.
    pub size: Option<usize>,
    /// `t`: seconds left to live; -1 for an item that never expires.
    pub ttl_secs: Option<i64>,
    /// `h`: whether the item had been fetched before. (`l`, seconds since the last access, has
    /// no field: strata keeps no access time, and its `mg` refuses the flag.)
    pub hit_before: Option<bool>,
    /// `Z`: a recache win token was already sent to another client.
    pub win_sent: bool,
    /// `X`: the item is stale.
    pub stale: bool,
    /// `W`: this client won the right to recache.
    pub won: bool,
}

/// Appends the return flags of a meta reply, each preceded by a space, in memcached's order:
/// the requested flags in the order the request listed them (`k`, `O`, `c`, `f`, `s`, `t`,
/// `h`), then `Z`, `X`, `W`. The opaque `O` is echoed whenever the request had one.
pub fn write_meta_flags(out: &mut Vec<u8>, request: &MetaFlags<'_>, ret: &MetaReturn<'_>) -> usize {
    let start = out.len();
    for token in request.tokens() {
        write_meta_flag(out, token, ret);
    }
    for (set, letter) in [(ret.win_sent, b'Z'), (ret.stale, b'X'), (ret.won, b'W')] {
        if set {
            out.extend_from_slice(&[b' ', letter]);
        }
    }
    out.len() - start
}

/// A return-flag value: `t` may be -1, the others are unsigned.
enum FlagValue {
    Signed(i64),
    Unsigned(u64),
}

fn write_meta_flag(out: &mut Vec<u8>, token: &[u8], ret: &MetaReturn<'_>) {
    let Some(&letter) = token.first() else { return };
    let value = match letter {
        b'k' => {
            if let Some(key) = ret.key {
                out.extend_from_slice(b" k");
                if ret.key_binary {
                    encode_base64(out, key);
                    out.extend_from_slice(b" b");
                } else {
                    out.extend_from_slice(key);
                }
            }
            return;
        }
        b'O' => {
            out.push(b' ');
            out.extend_from_slice(token);
            return;
        }
        b'h' => ret
            .hit_before
            .map(|hit| FlagValue::Unsigned(u64::from(hit))),
        b'c' => ret.cas.map(FlagValue::Unsigned),
        b'f' => ret
            .client_flags
            .map(|flags| FlagValue::Unsigned(u64::from(flags))),
        b's' => ret.size.map(|size| FlagValue::Unsigned(size as u64)),
        b't' => ret.ttl_secs.map(FlagValue::Signed),
        _ => None,
    };
    if let Some(value) = value {
        out.extend_from_slice(&[b' ', letter]);
        match value {
            FlagValue::Signed(signed) => write_i64(out, signed),
            FlagValue::Unsigned(unsigned) => write_u64(out, unsigned),
        };
    }
}

/// Appends `VA <size><flags>\r\n<data>\r\n`, a meta reply carrying a value.
pub fn write_meta_value(
    out: &mut Vec<u8>,
    request: &MetaFlags<'_>,
    ret: &MetaReturn<'_>,
    data: &[u8],
) -> usize {
    write_meta_value_pieces(out, request, ret, &[data])
}

/// [`write_meta_value`] of a value in pieces (a large string's parts), copied one after
/// another into `out` after one reservation.
pub fn write_meta_value_pieces(
    out: &mut Vec<u8>,
    request: &MetaFlags<'_>,
    ret: &MetaReturn<'_>,
    pieces: &[&[u8]],
) -> usize {
    let data_len: usize = pieces.iter().map(|piece| piece.len()).sum();
    let mut written = write_parts(out, &[b"VA "]);
    written += write_u64(out, data_len as u64);
    written += write_meta_flags(out, request, ret);
    written += write_parts(out, &[b"\r\n"]);
    written + write_data(out, pieces, data_len)
}

/// Appends `<code><flags>\r\n`, a meta reply without a value (`HD`, `EN`, `NF`, `NS`, `EX`).
pub fn write_meta_status(
    out: &mut Vec<u8>,
    status: MetaStatus,
    request: &MetaFlags<'_>,
    ret: &MetaReturn<'_>,
) -> usize {
    let written = write_parts(out, &[status.code()]);
    written + write_meta_flags(out, request, ret) + write_parts(out, &[b"\r\n"])
}

/// What `me` reports about one item.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetaDebugInfo {
    /// Seconds until expiry; -1 for never.
    pub exp_secs: i64,
    /// CAS value.
    pub cas: u64,
    /// Whether the item was fetched since it was stored.
    pub fetched: bool,
    /// Size class (slab class in memcached, segment TTL bucket or similar in strata).
    pub class_id: u32,
    /// Total item size in bytes.
    pub size: usize,
}

/// Appends `ME <key> exp=<e> cas=<c> fetch=<yes|no> cls=<n> size=<s>\r\n`: memcached's
/// line without `la=<secs since last access>`, which strata does not know.
pub fn write_meta_debug(out: &mut Vec<u8>, key: &[u8], info: &MetaDebugInfo) -> usize {
    let mut written = write_parts(out, &[b"ME ", key, b" exp="]);
    written += write_i64(out, info.exp_secs);
    written += write_parts(out, &[b" cas="]);
    written += write_u64(out, info.cas);
    let fetch: &[u8] = if info.fetched {
        b" fetch=yes cls="
    } else {
        b" fetch=no cls="
    };
    written += write_parts(out, &[fetch]);
    written += write_u64(out, u64::from(info.class_id));
    written += write_parts(out, &[b" size="]);
    written += write_u64(out, info.size as u64);
    written + write_parts(out, &[b"\r\n"])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memcache::meta::{MetaCommand, MetaFlags};

    fn written(f: impl FnOnce(&mut Vec<u8>) -> usize) -> Vec<u8> {
        let mut out = b"prefix".to_vec();
        let len = f(&mut out);
        assert_eq!(
            len,
            out.len() - 6,
            "returned length must match bytes appended"
        );
        out.split_off(6)
    }

    #[test]
    fn numbers() {
        for (value, text) in [
            (0u64, "0"),
            (7, "7"),
            (10, "10"),
            (u64::MAX, "18446744073709551615"),
        ] {
            assert_eq!(written(|out| write_u64(out, value)), text.as_bytes());
        }
        for (value, text) in [
            (-1i64, "-1"),
            (i64::MIN, "-9223372036854775808"),
            (42, "42"),
        ] {
            assert_eq!(written(|out| write_i64(out, value)), text.as_bytes());
        }
    }

    #[test]
    fn classic_replies() {
        assert_eq!(
            written(|o| write_value_header(o, b"k", 5, 3, None)),
            b"VALUE k 5 3\r\n"
        );
        assert_eq!(
            written(|o| write_value(o, b"k", u32::MAX, b"abc", Some(9))),
            b"VALUE k 4294967295 3 9\r\nabc\r\n"
        );
        assert_eq!(
            written(|o| write_value_pieces(o, b"k", 1, &[b"ab", b"", b"c"], None)),
            b"VALUE k 1 3\r\nabc\r\n"
        );
        assert_eq!(written(write_end), b"END\r\n");
        assert_eq!(written(|o| write_number(o, 12)), b"12\r\n");
        assert_eq!(written(|o| write_stat(o, b"pid", b"1")), b"STAT pid 1\r\n");
        assert_eq!(
            written(|o| write_stat_u64(o, b"uptime", 30)),
            b"STAT uptime 30\r\n"
        );
        assert_eq!(
            written(|o| write_version(o, b"1.6.18")),
            b"VERSION 1.6.18\r\n"
        );
    }

    /// Flags as parsed for a request on the base64 key `YQ==` (`a`).
    fn flags(text: &'static [u8]) -> MetaFlags<'static> {
        MetaFlags::parse(
            MetaCommand::Get,
            b"YQ==",
            crate::memcache::Tokens::new(text),
        )
        .unwrap()
    }

    #[test]
    fn meta_flags_follow_request_order() {
        // memcached 1.6.18: `mg a v k f s t c O123 q h` -> `VA 1 ka f5 s1 t-1 c26 O123 h0`.
        let request = flags(b"v k f s t c O123 q h");
        let ret = MetaReturn {
            key: Some(b"a"),
            cas: Some(26),
            client_flags: Some(5),
            size: Some(1),
            ttl_secs: Some(-1),
            hit_before: Some(false),
            ..MetaReturn::default()
        };
        assert_eq!(
            written(|o| write_meta_value(o, &request, &ret, b"x")),
            b"VA 1 ka f5 s1 t-1 c26 O123 h0\r\nx\r\n"
        );
        // The same value in pieces: the same bytes.
        let ret = MetaReturn {
            size: Some(5),
            ..ret
        };
        assert_eq!(
            written(|o| write_meta_value_pieces(o, &request, &ret, &[b"ab", b"", b"cde"])),
            b"VA 5 ka f5 s5 t-1 c26 O123 h0\r\nabcde\r\n"
        );
        // A miss returns only what it knows: `mg zz v k O1` -> `EN kzz O1`.
        let miss = MetaReturn {
            key: Some(b"zz"),
            ..MetaReturn::default()
        };
        assert_eq!(
            written(|o| write_meta_status(o, MetaStatus::En, &flags(b"v k O1"), &miss)),
            b"EN kzz O1\r\n"
        );
    }

    #[test]
    fn meta_binary_key_and_win_flags() {
        // memcached 1.6.18: `ms YQ== 1 c k O9 b` -> `HD c67 kYQ== b O9`.
        let ret = MetaReturn {
            key: Some(b"a"),
            key_binary: true,
            cas: Some(67),
            ..Default::default()
        };
        assert_eq!(
            written(|o| write_meta_status(o, MetaStatus::Hd, &flags(b"c k O9 b"), &ret)),
            b"HD c67 kYQ== b O9\r\n"
        );
        let ret = MetaReturn {
            win_sent: true,
            stale: true,
            won: true,
            ..Default::default()
        };
        assert_eq!(
            written(|o| write_meta_flags(o, &flags(b"t"), &ret)),
            b" Z X W"
        );
        assert_eq!(
            written(|o| write_meta_status(o, MetaStatus::Nf, &flags(b""), &ret)),
            b"NF Z X W\r\n"
        );
    }

    #[test]
    fn meta_debug() {
        // memcached 1.6.18 answers `ME a exp=-1 la=4 cas=26 fetch=yes cls=1 size=65`.
        let info = MetaDebugInfo {
            exp_secs: -1,
            cas: 26,
            fetched: true,
            class_id: 1,
            size: 65,
        };
        assert_eq!(
            written(|o| write_meta_debug(o, b"a", &info)),
            b"ME a exp=-1 cas=26 fetch=yes cls=1 size=65\r\n"
        );
    }
}
