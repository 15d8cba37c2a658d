//! `SLOWLOG GET [count] | LEN | RESET | HELP`, over the server's [`crate::slowlog::SlowLog`].
//! Replies as Redis 7 lays them out: an entry is `[id, unix time, microseconds, [args...],
//! "ip:port", client name]`.

use strata_protocol::resp::{encode, errors, name_eq, parse_i64};

use super::{Call, State};

/// Entries `SLOWLOG GET` returns without a count (Redis's).
const GET_COUNT_DEFAULT: usize = 10;

const HELP: &[&str] = &[
    "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET [<count>]",
    "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
    "    Entries are made of:",
    "    id, timestamp, time in microseconds, arguments array, client IP and port,",
    "    client name",
    "LEN",
    "    Return the length of the slowlog.",
    "RESET",
    "    Reset the slowlog.",
    "HELP",
    "    Print this help.",
];

/// `SLOWLOG ...`.
pub(crate) fn slowlog(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let sub = call.arg(1);
    let log = &call.ctx.slowlog;
    if name_eq(sub, b"get") && (2..=3).contains(&call.len()) {
        let count = if call.len() == 3 {
            // Redis answers a count that is no integer with the range's message too.
            match parse_i64(call.arg(2)) {
                Some(-1) => None,
                Some(n) if n >= 0 => Some(usize::try_from(n).unwrap_or(usize::MAX)),
                _ => {
                    encode::error(out, b"ERR count should be greater than or equal to -1");
                    return;
                }
            }
        } else {
            Some(GET_COUNT_DEFAULT)
        };
        let entries = log.newest(count);
        encode::array_len(out, entries.len());
        for entry in entries {
            encode::array_len(out, 6);
            encode::integer(out, i64::try_from(entry.id).unwrap_or(i64::MAX));
            encode::integer(out, i64::try_from(entry.unix_secs).unwrap_or(i64::MAX));
            encode::integer(out, i64::try_from(entry.duration_us).unwrap_or(i64::MAX));
            encode::array_len(out, entry.args.len());
            for arg in &entry.args {
                encode::bulk(out, arg);
            }
            encode::bulk(out, entry.client_addr.as_bytes());
            encode::bulk(out, &entry.client_name);
        }
    } else if name_eq(sub, b"len") && call.len() == 2 {
        encode::integer(out, i64::try_from(log.len()).unwrap_or(i64::MAX));
    } else if name_eq(sub, b"reset") && call.len() == 2 {
        log.reset();
        encode::ok(out);
    } else if name_eq(sub, b"help") && call.len() == 2 {
        encode::array_len(out, HELP.len());
        for line in HELP {
            encode::simple(out, line.as_bytes());
        }
    } else {
        errors::unknown_subcommand(out, b"slowlog", sub);
    }
}
