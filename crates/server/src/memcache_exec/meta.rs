//! Meta commands: `mg`, `ms`, `md`, `ma` (one submodule each), `mn` (in the session) and `me`.
//!
//! Shared rules, as memcached 1.6.18 applies them:
//! - `q` hides the common reply only: `EN` for `mg`, `HD` for `ms`, `md` and `ma`. `NF`, `NS`,
//!   `EX` and errors are always sent (errors ignore `q`, as memcached's `out_errstring`).
//! - `O` is echoed and `k` returns the key, base64-encoded and followed by ` b` when the request
//!   used `b`. memcached instead remembers in each item whether its key was stored binary, so
//!   an item stored by `set` and read by `mg <base64> b k` returns the plain key there; strata's
//!   records have no such bit, so it follows the request.
//! - `E<cas>` gives the item that CAS instead of a new one, wherever the command writes with a
//!   new CAS (later 1.6 releases; 1.6.18 refuses the flag): `ms` in every mode, `ma` (update or
//!   `N` create), `md` with `I`, and `mg` when `N` creates the item. `mg T` keeps the CAS and a
//!   plain `md` deletes, so there `E` does nothing. The engine stores the value with the record
//!   ([`strata_engine::Change::WriteWithCas`]); it is the client's to keep unique.
//! - `x` (`md`, keep the item but drop its value) is refused with 1.6.18's own error.
//! - Stale-while-revalidate (`N` vivify, `R` recache, `I` invalidate, reply flags `W X Z`) is
//!   kept in [`super::lease`].
//! - `h` reports whether the item was read since it was written, before this access, from the
//!   engine's index slot ([`strata_engine::ItemRef::fetched`]). Reads are `get`-family
//!   commands and `mg` (not with `u`), touches (`touch`, `gat`, `mg T`) and `mg N` on a hit;
//!   writes that give a new CAS start over. Unlike memcached, `md I` and an `incr`/`ma` that
//!   memcached does in place start over too (they get a new CAS here), and the `mg N` that
//!   creates an item does not count as its first read.
//! - `l` (seconds since the last access) is refused by `mg` as an unknown flag (the parser
//!   does it, see `strata_protocol::memcache::meta`): strata keeps no access time. `me` leaves
//!   out `la=` for the same reason, reports `fetch=` like `h` without counting as a read, and
//!   reports class 1 and the record's size rather than memcached's slab figures.

pub(super) mod arith;
pub(super) mod delete;
pub(super) mod get;
pub(super) mod set;

use strata_engine::Change;
use strata_protocol::memcache::encode::{self, MetaDebugInfo};
use strata_protocol::memcache::{decode_key, MetaDebug, MetaFlags};

use super::{now_ms, ttl_secs, KEY_LEN_MAX};
use crate::context::ServerContext;
use crate::stats::command_index;

/// Bytes memcached adds to key and value in an item (header, CAS, suffix), used only to make
/// `me` sizes comparable.
const ITEM_HEADER_BYTES: usize = 56;

/// Starts a meta command: counts it and returns the key it names, decoded into `scratch` when
/// it came base64-encoded (`b`); `None` once a key that does not decode has been answered.
fn begin<'a>(
    raw_key: &'a [u8],
    base64: bool,
    scratch: &'a mut [u8; KEY_LEN_MAX],
    ctx: &ServerContext,
    out: &mut Vec<u8>,
) -> Option<&'a [u8]> {
    ctx.stats.count_command(command_index("meta"));
    if !base64 {
        return Some(raw_key);
    }
    match decode_key(raw_key, scratch) {
        Some(len) if len > 0 => Some(&scratch[..len]),
        _ => {
            fail(encode::CLIENT_ERROR_DECODING_KEY, ctx, out);
            None
        }
    }
}

/// `change`, giving the item the request's `E` CAS instead of a new one when it has one. A
/// write that keeps the CAS (`mg T`) and the other changes pass unchanged.
fn with_new_cas(change: Change, flags: &MetaFlags<'_>) -> Change {
    match (change, flags.new_cas) {
        (
            Change::Write {
                client_flags,
                expiry,
                keep_cas: false,
            },
            Some(cas),
        ) => Change::WriteWithCas {
            client_flags,
            expiry,
            cas,
        },
        (change, _) => change,
    }
}

/// Answers an error a meta command hit before or during its work (never hidden by `q`).
fn fail(reply: &[u8], ctx: &ServerContext, out: &mut Vec<u8>) {
    ctx.stats.count_error();
    out.extend_from_slice(reply);
}

/// Runs `me <key> [b]`: `ME <key> exp=.. cas=.. fetch=.. cls=.. size=..`, or `EN`.
pub(super) fn debug(
    debug: MetaDebug<'_>,
    scratch: &mut [u8; KEY_LEN_MAX],
    ctx: &ServerContext,
    out: &mut Vec<u8>,
) {
    let Some(lookup) = begin(debug.key, debug.key_base64, scratch, ctx, out) else {
        return;
    };
    let now_ms = now_ms(ctx);
    // `peek`: like memcached's, this look does not count as a read of the item.
    let found = ctx.engine.peek(lookup, |item| {
        let info = MetaDebugInfo {
            exp_secs: ttl_secs(item.expires_at_ms, now_ms),
            cas: item.cas,
            fetched: item.fetched,
            class_id: 1,
            size: ITEM_HEADER_BYTES + item.key.len() + item.value.len(),
        };
        encode::write_meta_debug(out, debug.key, &info);
    });
    if found.is_none() {
        out.extend_from_slice(b"EN\r\n");
    }
}
