//! Wire protocols spoken by strata: memcached text + meta, and Redis RESP2/RESP3.
//!
//! Everything here is a pure function over byte buffers: a parse returns the request and the
//! number of bytes it consumed, or says that more input is needed; an encoder appends a reply to
//! a caller-owned buffer. No I/O, no storage, no allocation per request on the hot path. The
//! server crate joins these parsers to the engine.
#![forbid(unsafe_code)]

pub mod cross_protocol;
mod digits;
pub use digits::{format_u64, U64_LEN_MAX};
pub mod memcache;
pub mod resp;
mod scan;
