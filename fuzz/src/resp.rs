//! The `resp_parse` target: Redis requests, multibulk (`*<n>\r\n$<len>\r\n...`) and inline.
//!
//! The input is a byte stream as a client would send it, parsed the way a server session does
//! (parse from the front, drop what was consumed, stop at a protocol error, which closes the
//! connection), once whole and again as reads of varying sizes, under three sets of limits:
//! Redis's defaults, the stricter ones before `AUTH`, and tiny ones that short inputs exceed.
//!
//! Invariants checked:
//! - `parse_command` never panics, never consumes more than it was given nor zero bytes, and
//!   every argument it records resolves inside the consumed bytes or its own scratch buffer.
//! - Splitting the stream into reads at any points gives the same commands, error and leftover
//!   as parsing it whole.
//! - A multibulk command has exactly the announced number of arguments (none for a count of zero
//!   or less), each within `bulk_len_max` (16 KiB before `AUTH`), and at most `args_max` (10
//!   before `AUTH`) of them. Inline commands have no such bounds in Redis, only the line's.
//! - An inline command is one line of at most `inline_len_max` bytes with no NUL; an argument
//!   read straight from the input holds no space, tab, line end or quote.
//! - A protocol error's reply is a single `-ERR ...\r\n` line.
//! - Encoding an accepted command as a client does (`encode_command`) and parsing that gives
//!   the same arguments, when they are within the limits.

use strata_protocol::resp::{
    encode_command, parse_command, Arg, Args, Limits, ParseError, ProtocolError,
    UNAUTHENTICATED_ARGS_MAX, UNAUTHENTICATED_BULK_LEN_MAX,
};

use crate::{bytewise_plan, chunk_plan, find};

/// Tiny limits: every bound is reachable by an input of a few dozen bytes.
const LIMITS_SMALL: Limits = Limits {
    args_max: 4,
    bulk_len_max: 16,
    bulk_len_discard_max: 64,
    inline_len_max: 32,
    auth_pending: false,
};

/// Runs every check on one input; panics when an invariant fails.
pub fn check(data: &[u8]) {
    let auth_pending = Limits {
        auth_pending: true,
        ..Limits::default()
    };
    let mut args = Args::new();
    for limits in [Limits::default(), auth_pending, LIMITS_SMALL] {
        let whole = drive(data, &limits, &[data.len()], &mut args);
        let chunked = drive(data, &limits, &chunk_plan(data), &mut args);
        assert_eq!(
            whole, chunked,
            "reads split by the chunk plan changed the parse"
        );
        if let Some(plan) = bytewise_plan(data) {
            let bytewise = drive(data, &limits, &plan, &mut args);
            assert_eq!(whole, bytewise, "one byte per read changed the parse");
        }
    }
}

/// What the session saw, in order; compared between read patterns.
#[derive(Debug, PartialEq, Eq)]
enum Event {
    /// A command's arguments (empty: skipped silently) and the bytes it took.
    Command(Vec<Vec<u8>>, usize),
    /// A protocol error: the connection closes.
    Protocol(ProtocolError),
    /// A bulk argument over `bulk_len_max` (within `bulk_len_discard_max`): the session drops
    /// the rest of the command as it arrives and refuses it (not emulated: the drive ends).
    TooLong(strata_protocol::resp::TooLong),
    /// End of input: the first unparsed byte.
    Pending(usize),
}

/// Parses `data` as it arrives in reads of the sizes in `plan`, like a server's session.
fn drive(data: &[u8], limits: &Limits, plan: &[usize], args: &mut Args) -> Vec<Event> {
    let mut events = Vec::new();
    let (mut start, mut arrived) = (0usize, 0usize);
    for &size in plan {
        arrived += size;
        loop {
            let buf = &data[start..arrived];
            match parse_command(buf, limits, args) {
                Ok(consumed) => {
                    let needed = strata_protocol::resp::bytes_needed(buf, limits);
                    assert_eq!(needed, None, "a whole command needs no more bytes");
                    let owned = check_command(buf, consumed, args, limits);
                    check_round_trip(&owned, limits);
                    events.push(Event::Command(owned, consumed));
                    start += consumed;
                }
                Err(ParseError::Incomplete) => {
                    // What a connection grows its read buffer to: always more than it holds.
                    if let Some(needed) = strata_protocol::resp::bytes_needed(buf, limits) {
                        assert!(needed > buf.len(), "{needed} for {} bytes", buf.len());
                    }
                    break;
                }
                Err(ParseError::Protocol(error)) => {
                    check_error(error);
                    events.push(Event::Protocol(error));
                    return events;
                }
                Err(ParseError::TooLong) => {
                    let at = strata_protocol::resp::too_long_at(buf, limits)
                        .expect("TooLong says where the command stands");
                    assert!(at.consumed <= buf.len(), "{at:?}");
                    let bulk_len = at.discard_len - 2;
                    assert!(bulk_len > limits.bulk_len_max, "{at:?}");
                    assert!(bulk_len <= limits.bulk_len_discard_max, "{at:?}");
                    events.push(Event::TooLong(at));
                    return events;
                }
                Err(other) => panic!("unknown parse error {other:?}"),
            }
        }
    }
    events.push(Event::Pending(start));
    events
}

/// Checks one accepted command and returns its arguments as owned bytes.
fn check_command(buf: &[u8], consumed: usize, args: &Args, limits: &Limits) -> Vec<Vec<u8>> {
    assert!(
        consumed > 0 && consumed <= buf.len(),
        "consumed {consumed} of {}",
        buf.len()
    );
    let (args_max, bulk_len_max) = if limits.auth_pending {
        (UNAUTHENTICATED_ARGS_MAX, UNAUTHENTICATED_BULK_LEN_MAX)
    } else {
        (limits.args_max, limits.bulk_len_max)
    };
    for &arg in args.as_slice() {
        if let Arg::Input { start, len } = arg {
            assert!(
                start + len <= consumed,
                "argument {start}+{len} past {consumed}"
            );
        }
    }
    let owned: Vec<Vec<u8>> = args.iter(buf).map(<[u8]>::to_vec).collect();
    if buf[0] == b'*' {
        let announced = announced_count(buf).expect("an accepted multibulk has a count");
        assert_eq!(owned.len() as i64, announced.max(0), "argument count");
        let count_max = args_max.min(limits.args_max);
        assert!(owned.len() <= count_max, "{} arguments", owned.len());
        for arg in &owned {
            assert!(arg.len() <= bulk_len_max.min(limits.bulk_len_max));
        }
        return owned;
    }
    let newline = find(buf, b'\n').expect("an inline command is a line");
    assert_eq!(consumed, newline + 1, "an inline command is one line");
    assert!(
        newline <= limits.inline_len_max,
        "inline line of {newline} bytes"
    );
    assert!(!buf[..newline].contains(&0), "the line search stops at NUL");
    for &arg in args.as_slice() {
        if let Arg::Input { start, len } = arg {
            let plain = &buf[start..start + len];
            assert!(
                !plain.iter().any(|b| b" \t\r\n\"'".contains(b)),
                "plain inline argument {plain:?}"
            );
        }
    }
    owned
}

/// The count of a multibulk request's first line, read here independently of the parser:
/// the digits after `*` up to the `\r` (Redis's `string2ll`: optional `-`, no leading zeros).
fn announced_count(buf: &[u8]) -> Option<i64> {
    let carriage_return = find(buf, b'\r')?;
    let text = std::str::from_utf8(&buf[1..carriage_return]).ok()?;
    let value: i64 = text.parse().ok()?;
    (value.to_string() == text).then_some(value)
}

fn check_error(error: ProtocolError) {
    let mut reply = Vec::new();
    let written = error.encode(&mut reply);
    assert_eq!(written, reply.len());
    assert!(reply.starts_with(b"-ERR Protocol error: "), "{reply:?}");
    assert!(reply.ends_with(b"\r\n"));
    let body = &reply[..reply.len() - 2];
    assert!(
        !body.contains(&b'\r') && !body.contains(&b'\n'),
        "{reply:?}"
    );
    let _ = error.to_string();
}

/// A client's multibulk encoding of the arguments parses back to the same arguments.
fn check_round_trip(args: &[Vec<u8>], limits: &Limits) {
    let bulk_len_max = if limits.auth_pending {
        UNAUTHENTICATED_BULK_LEN_MAX
    } else {
        limits.bulk_len_max
    };
    let args_max = if limits.auth_pending {
        UNAUTHENTICATED_ARGS_MAX
    } else {
        limits.args_max
    };
    // An inline command may hold more or longer arguments than a multibulk one may.
    if args.is_empty() || args.len() > args_max || args.iter().any(|a| a.len() > bulk_len_max) {
        return;
    }
    let borrowed: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
    let mut encoded = Vec::new();
    assert_eq!(encode_command(&mut encoded, &borrowed), encoded.len());
    let mut again = Args::new();
    match parse_command(&encoded, limits, &mut again) {
        Ok(consumed) => {
            assert_eq!(consumed, encoded.len());
            let parsed: Vec<&[u8]> = again.iter(&encoded).collect();
            assert_eq!(parsed, borrowed, "encoded as {:?}", encoded.escape_ascii());
        }
        Err(error) => panic!(
            "{borrowed:?} encoded as {:?}: {error:?}",
            encoded.escape_ascii()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announced_counts() {
        assert_eq!(announced_count(b"*3\r\n"), Some(3));
        assert_eq!(announced_count(b"*-1\r\n"), Some(-1));
        assert_eq!(announced_count(b"*03\r\n"), None);
        assert_eq!(announced_count(b"*\r\n"), None);
    }

    #[test]
    fn a_pipeline_checks_clean() {
        check(b"*2\r\n$3\r\nGET\r\n$1\r\na\r\nSET k \"a b\" 'c'\r\n*0\r\n\r\nPING\n*1\r\n$4\r\nPI");
        check(b"*1\r\n$4\r\nPINGxy*2\r\n+3\r\n");
    }
}
