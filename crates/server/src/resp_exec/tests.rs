//! Session tests: raw RESP in, exact reply bytes out, against a real engine.

use std::sync::Arc;

use strata_engine::{Engine, EngineConfig};

use super::RespSession;
use crate::context::{Processed, ServerContext, Session, Settings};

fn context(settings: Settings) -> ServerContext {
    let engine = Engine::open(EngineConfig::default()).expect("a DRAM engine opens");
    ServerContext::new(Arc::new(engine), settings)
}

/// Encodes a command as a client does.
fn command(args: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    strata_protocol::resp::encode_command(&mut out, &args);
    out
}

/// Runs inline-style commands (split on spaces) one at a time and returns each reply.
fn run(session: &mut RespSession, ctx: &ServerContext, line: &str) -> Vec<u8> {
    let args: Vec<&str> = line.split(' ').collect();
    let input = command(&args);
    let mut out = Vec::new();
    let processed = session.process(&input, ctx, &mut out);
    assert_eq!(processed.consumed, input.len(), "{line}");
    out
}

/// Checks a table of (command, exact reply) in order on one session.
fn check(ctx: &ServerContext, table: &[(&str, &str)]) {
    let mut session = RespSession::new(ctx.next_client_id());
    for &(line, reply) in table {
        let out = run(&mut session, ctx, line);
        assert_eq!(
            out.escape_ascii().to_string(),
            reply.as_bytes().escape_ascii().to_string(),
            "{line}"
        );
    }
}

#[test]
fn ping_and_get_set() {
    let ctx = context(Settings::default());
    check(
        &ctx,
        &[
            ("PING", "+PONG\r\n"),
            ("ping hi", "$2\r\nhi\r\n"),
            ("GET k", "$-1\r\n"),
            ("SET k v", "+OK\r\n"),
            ("GET k", "$1\r\nv\r\n"),
        ],
    );
}

#[test]
fn pipelined_and_incomplete_input() {
    let ctx = context(Settings::default());
    let mut session = RespSession::new(1);
    let mut input = command(&["SET", "a", "1"]);
    input.extend_from_slice(b"GET a\r\n");
    input.extend_from_slice(b"*2\r\n$3\r\nGET\r\n$1\r");
    let mut out = Vec::new();
    let processed = session.process(&input, &ctx, &mut out);
    assert_eq!(
        processed,
        Processed {
            consumed: input.len() - 16,
            close: false
        }
    );
    assert_eq!(out, b"+OK\r\n$1\r\n1\r\n");
}
