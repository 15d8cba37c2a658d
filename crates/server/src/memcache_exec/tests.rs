//! Unit tests: request bytes through [`MemcacheSession::process`] against a real engine, and
//! the exact reply bytes.

use std::sync::Arc;

use strata_engine::{Engine, EngineConfig};

use super::MemcacheSession;
use crate::context::{Processed, ServerContext, Session, Settings};

fn context(settings: Settings) -> ServerContext {
    let engine = Engine::open(EngineConfig::default()).expect("open engine");
    ServerContext::new(Arc::new(engine), settings)
}

/// Runs `input` through a fresh session; returns the output and what `process` said.
fn run_with(
    ctx: &ServerContext,
    session: &mut MemcacheSession,
    input: &[u8],
) -> (Vec<u8>, Processed) {
    let mut out = Vec::new();
    let processed = session.process(input, ctx, &mut out);
    (out, processed)
}

#[test]
fn smoke() {
    let ctx = context(Settings::default());
    let mut session = MemcacheSession::new();
    let (out, processed) = run_with(&ctx, &mut session, b"set a 0 0 1\r\nx\r\nget a\r\n");
    assert_eq!(out, b"STORED\r\nVALUE a 0 1\r\nx\r\nEND\r\n");
    assert_eq!(processed.consumed, 23);
}
