//! `get`, `gets`, `gat`, `gats`.
//!
//! Hits are written into `out` from inside the engine's closure, while the item is borrowed:
//! no copy of the value and no allocation per key. `gat`/`gats` change the expiry under the
//! shard's write lock and keep the CAS, as memcached's touch does. A miss writes nothing; the
//! reply always ends in `END`.

use strata_engine::{Change, Expiry, ItemRef};
use strata_protocol::memcache::{encode, Get};

use super::{expiry, now_ms, write_error_reply};
use crate::context::ServerContext;
use crate::stats::{command_index, PendingCounts};

/// Runs a retrieval command.
pub(super) fn execute(
    get: Get<'_>,
    ctx: &ServerContext,
    out: &mut Vec<u8>,
    pending: &mut PendingCounts,
) {
    let returns_cas = get.command.returns_cas();
    let (command, touch) = match get.exptime {
        Some(exptime) => (
            const { command_index("touch") },
            Some(expiry(exptime, now_ms(ctx))),
        ),
        None => (const { command_index("get") }, None),
    };
    if !pending.count_command(command) {
        ctx.stats.count_command(command);
    }
    let start = out.len();
    let mut hits = 0u64;
    for key in get.keys {
        let hit = match touch {
            None => ctx
                .engine
                .get(key, |item| write_hit(out, key, &item, returns_cas))
                .is_some(),
            Some(expiry) => match touch_one(key, expiry, returns_cas, ctx, out) {
                Ok(hit) => hit,
                Err(reply) => {
                    out.truncate(start);
                    out.extend_from_slice(reply);
                    return;
                }
            },
        };
        hits += u64::from(hit);
    }
    pending.count_gets(get.keys.len() as u64, hits);
    encode::write_end(out);
}

/// Writes `VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n`.
fn write_hit(out: &mut Vec<u8>, key: &[u8], item: &ItemRef<'_>, returns_cas: bool) {
    let cas = returns_cas.then_some(item.cas);
    encode::write_value(out, key, item.client_flags, item.value, cas);
}

/// `gat`: writes the hit and gives the item its new expiry, keeping value, flags and CAS.
fn touch_one(
    key: &[u8],
    expiry: Expiry,
    returns_cas: bool,
    ctx: &ServerContext,
    out: &mut Vec<u8>,
) -> Result<bool, &'static [u8]> {
    let mut hit = false;
    ctx.engine
        .modify(key, |current, buffer| match current {
            None => Change::Keep,
            Some(item) => {
                hit = true;
                write_hit(out, key, &item, returns_cas);
                buffer.extend_from_slice(item.value);
                Change::Write {
                    client_flags: item.client_flags,
                    expiry,
                    keep_cas: true,
                }
            }
        })
        .map_err(|error| write_error_reply(&error))?;
    Ok(hit)
}
