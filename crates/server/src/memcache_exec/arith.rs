//! `incr` and `decr`, and memcached's counter rules, which the meta `ma` command shares.
//!
//! memcached 1.6.18 reads the value with `strtoull`: leading white space, an optional sign,
//! decimal digits, then white space, a NUL or the end; a number that needs more than 64 bits,
//! or a negative one that does not read as 0, is not numeric. `incr` wraps at 2^64, `decr`
//! stops at 0. When the new number is no longer than the old value, memcached rewrites the
//! value in place and pads it with spaces (`decr` of `100` leaves `99 `); a longer number
//! replaces the value. strata does the same, so `get` after `decr` answers byte for byte alike.
//! Flags and expiry are kept; the CAS changes.

use crate::memcache_exec::strings_only;
use strata_engine::{Change, Expiry, ItemRef};
use strata_protocol::memcache::{encode, Arith, ArithCommand};

use super::write_failed;
use crate::context::ServerContext;
use crate::stats::command_index;

/// What a counter update found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Counted {
    /// The new value; the item now holds it.
    Value(u64),
    /// No such key.
    NotFound,
    /// The value is not a number.
    NotNumeric,
}

/// Runs `incr`/`decr <key> <delta> [noreply]`.
pub(super) fn execute(request: Arith<'_>, ctx: &ServerContext, out: &mut Vec<u8>) {
    let decrement = request.command == ArithCommand::Decr;
    let name = if decrement { "decr" } else { "incr" };
    ctx.stats.count_command(command_index(name));
    let mut counted = Counted::NotFound;
    let result = ctx
        .engine
        .modify(request.key, |current, buffer| match strings_only(current) {
            None => Change::Keep,
            Some(item) => {
                let (outcome, change) =
                    update(&item, request.delta, decrement, Expiry::Keep, buffer);
                counted = outcome;
                change
            }
        });
    if let Err(error) = result {
        return write_failed(&error, ctx, out, request.noreply);
    }
    match counted {
        Counted::Value(_) => count_arith(ctx, decrement, true),
        Counted::NotFound => count_arith(ctx, decrement, false),
        // A value that is not a number counts as neither, as in memcached.
        Counted::NotNumeric => {}
    }
    if request.noreply {
        return;
    }
    match counted {
        Counted::Value(value) => {
            encode::write_number(out, value);
        }
        Counted::NotFound => out.extend_from_slice(encode::NOT_FOUND),
        Counted::NotNumeric => out.extend_from_slice(encode::CLIENT_ERROR_NON_NUMERIC),
    }
}

/// Counts an incr or decr, text or meta, in memcached's `incr_hits`/`incr_misses`
/// (`decr_*`): a hit changed an existing number.
pub(super) fn count_arith(ctx: &ServerContext, decrement: bool, hit: bool) {
    ctx.stats.count_outcome(match (decrement, hit) {
        (false, true) => "incr_hits",
        (false, false) => "incr_misses",
        (true, true) => "decr_hits",
        (true, false) => "decr_misses",
    });
}

/// Applies `delta` to `item`'s number, writing the new value into `buffer` as memcached lays
/// it out, and says what to do with the item.
pub(super) fn update(
    item: &ItemRef<'_>,
    delta: u64,
    decrement: bool,
    expiry: Expiry,
    buffer: &mut Vec<u8>,
) -> (Counted, Change) {
    let Some(number) = parse_counter(item.value) else {
        return (Counted::NotNumeric, Change::Keep);
    };
    let next = if decrement {
        number.saturating_sub(delta)
    } else {
        number.wrapping_add(delta)
    };
    encode::write_u64(buffer, next);
    if buffer.len() < item.value.len() {
        buffer.resize(item.value.len(), b' ');
    }
    let change = Change::Write {
        client_flags: item.client_flags,
        expiry,
        keep_cas: false,
    };
    (Counted::Value(next), change)
}

/// Reads a counter as memcached's `safe_strtoull` does (see the module documentation).
pub(super) fn parse_counter(value: &[u8]) -> Option<u64> {
    let is_space = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r');
    let mut rest = value;
    while let [first, tail @ ..] = rest {
        if !is_space(*first) {
            break;
        }
        rest = tail;
    }
    let negative = rest.first() == Some(&b'-');
    if matches!(rest.first(), Some(b'-' | b'+')) {
        rest = &rest[1..];
    }
    let digits_len = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits_len == 0 {
        return None;
    }
    let mut number: u64 = 0;
    for &digit in &rest[..digits_len] {
        number = number
            .checked_mul(10)?
            .checked_add(u64::from(digit - b'0'))?;
    }
    match rest.get(digits_len) {
        None | Some(0) => {}
        Some(&b) if is_space(b) => {}
        Some(_) => return None,
    }
    if negative {
        // strtoull negates; memcached then refuses results that read as negative i64.
        let negated = number.wrapping_neg();
        return (i64::try_from(negated).is_ok()).then_some(negated);
    }
    Some(number)
}

#[cfg(test)]
mod tests {
    use super::parse_counter;

    #[test]
    fn counters_read_like_strtoull() {
        let cases: &[(&[u8], Option<u64>)] = &[
            (b"10", Some(10)),
            (b" 12", Some(12)),
            (b"+5", Some(5)),
            (b"12 ", Some(12)),
            (b"12\t", Some(12)),
            (b"1 2", Some(1)),
            (b"1\0x", Some(1)),
            (b"00000000000000000000000001", Some(1)),
            (b"18446744073709551615", Some(u64::MAX)),
            (b"18446744073709551616", None),
            (b"-1", None),
            (b"-0", Some(0)),
            (b"", None),
            (b" ", None),
            (b"1x", None),
            (b"x", None),
            (b"+", None),
        ];
        for &(value, want) in cases {
            assert_eq!(parse_counter(value), want, "{value:?}");
        }
    }
}
