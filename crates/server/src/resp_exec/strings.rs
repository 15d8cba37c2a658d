//! String commands: GET, SET, GETEX, GETDEL, GETSET, SETNX, SETEX, PSETEX, MGET, MSET, MSETNX.
//!
//! GET and a plain SET are the hot path: GET encodes the value into `out` while the engine
//! holds the item, SET hands the argument slice to `Engine::set`; neither allocates.
//!
//! Departure: MSETNX checks that every key is absent and then stores them; strata's shards are
//! locked one at a time, so a concurrent writer can slip in between (Redis is single-threaded).

use strata_engine::{Change, Condition, Expiry, StoreOptions, StoreOutcome};
use strata_protocol::resp::{encode, errors, name_eq};

use super::expire::{option_expire_at_ms, Unit};
use super::{write_error, Call, State};

/// `GET key`.
pub(crate) fn get(state: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let found = call
        .engine()
        .get(call.arg(1), |item| {
            encode::bulk(out, item.value);
        })
        .is_some();
    if !found {
        encode::null(out, state.version);
    }
    state.pending.count_gets(1, u64::from(found));
}

/// `MGET key [key ...]`.
pub(crate) fn mget(state: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    encode::array_len(out, call.len() - 1);
    let mut hits = 0;
    for key in call.args_from(1) {
        let found = call
            .engine()
            .get(key, |item| {
                encode::bulk(out, item.value);
            })
            .is_some();
        if found {
            hits += 1;
        } else {
            encode::null(out, state.version);
        }
    }
    state.pending.count_gets(call.len() as u64 - 1, hits);
}

/// Which expire option a SET or GETEX carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ExpireOption {
    Ex,
    Px,
    ExAt,
    PxAt,
}

/// Options of SET and GETEX, parsed as Redis 7.0's `parseExtendedStringArgumentsOrReply`.
#[derive(Clone, Copy, Debug, Default)]
struct StringOptions<'a> {
    nx: bool,
    xx: bool,
    get: bool,
    keepttl: bool,
    persist: bool,
    expire: Option<(ExpireOption, &'a [u8])>,
}

impl<'a> StringOptions<'a> {
    /// Parses the options from argument `start`; `None` means `-ERR syntax error`. SET takes
    /// NX XX GET KEEPTTL, GETEX takes PERSIST, both take one of EX PX EXAT PXAT (repeating the
    /// same one is allowed, the last value wins, as in Redis).
    fn parse(call: &Call<'a>, start: usize, getex: bool) -> Option<Self> {
        let mut options = StringOptions::default();
        let mut index = start;
        while index < call.len() {
            let option = call.arg(index);
            let next = (index + 1 < call.len()).then(|| call.arg(index + 1));
            let expire = [
                (&b"ex"[..], ExpireOption::Ex),
                (b"px", ExpireOption::Px),
                (b"exat", ExpireOption::ExAt),
                (b"pxat", ExpireOption::PxAt),
            ]
            .into_iter()
            .find(|(name, _)| name_eq(option, name));
            if let Some((_, kind)) = expire {
                let compatible = !options.keepttl
                    && !options.persist
                    && match options.expire {
                        None => true,
                        Some((current, _)) => current == kind,
                    };
                options.expire = Some((kind, next.filter(|_| compatible)?));
                index += 2;
                continue;
            }
            let accepted = if name_eq(option, b"nx") {
                options.nx = true;
                !getex && !options.xx
            } else if name_eq(option, b"xx") {
                options.xx = true;
                !getex && !options.nx
            } else if name_eq(option, b"get") {
                options.get = true;
                !getex
            } else if name_eq(option, b"keepttl") {
                options.keepttl = true;
                !getex && options.expire.is_none()
            } else if name_eq(option, b"persist") {
                options.persist = true;
                getex && options.expire.is_none()
            } else {
                false
            };
            if !accepted {
                return None;
            }
            index += 1;
        }
        Some(options)
    }

    /// The expiry to store: the expire option's absolute time, KEEPTTL's `Keep`, or `Never`.
    /// `None` after replying with Redis's error for a bad expire value.
    fn expiry(&self, command: &[u8], now_ms: u64, out: &mut Vec<u8>) -> Option<Expiry> {
        let Some((kind, text)) = self.expire else {
            return Some(if self.keepttl {
                Expiry::Keep
            } else {
                Expiry::Never
            });
        };
        let (unit, relative) = match kind {
            ExpireOption::Ex => (Unit::Seconds, true),
            ExpireOption::Px => (Unit::Millis, true),
            ExpireOption::ExAt => (Unit::Seconds, false),
            ExpireOption::PxAt => (Unit::Millis, false),
        };
        option_expire_at_ms(text, unit, relative, now_ms, command, out).map(Expiry::AtMs)
    }

    fn condition(&self) -> Condition {
        match (self.nx, self.xx) {
            (true, _) => Condition::IfAbsent,
            (_, true) => Condition::IfPresent,
            _ => Condition::Always,
        }
    }
}

/// Replies `ERR_STRING_TOO_LONG` and returns false when `value` cannot be stored under `key`.
fn value_fits(call: &Call<'_>, key: &[u8], value: &[u8], out: &mut Vec<u8>) -> bool {
    let fits = value.len() <= call.value_len_max(key);
    if !fits {
        out.extend_from_slice(errors::ERR_STRING_TOO_LONG);
    }
    fits
}

/// `SET key value [NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL]`.
pub(crate) fn set(state: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let Some(options) = StringOptions::parse(call, 3, false) else {
        out.extend_from_slice(errors::ERR_SYNTAX);
        return;
    };
    let Some(expiry) = options.expiry(b"set", call.engine().now_ms(), out) else {
        return;
    };
    let (key, value) = (call.arg(1), call.arg(2));
    if !value_fits(call, key, value, out) {
        return;
    }
    let condition = options.condition();
    if options.get {
        set_and_get(state, call, out, condition, expiry);
        return;
    }
    let result = if condition == Condition::Always && expiry != Expiry::Keep {
        call.engine()
            .set(key, value, 0, expiry)
            .map(StoreOutcome::Stored)
    } else {
        let store = StoreOptions {
            client_flags: 0,
            expiry,
            condition,
        };
        call.engine().store(key, value, store)
    };
    match result {
        Ok(StoreOutcome::Stored(_)) => {
            encode::ok(out);
        }
        Ok(_) => {
            encode::null(out, state.version);
        }
        Err(error) => write_error(out, &error),
    }
}

/// `SET ... GET`: replies with the old value (or null) whether or not the condition let the
/// write happen, all under the key's lock.
fn set_and_get(
    state: &State,
    call: &Call<'_>,
    out: &mut Vec<u8>,
    condition: Condition,
    expiry: Expiry,
) {
    let mark = out.len();
    let value = call.arg(2);
    let result = call.engine().modify(call.arg(1), |current, buffer| {
        match &current {
            Some(item) => encode::bulk(out, item.value),
            None => encode::null(out, state.version),
        };
        let allowed = match condition {
            Condition::IfAbsent => current.is_none(),
            Condition::IfPresent => current.is_some(),
            _ => true,
        };
        if !allowed {
            return Change::Keep;
        }
        buffer.extend_from_slice(value);
        Change::Write {
            client_flags: 0,
            expiry,
            keep_cas: false,
        }
    });
    if let Err(error) = result {
        out.truncate(mark);
        write_error(out, &error);
    }
}

/// `SETNX key value`: 1 when stored, 0 when the key exists.
pub(crate) fn setnx(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let (key, value) = (call.arg(1), call.arg(2));
    if !value_fits(call, key, value, out) {
        return;
    }
    let options = StoreOptions {
        condition: Condition::IfAbsent,
        ..StoreOptions::default()
    };
    match call.engine().store(key, value, options) {
        Ok(outcome) => encode::integer(out, i64::from(matches!(outcome, StoreOutcome::Stored(_)))),
        Err(error) => {
            write_error(out, &error);
            0
        }
    };
}

fn set_with_expire(call: &Call<'_>, out: &mut Vec<u8>, unit: Unit) {
    let (key, value) = (call.arg(1), call.arg(3));
    let name = call.command.name.as_bytes();
    let Some(at_ms) =
        option_expire_at_ms(call.arg(2), unit, true, call.engine().now_ms(), name, out)
    else {
        return;
    };
    if !value_fits(call, key, value, out) {
        return;
    }
    match call.engine().set(key, value, 0, Expiry::AtMs(at_ms)) {
        Ok(_) => {
            encode::ok(out);
        }
        Err(error) => write_error(out, &error),
    }
}

/// `SETEX key seconds value`.
pub(crate) fn setex(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    set_with_expire(call, out, Unit::Seconds);
}

/// `PSETEX key ms value`.
pub(crate) fn psetex(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    set_with_expire(call, out, Unit::Millis);
}

/// `GETEX key [EX s|PX ms|EXAT s|PXAT ms|PERSIST]`: the value, then the new expiry.
pub(crate) fn getex(state: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let Some(options) = StringOptions::parse(call, 2, true) else {
        out.extend_from_slice(errors::ERR_SYNTAX);
        return;
    };
    let Some(expiry) = options.expiry(b"getex", call.engine().now_ms(), out) else {
        return;
    };
    if options.expire.is_none() && !options.persist {
        get(state, call, out);
        return;
    }
    let mark = out.len();
    let mut found = false;
    let result = call.engine().modify(call.arg(1), |current, buffer| {
        let Some(item) = current else {
            encode::null(out, state.version);
            return Change::Keep;
        };
        found = true;
        encode::bulk(out, item.value);
        if options.persist && item.expires_at_ms.is_none() {
            return Change::Keep;
        }
        buffer.extend_from_slice(item.value);
        Change::Write {
            client_flags: item.client_flags,
            expiry,
            keep_cas: true,
        }
    });
    state.pending.count_gets(1, u64::from(found));
    if let Err(error) = result {
        out.truncate(mark);
        write_error(out, &error);
    }
}

/// `GETDEL key`.
pub(crate) fn getdel(state: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let mark = out.len();
    let mut found = false;
    let result = call
        .engine()
        .modify(call.arg(1), |current, _| match current {
            Some(item) => {
                found = true;
                encode::bulk(out, item.value);
                Change::Delete
            }
            None => {
                encode::null(out, state.version);
                Change::Keep
            }
        });
    state.pending.count_gets(1, u64::from(found));
    if let Err(error) = result {
        out.truncate(mark);
        write_error(out, &error);
    }
}

/// `GETSET key value`: the old value, and the new one stored without expiry.
pub(crate) fn getset(state: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let (key, value) = (call.arg(1), call.arg(2));
    if value_fits(call, key, value, out) {
        set_and_get(state, call, out, Condition::Always, Expiry::Never);
    }
}

/// `MSET key value [key value ...]`.
pub(crate) fn mset(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    if call.len().is_multiple_of(2) {
        errors::wrong_args(out, b"mset");
        return;
    }
    if !pairs_fit(call, out) {
        return;
    }
    for pair in 0..(call.len() - 1) / 2 {
        let (key, value) = (call.arg(1 + 2 * pair), call.arg(2 + 2 * pair));
        if let Err(error) = call.engine().set(key, value, 0, Expiry::Never) {
            write_error(out, &error);
            return;
        }
    }
    encode::ok(out);
}

/// Checks every value of an MSET/MSETNX before writing any, so a too-long value writes nothing.
fn pairs_fit(call: &Call<'_>, out: &mut Vec<u8>) -> bool {
    (0..(call.len() - 1) / 2).all(|pair| {
        let (key, value) = (call.arg(1 + 2 * pair), call.arg(2 + 2 * pair));
        value_fits(call, key, value, out)
    })
}

/// `MSETNX key value [key value ...]`: 1 when all were absent and are now set, else 0.
pub(crate) fn msetnx(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    if call.len().is_multiple_of(2) {
        errors::wrong_args(out, b"msetnx");
        return;
    }
    if !pairs_fit(call, out) {
        return;
    }
    let pairs = (call.len() - 1) / 2;
    if (0..pairs).any(|pair| call.engine().contains(call.arg(1 + 2 * pair))) {
        encode::integer(out, 0);
        return;
    }
    for pair in 0..pairs {
        let (key, value) = (call.arg(1 + 2 * pair), call.arg(2 + 2 * pair));
        if let Err(error) = call.engine().set(key, value, 0, Expiry::Never) {
            write_error(out, &error);
            return;
        }
    }
    encode::integer(out, 1);
}
