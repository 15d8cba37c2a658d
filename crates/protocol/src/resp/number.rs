//! Numbers as Redis 7.0 reads and writes them.
//!
//! * [`parse_i64`] follows `string2ll` (`util.c`): optional `-`, no `+`, no leading zeros except
//!   the single string `0`, no spaces, at most 20 bytes, within the `i64` range. `-0` is rejected.
//! * [`parse_f64`] follows `string2d` (`util.c`, used by `getDoubleFromObject`): the full C
//!   `strtod` grammar (decimal, hexadecimal `0x1p3`, `inf`/`infinity` in any case) with no leading
//!   space, nothing left over, no NaN, and no overflow to infinity or underflow to zero. Redis's
//!   long double paths (`INCRBYFLOAT`) also accept magnitudes between `f64::MAX` and ~1.2e4932;
//!   strata stores `f64`, so it rejects those.
//! * [`format_i64`] and [`format_double`] write into caller stack buffers, never allocating.
//!   Doubles use C's `%.17g`, as Redis 7.0's `addReplyDouble` does (7.2 switched to shortest
//!   round-trip output).

use core::fmt::Write as _;

/// Bytes of the longest `i64` in decimal: `-9223372036854775808`.
pub const I64_LEN_MAX: usize = 20;

/// Bytes of the longest [`format_double`] output, e.g. `-1.0000000000000001e-308` or
/// `-0.00012345678901234567`, rounded up.
pub const DOUBLE_LEN_MAX: usize = 32;

/// Redis's `LONG_STR_SIZE`: `string2ll` rejects strings of this many bytes or more.
const STRING2LL_LEN_MAX: usize = 20;

/// Parses an argument as `string2ll` does, or returns `None` for anything Redis would answer
/// with `-ERR value is not an integer or out of range`.
#[must_use]
pub fn parse_i64(arg: &[u8]) -> Option<i64> {
    if arg.is_empty() || arg.len() > STRING2LL_LEN_MAX {
        return None;
    }
    if arg == b"0" {
        return Some(0);
    }
    let (negative, digits) = match arg.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, arg),
    };
    // The first digit must be 1-9: this rejects "", "-", "-0", "01" and "+1".
    if !matches!(digits.first(), Some(b'1'..=b'9')) {
        return None;
    }
    let mut magnitude: u64 = 0;
    for &byte in digits {
        if !byte.is_ascii_digit() {
            return None;
        }
        magnitude = magnitude
            .checked_mul(10)?
            .checked_add(u64::from(byte - b'0'))?;
    }
    if negative {
        // `0 - magnitude` fits exactly when magnitude <= 2^63.
        0i64.checked_sub_unsigned(magnitude)
    } else {
        i64::try_from(magnitude).ok()
    }
}

/// Writes `value` in decimal into `buf` and returns the written prefix.
pub fn format_i64(value: i64, buf: &mut [u8; I64_LEN_MAX]) -> &[u8] {
    let mut start = crate::digits::put_u64(buf, I64_LEN_MAX, value.unsigned_abs());
    if value < 0 {
        start -= 1;
        buf[start] = b'-';
    }
    // Digits were written from the end; move them to the front so callers get a prefix.
    buf.copy_within(start.., 0);
    &buf[..I64_LEN_MAX - start]
}

/// C's `isspace` in the C locale.
pub(crate) fn is_c_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')
}

/// An optional leading `-` or `+` (as `strtod` reads one): whether it was `-`, and the rest.
pub(crate) fn split_sign(text: &[u8]) -> (bool, &[u8]) {
    match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, text),
    }
}

/// Parses an argument as `string2d` does, or returns `None` for anything Redis would answer with
/// `-ERR value is not a valid float`.
#[must_use]
pub fn parse_f64(arg: &[u8]) -> Option<f64> {
    // An empty or sign-only argument is left with no digits, which the magnitude refuses.
    let (negative, body) = split_sign(arg);
    let magnitude = if body.eq_ignore_ascii_case(b"inf") || body.eq_ignore_ascii_case(b"infinity") {
        f64::INFINITY
    } else if body.len() > 2 && body[0] == b'0' && (body[1] | 0x20) == b'x' {
        parse_hex_magnitude(&body[2..])?
    } else {
        parse_decimal_magnitude(body)?
    };
    Some(if negative { -magnitude } else { magnitude })
}

/// Parses `digits [. digits] [e [sign] digits]` with at least one mantissa digit; rejects
/// overflow to infinity and underflow to zero as `strtod`'s `ERANGE` does.
fn parse_decimal_magnitude(body: &[u8]) -> Option<f64> {
    let mut index = 0;
    let mut mantissa_digits = 0usize;
    let mut mantissa_nonzero = false;
    let mut seen_point = false;
    while index < body.len() {
        match body[index] {
            b'0'..=b'9' => {
                mantissa_digits += 1;
                mantissa_nonzero |= body[index] != b'0';
            }
            b'.' if !seen_point => seen_point = true,
            _ => break,
        }
        index += 1;
    }
    if mantissa_digits == 0 {
        return None;
    }
    if index < body.len() {
        if body[index] | 0x20 != b'e' {
            return None;
        }
        index += 1;
        if matches!(body.get(index), Some(b'+' | b'-')) {
            index += 1;
        }
        let exponent = &body[index..];
        if exponent.is_empty() || !exponent.iter().all(u8::is_ascii_digit) {
            return None;
        }
    }
    // The grammar above is a subset of Rust's float grammar, so the text is valid UTF-8 and
    // `parse` rounds it correctly, as glibc's `strtod` does.
    let value: f64 = core::str::from_utf8(body).ok()?.parse().ok()?;
    let out_of_range = value.is_infinite() || (value == 0.0 && mantissa_nonzero);
    (!out_of_range).then_some(value)
}

/// Parses the part of a C hexadecimal float after `0x`: `hex [. hex] [p [sign] digits]`.
fn parse_hex_magnitude(body: &[u8]) -> Option<f64> {
    // Significant bits kept exactly; further nonzero digits only set the sticky bit.
    const MANTISSA_HEX_DIGITS_MAX: u32 = 15;
    let mut mantissa: u64 = 0;
    let mut mantissa_hex_digits = 0u32;
    let mut sticky = false;
    let mut exponent2: i64 = 0;
    let mut digits = 0usize;
    let mut seen_point = false;
    let mut index = 0;
    while index < body.len() {
        let byte = body[index];
        if byte == b'.' && !seen_point {
            seen_point = true;
        } else if let Some(nibble) = (byte as char).to_digit(16) {
            digits += 1;
            if mantissa_hex_digits < MANTISSA_HEX_DIGITS_MAX {
                mantissa = mantissa << 4 | u64::from(nibble);
                mantissa_hex_digits += u32::from(mantissa != 0);
                exponent2 -= if seen_point { 4 } else { 0 };
            } else {
                sticky |= nibble != 0;
                exponent2 += if seen_point { 0 } else { 4 };
            }
        } else {
            break;
        }
        index += 1;
    }
    if digits == 0 {
        return None;
    }
    if index < body.len() {
        if body[index] | 0x20 != b'p' {
            return None;
        }
        exponent2 = exponent2.saturating_add(parse_exponent(&body[index + 1..])?);
    }
    round_binary(mantissa, sticky, exponent2)
}

/// Parses `[sign] digits`, saturating far beyond any finite double's exponent.
fn parse_exponent(text: &[u8]) -> Option<i64> {
    const EXPONENT_ABS_MAX: i64 = 1 << 20;
    let (negative, digits) = split_sign(text);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut value: i64 = 0;
    for &byte in digits {
        value = (value * 10 + i64::from(byte - b'0')).min(EXPONENT_ABS_MAX);
    }
    Some(if negative { -value } else { value })
}

/// Rounds `(mantissa + sticky) * 2^exponent2` to the nearest double, ties to even; `None` on
/// overflow or when a nonzero value underflows to zero.
fn round_binary(mantissa: u64, sticky: bool, exponent2: i64) -> Option<f64> {
    if mantissa == 0 {
        // Only zero digits were seen, since the sticky bit is set only after 15 significant ones.
        return Some(0.0);
    }
    let leading_zeros = i64::from(mantissa.leading_zeros());
    // value = wide * 2^(exponent2 - leading_zeros - 64), wide in [2^127, 2^128).
    let wide = (u128::from(mantissa) << (64 + leading_zeros)) | u128::from(sticky);
    let exponent_top = exponent2 - leading_zeros + 63; // value in [2^top, 2^(top+1))
    if exponent_top > 1023 {
        return None;
    }
    let bits_kept = if exponent_top >= -1022 {
        53
    } else {
        53 - (-1022 - exponent_top)
    };
    if bits_kept < 0 {
        return None;
    }
    let shift = 128 - bits_kept; // in 75..=128
    let (mut kept, dropped) = if shift >= 128 {
        (0u128, wide)
    } else {
        (wide >> shift, wide & ((1u128 << shift) - 1))
    };
    let half = 1u128 << (shift - 1);
    if dropped > half || (dropped == half && kept & 1 == 1) {
        kept += 1;
    }
    if kept == 0 {
        return None;
    }
    // kept < 2^54 is exact as f64; scale = 2^(exponent_top - bits_kept + 1) is >= 2^-1074.
    let scale_exponent = exponent_top - bits_kept + 1;
    let scale = if scale_exponent >= -1022 {
        f64::from_bits(((scale_exponent + 1023) as u64) << 52)
    } else {
        f64::from_bits(1u64 << (scale_exponent + 1074))
    };
    let value = kept as f64 * scale;
    value.is_finite().then_some(value)
}

/// A fixed-size `fmt::Write` sink, so formatting floats never allocates.
struct StackWriter {
    bytes: [u8; DOUBLE_LEN_MAX],
    len: usize,
}

impl core::fmt::Write for StackWriter {
    fn write_str(&mut self, text: &str) -> core::fmt::Result {
        let end = self.len + text.len();
        let target = self.bytes.get_mut(self.len..end).ok_or(core::fmt::Error)?;
        target.copy_from_slice(text.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// Writes `value` as C's `printf("%.17g")` does (glibc spelling `inf`, `-inf`, `nan`, `-nan`)
/// into `buf` and returns the written prefix.
pub fn format_double(value: f64, buf: &mut [u8; DOUBLE_LEN_MAX]) -> &[u8] {
    let sign: &[u8] = if value.is_sign_negative() { b"-" } else { b"" };
    if value.is_nan() || value.is_infinite() {
        let word: &[u8] = if value.is_nan() { b"nan" } else { b"inf" };
        return copy_parts(buf, &[sign, word]);
    }
    // 17 significant digits in scientific notation, correctly rounded: "d.dddddddddddddddde-5".
    let mut sci = StackWriter {
        bytes: [0; DOUBLE_LEN_MAX],
        len: 0,
    };
    write!(sci, "{:.16e}", value.abs()).expect("a double fits in DOUBLE_LEN_MAX bytes");
    let text = &sci.bytes[..sci.len];
    let e_index = text
        .iter()
        .position(|&b| b == b'e')
        .expect("`{:e}` writes an exponent");
    let exponent: i32 = core::str::from_utf8(&text[e_index + 1..])
        .ok()
        .and_then(|s| s.parse().ok())
        .expect("`{:e}` writes a decimal exponent");
    let mut digits = [0u8; 17];
    digits[0] = text[0];
    digits[1..].copy_from_slice(&text[2..e_index]);
    let significant = digits.iter().rposition(|&b| b != b'0').map_or(1, |i| i + 1);
    let digits = &digits[..significant];
    if !(-4..17).contains(&exponent) {
        let (first, rest) = digits.split_at(1);
        let point: &[u8] = if rest.is_empty() { b"" } else { b"." };
        let exp_sign: &[u8] = if exponent < 0 { b"-" } else { b"+" };
        // At least two exponent digits, as C's `%g` writes them (|exponent| <= 324).
        let mut exp = [b'0'; 3];
        let exp_start =
            crate::digits::put_u64(&mut exp, 3, u64::from(exponent.unsigned_abs())).min(1);
        return copy_parts(
            buf,
            &[sign, first, point, rest, b"e", exp_sign, &exp[exp_start..]],
        );
    }
    if exponent < 0 {
        let zeros = &b"0000"[..(-exponent - 1) as usize];
        return copy_parts(buf, &[sign, b"0.", zeros, digits]);
    }
    let integer_len = exponent as usize + 1;
    if digits.len() <= integer_len {
        let zeros = &b"0000000000000000"[..integer_len - digits.len()];
        return copy_parts(buf, &[sign, digits, zeros]);
    }
    let (integer, fraction) = digits.split_at(integer_len);
    copy_parts(buf, &[sign, integer, b".", fraction])
}

/// Concatenates `parts` into the front of `buf`.
fn copy_parts<'a>(buf: &'a mut [u8; DOUBLE_LEN_MAX], parts: &[&[u8]]) -> &'a [u8] {
    let mut len = 0;
    for part in parts {
        buf[len..len + part.len()].copy_from_slice(part);
        len += part.len();
    }
    &buf[..len]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_i64_table() {
        let accepted: &[(&[u8], i64)] = &[
            (b"0", 0),
            (b"1", 1),
            (b"-1", -1),
            (b"42", 42),
            (b"9223372036854775807", i64::MAX),
            (b"-9223372036854775808", i64::MIN),
        ];
        for &(text, value) in accepted {
            assert_eq!(
                parse_i64(text),
                Some(value),
                "{:?}",
                text.escape_ascii().to_string()
            );
        }
        let rejected: &[&[u8]] = &[
            b"",
            b"-",
            b"-0",
            b"+1",
            b"01",
            b"00",
            b" 1",
            b"1 ",
            b"1.0",
            b"0x10",
            b"1e3",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"18446744073709551616",
            b"99999999999999999999",
            b"000000000000000000001",
            b"1\0",
            b"--1",
            b"1-",
        ];
        for &text in rejected {
            assert_eq!(
                parse_i64(text),
                None,
                "{:?}",
                text.escape_ascii().to_string()
            );
        }
    }

    #[test]
    fn format_i64_table() {
        let mut buf = [0u8; I64_LEN_MAX];
        for value in [0, 1, -1, 10, 99, -100, i64::MAX, i64::MIN] {
            assert_eq!(format_i64(value, &mut buf), value.to_string().as_bytes());
        }
    }

    #[test]
    fn parse_f64_accepted() {
        let accepted: &[(&[u8], f64)] = &[
            (b"0", 0.0),
            (b"1.5", 1.5),
            (b"-1.5", -1.5),
            (b"+2", 2.0),
            (b".5", 0.5),
            (b"5.", 5.0),
            (b"1e3", 1000.0),
            (b"1E+3", 1000.0),
            (b"1e-3", 0.001),
            (b"0e999999", 0.0),
            (b"007", 7.0),
            (b"inf", f64::INFINITY),
            (b"+INF", f64::INFINITY),
            (b"-Infinity", f64::NEG_INFINITY),
            (b"0x10", 16.0),
            (b"0x1p3", 8.0),
            (b"0X1.8P1", 3.0),
            (b"0x.8", 0.5),
            (b"-0x1p-1074", -f64::from_bits(1)),
            (b"0x1.fffffffffffffp1023", f64::MAX),
            (
                b"0x123456789abcdef0123",
                0x123_4567_89ab_cdef_0123_u128 as f64,
            ),
            (b"4e-320", 4e-320),
            (b"1.7976931348623157e308", f64::MAX),
        ];
        for &(text, value) in accepted {
            let parsed = parse_f64(text);
            assert_eq!(parsed, Some(value), "{:?}", text.escape_ascii().to_string());
        }
    }

    #[test]
    fn parse_f64_rejected() {
        let rejected: &[&[u8]] = &[
            b"",
            b" 1",
            b"1 ",
            b"\t1",
            b"nan",
            b"NaN",
            b"-nan",
            b"nan(1)",
            b"1e400",
            b"-1e400",
            b"1e-400",
            b"0x1p-1080",
            b"0x1p1024",
            b"1e",
            b"1e+",
            b"e5",
            b".",
            b"-",
            b"+",
            b"in",
            b"infin",
            b"infinityx",
            b"0x",
            b"0x1p",
            b"0xg",
            b"1.2.3",
            b"1_0",
            b"1\0",
            b"--1",
            b"0x1.fffffffffffff8p1023",
            b"0x1.fffffffffffffcp1023",
        ];
        for &text in rejected {
            assert_eq!(
                parse_f64(text),
                None,
                "{:?}",
                text.escape_ascii().to_string()
            );
        }
    }

    #[test]
    fn format_double_matches_printf_g17() {
        // Outputs checked against redis-server 7.0.15 ZSCORE and glibc printf("%.17g").
        let table: &[(f64, &str)] = &[
            (0.0, "0"),
            (-0.0, "-0"),
            (1.5, "1.5"),
            (0.1, "0.10000000000000001"),
            (100.0, "100"),
            (1e16, "10000000000000000"),
            (1e17, "1e+17"),
            (1e20, "1e+20"),
            (1e-5, "1.0000000000000001e-05"),
            (0.0001, "0.0001"),
            (123_456_789_012_345_678.0, "1.2345678901234568e+17"),
            (4e-320, "3.999955468730732e-320"),
            (f64::MAX, "1.7976931348623157e+308"),
            (-f64::MIN_POSITIVE, "-2.2250738585072014e-308"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (f64::NAN, "nan"),
            (-0.000_123_456_789_012_345_67, "-0.00012345678901234567"),
        ];
        let mut buf = [0u8; DOUBLE_LEN_MAX];
        for &(value, text) in table {
            assert_eq!(format_double(value, &mut buf), text.as_bytes(), "{value:e}");
        }
    }

    #[test]
    fn format_double_round_trips() {
        let mut buf = [0u8; DOUBLE_LEN_MAX];
        for value in [
            0.1,
            1.0 / 3.0,
            2.5e-300,
            6.02e23,
            f64::MIN_POSITIVE,
            f64::from_bits(1),
        ] {
            assert_eq!(parse_f64(format_double(value, &mut buf)), Some(value));
        }
    }
}
