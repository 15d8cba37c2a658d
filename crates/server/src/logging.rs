//! Structured logs on standard error, as text lines or JSON objects (`--log-format`).
//!
//! `--log-level` sets the level; `RUST_LOG`, when set, overrides it with any `tracing`
//! filter directive (`strata_server=debug`).

use tracing_subscriber::EnvFilter;

use crate::config::{LogFormat, LogLevel};

/// Installs the global subscriber. Call once, before the server starts.
pub fn init(level: LogLevel, format: LogFormat) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level.directive()));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false);
    // A subscriber may already be installed (tests run several servers in one process).
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
