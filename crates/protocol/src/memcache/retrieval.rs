//! `get <key>*`, `gets <key>*`, `gat <exptime> <key>*`, `gats <exptime> <key>*`.
//!
//! As in memcached 1.6: `get`/`gets` need at least one key (`get` alone is `ERROR`); `gat`/`gats`
//! take the expiry first and may have no key at all (`gat 10` answers `END`). A bad expiry is
//! `CLIENT_ERROR invalid exptime argument`. Any key over the limit fails the whole line with
//! `CLIENT_ERROR bad command line format` and no values, as memcached answers
//! `get a <251 bytes>` even when `a` exists.

use super::encode::{CLIENT_ERROR_BAD_FORMAT, CLIENT_ERROR_INVALID_EXPTIME, ERROR};
use super::token::{key_is_valid, parse_i64, Tokens};
use super::{Limits, Line, ParseError, Parsed, Request};

/// Which retrieval command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GetCommand {
    /// `get`: values without CAS.
    Get,
    /// `gets`: values with CAS.
    Gets,
    /// `gat`: get and touch, values without CAS.
    Gat,
    /// `gats`: get and touch, values with CAS.
    Gats,
}

impl GetCommand {
    /// The command as sent.
    pub fn name(self) -> &'static [u8] {
        match self {
            Self::Get => b"get",
            Self::Gets => b"gets",
            Self::Gat => b"gat",
            Self::Gats => b"gats",
        }
    }

    /// The command named `name`, if it is a retrieval command.
    pub fn from_name(name: &[u8]) -> Option<Self> {
        match name {
            b"get" => Some(Self::Get),
            b"gets" => Some(Self::Gets),
            b"gat" => Some(Self::Gat),
            b"gats" => Some(Self::Gats),
            _ => None,
        }
    }

    /// Whether hits carry their CAS value (`VALUE <key> <flags> <bytes> <cas>`).
    pub fn returns_cas(self) -> bool {
        matches!(self, Self::Gets | Self::Gats)
    }

    /// Whether the command takes an expiry and touches what it finds.
    pub fn touches(self) -> bool {
        matches!(self, Self::Gat | Self::Gats)
    }
}

/// A retrieval request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Get<'a> {
    /// Which command.
    pub command: GetCommand,
    /// The new expiry for `gat`/`gats`, as sent (the server applies memcached's rules: 0 never,
    /// up to 30 days relative, above that absolute Unix time, negative already expired);
    /// `None` for `get`/`gets`.
    pub exptime: Option<i64>,
    /// The keys, in request order; each is valid by [`key_is_valid`].
    pub keys: Keys<'a>,
}

/// The keys of a multiget, split lazily from the request line without allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keys<'a> {
    tokens: Tokens<'a>,
    len: usize,
}

impl<'a> Keys<'a> {
    /// Iterates over the keys in request order.
    pub fn iter(&self) -> Tokens<'a> {
        self.tokens
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no keys (possible only for `gat`/`gats`).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The common request `get <key>` with a valid key (one space, one token), recognised without
/// splitting the line into tokens: `key_is_valid` refuses spaces, so the rest of the line is one
/// key. Anything else (`gets`, spacing that differs, several keys, a refused key) is `None` and
/// goes through the general parser, which gives the same result for this shape.
pub(crate) fn single_get<'a>(text: &'a [u8], limits: &Limits) -> Option<Get<'a>> {
    let key = text.strip_prefix(b"get ")?;
    if !key_is_valid(key, limits.key_len_max) {
        return None;
    }
    Some(Get {
        command: GetCommand::Get,
        exptime: None,
        keys: Keys {
            tokens: Tokens::new(key),
            len: 1,
        },
    })
}

impl<'a> IntoIterator for Keys<'a> {
    type Item = &'a [u8];
    type IntoIter = Tokens<'a>;

    fn into_iter(self) -> Tokens<'a> {
        self.tokens
    }
}

pub(crate) fn parse<'a>(
    command: GetCommand,
    line: Line<'a>,
    limits: &Limits,
) -> Result<Parsed<'a>, ParseError> {
    let mut args = line.args;
    let exptime = if command.touches() {
        let Some(token) = args.next() else {
            return Err(line.refuse(ERROR, false));
        };
        let Some(exptime) = parse_i64(token) else {
            return Err(line.refuse(CLIENT_ERROR_INVALID_EXPTIME, false));
        };
        Some(exptime)
    } else {
        None
    };
    let mut len = 0;
    for key in args {
        if !key_is_valid(key, limits.key_len_max) {
            return Err(line.refuse(CLIENT_ERROR_BAD_FORMAT, false));
        }
        len += 1;
    }
    if len == 0 && !command.touches() {
        return Err(line.refuse(ERROR, false));
    }
    let keys = Keys { tokens: args, len };
    line.parsed(Request::Get(Get {
        command,
        exptime,
        keys,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memcache::parse;
    use crate::memcache::tests::assert_refused;

    fn get(buf: &[u8]) -> (Get<'_>, usize) {
        match parse(buf, &Limits::default()) {
            Ok(Parsed {
                request: Request::Get(get),
                consumed,
            }) => (get, consumed),
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(buf)),
        }
    }

    fn keys<'a>(get: &Get<'a>) -> Vec<&'a [u8]> {
        get.keys.iter().collect()
    }

    #[test]
    fn accepted() {
        let (request, consumed) = get(b"get a\r\n");
        assert_eq!(
            (request.command, request.exptime, consumed),
            (GetCommand::Get, None, 7)
        );
        assert_eq!(keys(&request), [b"a"]);
        let (request, consumed) = get(b"  gets  a   b \nget c");
        assert_eq!(
            (request.command, consumed, request.keys.len()),
            (GetCommand::Gets, 15, 2)
        );
        assert_eq!(keys(&request), [&b"a"[..], b"b"]);
        let (request, _) = get(b"gat -1 k\r\n");
        assert_eq!(
            (request.command, request.exptime),
            (GetCommand::Gat, Some(-1))
        );
        assert_eq!(keys(&request), [b"k"]);
        let (request, _) = get(b"gats 10\r\n");
        assert!(request.keys.is_empty() && request.command.returns_cas());
        let long = [b'k'; 250];
        let mut line = b"get ".to_vec();
        line.extend_from_slice(&long);
        line.extend_from_slice(b"\r\n");
        assert_eq!(keys(&get(&line).0), [&long[..]]);
    }

    #[test]
    fn rejected() {
        let mut long = b"get a ".to_vec();
        long.extend_from_slice(&[b'k'; 251]);
        long.extend_from_slice(b"\r\n");
        let cases: &[(&[u8], &[u8])] = &[
            (b"get\r\n", b"ERROR\r\n"),
            (b"get \r\n", b"ERROR\r\n"),
            (b"gets\r\n", b"ERROR\r\n"),
            (b"gat\r\n", b"ERROR\r\n"),
            (b"gat a\r\n", b"CLIENT_ERROR invalid exptime argument\r\n"),
            (b"gat x a\r\n", b"CLIENT_ERROR invalid exptime argument\r\n"),
            (&long, b"CLIENT_ERROR bad command line format\r\n"),
            (b"get a\tb\r\n", b"CLIENT_ERROR bad command line format\r\n"),
            (b"get a\r\r\n", b"CLIENT_ERROR bad command line format\r\n"),
        ];
        assert_refused(cases);
    }

    #[test]
    fn a_multiget_takes_any_number_of_keys_as_in_memcached() {
        let keys: Vec<String> = (0..5000).map(|i| format!("k{i}")).collect();
        let line = format!("get {}\r\n", keys.join(" "));
        let (request, consumed) = get(line.as_bytes());
        assert_eq!((request.keys.len(), consumed), (5000, line.len()));
        assert_eq!(request.keys.iter().last(), Some(&b"k4999"[..]));
    }
}
