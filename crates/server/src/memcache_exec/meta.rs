//! Meta commands: `mg`, `ms`, `md`, `ma` (one submodule each), `mn` (in the session) and `me`.
//!
//! Shared rules, as memcached 1.6.18 applies them:
//! - `q` hides the common reply only: `EN` for `mg`, `HD` for `ms`, `md` and `ma`. `NF`, `NS`,
//!   `EX` and errors are always sent (errors ignore `q`, as memcached's `out_errstring`).
//! - `O` is echoed and `k` returns the key, base64-encoded and followed by ` b` when the request
//!   used `b`. memcached instead remembers in each item whether its key was stored binary, so
//!   an item stored by `set` and read by `mg <base64> b k` returns the plain key there; strata's
//!   records have no such bit, so it follows the request.
//! - `E` (explicit CAS) is refused with 1.6.18's own error: the engine assigns every CAS itself
//!   (unique across restarts), so strata cannot honour it. `x` (`md`) likewise.
//! - Stale-while-revalidate (`N` vivify, `R` recache, `I` invalidate, reply flags `W X Z`) is
//!   kept in [`super::lease`].
//! - Not tracked: `h` is always `h0`, `l` always `l0`, and `me` reports `la=0 fetch=no`;
//!   `me` reports class 1 and the record's size rather than memcached's slab figures.

pub(super) mod arith;
pub(super) mod delete;
pub(super) mod get;
pub(super) mod set;

use strata_protocol::memcache::encode::{self, MetaDebugInfo};
use strata_protocol::memcache::{decode_key, MetaDebug, MetaFlags};

use super::{now_ms, ttl_secs, KEY_LEN_MAX};
use crate::context::ServerContext;
use crate::stats::command_index;

/// Bytes memcached adds to key and value in an item (header, CAS, suffix), used only to make
/// `me` sizes comparable.
const ITEM_HEADER_BYTES: usize = 56;

/// The key a meta request names: decoded into `scratch` when it came base64-encoded (`b`).
/// `Err` carries the reply for a key that does not decode.
fn key<'a>(
    key: &'a [u8],
    base64: bool,
    scratch: &'a mut [u8; KEY_LEN_MAX],
) -> Result<&'a [u8], &'static [u8]> {
    if !base64 {
        return Ok(key);
    }
    match decode_key(key, scratch) {
        Some(len) if len > 0 => Ok(&scratch[..len]),
        _ => Err(encode::CLIENT_ERROR_DECODING_KEY),
    }
}

/// Checks what every meta command does first: counts it, refuses flags strata cannot honour
/// (with `refusal`, the command's own "invalid flag" error), and decodes the key.
fn begin<'a>(
    raw_key: &'a [u8],
    flags: &MetaFlags<'_>,
    refused: &[u8],
    refusal: &'static [u8],
    scratch: &'a mut [u8; KEY_LEN_MAX],
    ctx: &ServerContext,
) -> Result<&'a [u8], &'static [u8]> {
    ctx.stats.count_command(command_index("meta"));
    if refused.iter().any(|&letter| flags.has(letter)) {
        return Err(refusal);
    }
    key(raw_key, flags.key_base64(), scratch)
}

/// Answers an error a meta command hit before or during its work (never hidden by `q`).
fn fail(reply: &[u8], ctx: &ServerContext, out: &mut Vec<u8>) {
    ctx.stats.count_error();
    out.extend_from_slice(reply);
}

/// Runs `me <key> [b]`: `ME <key> exp=.. la=.. cas=.. fetch=.. cls=.. size=..`, or `EN`.
pub(super) fn debug(
    debug: MetaDebug<'_>,
    scratch: &mut [u8; KEY_LEN_MAX],
    ctx: &ServerContext,
    out: &mut Vec<u8>,
) {
    ctx.stats.count_command(command_index("meta"));
    let lookup = match key(debug.key, debug.key_base64, scratch) {
        Ok(lookup) => lookup,
        Err(reply) => return fail(reply, ctx, out),
    };
    let now_ms = now_ms(ctx);
    let found = ctx.engine.get(lookup, |item| {
        let info = MetaDebugInfo {
            exp_secs: ttl_secs(item.expires_at_ms, now_ms),
            last_access_secs: 0,
            cas: item.cas,
            fetched: false,
            class_id: 1,
            size: ITEM_HEADER_BYTES + item.key.len() + item.value.len(),
        };
        encode::write_meta_debug(out, debug.key, &info);
    });
    if found.is_none() {
        out.extend_from_slice(b"EN\r\n");
    }
}
