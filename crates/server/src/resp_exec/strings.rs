//! String commands: GET, SET, GETEX, GETDEL, GETSET, SETNX, SETEX, PSETEX, MGET, MSET, MSETNX.
//!
//! GET and a plain SET are the hot path: GET encodes the value into `out` while the engine
//! holds the item, SET hands the argument slice to `Engine::set`; neither allocates.
//!
//! MGET checks the connection's output limit before each value it appends
//! ([`output_limit_passed`]), so one MGET of many large values cannot grow the output buffer
//! past the hard limit by more than one value: past it the reply stops and the connection is
//! closed without sending it, as Redis closes a client over `client-output-buffer-limit`. The
//! same check applies the budget of all connections' output (`--client-output-memory`).
//!
//! MSET and MSETNX (which checks that every key is absent, then stores them) write their keys
//! one at a time, while no other worker runs a command (`crate::exclusive`): no writer slips in
//! between and no reader sees part of one, as with single-threaded Redis.

use strata_engine::{Change, Condition, Door, Engine, Expiry, Kind, StoreOptions, StoreOutcome};
use strata_protocol::resp::{encode, errors, name_eq};

use super::expire::{option_expire_at_ms, Unit};
use super::{write_error, Call, State};
use crate::context::output_held_bytes;

/// `GET key`.
pub(crate) fn get(state: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let found = call
        .keys()
        .get_pieces(call.arg(1), |item, pieces| {
            if item.kind == Kind::String {
                encode::bulk_pieces(out, pieces);
            } else {
                out.extend_from_slice(errors::ERR_WRONGTYPE);
            }
        })
        .is_some();
    if !found {
        encode::null(out, state.version);
    }
    // Counted here, not through `Call::looked_up`: GETEX without options, a write, runs this.
    state.pending.count_gets(1, u64::from(found));
}

/// Whether `out`, the connection's output buffer, holds more than the output hard limit
/// (`OutputLimits`, Redis's `client-output-buffer-limit`). When it does, the handler building
/// a reply stops appending to it and the session ends the batch (`State::close`): the
/// connection then finds its buffer over the limit and closes without writing any of it, so
/// the partial reply never reaches the client and no later command of the batch runs.
///
/// It also applies the budget of all connections' output (`OutputBudget`), once this call has
/// grown the buffer (before that, nothing it wrote holds new memory): past the budget, if this
/// connection holds the most, the reply stops the same way and the connection is closed as
/// Redis evicts a client over `maxmemory-clients`; if another holds more, its worker is asked
/// to close it and the reply goes on.
///
/// Departure: under `CLIENT REPLY OFF|SKIP` the reply is dropped after the handler returns, so
/// the connection closes as for QUIT, without counting an output limit disconnection.
pub(crate) fn output_limit_passed(state: &mut State, call: &Call<'_>, out: &Vec<u8>) -> bool {
    let passed = call.ctx.live.output().past_hard(out);
    state.close |= passed;
    if passed {
        return true;
    }
    let budget = &call.ctx.output_budget;
    if !budget.passed_by(out, state.output_capacity_at_call) {
        return false;
    }
    if budget.is_largest(output_held_bytes(out.capacity())) {
        state.close = true;
        state.over_budget = true;
        return true;
    }
    budget.request_eviction();
    false
}

/// `MGET key [key ...]`.
pub(crate) fn mget(state: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    encode::array_len(out, call.len() - 1);
    let (mut keys, mut hits) = (0, 0);
    for key in call.args_from(1) {
        if output_limit_passed(state, call, out) {
            break;
        }
        keys += 1;
        // A key of another kind is nil, as in Redis, and a hit (the key is there), as Redis
        // counts it.
        let found = call.keys().get_pieces(key, |item, pieces| {
            if item.kind == Kind::String {
                encode::bulk_pieces(out, pieces);
            }
            item.kind == Kind::String
        });
        hits += u64::from(found.is_some());
        if found != Some(true) {
            encode::null(out, state.version);
        }
    }
    call.looked_up_keys(keys, hits);
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
    /// `None` after replying with Redis's error for a bad expire value. The engine's clock is
    /// read only for EX and PX, so a plain SET costs no clock read.
    fn expiry(&self, command: &[u8], engine: &Engine, out: &mut Vec<u8>) -> Option<Expiry> {
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
        let now_ms = relative.then(|| engine.now_ms());
        option_expire_at_ms(text, unit, now_ms, command, out).map(Expiry::AtMs)
    }

    fn condition(&self) -> Condition {
        match (self.nx, self.xx) {
            (true, _) => Condition::IfAbsent,
            (_, true) => Condition::IfPresent,
            _ => Condition::Always,
        }
    }
}

/// Replies `ERR_VALUE_TOO_LARGE` and returns false when `value` cannot be stored under `key`.
fn value_fits(call: &Call<'_>, key: &[u8], value: &[u8], out: &mut Vec<u8>) -> bool {
    let fits = value.len() <= call.value_len_max(key);
    if !fits {
        out.extend_from_slice(super::ERR_VALUE_TOO_LARGE);
    }
    fits
}

/// `SET key value [NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL]`.
pub(crate) fn set(state: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let Some(options) = StringOptions::parse(call, 3, false) else {
        out.extend_from_slice(errors::ERR_SYNTAX);
        return;
    };
    let Some(expiry) = options.expiry(b"set", call.engine(), out) else {
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
        call.keys()
            .set(key, value, 0, expiry)
            .map(StoreOutcome::Stored)
    } else if expiry == Expiry::Keep {
        set_keeping_ttl(call, key, value, condition)
    } else {
        let store = StoreOptions {
            client_flags: 0,
            expiry,
            condition,
            kind: strata_engine::Kind::String,
        };
        call.keys().store(key, value, store)
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

/// Whether SET's NX or XX lets a write happen to a key that is `present` (or not).
fn presence_allows(condition: Condition, present: bool) -> bool {
    match condition {
        Condition::IfAbsent => !present,
        Condition::IfPresent => present,
        _ => true,
    }
}

/// `SET ... KEEPTTL`: the key's own TTL carries over, which for a hash is the one its encoding
/// keeps (its record may expire sooner, with its last field: `expire::key_expiry`).
fn set_keeping_ttl(
    call: &Call<'_>,
    key: &[u8],
    value: &[u8],
    condition: Condition,
) -> Result<StoreOutcome, strata_engine::WriteError> {
    let mut outcome = StoreOutcome::NotStored;
    let cas = call.keys().modify(key, |current, buffer| {
        if !presence_allows(condition, current.is_some()) {
            return Change::Keep;
        }
        outcome = StoreOutcome::Stored(0);
        buffer.extend_from_slice(value);
        let kept = current.as_ref().and_then(super::expire::key_expiry);
        Change::Write {
            client_flags: 0,
            expiry: kept.map_or(Expiry::Never, Expiry::AtMs),
            keep_cas: false,
        }
    })?;
    Ok(match (outcome, cas) {
        (StoreOutcome::Stored(_), cas) => StoreOutcome::Stored(cas.unwrap_or(0)),
        (other, _) => other,
    })
}

/// `SET ... GET`: replies with the old value (or null) whether or not the condition let the
/// write happen, all under the key's lock.
fn set_and_get(
    state: &mut State,
    call: &Call<'_>,
    out: &mut Vec<u8>,
    condition: Condition,
    expiry: Expiry,
) {
    let mark = out.len();
    let value = call.arg(2);
    let version = state.version;
    let mut found = false;
    let result = call.modify_typed(call.arg(1), |current, buffer| {
        found = current.is_some();
        match &current {
            Some(item) => encode::bulk(out, item.value),
            None => encode::null(out, version),
        };
        if !presence_allows(condition, current.is_some()) {
            return Change::Keep;
        }
        buffer.extend_from_slice(value);
        Change::Write {
            client_flags: 0,
            expiry,
            keep_cas: false,
        }
    });
    // The old value's read counts as Redis counts it (a key of another type: a hit).
    let hit = found || matches!(result, Err(strata_engine::WriteError::WrongKind));
    state.pending.count_gets(1, u64::from(hit));
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
    match call.keys().store(key, value, options) {
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
        option_expire_at_ms(call.arg(2), unit, Some(call.engine().now_ms()), name, out)
    else {
        return;
    };
    if !value_fits(call, key, value, out) {
        return;
    }
    match call.keys().set(key, value, 0, Expiry::AtMs(at_ms)) {
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
    let Some(expiry) = options.expiry(b"getex", call.engine(), out) else {
        return;
    };
    if options.expire.is_none() && !options.persist {
        get(state, call, out);
        return;
    }
    let mark = out.len();
    let mut found = false;
    let result = call.modify_typed(call.arg(1), |current, _| {
        let Some(item) = current else {
            encode::null(out, state.version);
            return Change::Keep;
        };
        found = true;
        encode::bulk(out, item.value);
        if options.persist && item.expires_at_ms.is_none() {
            return Change::Keep;
        }
        Change::Touch { expiry }
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
    let result = call.modify_typed(call.arg(1), |current, _| match current {
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
        if let Err(error) = call.keys().set(key, value, 0, Expiry::Never) {
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
    if (0..pairs).any(|pair| call.keys().contains(call.arg(1 + 2 * pair))) {
        encode::integer(out, 0);
        return;
    }
    for pair in 0..pairs {
        let (key, value) = (call.arg(1 + 2 * pair), call.arg(2 + 2 * pair));
        if let Err(error) = call.keys().set(key, value, 0, Expiry::Never) {
            write_error(out, &error);
            return;
        }
    }
    encode::integer(out, 1);
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Arc;

    use strata_engine::{Engine, EngineConfig};
    use strata_protocol::resp::encode_command;

    use crate::context::{OutputLimits, Processed, ServerContext, Session, Settings};
    use crate::resp_exec::RespSession;

    /// Bytes of the values the tests store.
    pub(crate) const VALUE_BYTES: usize = 10 << 10;

    /// A context whose output hard limit is `hard` bytes, holding `v` = [`VALUE_BYTES`] bytes.
    pub(crate) fn context(hard: usize) -> ServerContext {
        context_with(Settings {
            output: OutputLimits::new(hard),
            ..Settings::default()
        })
    }

    /// A context with `settings`, holding `v` = [`VALUE_BYTES`] bytes.
    fn context_with(settings: Settings) -> ServerContext {
        let engine = Engine::open(EngineConfig::default()).expect("a DRAM engine opens");
        let ctx = ServerContext::new(Arc::new(engine), settings);
        let mut out = Vec::new();
        let set = command(&["SET", "v", &"x".repeat(VALUE_BYTES)]);
        RespSession::new(1).process(&set, &ctx, &mut out);
        assert_eq!(out, b"+OK\r\n");
        ctx
    }

    /// A command as a client encodes it.
    pub(crate) fn command(args: &[&str]) -> Vec<u8> {
        let args: Vec<&[u8]> = args.iter().map(|arg| arg.as_bytes()).collect();
        let mut out = Vec::new();
        encode_command(&mut out, &args);
        out
    }

    /// `MGET` of `keys` times the key `v`.
    fn mget(keys: usize) -> Vec<u8> {
        let mut args = vec!["MGET"];
        args.extend(std::iter::repeat_n("v", keys));
        command(&args)
    }

    #[test]
    fn mget_under_the_output_limit_is_answered_whole() {
        let ctx = context(1 << 20);
        let input = mget(50);
        let mut out = Vec::new();
        let processed = RespSession::new(2).process(&input, &ctx, &mut out);
        assert_eq!(
            processed,
            Processed {
                consumed: input.len(),
                close: false,
                ..Processed::default()
            }
        );
        let bulk = [
            format!("${VALUE_BYTES}\r\n").into_bytes(),
            vec![b'x'; VALUE_BYTES],
        ]
        .concat();
        let mut want = b"*50\r\n".to_vec();
        for _ in 0..50 {
            want.extend_from_slice(&bulk);
            want.extend_from_slice(b"\r\n");
        }
        assert_eq!(out, want);
    }

    #[test]
    fn mget_stops_one_value_past_the_hard_limit_and_ends_the_batch() {
        const HARD: usize = 64 << 10;
        let ctx = context(HARD);
        // 10,000 values would be 100 MiB; the SET after the MGET must not run.
        let mut input = mget(10_000);
        let mget_len = input.len();
        input.extend(command(&["SET", "after", "1"]));
        let mut out = b"+earlier reply\r\n".to_vec();
        let processed = RespSession::new(2).process(&input, &ctx, &mut out);
        assert_eq!(
            processed,
            Processed {
                consumed: mget_len,
                close: true,
                ..Processed::default()
            }
        );
        assert!(
            ctx.live.output().past_hard(&out),
            "left over the limit: {}",
            out.len()
        );
        assert!(out.len() <= HARD + VALUE_BYTES + 16, "{} bytes", out.len());
        assert!(
            ctx.engine.get(b"after", |_| ()).is_none(),
            "nothing after it ran"
        );
        assert!(ctx.engine.get(b"v", |item| item.value.len()) == Some(VALUE_BYTES));
    }

    /// A context whose output buffers may hold 1 MiB together (and 256 MiB each).
    fn budget_context() -> ServerContext {
        context_with(Settings {
            client_output_bytes_max: 1 << 20,
            ..Settings::default()
        })
    }

    #[test]
    fn mget_past_the_budget_holding_the_most_stops_and_closes_without_its_reply() {
        let ctx = budget_context();
        // 10,000 values would be 100 MiB, under the per-connection limit.
        let mut input = mget(10_000);
        let mget_len = input.len();
        input.extend(command(&["SET", "after", "1"]));
        let mut out = Vec::new();
        let processed = RespSession::new(2).process(&input, &ctx, &mut out);
        assert_eq!(
            processed,
            Processed {
                consumed: mget_len,
                close: true,
                over_budget: true,
                ..Processed::default()
            }
        );
        // Capacity doubles: the check sees the buffer at 2 MiB of capacity, just past 1 MiB.
        assert!(
            out.len() <= (1 << 20) + VALUE_BYTES + 16,
            "{} bytes",
            out.len()
        );
        assert!(
            ctx.engine.get(b"after", |_| ()).is_none(),
            "nothing after it ran"
        );
    }

    #[test]
    fn mget_past_the_budget_asks_for_a_larger_connection_to_close_and_goes_on() {
        let ctx = budget_context();
        // Another connection, on worker 0, holds 8 MiB.
        ctx.output_budget.publish(0, 8 << 20);
        ctx.output_budget.publish_largest(0, 8 << 20);
        let input = mget(200); // 2 MiB.
        let mut out = Vec::new();
        let processed = RespSession::new(2).process(&input, &ctx, &mut out);
        assert_eq!(
            processed,
            Processed {
                consumed: input.len(),
                ..Processed::default()
            }
        );
        assert!(out.len() > 200 * VALUE_BYTES, "answered whole");
        assert!(ctx.output_budget.take_eviction_request(0));
    }
}
