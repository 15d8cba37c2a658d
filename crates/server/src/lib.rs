//! The strata network server: listeners, worker event loops, connection buffers, config,
//! stats and metrics, joining the protocol parsers to the engine.
#![forbid(unsafe_code)]

pub mod context;
pub mod stats;
