//! The panic policy of `strata serve`: which panics the server survives, and how it reports
//! every one.
//!
//! A panic is a bug. The question is what the process may still promise after one:
//!
//! - **A worker thread** serves the connections it holds and nothing else: its state is the
//!   connections, their buffers and sessions, all of which it owns. It runs its event loop under
//!   `catch_unwind` (`worker.rs`); after a panic it drops every connection it holds (their state
//!   may be half-changed, so none is trusted, and their clients see the connection close),
//!   counts the panic and the connections, reports itself restarting on `/health`, and runs a
//!   fresh loop with empty state. Connections the acceptor hands it meanwhile wait in its queue
//!   and are served by the new loop. The store is shared and stays: a panic while a shard's
//!   write lock is held is the engine's to handle (it ends the process, since the shard may be
//!   half-changed), so a worker restart never sees a torn shard.
//! - **Any other thread** (the acceptor on the main thread, the signal, admin and maintenance
//!   threads, the pool's populator) is one the server cannot run without, or one whose loss
//!   would leave a process that looks alive and is not: an acceptor gone means no new client is
//!   ever served, a maintenance thread gone means no interval flush and no expiry. The panic
//!   hook ends the process at once with [`std::process::abort`] (SIGABRT, exit status 134 in a
//!   shell, a core dump where enabled) after logging the panic, so a supervisor restarts it and
//!   the pool is recovered as after a crash. `abort` rather than `exit`: it runs no destructor
//!   and no exit handler on a process in an unknown state, and cannot hang on a lock the
//!   panicking thread or another holds.
//!
//! The hook ([`install_hook`]) logs every panic at error level through `tracing`: the thread's
//! name, the source location, the message, and a backtrace when `RUST_BACKTRACE` asks for one.
//! A thread says that its panics are caught with [`set_recoverable`]; the hook reads that flag.
//! All of this needs panics to unwind, as strata's build profiles have them do: built with
//! `panic = "abort"`, every panic would end the process right after the hook's log line.

use std::backtrace::{Backtrace, BacktraceStatus};
use std::cell::Cell;

thread_local! {
    /// Whether a panic on this thread is caught and recovered from (a worker's event loop).
    static RECOVERABLE: Cell<bool> = const { Cell::new(false) };
}

/// Declares whether panics on the calling thread are caught (`true` inside a worker's loop)
/// or must end the process (the default, and while a worker recovers from a panic).
pub fn set_recoverable(recoverable: bool) {
    RECOVERABLE.with(|flag| flag.set(recoverable));
}

/// Whether a panic on the calling thread is caught.
pub fn recoverable() -> bool {
    RECOVERABLE.with(Cell::get)
}

/// The message a panic carries: the `&str` or `String` given to `panic!`, or a placeholder.
pub fn message(payload: &(dyn std::any::Any + Send)) -> &str {
    if let Some(text) = payload.downcast_ref::<&str>() {
        text
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text
    } else {
        "(a panic without a text message)"
    }
}

/// Installs the process's panic hook (`strata serve` does, once, after logging is set up): it
/// logs every panic, and aborts the process unless the panicking thread is [`recoverable`].
pub fn install_hook() {
    std::panic::set_hook(Box::new(|info| {
        let thread = std::thread::current();
        let thread = thread.name().unwrap_or("(unnamed)");
        let location = info
            .location()
            .map_or_else(String::new, |at| format!("{}:{}", at.file(), at.line()));
        let message = message(info.payload());
        let backtrace = Backtrace::capture();
        let backtrace = if backtrace.status() == BacktraceStatus::Captured {
            backtrace.to_string()
        } else {
            String::new()
        };
        if recoverable() {
            tracing::error!(
                thread,
                location,
                panic_message = message,
                backtrace,
                "panic: the worker closes its connections and restarts"
            );
            return;
        }
        tracing::error!(
            thread,
            location,
            panic_message = message,
            backtrace,
            "panic on a thread strata cannot run without: aborting the process"
        );
        std::process::abort();
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_come_from_str_and_string_payloads() {
        let caught = |f: fn()| std::panic::catch_unwind(f).expect_err("it panics");
        // The default hook prints these panics: the hook is process-wide, so a test must not
        // replace it while other tests run.
        assert_eq!(message(&*caught(|| panic!("plain"))), "plain");
        assert_eq!(
            message(&*caught(|| panic!("formatted {}", 7))),
            "formatted 7"
        );
        assert_eq!(
            message(&*caught(|| std::panic::panic_any(7u8))),
            "(a panic without a text message)"
        );
    }

    #[test]
    fn the_flag_is_per_thread_and_off_by_default() {
        assert!(!recoverable());
        set_recoverable(true);
        assert!(recoverable());
        let other = std::thread::spawn(recoverable).join().expect("joins");
        assert!(!other, "a new thread starts unrecoverable");
        set_recoverable(false);
        assert!(!recoverable());
    }
}
