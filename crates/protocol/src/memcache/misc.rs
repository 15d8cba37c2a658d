//! `touch`, `flush_all`, `verbosity`, `cache_memlimit`, `stats`, `shutdown` (and, in `mod.rs`,
//! `version`, `quit`).
//!
//! As memcached 1.6.18 answers:
//! - `touch <key> <exptime> [noreply]`: a bad key is `CLIENT_ERROR bad command line format`, a
//!   bad expiry `CLIENT_ERROR invalid exptime argument`.
//! - `flush_all [delay] [noreply]`: the delay is read only when a token other than a trailing
//!   `noreply` is present, and only the first one (`flush_all 1 2` flushes in 1 s); a bad delay
//!   is `CLIENT_ERROR invalid exptime argument`; more than two arguments are `ERROR`.
//! - `verbosity <level> [noreply]`: a bad level is `CLIENT_ERROR bad command line format`
//!   (`verbosity noreply` is therefore silent); `verbosity 1 2` is accepted.
//! - `stats [args...]`: arguments are passed through; the server answers unknown ones `ERROR`.
//! - `shutdown [graceful]`: any other argument is `CLIENT_ERROR invalid shutdown mode`, but only
//!   when shutdown is enabled, so the parser reports it as [`ShutdownMode::Invalid`] and lets
//!   the server pick between that and `ERROR: shutdown not enabled`.
//!
//! `noreply` suppresses the error replies of `touch`, `flush_all` and `verbosity`.

use super::encode::{CLIENT_ERROR_BAD_FORMAT, CLIENT_ERROR_INVALID_EXPTIME, ERROR};
use super::token::{parse_client_flags, parse_i64};
use super::{
    key_and_number, noreply_last, split_args, Limits, Line, ParseError, Parsed, Request, Tokens,
};

/// A `touch` request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Touch<'a> {
    /// The key, valid by [`super::key_is_valid`].
    pub key: &'a [u8],
    /// The new expiry as sent (see [`super::Store::exptime`]).
    pub exptime: i64,
    /// Whether to suppress the reply.
    pub noreply: bool,
}

/// A `flush_all` request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlushAll {
    /// Seconds (or absolute time, as an expiry) until items become invalid; `None` for now.
    pub delay: Option<i64>,
    /// Whether to suppress the reply.
    pub noreply: bool,
}

/// A `verbosity` request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verbosity {
    /// The level, modulo 2^32 as memcached reads it.
    pub level: u32,
    /// Whether to suppress the reply.
    pub noreply: bool,
}

/// A `cache_memlimit` request (memcached's runtime memory limit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheMemlimit {
    /// The limit in megabytes (MiB), read as memcached reads a 32-bit number.
    pub megabytes: u32,
    /// Whether to suppress the reply.
    pub noreply: bool,
}

/// An `lru_crawler` request: strata answers `metadump` only (it has no crawler to tune; the
/// others stay `ERROR`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LruCrawler {
    /// `lru_crawler metadump <all|hash|classes>`: every item's metadata, or none when the
    /// classes named do not include 1 (strata's one class, as `stats slabs` reports it).
    Metadump {
        /// Whether the dump covers class 1.
        class_one: bool,
    },
}

/// memcached's answer to a class list it cannot read.
pub const BADCLASS: &[u8] = b"BADCLASS invalid class id\r\n";
/// Largest slab class id plus one (memcached's `MAX_NUMBER_OF_SLAB_CLASSES`).
const SLAB_CLASSES_MAX: u32 = 64;

/// `lru_crawler metadump <all|hash|ids>`: ids are comma-separated slab classes 1..=63 (empty
/// ones between commas skipped, as memcached's tokenizer does); anything else there is
/// `BADCLASS`, and any other subcommand or argument count `ERROR`.
pub(crate) fn parse_lru_crawler(line: Line<'_>) -> Result<Parsed<'_>, ParseError> {
    let (args, count) = split_args::<3>(line.args);
    if count != 2 || args[0] != b"metadump" {
        return Err(line.refuse(ERROR, false));
    }
    let spec = args[1];
    let class_one = if spec == b"all" || spec == b"hash" {
        true
    } else {
        let mut class_one = false;
        let mut any = false;
        for id in spec.split(|&b| b == b',').filter(|id| !id.is_empty()) {
            let id = std::str::from_utf8(id)
                .ok()
                .and_then(|id| id.parse::<u32>().ok());
            match id {
                Some(id) if (1..SLAB_CLASSES_MAX).contains(&id) => class_one |= id == 1,
                _ => return Err(line.refuse(BADCLASS, false)),
            }
            any = true;
        }
        if !any {
            return Err(line.refuse(BADCLASS, false));
        }
        class_one
    };
    line.parsed(Request::LruCrawler(LruCrawler::Metadump { class_one }))
}

/// A `stats` request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stats<'a> {
    /// The arguments (`settings`, `items`, `slabs`, `reset`, `detail on`, ...); empty for plain
    /// `stats`.
    pub args: Tokens<'a>,
}

/// What a `shutdown` asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShutdownMode {
    /// `shutdown`: stop now.
    Immediate,
    /// `shutdown graceful`: stop accepting, finish connections, then stop.
    Graceful,
    /// Any other argument: reply `CLIENT_ERROR invalid shutdown mode` if shutdown is enabled,
    /// else `ERROR: shutdown not enabled`, as memcached checks enablement first.
    Invalid,
}

pub(crate) fn parse_touch<'a>(line: Line<'a>, limits: &Limits) -> Result<Parsed<'a>, ParseError> {
    let (key, exptime, noreply) =
        key_and_number(&line, limits, parse_i64, CLIENT_ERROR_INVALID_EXPTIME)?;
    let request = Request::Touch(Touch {
        key,
        exptime,
        noreply,
    });
    line.parsed(request)
}

pub(crate) fn parse_flush_all(line: Line<'_>) -> Result<Parsed<'_>, ParseError> {
    let (args, count) = split_args::<2>(line.args);
    if count > 2 {
        return Err(line.refuse(ERROR, false));
    }
    let noreply = noreply_last(&args, count);
    let delay = if count == usize::from(noreply) {
        None
    } else {
        let Some(delay) = parse_i64(args[0]) else {
            return Err(line.refuse(CLIENT_ERROR_INVALID_EXPTIME, noreply));
        };
        Some(delay)
    };
    line.parsed(Request::FlushAll(FlushAll { delay, noreply }))
}

pub(crate) fn parse_verbosity(line: Line<'_>) -> Result<Parsed<'_>, ParseError> {
    let (args, count) = split_args::<2>(line.args);
    if !(1..=2).contains(&count) {
        return Err(line.refuse(ERROR, false));
    }
    let noreply = noreply_last(&args, count);
    let Some(level) = parse_client_flags(args[0]) else {
        return Err(line.refuse(CLIENT_ERROR_BAD_FORMAT, noreply));
    };
    let request = Request::Verbosity(Verbosity { level, noreply });
    line.parsed(request)
}

/// `cache_memlimit <megabytes> [noreply]`: a value that is not a number is `ERROR`, as in
/// memcached (and silent with `noreply`).
pub(crate) fn parse_cache_memlimit(line: Line<'_>) -> Result<Parsed<'_>, ParseError> {
    let (args, count) = split_args::<2>(line.args);
    if !(1..=2).contains(&count) {
        return Err(line.refuse(ERROR, false));
    }
    let noreply = noreply_last(&args, count);
    let Some(megabytes) = parse_client_flags(args[0]) else {
        return Err(line.refuse(ERROR, noreply));
    };
    line.parsed(Request::CacheMemlimit(CacheMemlimit { megabytes, noreply }))
}

pub(crate) fn parse_stats(line: Line<'_>) -> Result<Parsed<'_>, ParseError> {
    line.parsed(Request::Stats(Stats { args: line.args }))
}

pub(crate) fn parse_shutdown(line: Line<'_>) -> Result<Parsed<'_>, ParseError> {
    let (args, count) = split_args::<1>(line.args);
    let mode = match (count, args[0]) {
        (0, _) => ShutdownMode::Immediate,
        (1, b"graceful") => ShutdownMode::Graceful,
        _ => ShutdownMode::Invalid,
    };
    line.parsed(Request::Shutdown(mode))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memcache::parse;
    use crate::memcache::tests::assert_refused;

    fn request(input: &[u8]) -> Request<'_> {
        let parsed = parse(input, &Limits::default()).unwrap();
        assert_eq!(parsed.consumed, input.len());
        parsed.request
    }

    #[test]
    fn accepted() {
        let touch = |exptime, noreply| {
            Request::Touch(Touch {
                key: b"a",
                exptime,
                noreply,
            })
        };
        let flush = |delay, noreply| Request::FlushAll(FlushAll { delay, noreply });
        let verbosity = |level, noreply| Request::Verbosity(Verbosity { level, noreply });
        let cases: &[(&[u8], Request<'_>)] = &[
            (b"touch a 10\r\n", touch(10, false)),
            (b"touch a -1 noreply\r\n", touch(-1, true)),
            (b"flush_all\r\n", flush(None, false)),
            (b"flush_all 10\r\n", flush(Some(10), false)),
            (b"flush_all -1\r\n", flush(Some(-1), false)),
            (b"flush_all noreply\r\n", flush(None, true)),
            (b"flush_all 0 noreply\r\n", flush(Some(0), true)),
            (b"flush_all 1 2\r\n", flush(Some(1), false)),
            (b"verbosity 1\r\n", verbosity(1, false)),
            (b"verbosity 1 2\r\n", verbosity(1, false)),
            (b"verbosity 1 noreply\r\n", verbosity(1, true)),
            (
                b"cache_memlimit 64\r\n",
                Request::CacheMemlimit(CacheMemlimit {
                    megabytes: 64,
                    noreply: false,
                }),
            ),
            (
                b"cache_memlimit 64 noreply\r\n",
                Request::CacheMemlimit(CacheMemlimit {
                    megabytes: 64,
                    noreply: true,
                }),
            ),
            (b"version\r\n", Request::Version),
            (b"version x\r\n", Request::Version),
            (b"quit\r\n", Request::Quit),
            (b"quit x\r\n", Request::Quit),
            (b"shutdown\r\n", Request::Shutdown(ShutdownMode::Immediate)),
            (
                b"shutdown graceful\r\n",
                Request::Shutdown(ShutdownMode::Graceful),
            ),
            (b"shutdown x\r\n", Request::Shutdown(ShutdownMode::Invalid)),
            (
                b"shutdown graceful x\r\n",
                Request::Shutdown(ShutdownMode::Invalid),
            ),
            (
                b"stats\r\n",
                Request::Stats(Stats {
                    args: Tokens::new(b""),
                }),
            ),
            (
                b"stats detail on\r\n",
                Request::Stats(Stats {
                    args: Tokens::new(b"detail on"),
                }),
            ),
        ];
        for &(input, want) in cases {
            assert_eq!(request(input), want, "{:?}", String::from_utf8_lossy(input));
        }
    }

    #[test]
    fn lru_crawler_metadump_classes() {
        let cases: &[(&[u8], bool)] = &[
            (b"lru_crawler metadump all\r\n", true),
            (b"lru_crawler metadump hash\r\n", true),
            (b"lru_crawler metadump 1\r\n", true),
            (b"lru_crawler metadump 3,1\r\n", true),
            (b"lru_crawler metadump 1,\r\n", true),
            (b"lru_crawler metadump 2\r\n", false),
            (b"lru_crawler metadump 63\r\n", false),
        ];
        for &(input, class_one) in cases {
            assert_eq!(request(input), metadump(class_one), "{input:?}");
        }
    }

    fn metadump(class_one: bool) -> Request<'static> {
        Request::LruCrawler(LruCrawler::Metadump { class_one })
    }

    #[test]
    fn rejected() {
        let mut long = b"touch ".to_vec();
        long.extend_from_slice(&[b'k'; 251]);
        long.extend_from_slice(b" 1\r\n");
        // memcached 1.6.18's answers.
        let cases: &[(&[u8], &[u8])] = &[
            (b"touch a\r\n", ERROR),
            (b"touch a x\r\n", CLIENT_ERROR_INVALID_EXPTIME),
            (b"touch a x noreply\r\n", b""),
            (&long, CLIENT_ERROR_BAD_FORMAT),
            (b"flush_all x\r\n", CLIENT_ERROR_INVALID_EXPTIME),
            (b"flush_all 0 noreply x\r\n", ERROR),
            (b"verbosity\r\n", ERROR),
            (b"verbosity 1 2 3\r\n", ERROR),
            (b"cache_memlimit\r\n", ERROR),
            (b"cache_memlimit lots\r\n", ERROR),
            (b"cache_memlimit 1 2 3\r\n", ERROR),
            (b"verbosity x\r\n", CLIENT_ERROR_BAD_FORMAT),
            (b"verbosity noreply\r\n", b""),
            (b"lru_crawler\r\n", ERROR),
            (b"lru_crawler metadump\r\n", ERROR),
            (b"lru_crawler metadump all extra\r\n", ERROR),
            (b"lru_crawler crawl all\r\n", ERROR),
            (b"lru_crawler mgdump all\r\n", ERROR),
            (b"lru_crawler metadump ALL\r\n", BADCLASS),
            (b"lru_crawler metadump 0\r\n", BADCLASS),
            (b"lru_crawler metadump 64\r\n", BADCLASS),
            (b"lru_crawler metadump abc\r\n", BADCLASS),
            (b"lru_crawler metadump ,\r\n", BADCLASS),
        ];
        assert_refused(cases);
    }
}
