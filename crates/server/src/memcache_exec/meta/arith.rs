//! `ma <key> <flags>*`.
//!
//! Increments (`MI`, `M+`, default) or decrements (`MD`, `M-`) by `D<delta>` (default 1) with
//! the counter rules of `incr`/`decr`. On a miss, `N<ttl>` creates the counter with `J<initial>`
//! (default 0); otherwise the reply is `NF`. `C<cas>` must match (`EX`). `T<ttl>` sets a new
//! expiry on a hit. `E<cas>` gives the updated or created counter that CAS. Replies: `HD`, or
//! `VA <len>` and the number with `v`; return flags `t c k O` (memcached's `ma` ignores `s` and
//! `f`). `q` hides `HD` and `VA`, except after creating the counter, where 1.6.18 still answers.

use crate::memcache_exec::strings_only;
use strata_engine::{Change, Expiry};
use strata_protocol::memcache::encode::{self, MetaReturn, MetaStatus};
use strata_protocol::memcache::{ArithMode, MetaArith};

use super::super::arith::{count_arith, update, Counted};
use super::super::{expires_at, expiry, lease, now_ms, ttl_secs, write_error_reply, KEY_LEN_MAX};
use super::{begin, fail, with_new_cas};
use crate::context::ServerContext;

/// What the counter update did, with what the reply reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// Missing, not created.
    NotFound,
    /// `C` did not match.
    Exists,
    /// Not a number.
    NotNumeric,
    /// Updated or created: the value, its expiry, and whether it was created.
    Value {
        value: u64,
        expires_at_ms: Option<u64>,
        created: bool,
    },
}

/// Runs `ma`.
pub(in super::super) fn execute(
    request: MetaArith<'_>,
    scratch: &mut [u8; KEY_LEN_MAX],
    ctx: &ServerContext,
    out: &mut Vec<u8>,
) {
    let flags = request.flags;
    let Some(key) = begin(request.key, flags.key_base64(), scratch, ctx, out) else {
        return;
    };
    let now_ms = now_ms(ctx);
    let (outcome, cas) = match apply(&request, key, now_ms, ctx) {
        Ok(done) => done,
        Err(reply) => return fail(reply, ctx, out),
    };
    // memcached's incr/decr hits and misses (a number created by `N` was a miss).
    let decrement = request.mode == ArithMode::Decr;
    match outcome {
        Outcome::Value { created, .. } => count_arith(ctx, decrement, !created),
        Outcome::NotFound => count_arith(ctx, decrement, false),
        Outcome::Exists | Outcome::NotNumeric => {}
    }
    if flags.new_cas.is_some() && cas.is_some() {
        // A chosen CAS may equal the one a stale or won lease was recorded with.
        lease::forget(ctx, key);
    }
    let (status, value, ttl) = match outcome {
        Outcome::NotNumeric => return fail(encode::CLIENT_ERROR_NON_NUMERIC, ctx, out),
        Outcome::NotFound => (MetaStatus::Nf, None, None),
        Outcome::Exists => (MetaStatus::Ex, None, None),
        Outcome::Value {
            value,
            expires_at_ms,
            created,
        } => {
            if flags.quiet() && !created {
                return;
            }
            (
                MetaStatus::Hd,
                Some(value),
                Some(ttl_secs(expires_at_ms, now_ms)),
            )
        }
    };
    let ret = MetaReturn {
        key: Some(key),
        key_binary: flags.key_base64(),
        cas,
        ttl_secs: ttl,
        ..MetaReturn::default()
    };
    match value {
        Some(value) if flags.has(b'v') => {
            let mut digits = [0u8; strata_protocol::U64_LEN_MAX];
            let digits = strata_protocol::format_u64(value, &mut digits);
            encode::write_meta_value(out, &flags, &ret, digits);
        }
        _ => {
            encode::write_meta_status(out, status, &flags, &ret);
        }
    }
}

/// Updates or creates the counter; returns the outcome and the new CAS.
fn apply(
    request: &MetaArith<'_>,
    key: &[u8],
    now_ms: u64,
    ctx: &ServerContext,
) -> Result<(Outcome, Option<u64>), &'static [u8]> {
    let flags = &request.flags;
    let decrement = request.mode == ArithMode::Decr;
    let delta = flags.delta.unwrap_or(1);
    let new_expiry = flags.ttl.map(|ttl| expiry(ttl, || now_ms));
    let mut outcome = Outcome::NotFound;
    let result = ctx
        .engine
        .modify(key, |current, buffer| match strings_only(current) {
            None => {
                let Some(ttl) = flags.vivify_ttl else {
                    return Change::Keep;
                };
                let value = flags.initial.unwrap_or(0);
                let expiry = expiry(ttl, || now_ms);
                encode::write_u64(buffer, value);
                outcome = Outcome::Value {
                    value,
                    expires_at_ms: expires_at(expiry, None),
                    created: true,
                };
                with_new_cas(
                    Change::Write {
                        client_flags: 0,
                        expiry,
                        keep_cas: false,
                    },
                    flags,
                )
            }
            Some(item) if flags.compare_cas.is_some_and(|cas| cas != item.cas) => {
                outcome = Outcome::Exists;
                Change::Keep
            }
            Some(item) => {
                let expiry = new_expiry.unwrap_or(Expiry::Keep);
                let (counted, change) = update(&item, delta, decrement, expiry, buffer);
                outcome = match counted {
                    Counted::Value(value) => Outcome::Value {
                        value,
                        expires_at_ms: expires_at(expiry, item.expires_at_ms),
                        created: false,
                    },
                    Counted::NotFound => Outcome::NotFound,
                    Counted::NotNumeric => Outcome::NotNumeric,
                };
                with_new_cas(change, flags)
            }
        });
    result
        .map(|cas| (outcome, cas))
        .map_err(|error| write_error_reply(&error))
}
