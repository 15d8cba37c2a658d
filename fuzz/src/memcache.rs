//! The `memcache_parse` target: memcached text and meta requests.
//!
//! The input is a byte stream as a client would send it. It is parsed the way a server session
//! does (parse from the front, drop what was consumed, swallow refused data blocks, stop on
//! close), once with all bytes at hand, then again as reads of varying sizes, under two sets of
//! limits: memcached's defaults and tiny ones, so that short inputs reach the too-long and
//! too-large paths.
//!
//! Invariants checked:
//! - `parse` never panics, and never reports more bytes consumed than it was given, nor zero
//!   bytes for a request or a refusal (a server would loop forever on it).
//! - Splitting the stream into reads at any points gives the same requests, refusals and
//!   leftover as parsing it whole: the parser's answer never depends on read boundaries.
//! - Every key of a request is non-empty, within `key_len_max`, and free of spaces and control
//!   characters; a base64 key (`b` flag) decodes.
//! - A store's data block has exactly the announced length, lies right after the command line
//!   and is followed by `\r\n`; it is within `value_len_max`, and a larger one is `TooLarge`
//!   with `swallow_len` = announced + 2.
//! - A multiget has at least one key (except `gat`/`gats`) and at most `keys_per_get_max`.
//! - A refusal's reply is empty (noreply) or exactly one `\r\n`-terminated line; a close only
//!   happens when the line has grown past `line_len_max`.
//! - Encoding an accepted request the way a client does and parsing that gives the same request
//!   (the canonical form round-trips).

use strata_protocol::memcache::{
    decode_key, encode_request, parse, Limits, ParseError, Parsed, Request,
};

use crate::{bytewise_plan, chunk_plan, find};

/// Tiny limits: every bound is reachable by an input of a few hundred bytes.
const LIMITS_SMALL: Limits = Limits {
    key_len_max: 8,
    value_len_max: 64,
    get_line_len_max: 128,
    line_len_max: 64,
};

/// Runs every check on one input; panics when an invariant fails.
pub fn check(data: &[u8]) {
    for limits in [Limits::default(), LIMITS_SMALL] {
        let whole = drive(data, &limits, &[data.len()]);
        let chunked = drive(data, &limits, &chunk_plan(data));
        assert_eq!(
            whole, chunked,
            "reads split by the chunk plan changed the parse"
        );
        if let Some(plan) = bytewise_plan(data) {
            let bytewise = drive(data, &limits, &plan);
            assert_eq!(whole, bytewise, "one byte per read changed the parse");
        }
    }
}

/// What the session saw, in order; compared between read patterns.
#[derive(Debug, PartialEq, Eq)]
enum Event<'a> {
    /// A request and the bytes it took.
    Request(Request<'a>, usize),
    /// A refusal: reply, bytes dropped now, bytes to swallow later.
    Refused(&'static [u8], usize, usize),
    /// The connection closes.
    Close,
    /// End of input: the first unparsed byte and what was still to be swallowed.
    Pending(usize, usize),
}

/// Parses `data` as it arrives in reads of the sizes in `plan`, like a server's session.
fn drive<'a>(data: &'a [u8], limits: &Limits, plan: &[usize]) -> Vec<Event<'a>> {
    let mut events = Vec::new();
    let (mut start, mut arrived, mut swallow) = (0usize, 0usize, 0usize);
    for &size in plan {
        arrived += size;
        loop {
            let skipped = swallow.min(arrived - start);
            start += skipped;
            swallow -= skipped;
            if swallow > 0 {
                break;
            }
            let buf = &data[start..arrived];
            match parse(buf, limits) {
                Ok(parsed) => {
                    check_parsed(buf, &parsed, limits);
                    check_bytes_needed(buf, &parsed, limits);
                    if let Request::TooLarge(too_large) = parsed.request {
                        swallow = too_large.swallow_len;
                    }
                    events.push(Event::Request(parsed.request, parsed.consumed));
                    start += parsed.consumed;
                }
                Err(ParseError::Incomplete) => {
                    // What a connection grows its read buffer to: always more than it holds.
                    if let Some(needed) = strata_protocol::memcache::bytes_needed(buf, limits) {
                        assert!(needed > buf.len(), "{needed} for {} bytes", buf.len());
                    }
                    break;
                }
                Err(ParseError::Reply {
                    reply,
                    consumed,
                    swallow_len,
                }) => {
                    check_refusal(buf, reply, consumed);
                    events.push(Event::Refused(reply, consumed, swallow_len));
                    start += consumed;
                    swallow = swallow_len;
                }
                Err(error @ ParseError::Close) => {
                    check_close(buf, limits);
                    let _ = error.to_string();
                    events.push(Event::Close);
                    return events;
                }
                // An HTTP request on the memcached port: hung up on without a reply.
                Err(error @ ParseError::CrossProtocol) => {
                    check_cross_protocol(buf);
                    let _ = error.to_string();
                    events.push(Event::Close);
                    return events;
                }
                // A binary-protocol request: refused, then closed.
                Err(error @ ParseError::Binary { .. }) => {
                    assert_eq!(buf[0], 0x80, "only the binary magic is a binary request");
                    let _ = error.to_string();
                    events.push(Event::Close);
                    return events;
                }
                Err(other) => panic!("unknown parse error {other:?}"),
            }
        }
    }
    events.push(Event::Pending(start, swallow));
    events
}

/// A whole storage request takes exactly the bytes `bytes_needed` says its line declares.
fn check_bytes_needed(buf: &[u8], parsed: &Parsed<'_>, limits: &Limits) {
    if matches!(parsed.request, Request::Store(_) | Request::MetaSet(_)) {
        let needed = strata_protocol::memcache::bytes_needed(buf, limits);
        assert_eq!(needed, Some(parsed.consumed), "{parsed:?}");
    }
}

/// The command line of `buf`: its text without the line end, and the bytes through its `\n`.
fn command_line(buf: &[u8]) -> (&[u8], usize) {
    let newline = find(buf, b'\n').expect("a parsed request has a complete command line");
    let text = &buf[..newline];
    (text.strip_suffix(b"\r").unwrap_or(text), newline + 1)
}

fn check_parsed(buf: &[u8], parsed: &Parsed<'_>, limits: &Limits) {
    let consumed = parsed.consumed;
    assert!(
        consumed > 0 && consumed <= buf.len(),
        "consumed {consumed} of {}",
        buf.len()
    );
    let (text, line_len) = command_line(buf);
    assert!(
        consumed >= line_len,
        "a request takes at least its command line"
    );
    let tokens: Vec<&[u8]> = text
        .split(|&b| b == b' ')
        .filter(|t| !t.is_empty())
        .collect();
    let data_block_len = match parsed.request {
        Request::Store(store) => {
            check_key(store.key, limits);
            assert_eq!(store.cas_unique.is_some(), tokens[0] == b"cas");
            Some(store.data)
        }
        Request::MetaSet(set) => {
            check_meta_key(set.key, set.flags.key_base64(), limits);
            assert!(set.flags.opaque.is_none_or(|o| o.len() < 32));
            Some(set.data)
        }
        Request::TooLarge(too_large) => {
            check_key(too_large.key, limits);
            let announced = announced_len(&tokens).expect("a too-large store announces a length");
            assert!(
                announced > limits.value_len_max as u64,
                "{announced} is not too large"
            );
            assert_eq!(too_large.swallow_len as u64, announced + 2);
            None
        }
        other => {
            check_other(&other, limits);
            None
        }
    };
    match data_block_len {
        Some(data) => {
            let announced = announced_len(&tokens).expect("a store announces its length");
            assert_eq!(
                data.len() as u64,
                announced,
                "the data block has the announced length"
            );
            assert!(data.len() <= limits.value_len_max);
            assert_eq!(consumed, line_len + data.len() + 2);
            assert_eq!(data, &buf[line_len..line_len + data.len()]);
            assert_eq!(&buf[consumed - 2..consumed], b"\r\n");
        }
        None => assert_eq!(consumed, line_len, "a request without data is one line"),
    }
    check_round_trip(&parsed.request, limits);
}

/// Requests other than stores: their keys and counts.
fn check_other(request: &Request<'_>, limits: &Limits) {
    match request {
        Request::Get(get) => {
            let keys: Vec<&[u8]> = get.keys.iter().collect();
            assert_eq!(keys.len(), get.keys.len());
            assert!(!keys.is_empty() || get.command.touches(), "get needs a key");
            assert_eq!(get.exptime.is_some(), get.command.touches());
            keys.iter().for_each(|key| check_key(key, limits));
        }
        Request::Delete(delete) => check_key(delete.key, limits),
        Request::Arith(arith) => check_key(arith.key, limits),
        Request::Touch(touch) => check_key(touch.key, limits),
        Request::MetaGet(get) => {
            check_meta_key(get.key, get.flags.key_base64(), limits);
            assert!(!get.flags.has(b'l'), "mg refuses l");
            assert!(get.flags.opaque.is_none_or(|o| o.len() < 32));
        }
        Request::MetaDelete(delete) => {
            check_meta_key(delete.key, delete.flags.key_base64(), limits);
        }
        Request::MetaArith(arith) => check_meta_key(arith.key, arith.flags.key_base64(), limits),
        Request::MetaDebug(debug) => check_meta_key(debug.key, debug.key_base64, limits),
        _ => {}
    }
}

/// A key as `doc/protocol.txt` defines it, checked independently of the parser's own test.
fn check_key(key: &[u8], limits: &Limits) {
    assert!(!key.is_empty(), "empty key");
    assert!(
        key.len() <= limits.key_len_max,
        "key of {} bytes",
        key.len()
    );
    assert!(
        key.iter().all(|&b| b > b' ' && b != 0x7f),
        "space or control character in key {key:?}"
    );
}

/// A meta key: valid as sent, and decodable when it is base64.
fn check_meta_key(key: &[u8], base64: bool, limits: &Limits) {
    check_key(key, limits);
    if base64 {
        let mut decoded = vec![0u8; key.len()];
        let len = decode_key(key, &mut decoded).expect("an accepted base64 key decodes");
        assert!(len > 0 && len <= key.len());
    }
}

/// The data length a store's command line announces: the fifth token of `set`-family commands,
/// the third of `ms`. Read here with its own decimal parser (sign allowed, `-0` is zero), not
/// the parser's.
fn announced_len(tokens: &[&[u8]]) -> Option<u64> {
    let token = match tokens.first()? {
        &b"ms" => tokens.get(2)?,
        _ => tokens.get(4)?,
    };
    let (negative, digits) = match token.split_first()? {
        (b'-', rest) => (true, rest),
        (b'+', rest) => (false, rest),
        _ => (false, *token),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let value = digits.iter().try_fold(0u64, |v, &d| {
        v.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })?;
    (!negative || value == 0).then_some(value)
}

fn check_refusal(buf: &[u8], reply: &[u8], consumed: usize) {
    assert!(
        consumed > 0 && consumed <= buf.len(),
        "refusal consumed {consumed}"
    );
    let (_, line_len) = command_line(buf);
    assert!(
        consumed >= line_len,
        "a refusal drops at least the command line"
    );
    if !reply.is_empty() {
        assert!(reply.ends_with(b"\r\n"), "reply {reply:?} is not a line");
        let body = &reply[..reply.len() - 2];
        assert!(
            !body.contains(&b'\n') && !body.contains(&b'\r'),
            "reply {reply:?}"
        );
    }
}

/// A hang-up for another protocol comes only on a complete line that looks like an HTTP
/// request line.
fn check_cross_protocol(buf: &[u8]) {
    let (line, _) = command_line(buf);
    assert!(
        strata_protocol::cross_protocol::is_http_line(line),
        "hung up on a line that is not HTTP: {:?}",
        String::from_utf8_lossy(line)
    );
}

fn check_close(buf: &[u8], limits: &Limits) {
    let line_len = find(buf, b'\n').unwrap_or(buf.len());
    assert!(
        line_len > limits.line_len_max,
        "closed on a line of {line_len} bytes"
    );
}

/// The client's canonical encoding of `request` parses back to the same request, whole.
fn check_round_trip(request: &Request<'_>, limits: &Limits) {
    if matches!(request, Request::TooLarge(_)) {
        return;
    }
    let mut encoded = Vec::new();
    let written = encode_request(&mut encoded, request);
    assert_eq!(written, encoded.len());
    // The canonical form ends lines in `\r\n`; a request sent with a bare `\n` gains the `\r`,
    // which counts towards the line limit as memcached counts it.
    let limits = Limits {
        line_len_max: limits.line_len_max + 1,
        ..*limits
    };
    match parse(&encoded, &limits) {
        Ok(again) => {
            assert_eq!(
                again.request,
                *request,
                "encoded as {:?}",
                encoded.escape_ascii()
            );
            assert_eq!(again.consumed, encoded.len());
        }
        Err(error) => panic!(
            "{request:?} encoded as {:?}: {error:?}",
            encoded.escape_ascii()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announced_lengths() {
        let split = |line: &'static [u8]| -> Vec<&'static [u8]> {
            line.split(|&b| b == b' ')
                .filter(|t| !t.is_empty())
                .collect()
        };
        assert_eq!(announced_len(&split(b"set k 0 0 +05")), Some(5));
        assert_eq!(announced_len(&split(b"ms k -0 T1")), Some(0));
        assert_eq!(announced_len(&split(b"ms k -1")), None);
        assert_eq!(announced_len(&split(b"set k 0 0")), None);
    }

    #[test]
    fn a_pipeline_checks_clean() {
        check(b"set a 0 0 1\r\nx\r\nget a b\r\nmg a v\r\nms k 2 T5\r\nhi\r\nset b 0 0 99\r\n");
        check(b"get aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
    }
}
