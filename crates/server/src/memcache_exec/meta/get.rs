//! `mg <key> <flags>*`.
//!
//! A hit answers `VA <size> <flags>` and the value with `v`, else `HD <flags>`; a miss answers
//! `EN` (hidden by `q`). Return flags: `k c f s t h O`, then `Z X W` (`l` is refused by the
//! parser). `T` changes the expiry (keeping the CAS, like `touch`); `N<ttl>` turns a miss into
//! an empty item this client wins the right to fill (`W`), with the CAS `E<cas>` when given,
//! and later readers see `Z`; `R<secs>` hands the token to the first reader once fewer than
//! `secs` remain.
//!
//! `h` is the item's state before this access, as memcached reports it (it bumps after
//! replying). The access then counts as a read, except with `u`; `T` counts even with `u`, as
//! every touch does in the engine.
//!
//! Without `T` or `N` the read runs under the shard's read lock and the reply is written from
//! inside the engine's closure (no copy, no allocation); with them it runs under the write lock.

use crate::memcache_exec::strings_only;
use std::cell::OnceCell;

use strata_engine::{Change, Expiry, ItemRef};
use strata_protocol::memcache::encode::{self, MetaReturn, MetaStatus};
use strata_protocol::memcache::MetaGet;

use super::super::{expires_at, expiry, lease, now_ms, ttl_secs, write_error_reply, KEY_LEN_MAX};
use super::{begin, fail, with_new_cas};
use crate::context::ServerContext;

/// Runs `mg`.
pub(in super::super) fn execute(
    get: MetaGet<'_>,
    scratch: &mut [u8; KEY_LEN_MAX],
    ctx: &ServerContext,
    out: &mut Vec<u8>,
) {
    let flags = get.flags;
    let Some(key) = begin(get.key, flags.key_base64(), scratch, ctx, out) else {
        return;
    };
    // The clock is read at most once, and only when the request needs it (`t T N R`).
    let clock = OnceCell::new();
    let now = || *clock.get_or_init(|| now_ms(ctx));
    let touch = flags.ttl.map(|ttl| expiry(ttl, now));
    if touch.is_none() && flags.vivify_ttl.is_none() {
        // A large string's parts are copied straight into the reply (`Engine::get_pieces`).
        let reply = |item: ItemRef<'_>, pieces: &[&[u8]]| {
            let string = strings_only(Some(item)).is_some();
            if string {
                write_item(&get, key, (&item, pieces), None, &now, ctx, out);
            }
            string
        };
        let hit = ctx
            .engine
            .get_pieces(key, !flags.has(b'u'), reply)
            .unwrap_or(false);
        ctx.stats.count_gets(1, u64::from(hit));
        if !hit {
            write_miss(&get, key, out);
        }
        return;
    }
    read_write(&get, key, touch, &now, ctx, out);
}

/// `mg` with `T` or `N`: under the write lock.
fn read_write(
    get: &MetaGet<'_>,
    key: &[u8],
    touch: Option<Expiry>,
    now: &dyn Fn() -> u64,
    ctx: &ServerContext,
    out: &mut Vec<u8>,
) {
    let vivify = get.flags.vivify_ttl.map(|ttl| expiry(ttl, now));
    let start = out.len();
    let mut hit = false;
    let result = ctx
        .engine
        .modify(key, |current, _| match (strings_only(current), vivify) {
            (Some(item), _) => {
                hit = true;
                let expires_at_ms = touch.map(|expiry| expires_at(expiry, item.expires_at_ms));
                write_item(
                    get,
                    key,
                    (&item, &[item.value]),
                    expires_at_ms,
                    now,
                    ctx,
                    out,
                );
                match touch {
                    None if get.flags.has(b'u') => Change::Keep,
                    None => Change::Read,
                    Some(expiry) => Change::Touch { expiry },
                }
            }
            (None, Some(expiry)) => with_new_cas(
                Change::Write {
                    client_flags: 0,
                    expiry,
                    keep_cas: false,
                },
                &get.flags,
            ),
            (None, None) => Change::Keep,
        });
    ctx.stats.count_gets(1, u64::from(hit));
    match (result, vivify) {
        (Err(error), _) => {
            out.truncate(start);
            fail(write_error_reply(&error), ctx, out);
        }
        (Ok(_), _) if hit => {}
        (Ok(cas), Some(expiry)) => {
            let cas = cas.unwrap_or(0);
            lease::record(ctx, key, cas, false, true);
            let item = ItemRef {
                key,
                value: b"",
                record_value: b"",
                client_flags: 0,
                cas,
                expires_at_ms: expires_at(expiry, None),
                kind: strata_engine::Kind::String,
                parts: 0,
                fetched: false,
                reads: 0,
                on_flash: false,
            };
            let won = lease::Flags {
                won: true,
                ..lease::Flags::default()
            };
            write_reply(get, key, (&item, &[item.value]), None, won, now, out);
        }
        (Ok(_), None) => write_miss(get, key, out),
    }
}

/// Writes the reply to a hit, consulting the lease table for `W X Z`.
fn write_item(
    get: &MetaGet<'_>,
    key: &[u8],
    (item, pieces): (&ItemRef<'_>, &[&[u8]]),
    expires_at_ms: Option<Option<u64>>,
    now: &dyn Fn() -> u64,
    ctx: &ServerContext,
    out: &mut Vec<u8>,
) {
    let want_win = get.flags.recache_ttl.is_some_and(|recache| {
        let ttl = ttl_secs(expires_at_ms.unwrap_or(item.expires_at_ms), now());
        ttl != -1 && ttl < recache
    });
    let lease = lease::read(ctx, key, item.cas, want_win);
    write_reply(get, key, (item, pieces), expires_at_ms, lease, now, out);
}

/// The reply to a hit on `item`, whose value is `pieces` (a large string's parts, unjoined).
fn write_reply(
    get: &MetaGet<'_>,
    key: &[u8],
    (item, pieces): (&ItemRef<'_>, &[&[u8]]),
    expires_at_ms: Option<Option<u64>>,
    lease: lease::Flags,
    now: &dyn Fn() -> u64,
    out: &mut Vec<u8>,
) {
    let ret = MetaReturn {
        key: Some(key),
        key_binary: get.flags.key_base64(),
        cas: Some(item.cas),
        client_flags: Some(item.client_flags),
        size: Some(pieces.iter().map(|piece| piece.len()).sum()),
        // Only `t` shows it (the encoder writes the flags asked for).
        ttl_secs: get
            .flags
            .has(b't')
            .then(|| ttl_secs(expires_at_ms.unwrap_or(item.expires_at_ms), now())),
        hit_before: Some(item.fetched),
        win_sent: lease.win_sent,
        stale: lease.stale,
        won: lease.won,
    };
    if get.flags.has(b'v') {
        encode::write_meta_value_pieces(out, &get.flags, &ret, pieces);
    } else {
        encode::write_meta_status(out, MetaStatus::Hd, &get.flags, &ret);
    }
}

/// `EN` with `k` and `O`, unless quiet.
fn write_miss(get: &MetaGet<'_>, key: &[u8], out: &mut Vec<u8>) {
    if get.flags.quiet() {
        return;
    }
    let ret = MetaReturn {
        key: Some(key),
        key_binary: get.flags.key_base64(),
        ..MetaReturn::default()
    };
    encode::write_meta_status(out, MetaStatus::En, &get.flags, &ret);
}
