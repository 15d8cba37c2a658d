//! Expiry: EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT (with NX XX GT LT), TTL, PTTL, EXPIRETIME,
//! PEXPIRETIME, PERSIST, and the expire arguments SET and GETEX share.
//!
//! The engine keeps expiry as absolute Unix milliseconds (`Expiry::AtMs`); a time at or before
//! now deletes the item, which is also what Redis does with a non-positive relative expire.
//! Arithmetic follows Redis 7.0's `expireGenericCommand` and `getExpireMillisecondsOrReply`,
//! including where each overflow is reported as `invalid expire time`.

use strata_engine::{Change, Door, Expiry, ItemRef, Kind};
use strata_protocol::resp::{encode, errors, name_eq, parse_i64};
use strata_types::hash::{record_expiry, set_key_expiry, Hash};
use strata_types::hash_chunks::{is_chunked, Chunked};

use super::{write_error, Call, State};

/// The unit of an expire argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unit {
    /// Seconds (EX, EXAT, EXPIRE, EXPIREAT).
    Seconds,
    /// Milliseconds (PX, PXAT, PEXPIRE, PEXPIREAT).
    Millis,
}

/// Absolute Unix ms for a SET/GETEX/SETEX expire argument, relative to `now_ms` when given
/// (EX, PX) and absolute otherwise (EXAT, PXAT), as Redis 7.0's
/// `getExpireMillisecondsOrReply`: it must be a positive integer whose conversion does not
/// overflow. Replies with the error and returns `None` otherwise.
pub(crate) fn option_expire_at_ms(
    text: &[u8],
    unit: Unit,
    now_ms: Option<u64>,
    command: &[u8],
    out: &mut Vec<u8>,
) -> Option<u64> {
    let Some(value) = parse_i64(text) else {
        out.extend_from_slice(errors::ERR_NOT_INTEGER);
        return None;
    };
    let scale = if unit == Unit::Seconds { 1000 } else { 1 };
    let now = now_ms.map_or(0, |ms| i64::try_from(ms).unwrap_or(i64::MAX));
    let at = (value > 0)
        .then(|| value.checked_mul(scale))
        .flatten()
        .and_then(|ms| ms.checked_add(now));
    match at {
        Some(at) => Some(at.unsigned_abs()),
        None => {
            errors::invalid_expire_time(out, command);
            None
        }
    }
}

/// EXPIRE's NX/XX/GT/LT conditions.
#[derive(Clone, Copy, Debug, Default)]
struct Conditions {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
}

impl Conditions {
    /// Parses the options after the time, replying with Redis's error on a bad set.
    fn parse(call: &Call<'_>, out: &mut Vec<u8>) -> Option<Conditions> {
        let mut conditions = Conditions::default();
        for option in call.args_from(3) {
            if name_eq(option, b"nx") {
                conditions.nx = true;
            } else if name_eq(option, b"xx") {
                conditions.xx = true;
            } else if name_eq(option, b"gt") {
                conditions.gt = true;
            } else if name_eq(option, b"lt") {
                conditions.lt = true;
            } else {
                let mut message = b"ERR Unsupported option ".to_vec();
                message.extend_from_slice(option);
                encode::error(out, &message);
                return None;
            }
        }
        if conditions.nx && (conditions.xx || conditions.gt || conditions.lt) {
            encode::error(
                out,
                b"ERR NX and XX, GT or LT options at the same time are not compatible",
            );
            return None;
        }
        if conditions.gt && conditions.lt {
            encode::error(
                out,
                b"ERR GT and LT options at the same time are not compatible",
            );
            return None;
        }
        Some(conditions)
    }

    /// Whether a key whose expiry is `current` (None: never) may get the expiry `when`.
    fn allow(self, current: Option<u64>, when: i64) -> bool {
        let current = current.map(|at| i64::try_from(at).unwrap_or(i64::MAX));
        match current {
            None => !self.xx && !self.gt,
            Some(current) => {
                !(self.nx || (self.gt && when <= current) || (self.lt && when >= current))
            }
        }
    }
}

/// The key's own expiry, as TTL reports it: the record's for a string; for a hash, the one its
/// encoding keeps (its record may expire earlier, with its last field: see `hashes.rs`).
pub(crate) fn key_expiry(item: &ItemRef<'_>) -> Option<u64> {
    match item.kind {
        // A large hash's record may expire earlier, with its fields (`hash_chunks`).
        Kind::Hash if is_chunked(item.value) => Chunked::parse(item.value)
            .ok()
            .and_then(|owner| owner.key_expiry_ms()),
        Kind::Hash => Hash::parse(item.value)
            .ok()
            .and_then(|hash| hash.key_expiry_ms()),
        // The engine never hands out a part (one record of a larger item) as a key's item.
        Kind::String | Kind::Part => item.expires_at_ms,
    }
}

/// `item` written back with the key's own expiry set to `key_expiry` (a touch: same value,
/// same CAS): a string's record expiry; a hash's, in its encoding, with the record expiring at
/// the earlier of it and the last field's.
fn with_key_expiry(item: &ItemRef<'_>, key_expiry: Option<u64>, buffer: &mut Vec<u8>) -> Change {
    if item.kind == Kind::Hash && is_chunked(item.value) {
        // A large hash: its owner keeps the key's expiry, and its record expires then, or
        // with its fields if every one expires first.
        let record = if let Ok(owner) = Chunked::parse(item.value) {
            let owner = owner.with_key_expiry(key_expiry);
            owner.encode(buffer);
            owner.record_expiry_ms()
        } else {
            buffer.extend_from_slice(item.value);
            key_expiry
        };
        return Change::Write {
            client_flags: item.client_flags,
            expiry: record.map_or(Expiry::Never, Expiry::AtMs),
            keep_cas: true,
        };
    }
    if item.kind == Kind::String {
        return Change::Touch {
            expiry: key_expiry.map_or(Expiry::Never, Expiry::AtMs),
        };
    }
    buffer.extend_from_slice(item.value);
    let record = match (item.kind, Hash::parse(item.value)) {
        (Kind::Hash, Ok(hash)) => {
            let fields_gone = hash.fields_gone_ms();
            set_key_expiry(buffer, key_expiry);
            record_expiry(key_expiry, fields_gone)
        }
        _ => key_expiry,
    };
    Change::Write {
        client_flags: item.client_flags,
        expiry: record.map_or(Expiry::Never, Expiry::AtMs),
        keep_cas: true,
    }
}

/// The four EXPIRE commands: `unit` of the argument, `relative` to now or absolute.
fn expire_generic(call: &Call<'_>, out: &mut Vec<u8>, unit: Unit, relative: bool) {
    let Some(conditions) = Conditions::parse(call, out) else {
        return;
    };
    let Some(mut when) = parse_i64(call.arg(2)) else {
        out.extend_from_slice(errors::ERR_NOT_INTEGER);
        return;
    };
    let name = call.command.name.as_bytes();
    if unit == Unit::Seconds {
        match when.checked_mul(1000) {
            Some(ms) => when = ms,
            None => {
                errors::invalid_expire_time(out, name);
                return;
            }
        }
    }
    let base = if relative {
        i64::try_from(call.engine().now_ms()).unwrap_or(i64::MAX)
    } else {
        0
    };
    let Some(when) = when.checked_add(base) else {
        errors::invalid_expire_time(out, name);
        return;
    };
    let mut changed = false;
    let result = call.keys().modify(call.arg(1), |current, buffer| {
        let Some(item) = current else {
            return Change::Keep;
        };
        if !conditions.allow(key_expiry(&item), when) {
            return Change::Keep;
        }
        changed = true;
        if when <= 0 {
            return Change::Delete;
        }
        with_key_expiry(&item, Some(when.unsigned_abs()), buffer)
    });
    match result {
        Ok(_) => encode::integer(out, i64::from(changed)),
        Err(error) => {
            write_error(out, &error);
            0
        }
    };
}

/// `EXPIRE key seconds [NX|XX|GT|LT]`.
pub(crate) fn expire(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    expire_generic(call, out, Unit::Seconds, true);
}

/// `PEXPIRE key ms [NX|XX|GT|LT]`.
pub(crate) fn pexpire(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    expire_generic(call, out, Unit::Millis, true);
}

/// `EXPIREAT key unix-seconds [NX|XX|GT|LT]`.
pub(crate) fn expireat(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    expire_generic(call, out, Unit::Seconds, false);
}

/// `PEXPIREAT key unix-ms [NX|XX|GT|LT]`.
pub(crate) fn pexpireat(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    expire_generic(call, out, Unit::Millis, false);
}

/// What the TTL family reports.
#[derive(Clone, Copy)]
enum TtlForm {
    /// Remaining seconds, rounded (TTL).
    Seconds,
    /// Remaining milliseconds (PTTL).
    Millis,
    /// Absolute Unix seconds, rounded (EXPIRETIME).
    AtSeconds,
    /// Absolute Unix ms (PEXPIRETIME).
    AtMillis,
}

/// -2 for a missing key, -1 for no expiry, else the time in `form`, as Redis's
/// `ttlGenericCommand` (remaining time never below zero, seconds rounded to nearest).
fn ttl_generic(call: &Call<'_>, out: &mut Vec<u8>, form: TtlForm) {
    let expires_at_ms = call.keys().get(call.arg(1), |item| key_expiry(&item));
    call.looked_up(expires_at_ms.is_some());
    let reply = match expires_at_ms {
        None => -2,
        Some(None) => -1,
        Some(Some(at)) => {
            let at = i64::try_from(at).unwrap_or(i64::MAX);
            let remaining = at
                .saturating_sub(i64::try_from(call.engine().now_ms()).unwrap_or(i64::MAX))
                .max(0);
            match form {
                TtlForm::Seconds => remaining.saturating_add(500) / 1000,
                TtlForm::Millis => remaining,
                TtlForm::AtSeconds => at.saturating_add(500) / 1000,
                TtlForm::AtMillis => at,
            }
        }
    };
    encode::integer(out, reply);
}

/// `TTL key`.
pub(crate) fn ttl(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    ttl_generic(call, out, TtlForm::Seconds);
}

/// `PTTL key`.
pub(crate) fn pttl(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    ttl_generic(call, out, TtlForm::Millis);
}

/// `EXPIRETIME key`.
pub(crate) fn expiretime(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    ttl_generic(call, out, TtlForm::AtSeconds);
}

/// `PEXPIRETIME key`.
pub(crate) fn pexpiretime(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    ttl_generic(call, out, TtlForm::AtMillis);
}

/// `PERSIST key`: 1 when an expiry was removed, 0 when the key is missing or has none.
pub(crate) fn persist(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let mut changed = false;
    let result = call
        .keys()
        .modify(call.arg(1), |current, buffer| match current {
            Some(item) if key_expiry(&item).is_some() => {
                changed = true;
                with_key_expiry(&item, None, buffer)
            }
            _ => Change::Keep,
        });
    match result {
        Ok(_) => encode::integer(out, i64::from(changed)),
        Err(error) => {
            write_error(out, &error);
            0
        }
    };
}
