//! `delete` and `touch`: a key's existence and lifetime.
//!
//! `delete` answers `DELETED` or `NOT_FOUND`; `touch` answers `TOUCHED` or `NOT_FOUND` and keeps
//! the item's value, flags and CAS (memcached's touch does not change the CAS). A negative
//! expiry makes `touch` expire the item at once, as in memcached.

use strata_engine::DeleteOutcome;
use strata_protocol::memcache::{encode, Delete, Touch};

use super::{expiry, now_ms, reply, write_failed};
use crate::context::ServerContext;
use crate::stats::command_index;

/// Runs `delete <key> [0] [noreply]`.
pub(super) fn delete(delete: Delete<'_>, ctx: &ServerContext, out: &mut Vec<u8>) {
    ctx.stats.count_command(command_index("delete"));
    match ctx.engine.delete(delete.key, None) {
        Ok(DeleteOutcome::Deleted) => {
            ctx.stats.count_outcome("delete_hits");
            reply(out, encode::DELETED, delete.noreply);
        }
        Ok(_) => {
            ctx.stats.count_outcome("delete_misses");
            reply(out, encode::NOT_FOUND, delete.noreply);
        }
        Err(error) => write_failed(&error, ctx, out, delete.noreply),
    }
}

/// Runs `touch <key> <exptime> [noreply]`.
pub(super) fn touch(touch: Touch<'_>, ctx: &ServerContext, out: &mut Vec<u8>) {
    ctx.stats.count_command(command_index("touch"));
    match ctx
        .engine
        .touch(touch.key, expiry(touch.exptime, || now_ms(ctx)))
    {
        Ok(true) => {
            ctx.stats.count_outcome("touch_hits");
            reply(out, encode::TOUCHED, touch.noreply);
        }
        Ok(false) => {
            ctx.stats.count_outcome("touch_misses");
            reply(out, encode::NOT_FOUND, touch.noreply);
        }
        Err(error) => write_failed(&error, ctx, out, touch.noreply),
    }
}
