//! The authentication gate through [`MemcacheSession::process`]: the exact replies memcached
//! 1.6.18 gives before and after authentication (`tests/memcache_auth_differential.rs` checks
//! the same against a running memcached), what is kept from the engine, and input arriving in
//! pieces.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use strata_engine::{Engine, EngineConfig};

use super::{LINE_LEN_MAX, TOKEN_LEN_MAX};
use crate::auth::Credentials;
use crate::context::{Processed, ServerContext, Session, Settings};
use crate::memcache_exec::MemcacheSession;

const UNAUTHENTICATED: &str = "CLIENT_ERROR unauthenticated\r\n";

/// A server whose auth file holds `foo:bar` and `baaaz:quux` (memcached's `t/authfile`).
fn locked_server() -> ServerContext {
    let credentials = Credentials::parse(Path::new("t/authfile"), b"foo:bar\nbaaaz:quux\n")
        .expect("valid auth file");
    let settings = Settings {
        memcache_auth: Some(Arc::new(credentials)),
        ..Settings::default()
    };
    let engine = Engine::open(EngineConfig::default()).expect("open engine");
    ServerContext::new(Arc::new(engine), settings)
}

fn feed(ctx: &ServerContext, session: &mut MemcacheSession, input: &[u8]) -> (String, Processed) {
    let mut out = Vec::new();
    let processed = session.process(input, ctx, &mut out);
    assert!(processed.consumed <= input.len());
    (String::from_utf8_lossy(&out).into_owned(), processed)
}

/// Runs each `(request, reply)` on one session, asserting the reply, that the request is
/// consumed whole and that the connection stays open.
fn check_table(ctx: &ServerContext, session: &mut MemcacheSession, table: &[(&[u8], &str)]) {
    for &(input, want) in table {
        let (got, processed) = feed(ctx, session, input);
        let shown = String::from_utf8_lossy(input);
        assert_eq!(got, want, "{shown:?}");
        assert_eq!(processed.consumed, input.len(), "{shown:?}");
        assert!(!processed.close, "{shown:?}");
    }
}

#[test]
fn without_an_auth_file_a_connection_starts_authenticated() {
    let engine = Engine::open(EngineConfig::default()).expect("open engine");
    let ctx = ServerContext::new(Arc::new(engine), Settings::default());
    let mut session = MemcacheSession::for_server(&ctx);
    check_table(
        &ctx,
        &mut session,
        &[(
            b"set k 0 0 1\r\nv\r\nget k\r\n",
            "STORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n",
        )],
    );
}

#[test]
fn nothing_reaches_the_engine_before_authentication() {
    let ctx = locked_server();
    // An item stored by another, authenticated connection.
    let mut other = MemcacheSession::for_server(&ctx);
    check_table(
        &ctx,
        &mut other,
        &[
            (b"set foo 0 0 7\r\nfoo bar\r\n", "STORED\r\n"),
            (b"set k 0 0 1\r\nv\r\n", "STORED\r\n"),
        ],
    );
    let mut session = MemcacheSession::for_server(&ctx);
    check_table(
        &ctx,
        &mut session,
        &[
            (b"get k\r\n", UNAUTHENTICATED),
            (b"gets k\r\n", UNAUTHENTICATED),
            (b"mg k v\r\n", UNAUTHENTICATED),
            (b"flush_all\r\n", UNAUTHENTICATED),
            (b"delete k\r\n", UNAUTHENTICATED),
            (b"incr k 1\r\n", UNAUTHENTICATED),
            // `ms`'s data line is read as a command line of its own.
            (
                b"ms k 1\r\nw\r\n",
                "CLIENT_ERROR unauthenticated\r\nCLIENT_ERROR unauthenticated\r\n",
            ),
            (b"md k\r\n", UNAUTHENTICATED),
            (b"mn\r\n", UNAUTHENTICATED),
            (b"stats\r\n", UNAUTHENTICATED),
            (b"version\r\n", UNAUTHENTICATED),
            (b"quit\r\n", UNAUTHENTICATED),
            (b"shutdown\r\n", UNAUTHENTICATED),
            (b"\r\n", UNAUTHENTICATED),
            (b"\n", UNAUTHENTICATED),
            (b"SET k 0 0 1\r\n", UNAUTHENTICATED),
            (b"set k 0 0 -1\r\n", UNAUTHENTICATED),
            (b"set k 0 0\r\n", UNAUTHENTICATED),
            // A `set` of ordinary data is an authentication attempt.
            (
                b"set k 0 0 1\r\nw\r\n",
                "CLIENT_ERROR bad authentication token format\r\n",
            ),
            (
                b"set k 0 0 3\r\nw w\r\n",
                "CLIENT_ERROR authentication failure\r\n",
            ),
        ],
    );
    let (got, _) = feed(&ctx, &mut other, b"get k\r\nstats\r\n");
    assert!(got.starts_with("VALUE k 0 1\r\nv\r\nEND\r\n"), "{got}");
    assert!(got.contains("STAT auth_cmds 2\r\n"), "{got}");
    assert!(got.contains("STAT auth_errors 1\r\n"), "{got}");
}

#[test]
fn a_wrong_password_is_refused_and_the_right_one_unlocks() {
    let ctx = locked_server();
    let mut session = MemcacheSession::for_server(&ctx);
    check_table(
        &ctx,
        &mut session,
        &[
            (
                &b"set foo 0 0 7\r\nfoo bab\r\n"[..],
                "CLIENT_ERROR authentication failure\r\n",
            ),
            (
                b"set foo 0 0 9\r\nbaaaz bar\r\n",
                "CLIENT_ERROR authentication failure\r\n",
            ),
            (
                b"set foo 0 0 7\r\nfoo barXY",
                "CLIENT_ERROR bad command line termination\r\n",
            ),
            (b"get foo\r\n", UNAUTHENTICATED),
            // Key, flags and exptime are ignored, so is noreply; extra words too (1.6.18).
            (
                b"set any 5 9 15 noreply\r\nbaaaz quux more\r\n",
                "STORED\r\n",
            ),
            (b"get any\r\n", "END\r\n"),
            (b"set foo 0 0 7\r\nfoo bar\r\n", "STORED\r\n"),
            // Authenticated: this `set` stores.
            (b"get foo\r\n", "VALUE foo 0 7\r\nfoo bar\r\nEND\r\n"),
        ],
    );
    let (got, processed) = feed(&ctx, &mut session, b"version\r\nquit\r\n");
    assert!(got.starts_with("VERSION 1.6.18"), "{got}");
    assert!(processed.close, "quit closes once authenticated");
    assert_eq!(ctx.stats.auth_commands.load(Ordering::Relaxed), 3);
    assert_eq!(ctx.stats.auth_errors.load(Ordering::Relaxed), 2);
}

#[test]
fn requests_pipelined_behind_the_authentication_run_in_the_same_call() {
    let ctx = locked_server();
    let mut session = MemcacheSession::for_server(&ctx);
    let input = b"get k\r\nset x 0 0 7\r\nfoo bar\r\nset k 0 0 1\r\nv\r\nget k\r\nmn\r\n";
    let (got, processed) = feed(&ctx, &mut session, input);
    assert_eq!(
        got,
        "CLIENT_ERROR unauthenticated\r\nSTORED\r\nSTORED\r\nVALUE k 0 1\r\nv\r\nEND\r\nMN\r\n"
    );
    assert_eq!(processed.consumed, input.len());
    assert!(!processed.close);
}

/// The connection hands the session whatever has arrived and keeps what it did not consume;
/// the gate must answer the same however the bytes are split.
#[test]
fn input_in_pieces_gets_the_same_replies() {
    let script: &[u8] = b"get k\r\nset a 0 0 7\r\nfoo bab\r\nset a 0 0 7\r\nfoo bar\r\nget a\r\n";
    let want = "CLIENT_ERROR unauthenticated\r\nCLIENT_ERROR authentication failure\r\n\
                STORED\r\nEND\r\n";
    for piece_len in [1, 2, 3, 5, 8, 13] {
        let ctx = locked_server();
        let mut session = MemcacheSession::for_server(&ctx);
        let (mut buffered, mut out) = (Vec::new(), Vec::new());
        for piece in script.chunks(piece_len) {
            buffered.extend_from_slice(piece);
            let processed = session.process(&buffered, &ctx, &mut out);
            assert!(!processed.close);
            buffered.drain(..processed.consumed);
        }
        assert!(
            buffered.is_empty(),
            "pieces of {piece_len}: {buffered:?} left"
        );
        assert_eq!(String::from_utf8_lossy(&out), want, "pieces of {piece_len}");
    }
}

#[test]
fn tokens_and_lines_are_bounded() {
    let ctx = locked_server();
    let mut session = MemcacheSession::for_server(&ctx);
    // Over the bound: refused at once, and what follows is read as command lines.
    let too_long = format!("set k 0 0 {}\r\nfoo bar\r\n", TOKEN_LEN_MAX + 1);
    check_table(
        &ctx,
        &mut session,
        &[(
            too_long.as_bytes(),
            "CLIENT_ERROR auth token too long\r\nCLIENT_ERROR unauthenticated\r\n",
        )],
    );
    // At the bound: the gate waits for all of it.
    let longest = format!("set k 0 0 {TOKEN_LEN_MAX}\r\nfoo bad ");
    let (got, processed) = feed(&ctx, &mut session, longest.as_bytes());
    assert_eq!((got.as_str(), processed.close), ("", false));
    let line_len = longest.find('\n').expect("line") + 1;
    assert_eq!(
        processed.consumed, line_len,
        "the line is read, the token waited for"
    );
    let mut token = longest.as_bytes()[line_len..].to_vec();
    token.resize(TOKEN_LEN_MAX, b'x');
    token.extend_from_slice(b"\r\n");
    let (got, processed) = feed(&ctx, &mut session, &token);
    assert_eq!(got, "CLIENT_ERROR authentication failure\r\n");
    assert_eq!(processed.consumed, token.len());
    // A line longer than memcached's 2048 bytes closes, whether or not its newline came.
    let mut line = vec![b'x'; LINE_LEN_MAX];
    assert_eq!(feed(&ctx, &mut session, &line).1, Processed::default());
    line.push(b'x');
    assert!(feed(&ctx, &mut session, &line).1.close);
    line.extend_from_slice(b"\r\n");
    assert!(
        MemcacheSession::for_server(&ctx)
            .process(&line, &ctx, &mut Vec::new())
            .close
    );
}
