//! `ms <key> <datalen> <flags>*` and its value.
//!
//! Modes (`M`): `S` set (default), `E` add, `R` replace, `A` append, `P` prepend. `F` sets
//! the client flags (default 0), `T` the expiry (default never); append and prepend keep the
//! item's. `C<cas>` stores only over that CAS (`EX` otherwise, `NF` when absent); with `I`, a
//! CAS older than the item's still stores but leaves the item stale. `E<cas>` gives the stored
//! item that CAS instead of a new one, in every mode. Replies: `HD` (hidden by `q`), `NS` when
//! the mode's condition fails, `EX`, `NF`. Return flags: `k` (base64 with `b`), `O`, `c` (the
//! new CAS).

use crate::memcache_exec::strings_only;
use strata_engine::{Change, Door, Expiry, ItemRef, WriteError};
use strata_protocol::memcache::encode::{self, MetaReturn, MetaStatus};
use strata_protocol::memcache::{MetaSet, SetMode};

use super::super::{expiry, lease, now_ms, write_error_reply, KEY_LEN_MAX};
use super::{begin, fail, with_new_cas};
use crate::context::ServerContext;

/// Runs `ms`.
pub(in super::super) fn execute(
    set: MetaSet<'_>,
    scratch: &mut [u8; KEY_LEN_MAX],
    ctx: &ServerContext,
    out: &mut Vec<u8>,
) {
    let flags = set.flags;
    let Some(key) = begin(set.key, flags.key_base64(), scratch, ctx, out) else {
        return;
    };
    let expiry = flags
        .ttl
        .map_or(Expiry::Never, |ttl| expiry(ttl, || now_ms(ctx)));
    let client_flags = flags.client_flags.unwrap_or(0);
    let invalidate = flags.has(b'I');
    let plain = set.mode == SetMode::Set && flags.compare_cas.is_none();
    let mut status = MetaStatus::Hd;
    let mut stale = false;
    let result = if plain && flags.new_cas.is_none() {
        ctx.engine
            .set(key, set.data, client_flags, expiry)
            .map(Some)
    } else {
        // A value past one record (an append to a large string) is written in a transaction.
        ctx.engine.or_in_transaction(key, |door| {
            door.modify(key, |current, buffer| {
                let current = strings_only(current);
                match decide(&set, invalidate, current.as_ref()) {
                    Err(refused) => {
                        status = refused;
                        return Change::Keep;
                    }
                    Ok(made_stale) => stale = made_stale,
                }
                let change = write_value(&set, current.as_ref(), client_flags, expiry, buffer);
                with_new_cas(change, &flags)
            })
        })
    };
    let cas = match result {
        Ok(cas) => cas,
        Err(error) => {
            if plain && matches!(error, WriteError::TooLarge { .. }) {
                // As for a too-large `set`: the value the client meant to replace goes.
                let _ = ctx.engine.delete(key, None);
            }
            return fail(write_error_reply(&error), ctx, out);
        }
    };
    if stale {
        lease::record(ctx, key, cas.unwrap_or(0), true, false);
    } else if flags.new_cas.is_some() && cas.is_some() {
        // A chosen CAS may equal the one a stale or won lease was recorded with.
        lease::forget(ctx, key);
    }
    if status == MetaStatus::Hd && flags.quiet() {
        return;
    }
    let ret = MetaReturn {
        key: Some(key),
        key_binary: flags.key_base64(),
        cas: cas.filter(|_| status == MetaStatus::Hd),
        ..MetaReturn::default()
    };
    encode::write_meta_status(out, status, &flags, &ret);
}

/// Whether the store may go ahead (and leaves the item stale), or the status refusing it.
fn decide(
    set: &MetaSet<'_>,
    invalidate: bool,
    current: Option<&ItemRef<'_>>,
) -> Result<bool, MetaStatus> {
    let mut stale = false;
    match (current, set.flags.compare_cas) {
        (None, Some(_)) => return Err(MetaStatus::Nf),
        (Some(item), Some(cas)) if item.cas != cas => {
            if !(invalidate && cas < item.cas) {
                return Err(MetaStatus::Ex);
            }
            stale = true;
        }
        _ => {}
    }
    match (set.mode, current) {
        (SetMode::Add, Some(_)) | (SetMode::Replace | SetMode::Append | SetMode::Prepend, None) => {
            Err(MetaStatus::Ns)
        }
        _ => Ok(stale),
    }
}

/// Fills `buffer` with the value to store and says how to write it.
fn write_value(
    set: &MetaSet<'_>,
    current: Option<&ItemRef<'_>>,
    client_flags: u32,
    expiry: Expiry,
    buffer: &mut Vec<u8>,
) -> Change {
    match (set.mode, current) {
        (SetMode::Append | SetMode::Prepend, Some(item)) => {
            if set.mode == SetMode::Prepend {
                buffer.extend_from_slice(set.data);
            }
            buffer.extend_from_slice(item.value);
            if set.mode == SetMode::Append {
                buffer.extend_from_slice(set.data);
            }
            Change::Write {
                client_flags: item.client_flags,
                expiry: Expiry::Keep,
                keep_cas: false,
            }
        }
        _ => {
            buffer.extend_from_slice(set.data);
            Change::Write {
                client_flags,
                expiry,
                keep_cas: false,
            }
        }
    }
}
