//! `flush_all`, `version`, `verbosity`, `cache_memlimit`, `shutdown`.
//!
//! - `flush_all [delay] [noreply]`: `OK`; the delay follows the expiry rules (relative seconds
//!   up to 30 days, else an absolute Unix time; 0 or negative: now). When flushing is disabled
//!   the reply is `CLIENT_ERROR flush_all not allowed`, as memcached `-F` answers.
//! - `version`: `VERSION 1.6.18-strata-<version>` (see [`super::VERSION`]).
//! - `verbosity`: `OK`; strata's log level is set by its configuration, not by clients.
//! - `cache_memlimit <megabytes> [noreply]`: memcached's runtime memory limit, applied to the
//!   memory tier (`Engine::set_memory_limit`, as Redis's `CONFIG SET maxmemory`): `OK`; under 8
//!   `MEMLIMIT_TOO_SMALL ...` and past a billion `MEMLIMIT_ADJUST_FAILED input value is
//!   megabytes not bytes`, as memcached answers. Departure: the pool does not grow while
//!   running, so a limit at or past it means the whole pool (memcached grows to it), and one
//!   under what the shards need (two segments each, and the cleaner's two) is memcached's
//!   `MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust`.
//! - `shutdown [graceful]`: memcached answers `ERROR: shutdown not enabled` unless started with
//!   `-A`; strata has no such switch for memcached clients (stop it with SIGTERM), so it always
//!   answers that.

use strata_engine::Expiry;
use strata_protocol::memcache::{encode, CacheMemlimit, FlushAll, ShutdownMode, Verbosity};

use super::{expiry, now_ms, reply, write_failed, VERSION};
use crate::context::ServerContext;
use crate::stats::command_index;

/// Runs `flush_all`.
pub(super) fn flush_all(flush: FlushAll, ctx: &ServerContext, out: &mut Vec<u8>) {
    ctx.stats.count_command(command_index("flush"));
    if !ctx.settings.flush_enabled {
        ctx.stats.count_error();
        return reply(out, encode::CLIENT_ERROR_FLUSH_NOT_ALLOWED, flush.noreply);
    }
    let now_ms = now_ms(ctx);
    let delay_ms = match flush.delay.map(|delay| expiry(delay, || now_ms)) {
        Some(Expiry::AtMs(at_ms)) => at_ms.saturating_sub(now_ms),
        _ => 0,
    };
    match ctx.engine.flush_all(delay_ms) {
        Ok(()) => reply(out, encode::OK, flush.noreply),
        Err(error) => write_failed(&error, ctx, out, flush.noreply),
    }
}

/// Runs `version`.
pub(super) fn version(ctx: &ServerContext, out: &mut Vec<u8>) {
    ctx.stats.count_command(command_index("other"));
    encode::write_version(out, VERSION.as_bytes());
}

/// Runs `verbosity`.
pub(super) fn verbosity(verbosity: Verbosity, ctx: &ServerContext, out: &mut Vec<u8>) {
    ctx.stats.count_command(command_index("other"));
    reply(out, encode::OK, verbosity.noreply);
}

/// Runs `cache_memlimit` (see the module docs).
pub(super) fn cache_memlimit(limit: CacheMemlimit, ctx: &ServerContext, out: &mut Vec<u8>) {
    ctx.stats.count_command(command_index("other"));
    let answer: &[u8] = if limit.megabytes < 8 {
        b"MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n"
    } else if limit.megabytes > 1_000_000_000 {
        b"MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes\r\n"
    } else {
        let bytes = u64::from(limit.megabytes) << 20;
        let cap = ctx.engine.memory_cap_for(bytes);
        match cap.map(|cap| ctx.engine.set_memory_limit(cap)) {
            Ok(Ok(applied)) => {
                tracing::info!(bytes = applied, "memory limit changed by cache_memlimit");
                encode::OK
            }
            Ok(Err(_)) | Err(_) => b"MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust\r\n",
        }
    };
    reply(out, answer, limit.noreply);
}

/// Runs `shutdown`.
pub(super) fn shutdown(_mode: ShutdownMode, ctx: &ServerContext, out: &mut Vec<u8>) {
    ctx.stats.count_command(command_index("other"));
    out.extend_from_slice(encode::ERROR_SHUTDOWN_NOT_ENABLED);
}
