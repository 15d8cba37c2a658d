//! SIGTERM and SIGINT start a graceful shutdown; a second one exits at once.
//!
//! signal-hook registers the handlers (its handler only writes to a pipe) and a small thread
//! waits on that pipe, so this crate stays free of unsafe code and no work happens in signal
//! context.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use mio::Waker;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::context::ServerContext;
use crate::listener;

/// Exit code when a second signal cuts a graceful shutdown short.
pub const EXIT_CODE_FORCED: i32 = 1;

/// Starts the signal thread: the first SIGTERM/SIGINT sets `ctx.shutdown` and wakes the
/// acceptor; a second one exits the process without closing the pool cleanly (the next open
/// recovers it as after a crash).
pub fn spawn(ctx: Arc<ServerContext>, acceptor_waker: Arc<Waker>) -> std::io::Result<()> {
    let mut signals = Signals::new([SIGTERM, SIGINT])?;
    std::thread::Builder::new()
        .name("strata-signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                let name = if signal == SIGTERM {
                    "SIGTERM"
                } else {
                    "SIGINT"
                };
                if ctx.shutdown.load(Ordering::Acquire) {
                    tracing::warn!(
                        signal = name,
                        "second signal: exiting without a clean close"
                    );
                    std::process::exit(EXIT_CODE_FORCED);
                }
                tracing::info!(signal = name, "shutting down: finishing requests in flight");
                listener::request_shutdown(&ctx, &acceptor_waker);
            }
        })?;
    Ok(())
}
