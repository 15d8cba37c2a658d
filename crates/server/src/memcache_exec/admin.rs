//! `flush_all`, `version`, `verbosity`, `shutdown`.
//!
//! - `flush_all [delay] [noreply]`: `OK`; the delay follows the expiry rules (relative seconds
//!   up to 30 days, else an absolute Unix time; 0 or negative: now). When flushing is disabled
//!   the reply is `CLIENT_ERROR flush_all not allowed`, as memcached `-F` answers.
//! - `version`: `VERSION 1.6.18-strata-<version>` (see [`super::VERSION`]).
//! - `verbosity`: `OK`; strata's log level is set by its configuration, not by clients.
//! - `shutdown [graceful]`: memcached answers `ERROR: shutdown not enabled` unless started with
//!   `-A`; strata has no such switch for memcached clients (stop it with SIGTERM), so it always
//!   answers that.

use strata_engine::Expiry;
use strata_protocol::memcache::{encode, FlushAll, ShutdownMode, Verbosity};

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

/// Runs `shutdown`.
pub(super) fn shutdown(_mode: ShutdownMode, ctx: &ServerContext, out: &mut Vec<u8>) {
    ctx.stats.count_command(command_index("other"));
    out.extend_from_slice(encode::ERROR_SHUTDOWN_NOT_ENABLED);
}
