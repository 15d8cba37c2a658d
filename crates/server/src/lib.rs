//! The strata network server: listeners, worker event loops, connection buffers, config,
//! stats and metrics, joining the protocol parsers to the engine.
//!
//! ```text
//!   memcache :11211 ─┐                       ┌─▶ worker 0: mio poll ─▶ connections ─┐
//!   resp     :6379  ─┼─▶ acceptor thread ────┤   (read → Session::process → write) ├─▶ Engine
//!                    │   round-robin,        └─▶ worker N-1 ...                      │  (shared,
//!                    │   connection limit                                            │   sharded)
//!   admin    :9121  ───▶ admin thread (mio): /metrics /health ◀── ServerStats, Metrics┘
//!   signals thread: SIGTERM/SIGINT ─▶ ctx.shutdown + wake acceptor ─▶ wake workers ─▶ drain
//!   maintenance thread: Engine::repair and Engine::expire every 100 ms
//!   scrub thread (nice 19, after a restart that adopted segments unread): Engine::scrub_step
//! ```
//!
//! Goals: every request handled on the worker that read it, without locks of the server's
//! own and without allocation after warm-up; pipelined requests answered in one write; bounded
//! memory per client (request size, pending output); a clean pool after SIGTERM.
//! Non-goals: TLS, the memcached binary protocol (and with it SASL), UDP. Authentication is
//! memcached's auth file for the text protocol (`memcache_exec::auth`) and Redis's
//! `requirepass`; `config` refuses to start with one protocol protected and the other open.
//!
//! Panics (`panics`): a worker catches its own, closes its connections and serves again; a
//! panic on any other thread aborts the process. `/health` (`health`) reports which threads
//! serve and whether the engine accepts writes.
//!
//! The network core knows no protocol: a connection hands its input to a [`context::Session`]
//! made by the listener's [`sessions::SessionFactory`].
#![forbid(unsafe_code)]

pub mod admin;
pub mod auth;
pub mod clients;
pub mod config;
pub mod connection;
pub mod context;
pub mod exclusive;
pub mod flash_io;
pub mod health;
pub mod latency;
pub mod listener;
pub mod logging;
pub mod memcache_exec;
pub mod metrics;
pub mod monitor;
pub mod notify;
pub mod panics;
pub mod pause;
pub mod resp_exec;
pub mod serve;
pub mod sessions;
pub mod signals;
pub mod size;
pub mod slowlog;
pub mod stats;
pub mod tiers;
pub mod worker;

pub use config::{ConfigError, ServeOptions, ServerConfig};
pub use serve::{serve, ServeError};
pub use sessions::{Protocol, SessionFactory, Sessions};
