//! The `resp_session` target: a Redis session (`strata_server::resp_exec::RespSession`) over a
//! real engine, fed a client's byte stream in reads of varying sizes, as a connection does.
//! It reaches what the parser target cannot: every command's handler, transactions (MULTI,
//! EXEC, WATCH, DISCARD), CLIENT, CONFIG, SCAN, counters, expiry, RESP3.
//!
//! Invariants checked:
//! - A session never panics, whatever the commands and however the stream is split.
//! - `process` never consumes more than it was given, and once it says the connection closes
//!   nothing more is fed.
//! - The output is a sequence of complete, well-formed RESP replies (a transaction's nested
//!   ones included): it parses to the end with nothing left over.
//!
//! One engine (a small DRAM pool) serves every input of a process; each input starts with the
//! store flushed, so an input's effect does not depend on the ones before it.

use std::sync::{Arc, OnceLock};

use strata_engine::{Engine, EngineConfig};
use strata_protocol::resp::{parse_reply, ReplyError};
use strata_server::context::{ServerContext, Session, Settings};
use strata_server::resp_exec::RespSession;

use crate::chunk_plan;

/// Inputs longer than this are cut: a check runs every command, and a long input of cheap
/// commands would otherwise make one check take seconds.
const INPUT_LEN_MAX: usize = 16 << 10;

fn context() -> &'static ServerContext {
    static CONTEXT: OnceLock<ServerContext> = OnceLock::new();
    CONTEXT.get_or_init(|| {
        let engine = Engine::open(EngineConfig {
            memory_bytes: 8 << 20,
            segment_size_bytes: 64 << 10,
            shard_count: 2,
            ..EngineConfig::default()
        })
        .expect("a DRAM engine opens");
        ServerContext::new(Arc::new(engine), Settings::default())
    })
}

/// Runs every check on one input; panics when an invariant fails.
pub fn check(data: &[u8]) {
    let data = &data[..data.len().min(INPUT_LEN_MAX)];
    let ctx = context();
    ctx.engine.flush_all(0).expect("flush");
    let mut session = RespSession::new(1);
    let mut out = Vec::new();
    let (mut start, mut arrived) = (0usize, 0usize);
    for size in chunk_plan(data) {
        arrived += size;
        let processed = session.process(&data[start..arrived], ctx, &mut out);
        assert!(
            processed.consumed <= arrived - start,
            "consumed more than was given"
        );
        start += processed.consumed;
        if processed.close {
            break;
        }
    }
    check_replies(&out);
}

/// `out` parses as complete RESP replies, one after another, to its end.
fn check_replies(out: &[u8]) {
    let mut rest = out;
    while !rest.is_empty() {
        match parse_reply(rest) {
            Ok((_, used)) => {
                assert!(used > 0 && used <= rest.len(), "a reply of {used} bytes");
                rest = &rest[used..];
            }
            Err(ReplyError::Incomplete) => panic!(
                "the output ends inside a reply: {:?}",
                String::from_utf8_lossy(&rest[..rest.len().min(200)])
            ),
            Err(error) => panic!(
                "a malformed reply ({error:?}): {:?}",
                String::from_utf8_lossy(&rest[..rest.len().min(200)])
            ),
        }
    }
}
