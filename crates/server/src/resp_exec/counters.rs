//! Counters: INCR, DECR, INCRBY, DECRBY, INCRBYFLOAT.
//!
//! Each is one `Engine::modify`, so concurrent increments of a key never lose an update. A
//! missing key counts as 0; the key's expiry is kept, as in Redis.
//!
//! Departure: Redis computes INCRBYFLOAT in `long double` (x87, 64-bit mantissa) and prints
//! `%.17Lf` with trailing zeros removed. strata computes in `f64` and prints the shortest
//! decimal that reads back as the same `f64`, rounded to 17 decimals the same way. The two
//! agree whenever the exact decimal result is what both precisions round to (`10.5 + 0.1` is
//! `10.6`, `5.0e3 + 2.0e2` is `5200`); they differ where long double shows its own rounding
//! (Redis prints `1000.1 + 0.1` as `1000.19999999999999996`, strata as `1000.2`) or where f64
//! shows its own (`0.1 + 0.2`: Redis `0.3`, strata `0.30000000000000004`).

use std::fmt::Write as _;

use strata_engine::Change;
use strata_protocol::resp::{encode, errors, format_i64, parse_f64, parse_i64, I64_LEN_MAX};

use super::{rewrite, write_error, Call, State};

/// Digits after the decimal point Redis prints for INCRBYFLOAT (`%.17Lf`).
const FLOAT_FRACTION_DIGITS: usize = 17;

/// Why an increment was refused.
#[derive(Clone, Copy)]
enum Refused {
    NotInteger,
    Overflow,
    NotFloat,
    NanOrInfinity,
}

impl Refused {
    fn reply(self) -> &'static [u8] {
        match self {
            Refused::NotInteger => errors::ERR_NOT_INTEGER,
            Refused::Overflow => errors::ERR_OVERFLOW,
            Refused::NotFloat => errors::ERR_NOT_FLOAT,
            Refused::NanOrInfinity => errors::ERR_NAN_OR_INFINITY,
        }
    }
}

/// Adds `delta` to the integer at the call's key and replies with the result.
fn incr_by(call: &Call<'_>, out: &mut Vec<u8>, delta: i64) {
    let mut outcome = Err(Refused::NotInteger);
    let result = call.modify_typed(call.arg(1), |current, buffer| {
        let Some(old) = current
            .as_ref()
            .map_or(Some(0), |item| parse_i64(item.value))
        else {
            return Change::Keep;
        };
        let Some(new) = old.checked_add(delta) else {
            outcome = Err(Refused::Overflow);
            return Change::Keep;
        };
        outcome = Ok(new);
        let mut digits = [0u8; I64_LEN_MAX];
        buffer.extend_from_slice(format_i64(new, &mut digits));
        rewrite(current.as_ref())
    });
    match (result, outcome) {
        (Err(error), _) => write_error(out, &error),
        (Ok(_), Ok(new)) => {
            encode::integer(out, new);
        }
        (Ok(_), Err(refused)) => out.extend_from_slice(refused.reply()),
    }
}

/// `INCR key`.
pub(crate) fn incr(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    incr_by(call, out, 1);
}

/// `DECR key`.
pub(crate) fn decr(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    incr_by(call, out, -1);
}

/// `INCRBY key increment`.
pub(crate) fn incrby(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    match parse_i64(call.arg(2)) {
        Some(delta) => incr_by(call, out, delta),
        None => out.extend_from_slice(errors::ERR_NOT_INTEGER),
    }
}

/// `DECRBY key decrement` (negating `i64::MIN` is refused as Redis 7.0 does).
pub(crate) fn decrby(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    match parse_i64(call.arg(2)) {
        None => out.extend_from_slice(errors::ERR_NOT_INTEGER),
        Some(i64::MIN) => {
            encode::error(out, b"ERR decrement would overflow");
        }
        Some(delta) => incr_by(call, out, -delta),
    }
}

/// `INCRBYFLOAT key increment`: the new value as a bulk string.
pub(crate) fn incrbyfloat(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let Some(delta) = parse_f64(call.arg(2)) else {
        out.extend_from_slice(errors::ERR_NOT_FLOAT);
        return;
    };
    let mark = out.len();
    let mut outcome = Err(Refused::NotFloat);
    let result = call.modify_typed(call.arg(1), |current, buffer| {
        let Some(old) = current
            .as_ref()
            .map_or(Some(0.0), |item| parse_f64(item.value))
        else {
            return Change::Keep;
        };
        let new = old + delta;
        if !new.is_finite() {
            outcome = Err(Refused::NanOrInfinity);
            return Change::Keep;
        }
        outcome = Ok(());
        format_human(new, buffer);
        encode::bulk(out, buffer);
        rewrite(current.as_ref())
    });
    match (result, outcome) {
        (Err(error), _) => {
            out.truncate(mark);
            write_error(out, &error);
        }
        (Ok(_), Ok(())) => {}
        (Ok(_), Err(refused)) => out.extend_from_slice(refused.reply()),
    }
}

/// Appends `value` as Redis's `ld2string(..., LD_STR_HUMAN)` would print it, from the shortest
/// round-trip digits of the `f64`: fixed point, at most 17 decimals (rounded half up), no
/// trailing zeros or point, and `0` rather than `-0`.
pub(crate) fn format_human(value: f64, out: &mut Vec<u8>) {
    debug_assert!(value.is_finite());
    let mut scientific = String::new();
    write!(scientific, "{:e}", value.abs()).expect("writing to a String cannot fail");
    let (mantissa, exponent) = scientific
        .split_once('e')
        .expect("`{:e}` writes an exponent");
    let exponent: i64 = exponent.parse().expect("`{:e}` writes a decimal exponent");
    // digits × 10^(exponent + 1 - digits.len()), with digits the mantissa without its point.
    let mut digits: Vec<u8> = mantissa.bytes().filter(u8::is_ascii_digit).collect();
    let integer_len = exponent + 1;
    // Lay the digits out as fixed point: `integer_len` integer digits, then the fraction.
    let leading_zeros = usize::try_from(-integer_len).unwrap_or(0) + 1;
    let integer_len = if integer_len <= 0 {
        digits.splice(0..0, std::iter::repeat_n(b'0', leading_zeros));
        1
    } else {
        let integer_len = usize::try_from(integer_len).unwrap_or(usize::MAX);
        if digits.len() < integer_len {
            digits.resize(integer_len, b'0');
        }
        integer_len
    };
    let carried = round_fraction(&mut digits, integer_len + FLOAT_FRACTION_DIGITS);
    let integer_len = integer_len + usize::from(carried);
    digits.truncate(integer_len + FLOAT_FRACTION_DIGITS);
    while digits.len() > integer_len && digits.last() == Some(&b'0') {
        digits.pop();
    }
    let negative = value < 0.0 && digits.iter().any(|&digit| digit != b'0');
    if negative {
        out.push(b'-');
    }
    out.extend_from_slice(&digits[..integer_len]);
    if digits.len() > integer_len {
        out.push(b'.');
        out.extend_from_slice(&digits[integer_len..]);
    }
}

/// Rounds the decimal digit string to at most `keep` digits, half up. Returns true when the
/// carry added a new leading digit (all nines rounded up).
fn round_fraction(digits: &mut Vec<u8>, keep: usize) -> bool {
    if digits.len() <= keep {
        return false;
    }
    let round_up = digits[keep] >= b'5';
    digits.truncate(keep);
    if !round_up {
        return false;
    }
    for digit in digits.iter_mut().rev() {
        if *digit == b'9' {
            *digit = b'0';
        } else {
            *digit += 1;
            return false;
        }
    }
    digits.insert(0, b'1');
    true
}

#[cfg(test)]
mod tests {
    use super::format_human;

    #[test]
    fn human_format_matches_redis_where_precision_agrees() {
        // Right-hand sides are redis-server 7.0.15's INCRBYFLOAT replies.
        let table: &[(f64, &str)] = &[
            (10.6, "10.6"),
            (5200.0, "5200"),
            (0.0, "0"),
            (-0.0, "0"),
            (3.0, "3"),
            (-2.5, "-2.5"),
            (1e-20, "0"),
            (-1e-20, "0"),
            (2.734_567_890_123_457, "2.734567890123457"),
            (99.999_999_999_999_999_9, "100"),
            (1e20, "100000000000000000000"),
            (0.000_001, "0.000001"),
            (123.456, "123.456"),
            (9.999_999_999_999_999e-1, "0.9999999999999999"),
            (5e-18, "0.00000000000000001"),
            (-5e-18, "-0.00000000000000001"),
        ];
        for &(value, text) in table {
            let mut out = Vec::new();
            format_human(value, &mut out);
            assert_eq!(String::from_utf8(out).unwrap(), text, "{value:e}");
        }
    }
}
