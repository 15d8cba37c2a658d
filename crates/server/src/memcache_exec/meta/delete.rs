//! `md <key> <flags>*`.
//!
//! Deletes the item (`HD`, hidden by `q`), or answers `NF` when absent and `EX` when `C<cas>`
//! does not match. With `I` the item is kept but marked stale, with a new CAS (`E<cas>` when
//! given) and, with `T<ttl>`, a new expiry: the next `mg` sees `X` and wins the recache token
//! (`W`), later ones see `Z`. Return flags: `k` (base64 with `b`) and `O`.

use crate::memcache_exec::strings_only;
use strata_engine::{Change, Expiry};
use strata_protocol::memcache::encode::{self, MetaReturn, MetaStatus};
use strata_protocol::memcache::MetaDelete;

use super::super::{expiry, lease, now_ms, write_error_reply, KEY_LEN_MAX};
use super::{begin, fail, with_new_cas};
use crate::context::ServerContext;

/// Runs `md`.
pub(in super::super) fn execute(
    delete: MetaDelete<'_>,
    scratch: &mut [u8; KEY_LEN_MAX],
    ctx: &ServerContext,
    out: &mut Vec<u8>,
) {
    let flags = delete.flags;
    let Some(key) = begin(delete.key, flags.key_base64(), scratch, ctx, out) else {
        return;
    };
    if flags.has(b'x') {
        // 1.6.18 has no `x` (keep the item, drop its value): its error for a flag it refuses.
        return fail(encode::CLIENT_ERROR_INVALID_OR_DUPLICATE_FLAG, ctx, out);
    }
    let invalidate = flags.has(b'I');
    let new_expiry = flags
        .ttl
        .map_or(Expiry::Keep, |ttl| expiry(ttl, || now_ms(ctx)));
    let mut status = MetaStatus::Nf;
    let result = ctx
        .engine
        .modify(key, |current, buffer| match strings_only(current) {
            None => Change::Keep,
            Some(item) if flags.compare_cas.is_some_and(|cas| cas != item.cas) => {
                status = MetaStatus::Ex;
                Change::Keep
            }
            Some(item) if invalidate => {
                status = MetaStatus::Hd;
                buffer.extend_from_slice(item.value);
                let change = Change::Write {
                    client_flags: item.client_flags,
                    expiry: new_expiry,
                    keep_cas: false,
                };
                with_new_cas(change, &flags)
            }
            Some(_) => {
                status = MetaStatus::Hd;
                Change::Delete
            }
        });
    match result {
        Ok(Some(cas)) => lease::record(ctx, key, cas, true, false),
        Ok(None) => {}
        Err(error) => return fail(write_error_reply(&error), ctx, out),
    }
    match status {
        MetaStatus::Hd => ctx.stats.count_outcome("delete_hits"),
        MetaStatus::Nf => ctx.stats.count_outcome("delete_misses"),
        _ => {}
    }
    if status == MetaStatus::Hd && flags.quiet() {
        return;
    }
    let ret = MetaReturn {
        key: Some(key),
        key_binary: flags.key_base64(),
        ..MetaReturn::default()
    };
    encode::write_meta_status(out, status, &flags, &ret);
}
