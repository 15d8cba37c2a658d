//! `DEBUG`: fault injection for tests, off unless `--enable-debug-command` is given.
//!
//! As in Redis, the command exists only for tests and is refused with Redis 7.0's exact text
//! while `enable-debug-command` is off (the default). strata's subcommands exercise its panic
//! policy (`crate::panics`) from outside the process:
//!
//! - `DEBUG PANIC` panics the worker thread running the command. The worker closes every
//!   connection it holds (this one included), counts the panic and serves again.
//! - `DEBUG PANIC-ACCEPTOR` makes the acceptor panic when it accepts its next connection, which
//!   ends the process (a thread the server cannot run without).
//!
//! Redis's `DEBUG PANIC` ends the whole server; strata's ends what strata would lose to a real
//! bug in the same place. Redis's other subcommands (`SLEEP`, `RELOAD`, `OBJECT`, ...) answer the
//! unknown-subcommand error.

use std::sync::atomic::Ordering;

use strata_protocol::resp::{encode, errors, name_eq};

use super::{Call, State};

/// `DEBUG HELP`'s lines, after the header line, as Redis's `addReplyHelp` lays them out.
const HELP: &[&str] = &[
    "PANIC",
    "    Panic the worker thread that runs this command (it closes its connections and restarts).",
    "PANIC-ACCEPTOR",
    "    Make the acceptor panic on its next connection, which ends the process.",
    "HELP",
    "    Print this help.",
];

/// `DEBUG <subcommand> ...`.
pub(crate) fn debug(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    if !call.ctx.settings.debug_command_enabled {
        out.extend_from_slice(errors::ERR_DEBUG_NOT_ALLOWED);
        return;
    }
    let sub = call.arg(1);
    if name_eq(sub, b"panic") {
        panic!("DEBUG PANIC: a client asked this worker to panic");
    } else if name_eq(sub, b"panic-acceptor") {
        // Release: pairs with the Acquire load in the acceptor, which then panics.
        call.ctx
            .acceptor_panic_requested
            .store(true, Ordering::Release);
        encode::ok(out);
    } else if name_eq(sub, b"help") && call.len() == 2 {
        encode::array_len(out, HELP.len() + 1);
        encode::simple(
            out,
            b"DEBUG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        );
        for line in HELP {
            encode::simple(out, line.as_bytes());
        }
    } else {
        errors::subcommand_syntax(out, b"debug", sub);
    }
}
