//! Parts of strings: APPEND, STRLEN, GETRANGE (and its old name SUBSTR), SETRANGE.
//!
//! Length limits: a result longer than the server's value limit (also what
//! `CONFIG GET proto-max-bulk-len` reports) is refused with Redis's text for a string over its
//! limit, naming strata's setting: `-ERR string exceeds maximum allowed size (max-value-size)`;
//! past Redis's own limit (512 MiB), with Redis's exact reply (`too_large_reply`).

use strata_engine::Change;
use strata_protocol::resp::{encode, errors, parse_i64};

use super::{rewrite, too_large_reply, write_error, Call, State};

/// What a read-modify-write of a string decided, for the reply after the engine call.
enum Edit {
    /// The new length.
    Length(usize),
    /// The result, of this length, would exceed the value limit.
    TooLong(usize),
}

/// `APPEND key value`: the new length; creates the key when missing.
pub(crate) fn append(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let (key, data) = (call.arg(1), call.arg(2));
    let len_max = call.value_len_max(key);
    let mut edit = Edit::Length(0);
    let result = call.modify_typed(key, |current, buffer| {
        let old = current.as_ref().map_or(&[][..], |item| item.value);
        if old.len() + data.len() > len_max {
            edit = Edit::TooLong(old.len() + data.len());
            return Change::Keep;
        }
        buffer.extend_from_slice(old);
        buffer.extend_from_slice(data);
        edit = Edit::Length(buffer.len());
        rewrite(current.as_ref())
    });
    reply_edit(out, result.map(|_| edit));
}

fn reply_edit(out: &mut Vec<u8>, result: Result<Edit, strata_engine::WriteError>) {
    match result {
        Ok(Edit::Length(len)) => {
            encode::integer(out, i64::try_from(len).unwrap_or(i64::MAX));
        }
        Ok(Edit::TooLong(len)) => out.extend_from_slice(too_large_reply(len)),
        Err(error) => write_error(out, &error),
    }
}

/// `STRLEN key`: 0 for a missing key.
pub(crate) fn strlen(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    match call.get_typed(call.arg(1), |item| item.value.len()) {
        Ok(len) => {
            encode::integer(out, i64::try_from(len.unwrap_or(0)).unwrap_or(i64::MAX));
        }
        Err(error) => write_error(out, &error),
    };
}

/// The byte range `GETRANGE start end` selects from a string of `len` bytes, with Redis
/// 7.0's rules: negative indexes count from the end, both ends clamp into the string, and a
/// start past the end (or both negative with start > end) selects nothing.
pub(crate) fn range_of(start: i64, end: i64, len: usize) -> Option<(usize, usize)> {
    let len = i64::try_from(len).unwrap_or(i64::MAX);
    if (start < 0 && end < 0 && start > end) || len == 0 {
        return None;
    }
    let start = if start < 0 { len + start } else { start }.max(0);
    let end = if end < 0 { len + end } else { end }.max(0).min(len - 1);
    if start > end {
        return None;
    }
    Some((
        start.unsigned_abs() as usize,
        end.unsigned_abs() as usize + 1,
    ))
}

/// `GETRANGE key start end`: an empty string for a missing key or an empty range.
pub(crate) fn getrange(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let (Some(start), Some(end)) = (parse_i64(call.arg(2)), parse_i64(call.arg(3))) else {
        out.extend_from_slice(errors::ERR_NOT_INTEGER);
        return;
    };
    let Ok(found) = call.get_typed(call.arg(1), |item| {
        let slice = match range_of(start, end, item.value.len()) {
            Some((from, to)) => &item.value[from..to],
            None => &[][..],
        };
        encode::bulk(out, slice);
    }) else {
        out.extend_from_slice(errors::ERR_WRONGTYPE);
        return;
    };
    if found.is_none() {
        encode::bulk(out, b"");
    }
}

/// `SETRANGE key offset value`: overwrites from `offset`, zero-padding a shorter string;
/// replies with the new length. An empty value changes nothing and reports the current length.
pub(crate) fn setrange(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let (key, data) = (call.arg(1), call.arg(3));
    let offset = match parse_i64(call.arg(2)) {
        None => {
            out.extend_from_slice(errors::ERR_NOT_INTEGER);
            return;
        }
        Some(offset) if offset < 0 => {
            out.extend_from_slice(errors::ERR_OFFSET);
            return;
        }
        Some(offset) => usize::try_from(offset).unwrap_or(usize::MAX),
    };
    let len_max = call.value_len_max(key);
    let mut edit = Edit::Length(0);
    let result = call.modify_typed(key, |current, buffer| {
        let old = current.as_ref().map_or(&[][..], |item| item.value);
        if data.is_empty() {
            edit = Edit::Length(old.len());
            return Change::Keep;
        }
        if offset.saturating_add(data.len()) > len_max {
            edit = Edit::TooLong(offset.saturating_add(data.len()));
            return Change::Keep;
        }
        buffer.extend_from_slice(old);
        let end = offset + data.len();
        if buffer.len() < end {
            buffer.resize(end, 0);
        }
        buffer[offset..end].copy_from_slice(data);
        edit = Edit::Length(buffer.len());
        rewrite(current.as_ref())
    });
    reply_edit(out, result.map(|_| edit));
}

#[cfg(test)]
mod tests {
    use super::range_of;

    #[test]
    fn getrange_indexes_as_redis() {
        // "Hello World" (11 bytes), cases from the Redis GETRANGE documentation and t/unit.
        type Case = (i64, i64, Option<(usize, usize)>);
        let table: &[Case] = &[
            (0, 3, Some((0, 4))),
            (-3, -1, Some((8, 11))),
            (0, -1, Some((0, 11))),
            (10, 100, Some((10, 11))),
            (5, 3, None),
            (-1, -5, None),
            (-100, -50, Some((0, 1))),
            (11, 20, None),
            (-100, 100, Some((0, 11))),
            (i64::MIN, i64::MAX, Some((0, 11))),
        ];
        for &(start, end, expected) in table {
            assert_eq!(range_of(start, end, 11), expected, "{start} {end}");
        }
        assert_eq!(range_of(0, 0, 0), None);
    }
}
