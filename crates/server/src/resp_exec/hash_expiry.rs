//! Hash field expiry, as Redis 7.4 added it: HEXPIRE HPEXPIRE HEXPIREAT HPEXPIREAT (with NX,
//! XX, GT, LT), HTTL HPTTL HEXPIRETIME HPEXPIRETIME, HPERSIST.
//!
//! Each field carries its own expiry in the hash's encoding (`strata_types::hash`); an expired
//! field is invisible to every read and dropped by the next write of the hash, and a hash whose
//! fields have all expired reads as absent to the hash commands. Replies are Redis 7.4's: one
//! integer per named field, in order (`-2` no such field or key; HEXPIRE: `0` condition not
//! met, `1` set, `2` deleted because the time has passed; HPERSIST: `-1` no expiry, `1`
//! removed; HTTL and friends: `-1` no expiry, else the time). A field named twice is answered
//! twice, the second time after the first took effect.
//!
//! The key goes with its last field, as in Redis: a write that leaves every field with an
//! expiry makes the record expire with the last of them (or at the key's own TTL, kept in the
//! encoding, if that comes first: `hashes.rs`).

use strata_protocol::resp::{encode, errors, name_eq, parse_i64};
use strata_types::hash::{Field, Hash};

use super::expire::Unit;
use super::hashes::{edit_hash, read_hash, reply_edit_failed, Check, Edit, Read};
use super::{Call, State};

/// The largest absolute field expiry, Unix ms (Redis's `EB_EXPIRE_TIME_MAX`, 2^48 - 1).
const FIELD_EXPIRY_MS_MAX: i64 = (1 << 48) - 1;

/// Reply per field: no such field (or key).
const NO_FIELD: i64 = -2;

/// The named fields of a `... FIELDS numfields field [field ...]` tail whose FIELDS word is at
/// `at`; `None` when refused (the reply is written).
fn fields_tail<'a>(call: &Call<'a>, at: usize, out: &mut Vec<u8>) -> Option<Vec<&'a [u8]>> {
    if at + 1 >= call.len() || !name_eq(call.arg(at), b"fields") {
        encode::error(
            out,
            b"ERR Mandatory argument FIELDS is missing or not at the right position",
        );
        return None;
    }
    let count = parse_i64(call.arg(at + 1)).filter(|&count| count >= 1);
    let Some(count) = count else {
        encode::error(out, b"ERR Number of fields must be a positive integer");
        return None;
    };
    let named = call.len() - at - 2;
    if usize::try_from(count).ok() != Some(named) {
        encode::error(
            out,
            b"ERR The `numfields` parameter must match the number of arguments",
        );
        return None;
    }
    Some(call.args_from(at + 2).collect())
}

/// Which fields HEXPIRE may change (`NX`, `XX`, `GT`, `LT`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Condition {
    Always,
    NoExpiry,
    HasExpiry,
    Later,
    Earlier,
}

impl Condition {
    fn parse(word: &[u8]) -> Option<Condition> {
        [
            (&b"nx"[..], Condition::NoExpiry),
            (b"xx", Condition::HasExpiry),
            (b"gt", Condition::Later),
            (b"lt", Condition::Earlier),
        ]
        .into_iter()
        .find(|(name, _)| name_eq(word, name))
        .map(|(_, condition)| condition)
    }

    /// Whether a field expiring at `current` (`None`: never) may get `new`. No expiry counts
    /// as an infinite one, as in Redis.
    fn allows(self, current: Option<u64>, new: u64) -> bool {
        match self {
            Condition::Always => true,
            Condition::NoExpiry => current.is_none(),
            Condition::HasExpiry => current.is_some(),
            Condition::Later => current.is_some_and(|at| new > at),
            Condition::Earlier => current.is_none_or(|at| new < at),
        }
    }
}

/// The absolute expiry, Unix ms, that HEXPIRE's time argument names; `None` when refused.
fn expiry_at_ms(call: &Call<'_>, unit: Unit, relative: bool, out: &mut Vec<u8>) -> Option<u64> {
    let Some(time) = parse_i64(call.arg(2)) else {
        out.extend_from_slice(errors::ERR_NOT_INTEGER);
        return None;
    };
    if time < 0 {
        encode::error(out, b"ERR invalid expire time, must be >= 0");
        return None;
    }
    let base = if relative {
        i64::try_from(call.engine().now_ms()).unwrap_or(i64::MAX)
    } else {
        0
    };
    let millis = match unit {
        Unit::Seconds => time.checked_mul(1000),
        Unit::Millis => Some(time),
    };
    match millis.and_then(|millis| millis.checked_add(base)) {
        Some(at) if at <= FIELD_EXPIRY_MS_MAX => Some(at.unsigned_abs()),
        _ => {
            errors::invalid_expire_time(out, call.command.name.as_bytes());
            None
        }
    }
}

/// A hash's live fields, with what this command does to each.
struct Fields<'h> {
    fields: Vec<Field<'h>>,
    deleted: Vec<bool>,
}

impl<'h> Fields<'h> {
    fn of(hash: Option<&Hash<'h>>, now_ms: u64) -> Fields<'h> {
        let fields: Vec<Field<'h>> = hash.into_iter().flat_map(|h| h.live(now_ms)).collect();
        let deleted = vec![false; fields.len()];
        Fields { fields, deleted }
    }

    /// The index of the live, not deleted field named `name`.
    fn find(&self, name: &[u8]) -> Option<usize> {
        (0..self.fields.len()).find(|&i| !self.deleted[i] && self.fields[i].name == name)
    }

    fn write(&self, builder: &mut strata_types::hash::Builder<'_>) {
        for (field, _) in self.fields.iter().zip(&self.deleted).filter(|(_, &d)| !d) {
            builder.push(*field);
        }
    }
}

/// HEXPIRE and friends: `unit` of the time argument, `relative` to now or absolute.
fn hexpire_generic(call: &Call<'_>, out: &mut Vec<u8>, unit: Unit, relative: bool) {
    let Some(at_ms) = expiry_at_ms(call, unit, relative, out) else {
        return;
    };
    let condition = Condition::parse(call.arg(3));
    let fields_at = if condition.is_some() { 4 } else { 3 };
    let condition = condition.unwrap_or(Condition::Always);
    let Some(names) = fields_tail(call, fields_at, out) else {
        return;
    };
    let mut replies = vec![NO_FIELD; names.len()];
    let result = edit_hash(call, call.arg(1), Check::Whole, |old, now_ms, builder| {
        let mut fields = Fields::of(old, now_ms);
        let mut changed = false;
        for (reply, name) in replies.iter_mut().zip(&names) {
            let Some(index) = fields.find(name) else {
                continue;
            };
            let field = &mut fields.fields[index];
            if !condition.allows(field.expires_at_ms, at_ms) {
                *reply = 0;
            } else if at_ms <= now_ms {
                fields.deleted[index] = true;
                *reply = 2;
            } else {
                field.expires_at_ms = Some(at_ms);
                *reply = 1;
            }
            changed |= *reply > 0;
        }
        if !changed {
            return Edit::Keep;
        }
        fields.write(builder);
        Edit::Write
    });
    match result {
        Ok(true) => write_integers(out, &replies),
        failed => reply_edit_failed(out, &failed),
    }
}

fn write_integers(out: &mut Vec<u8>, replies: &[i64]) {
    encode::array_len(out, replies.len());
    for &reply in replies {
        encode::integer(out, reply);
    }
}

/// `HEXPIRE key seconds [NX|XX|GT|LT] FIELDS numfields field [field ...]`.
pub(crate) fn hexpire(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    hexpire_generic(call, out, Unit::Seconds, true);
}

/// `HPEXPIRE key milliseconds [NX|XX|GT|LT] FIELDS numfields field [field ...]`.
pub(crate) fn hpexpire(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    hexpire_generic(call, out, Unit::Millis, true);
}

/// `HEXPIREAT key unix-time-seconds [NX|XX|GT|LT] FIELDS numfields field [field ...]`.
pub(crate) fn hexpireat(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    hexpire_generic(call, out, Unit::Seconds, false);
}

/// `HPEXPIREAT key unix-time-milliseconds [NX|XX|GT|LT] FIELDS numfields field [field ...]`.
pub(crate) fn hpexpireat(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    hexpire_generic(call, out, Unit::Millis, false);
}

/// HTTL and friends: each field's time left (`relative`) or expiry time, in `unit`.
fn httl_generic(call: &Call<'_>, out: &mut Vec<u8>, unit: Unit, relative: bool) {
    let Some(names) = fields_tail(call, 2, out) else {
        return;
    };
    let found = read_hash(call, call.arg(1), out, Check::Whole, |hash, now_ms, out| {
        let replies: Vec<i64> = names
            .iter()
            .map(|name| match hash.get(name, now_ms) {
                None => NO_FIELD,
                Some(Field {
                    expires_at_ms: None,
                    ..
                }) => -1,
                Some(Field {
                    expires_at_ms: Some(at),
                    ..
                }) => {
                    let ms = if relative { at - now_ms } else { at };
                    let time = match unit {
                        Unit::Seconds => ms.div_ceil(1000),
                        Unit::Millis => ms,
                    };
                    i64::try_from(time).unwrap_or(i64::MAX)
                }
            })
            .collect();
        write_integers(out, &replies);
    });
    if let Read::Missing = found {
        write_integers(out, &vec![NO_FIELD; names.len()]);
    }
}

/// `HTTL key FIELDS numfields field [field ...]`.
pub(crate) fn httl(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    httl_generic(call, out, Unit::Seconds, true);
}

/// `HPTTL key FIELDS numfields field [field ...]`.
pub(crate) fn hpttl(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    httl_generic(call, out, Unit::Millis, true);
}

/// `HEXPIRETIME key FIELDS numfields field [field ...]`.
pub(crate) fn hexpiretime(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    httl_generic(call, out, Unit::Seconds, false);
}

/// `HPEXPIRETIME key FIELDS numfields field [field ...]`.
pub(crate) fn hpexpiretime(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    httl_generic(call, out, Unit::Millis, false);
}

/// `HPERSIST key FIELDS numfields field [field ...]`: `1` per field whose expiry it removed.
pub(crate) fn hpersist(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let Some(names) = fields_tail(call, 2, out) else {
        return;
    };
    let mut replies = vec![NO_FIELD; names.len()];
    let result = edit_hash(call, call.arg(1), Check::Whole, |old, now_ms, builder| {
        let mut fields = Fields::of(old, now_ms);
        let mut changed = false;
        for (reply, name) in replies.iter_mut().zip(&names) {
            let Some(index) = fields.find(name) else {
                continue;
            };
            let field = &mut fields.fields[index];
            *reply = if field.expires_at_ms.take().is_some() {
                changed = true;
                1
            } else {
                -1
            };
        }
        if !changed {
            return Edit::Keep;
        }
        fields.write(builder);
        Edit::Write
    });
    match result {
        Ok(true) => write_integers(out, &replies),
        failed => reply_edit_failed(out, &failed),
    }
}
