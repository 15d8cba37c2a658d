//! Bits of strings: GETBIT, SETBIT, BITCOUNT, BITPOS, with Redis 7.0's replies.
//!
//! Bit 0 is the most significant bit of the first byte. A missing key is an empty string,
//! read as all zeros. SETBIT grows the string with zero bytes; past the value limit it is
//! refused with strata's value-limit error, as SETRANGE is. Offsets are Redis's: 0 to
//! 2^32 - 1 (its 512 MiB string limit in bits).

use strata_engine::Change;
use strata_protocol::resp::{encode, errors, name_eq, parse_i64};

use super::{rewrite, too_large_reply, write_error, Call, State};

const ERR_BIT_OFFSET: &[u8] = b"-ERR bit offset is not an integer or out of range\r\n";
const ERR_BIT_VALUE: &[u8] = b"-ERR bit is not an integer or out of range\r\n";
const ERR_BITPOS_BIT: &[u8] = b"-ERR The bit argument must be 1 or 0.\r\n";

/// Largest bit offset Redis accepts: its 512 MiB string limit, in bits, less one.
const BIT_OFFSET_MAX: i64 = (512 << 20) * 8 - 1;

fn bit_offset(arg: &[u8]) -> Option<usize> {
    parse_i64(arg)
        .filter(|offset| (0..=BIT_OFFSET_MAX).contains(offset))
        .and_then(|offset| usize::try_from(offset).ok())
}

fn bit_at(bytes: &[u8], offset: usize) -> u8 {
    bytes
        .get(offset / 8)
        .map_or(0, |byte| (byte >> (7 - offset % 8)) & 1)
}

/// `GETBIT key offset`.
pub(crate) fn getbit(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let Some(offset) = bit_offset(call.arg(2)) else {
        out.extend_from_slice(ERR_BIT_OFFSET);
        return;
    };
    match call.get_typed(call.arg(1), |item| bit_at(item.value, offset)) {
        Ok(bit) => {
            encode::integer(out, i64::from(bit.unwrap_or(0)));
        }
        Err(error) => write_error(out, &error),
    };
}

/// `SETBIT key offset 0|1`: the bit's old value.
pub(crate) fn setbit(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let key = call.arg(1);
    let Some(offset) = bit_offset(call.arg(2)) else {
        out.extend_from_slice(ERR_BIT_OFFSET);
        return;
    };
    let value = match call.arg(3) {
        b"0" => 0u8,
        b"1" => 1,
        _ => {
            out.extend_from_slice(ERR_BIT_VALUE);
            return;
        }
    };
    let len_needed = offset / 8 + 1;
    if len_needed > call.value_len_max(key) {
        out.extend_from_slice(too_large_reply(len_needed));
        return;
    }
    let mut old = 0u8;
    let result = call.modify_typed(key, |current, buffer| {
        let bytes = current.as_ref().map_or(&[][..], |item| item.value);
        old = bit_at(bytes, offset);
        buffer.extend_from_slice(bytes);
        if buffer.len() < len_needed {
            buffer.resize(len_needed, 0);
        }
        let mask = 1u8 << (7 - offset % 8);
        if value == 1 {
            buffer[offset / 8] |= mask;
        } else {
            buffer[offset / 8] &= !mask;
        }
        if old == value && current.is_some() && bytes.len() >= len_needed {
            return Change::Keep;
        }
        rewrite(current.as_ref())
    });
    match result {
        Ok(_) => {
            encode::integer(out, i64::from(old));
        }
        Err(error) => write_error(out, &error),
    }
}

/// A range's unit (`BYTE`, the default, or `BIT`); `None` (syntax error) for anything else.
fn unit_is_bit(arg: &[u8]) -> Option<bool> {
    if name_eq(arg, b"bit") {
        Some(true)
    } else if name_eq(arg, b"byte") {
        Some(false)
    } else {
        None
    }
}

/// The inclusive bit range `start..=end` (in `bit` units, or bytes) selects from a string of
/// `len` bytes, Redis's way: negative indexes count from the end, both ends clamp into the
/// string; `None` when it selects nothing.
fn bit_range(start: i64, end: i64, len: usize, bit: bool) -> Option<(usize, usize)> {
    let bytes = i64::try_from(len).unwrap_or(i64::MAX);
    let total = if bit { bytes.saturating_mul(8) } else { bytes };
    if total == 0 {
        return None;
    }
    let start = if start < 0 { total + start } else { start }.max(0);
    let end = if end < 0 { total + end } else { end }.clamp(0, total - 1);
    if start > end {
        return None;
    }
    let (start, end) = (start.unsigned_abs() as usize, end.unsigned_abs() as usize);
    Some(if bit {
        (start, end)
    } else {
        (start * 8, end * 8 + 7)
    })
}

/// `BITCOUNT key [start end [BYTE|BIT]]`.
pub(crate) fn bitcount(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let range = match call.len() {
        2 => None,
        4 | 5 => {
            let (Some(start), Some(end)) = (parse_i64(call.arg(2)), parse_i64(call.arg(3))) else {
                out.extend_from_slice(errors::ERR_NOT_INTEGER);
                return;
            };
            Some((start, end))
        }
        _ => {
            out.extend_from_slice(errors::ERR_SYNTAX);
            return;
        }
    };
    let Ok(count) = call.get_typed(call.arg(1), |item| {
        let bytes = item.value;
        let bit = if call.len() == 5 {
            match unit_is_bit(call.arg(4)) {
                Some(bit) => bit,
                None => return None,
            }
        } else {
            false
        };
        let (from, to) = match range {
            None if bytes.is_empty() => return Some(0),
            None => (0, bytes.len() * 8 - 1),
            Some((start, end)) => match bit_range(start, end, bytes.len(), bit) {
                Some(range) => range,
                None => return Some(0),
            },
        };
        Some(count_ones(bytes, from, to))
    }) else {
        out.extend_from_slice(errors::ERR_WRONGTYPE);
        return;
    };
    match count {
        // A missing key counts 0 before its unit is read, as in Redis.
        None => {
            encode::integer(out, 0);
        }
        Some(None) => out.extend_from_slice(errors::ERR_SYNTAX),
        Some(Some(count)) => {
            encode::integer(out, i64::try_from(count).unwrap_or(i64::MAX));
        }
    }
}

/// `BITPOS key 0|1 [start [end [BYTE|BIT]]]`: the first bit set to the value in the range, or
/// -1. Looking for 0 without an end, the string counts as followed by zeros: a string of ones
/// answers the bit after it.
pub(crate) fn bitpos(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let wanted = match parse_i64(call.arg(2)) {
        None => {
            out.extend_from_slice(errors::ERR_NOT_INTEGER);
            return;
        }
        Some(bit @ (0 | 1)) => u8::try_from(bit).unwrap_or(0),
        Some(_) => {
            out.extend_from_slice(ERR_BITPOS_BIT);
            return;
        }
    };
    let Ok(found) = call.get_typed(call.arg(1), |item| bitpos_in(call, item.value, wanted)) else {
        out.extend_from_slice(errors::ERR_WRONGTYPE);
        return;
    };
    match found {
        None => {
            encode::integer(out, if wanted == 1 { -1 } else { 0 });
        }
        Some(Err(reply)) => out.extend_from_slice(reply),
        Some(Ok(position)) => {
            encode::integer(out, position);
        }
    }
}

/// BITPOS over an existing string `bytes`: the position, or the error reply.
fn bitpos_in(call: &Call<'_>, bytes: &[u8], wanted: u8) -> Result<i64, &'static [u8]> {
    let len = call.len();
    if len > 6 {
        return Err(errors::ERR_SYNTAX);
    }
    let start = match len {
        3 => 0,
        _ => parse_i64(call.arg(3)).ok_or(errors::ERR_NOT_INTEGER)?,
    };
    let bit = match len {
        6 => unit_is_bit(call.arg(5)).ok_or(errors::ERR_SYNTAX)?,
        _ => false,
    };
    let end_given = len >= 5;
    let end = match len {
        5 | 6 => parse_i64(call.arg(4)).ok_or(errors::ERR_NOT_INTEGER)?,
        _ => -1,
    };
    let Some((from, to)) = bit_range(start, end, bytes.len(), bit) else {
        return Ok(-1);
    };
    let found = first_bit(bytes, from, to, wanted);
    Ok(match found {
        Some(at) => i64::try_from(at).unwrap_or(i64::MAX),
        None if wanted == 0 && !end_given => {
            // Past the range the string reads as zeros: the first bit after its last byte
            // that the range reached.
            i64::try_from((to / 8 + 1) * 8).unwrap_or(i64::MAX)
        }
        None => -1,
    })
}

/// Set bits among bits `from..=to` of `bytes` (within the string): whole bytes by
/// `count_ones`, the partial first and last bytes masked.
fn count_ones(bytes: &[u8], from: usize, to: usize) -> u64 {
    let (first, last) = (from / 8, to / 8);
    let head = 0xFFu8 >> (from % 8);
    let tail = 0xFFu8 << (7 - to % 8);
    if first == last {
        return u64::from((bytes[first] & head & tail).count_ones());
    }
    let middle: u64 = bytes[first + 1..last]
        .iter()
        .map(|b| u64::from(b.count_ones()))
        .sum();
    u64::from((bytes[first] & head).count_ones())
        + middle
        + u64::from((bytes[last] & tail).count_ones())
}

/// The first of bits `from..=to` of `bytes` equal to `wanted`: bytes that cannot hold one
/// (all zeros looking for a one, all ones looking for a zero) are skipped whole.
fn first_bit(bytes: &[u8], from: usize, to: usize, wanted: u8) -> Option<usize> {
    let skip = if wanted == 1 { 0x00 } else { 0xFF };
    let mut at = from;
    while at <= to {
        if at.is_multiple_of(8) && at + 7 <= to && bytes[at / 8] == skip {
            at += 8;
            continue;
        }
        if bit_at(bytes, at) == wanted {
            return Some(at);
        }
        at += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The byte-wise count and search agree with a bit-by-bit walk over every range of a few
    /// patterned bytes.
    #[test]
    fn byte_wise_count_and_search_match_a_bit_walk() {
        let bytes = [0x00, 0xFF, 0x5A, 0x80, 0x01, 0xFF, 0x00];
        let bits = bytes.len() * 8;
        for from in 0..bits {
            for to in from..bits {
                let walked: u64 = (from..=to).map(|at| u64::from(bit_at(&bytes, at))).sum();
                assert_eq!(count_ones(&bytes, from, to), walked, "{from}..={to}");
                for wanted in [0, 1] {
                    let walked = (from..=to).find(|&at| bit_at(&bytes, at) == wanted);
                    assert_eq!(first_bit(&bytes, from, to, wanted), walked);
                }
            }
        }
    }
}
