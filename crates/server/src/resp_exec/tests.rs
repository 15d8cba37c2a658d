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

/// Runs one command given as its arguments (which may hold spaces).
fn run_args(session: &mut RespSession, ctx: &ServerContext, args: &[&str]) -> Vec<u8> {
    let input = command(args);
    let mut out = Vec::new();
    session.process(&input, ctx, &mut out);
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
            close: false,
            ..Processed::default()
        }
    );
    assert_eq!(out, b"+OK\r\n$1\r\n1\r\n");
}

#[test]
fn protocol_error_replies_and_closes() {
    let ctx = context(Settings::default());
    let table: &[(&[u8], &[u8])] = &[
        (
            b"*abc\r\n",
            b"-ERR Protocol error: invalid multibulk length\r\n",
        ),
        (
            b"*1\r\nx\r\n",
            b"-ERR Protocol error: expected '$', got 'x'\r\n",
        ),
        (
            b"PING\r\n*1\r\n$-1\r\nPING\r\n",
            b"+PONG\r\n-ERR Protocol error: invalid bulk length\r\n",
        ),
        (
            b"ECHO \"a\r\n",
            b"-ERR Protocol error: unbalanced quotes in request\r\n",
        ),
    ];
    for &(input, reply) in table {
        let mut session = RespSession::new(1);
        let mut out = Vec::new();
        let processed = session.process(input, &ctx, &mut out);
        assert_eq!(
            processed,
            Processed {
                consumed: input.len(),
                close: true,
                ..Processed::default()
            }
        );
        assert_eq!(
            out.escape_ascii().to_string(),
            reply.escape_ascii().to_string()
        );
    }
    // A bulk longer than Redis's proto-max-bulk-len is refused while parsing; one over the
    // value limit plus the margin, but within it, is dropped (see the tests below).
    let settings = Settings {
        value_len_max: 1024,
        ..Settings::default()
    };
    let ctx = context(settings);
    let mut session = RespSession::new(1);
    let mut out = Vec::new();
    let too_long = format!("*1\r\n${}\r\n", super::BULK_LEN_DISCARD_MAX + 1);
    let processed = session.process(too_long.as_bytes(), &ctx, &mut out);
    assert!(processed.close);
    assert_eq!(out, b"-ERR Protocol error: invalid bulk length\r\n");
}

#[test]
fn incomplete_input_consumes_nothing_and_resumes() {
    let ctx = context(Settings::default());
    let mut session = RespSession::new(1);
    let full = command(&["SET", "key", "value"]);
    for cut in 1..full.len() {
        let mut out = Vec::new();
        let processed = session.process(&full[..cut], &ctx, &mut out);
        assert_eq!(
            processed,
            Processed {
                consumed: 0,
                close: false,
                ..Processed::default()
            },
            "cut at {cut}"
        );
        assert!(out.is_empty());
    }
    let mut out = Vec::new();
    assert_eq!(session.process(&full, &ctx, &mut out).consumed, full.len());
    assert_eq!(out, b"+OK\r\n");
    // Empty commands are consumed without a reply.
    let mut out = Vec::new();
    let processed = session.process(b"*0\r\n\r\n*-1\r\n", &ctx, &mut out);
    assert_eq!(
        processed,
        Processed {
            consumed: 11,
            close: false,
            ..Processed::default()
        }
    );
    assert!(out.is_empty());
}

#[test]
fn strings_accepted_and_rejected() {
    let ctx = context(Settings::default());
    check(
        &ctx,
        &[
            ("SET k v NX", "+OK\r\n"),
            ("SET k v NX", "$-1\r\n"),
            ("SET k w XX GET", "$1\r\nv\r\n"),
            ("SET k v NX XX", "-ERR syntax error\r\n"),
            (
                "SET k v EX 0",
                "-ERR invalid expire time in 'set' command\r\n",
            ),
            (
                "SET k v EX x",
                "-ERR value is not an integer or out of range\r\n",
            ),
            ("SET k v KEEPTTL PX 5", "-ERR syntax error\r\n"),
            (
                "SETEX k 0 v",
                "-ERR invalid expire time in 'setex' command\r\n",
            ),
            ("GETEX k PERSIST EX 1", "-ERR syntax error\r\n"),
            ("GETEX k EX 100", "$1\r\nw\r\n"),
            ("TTL k", ":100\r\n"),
            ("GETEX k PERSIST", "$1\r\nw\r\n"),
            ("TTL k", ":-1\r\n"),
            ("GETDEL k", "$1\r\nw\r\n"),
            ("GETDEL k", "$-1\r\n"),
            ("MSET a 1 b 2", "+OK\r\n"),
            (
                "MSET a 1 b",
                "-ERR wrong number of arguments for 'mset' command\r\n",
            ),
            ("MGET a x b", "*3\r\n$1\r\n1\r\n$-1\r\n$1\r\n2\r\n"),
            ("MSETNX a 1 c 3", ":0\r\n"),
            ("MSETNX c 3 d 4", ":1\r\n"),
            ("SETNX c 9", ":0\r\n"),
            ("GETSET c 5", "$1\r\n3\r\n"),
            ("SET  v", "-ERR empty keys are not supported by strata\r\n"),
        ],
    );
}

#[test]
fn values_over_the_limit_are_refused() {
    let settings = Settings {
        value_len_max: 8,
        ..Settings::default()
    };
    let ctx = context(settings);
    let too_long = "-ERR string exceeds maximum allowed size (max-value-size)\r\n";
    check(
        &ctx,
        &[
            ("SET k 123456789", too_long),
            ("SET k 12345678", "+OK\r\n"),
            ("APPEND k 9", too_long),
            ("SETRANGE k 8 x", too_long),
            ("SETRANGE k 7 x", ":8\r\n"),
            ("MSET a 1 b 123456789", too_long),
            ("EXISTS a", ":0\r\n"),
            ("GET k", "$8\r\n1234567x\r\n"),
        ],
    );
}

#[test]
fn counters_accepted_and_rejected() {
    let ctx = context(Settings::default());
    check(
        &ctx,
        &[
            ("INCR n", ":1\r\n"),
            ("INCRBY n 41", ":42\r\n"),
            ("DECRBY n 50", ":-8\r\n"),
            (
                "INCRBY n x",
                "-ERR value is not an integer or out of range\r\n",
            ),
            (
                "DECRBY n -9223372036854775808",
                "-ERR decrement would overflow\r\n",
            ),
            ("SET n 9223372036854775807", "+OK\r\n"),
            ("INCR n", "-ERR increment or decrement would overflow\r\n"),
            ("SET f 10.50", "+OK\r\n"),
            ("INCRBYFLOAT f 0.1", "$4\r\n10.6\r\n"),
            ("INCRBYFLOAT f x", "-ERR value is not a valid float\r\n"),
            (
                "INCRBYFLOAT f inf",
                "-ERR increment would produce NaN or Infinity\r\n",
            ),
            ("INCR f", "-ERR value is not an integer or out of range\r\n"),
            ("SET c 1 EX 100", "+OK\r\n"),
            ("INCR c", ":2\r\n"),
            ("TTL c", ":100\r\n"),
        ],
    );
}

#[test]
fn keyspace_and_expiry() {
    let ctx = context(Settings::default());
    check(
        &ctx,
        &[
            ("SET k v", "+OK\r\n"),
            ("EXISTS k k x", ":2\r\n"),
            ("TYPE k", "+string\r\n"),
            ("TYPE x", "+none\r\n"),
            (
                "EXPIRE k 100 NX GT",
                "-ERR NX and XX, GT or LT options at the same time are not compatible\r\n",
            ),
            ("EXPIRE k 100 GT", ":0\r\n"),
            ("EXPIRE k 100 NX", ":1\r\n"),
            ("EXPIRE k 200 LT", ":0\r\n"),
            ("PERSIST k", ":1\r\n"),
            ("PTTL k", ":-1\r\n"),
            ("PTTL x", ":-2\r\n"),
            ("EXPIREAT k 4000000000", ":1\r\n"),
            ("RENAME k j", "+OK\r\n"),
            ("EXPIRETIME j", ":4000000000\r\n"),
            ("RENAME k j", "-ERR no such key\r\n"),
            ("EXPIRE j -1", ":1\r\n"),
            ("DBSIZE", ":0\r\n"),
            (
                "LPUSH j x",
                "-ERR unknown command 'LPUSH', with args beginning with: 'j' 'x' \r\n",
            ),
            ("SET j v", "+OK\r\n"),
            (
                "LPUSH j x",
                "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
            ),
            ("KEYS j*", "*1\r\n$1\r\nj\r\n"),
            (
                "SCAN 0 MATCH j COUNT 1000000",
                "*2\r\n$1\r\n0\r\n*1\r\n$1\r\nj\r\n",
            ),
            ("SCAN 0 TYPE hash COUNT 1000000", "*2\r\n$1\r\n0\r\n*0\r\n"),
            ("RANDOMKEY", "$1\r\nj\r\n"),
            ("DEL j j", ":1\r\n"),
            ("FLUSHALL ASYNC", "+OK\r\n"),
        ],
    );
    let settings = Settings {
        flush_enabled: false,
        ..Settings::default()
    };
    let ctx = context(settings);
    let mut session = RespSession::new(1);
    let out = run(&mut session, &ctx, "FLUSHDB");
    assert!(out.starts_with(b"-ERR flushing is disabled"));
}

#[test]
fn auth_gates_commands() {
    let settings = Settings {
        requirepass: Some("pw".to_string()),
        ..Settings::default()
    };
    let ctx = context(settings);
    check(
        &ctx,
        &[
            ("GET k", "-NOAUTH Authentication required.\r\n"),
            (
                "NOPE",
                "-ERR unknown command 'NOPE', with args beginning with: \r\n",
            ),
            (
                "AUTH x",
                "-WRONGPASS invalid username-password pair or user is disabled.\r\n",
            ),
            ("AUTH pw", "+OK\r\n"),
            ("GET k", "$-1\r\n"),
            ("RESET", "+RESET\r\n"),
            ("GET k", "-NOAUTH Authentication required.\r\n"),
            ("QUIT", "+OK\r\n"),
        ],
    );
    // While unauthenticated, Redis's small request limits apply.
    let mut session = RespSession::new(1);
    let mut out = Vec::new();
    let processed = session.process(b"*11\r\n", &ctx, &mut out);
    assert!(processed.close);
    assert_eq!(
        out,
        b"-ERR Protocol error: unauthenticated multibulk length\r\n"
    );
}

#[test]
fn resp3_after_hello_3() {
    let ctx = context(Settings::default());
    let mut session = RespSession::new(7);
    let hello = run(&mut session, &ctx, "HELLO 3 SETNAME app");
    let expected = "%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n\
                    $5\r\nproto\r\n:3\r\n$2\r\nid\r\n:7\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n\
                    $4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n";
    assert_eq!(hello, expected.as_bytes());
    assert_eq!(run(&mut session, &ctx, "GET nope"), b"_\r\n");
    assert_eq!(run(&mut session, &ctx, "CLIENT GETNAME"), b"$3\r\napp\r\n");
    assert_eq!(
        run(&mut session, &ctx, "CONFIG GET save"),
        b"%1\r\n$4\r\nsave\r\n$0\r\n\r\n"
    );
    let info = run(&mut session, &ctx, "INFO keyspace");
    assert_eq!(info, b"=16\r\ntxt:# Keyspace\r\n\r\n");
    assert!(run(&mut session, &ctx, "HELLO 2").starts_with(b"*14\r\n"));
    assert_eq!(run(&mut session, &ctx, "GET nope"), b"$-1\r\n");
}

#[test]
fn client_reply_off_and_skip() {
    let ctx = context(Settings::default());
    check(
        &ctx,
        &[
            ("CLIENT REPLY OFF", ""),
            ("PING", ""),
            ("CLIENT REPLY ON", "+OK\r\n"),
            ("CLIENT REPLY SKIP", ""),
            ("PING", ""),
            ("PING", "+PONG\r\n"),
        ],
    );
}

#[test]
fn shutdown_sets_the_flag_and_closes_silently() {
    let ctx = context(Settings::default());
    let mut session = RespSession::new(1);
    let input = command(&["SHUTDOWN", "NOSAVE"]);
    let mut out = Vec::new();
    let processed = session.process(&input, &ctx, &mut out);
    assert_eq!(
        processed,
        Processed {
            consumed: input.len(),
            close: true,
            ..Processed::default()
        }
    );
    assert!(out.is_empty());
    assert!(ctx.shutdown.load(std::sync::atomic::Ordering::Acquire));
}

#[test]
fn quit_stops_the_pipeline() {
    let ctx = context(Settings::default());
    let mut session = RespSession::new(1);
    let mut input = command(&["QUIT"]);
    input.extend_from_slice(&command(&["PING"]));
    let mut out = Vec::new();
    let processed = session.process(&input, &ctx, &mut out);
    assert_eq!(
        processed,
        Processed {
            consumed: 14,
            close: true,
            ..Processed::default()
        }
    );
    assert_eq!(out, b"+OK\r\n");
}

#[test]
fn info_config_and_command() {
    let settings = Settings {
        resp_port: Some(6400),
        ..Settings::default()
    };
    let ctx = context(settings);
    let mut session = RespSession::new(1);
    run(&mut session, &ctx, "SET k v");
    run(&mut session, &ctx, "GET k");
    run(&mut session, &ctx, "GET nope");
    let info = String::from_utf8(run(&mut session, &ctx, "INFO")).unwrap();
    for needle in [
        "# Server\r\nredis_version:7.0.15\r\n",
        "tcp_port:6400\r\n",
        "# Memory\r\n",
        "loading:0\r\n",
        "strata_pool_backend:dram\r\n",
        "keyspace_hits:1\r\nkeyspace_misses:1\r\n",
        "db0:keys=1,expires=0,avg_ttl=0\r\n",
        "# Strata\r\npool_backend:dram\r\n",
        "tier_pool:medium=dram,",
    ] {
        assert!(info.contains(needle), "{needle:?} missing from {info}");
    }
    // Keys with an expiry are counted (every one, in a keyspace this small), with their
    // average time left in ms.
    for i in 0..4 {
        run(&mut session, &ctx, &format!("SET t{i} v EX 100"));
    }
    run(&mut session, &ctx, "SET gone v PX 1");
    std::thread::sleep(std::time::Duration::from_millis(5));
    let keyspace = String::from_utf8(run(&mut session, &ctx, "INFO keyspace")).unwrap();
    let db0 = keyspace.lines().find(|l| l.starts_with("db0:")).unwrap();
    assert!(db0.contains(",expires=4,avg_ttl="), "{db0}");
    let avg_ttl: u64 = db0.rsplit('=').next().unwrap().parse().unwrap();
    assert!((90_000..=100_000).contains(&avg_ttl), "{db0}");
    let stats_only = String::from_utf8(run(&mut session, &ctx, "INFO STATS")).unwrap();
    assert!(
        stats_only.contains("total_commands_processed:10\r\n"),
        "{stats_only}"
    );
    assert!(!stats_only.contains("# Server"));
    assert_eq!(
        run(&mut session, &ctx, "CONFIG GET port"),
        b"*2\r\n$4\r\nport\r\n$4\r\n6400\r\n"
    );
    assert_eq!(run(&mut session, &ctx, "CONFIG SET port 6400"), b"+OK\r\n");
    let refused = run(&mut session, &ctx, "CONFIG SET port 1");
    assert!(refused.starts_with(b"-ERR CONFIG SET failed (possibly related to argument 'port')"));
    assert_eq!(run(&mut session, &ctx, "CONFIG RESETSTAT"), b"+OK\r\n");
    let count = format!(":{}\r\n", super::table::COMMANDS.len());
    assert_eq!(run(&mut session, &ctx, "COMMAND COUNT"), count.as_bytes());
    let get_info = run(&mut session, &ctx, "COMMAND INFO get nope");
    assert!(get_info.starts_with(b"*2\r\n*10\r\n$3\r\nget\r\n:2\r\n*2\r\n+readonly\r\n+fast\r\n"));
    assert!(get_info.ends_with(b"$-1\r\n"));
    assert_eq!(run(&mut session, &ctx, "COMMAND DOCS"), b"*0\r\n");
    assert!(run(&mut session, &ctx, "SAVE").starts_with(b"-ERR strata writes no RDB"));
}

#[test]
fn stats_count_commands_and_gets() {
    use std::sync::atomic::Ordering;
    let ctx = context(Settings::default());
    let mut session = RespSession::new(1);
    run(&mut session, &ctx, "SET a 1");
    run(&mut session, &ctx, "MGET a b c");
    run(&mut session, &ctx, "DEL a");
    let count =
        |name| ctx.stats.commands[crate::stats::command_index(name)].load(Ordering::Relaxed);
    assert_eq!((count("set"), count("get"), count("delete")), (1, 1, 1));
    assert_eq!(ctx.stats.get_keys.load(Ordering::Relaxed), 3);
    assert_eq!(ctx.stats.get_hits.load(Ordering::Relaxed), 1);
}

#[test]
fn case_insensitive_names_and_wrong_arity() {
    let ctx = context(Settings::default());
    check(
        &ctx,
        &[
            ("pInG", "+PONG\r\n"),
            (
                "get",
                "-ERR wrong number of arguments for 'get' command\r\n",
            ),
            (
                "CONFIG GET",
                "-ERR wrong number of arguments for 'config|get' command\r\n",
            ),
            (
                "CLIENT ID x",
                "-ERR wrong number of arguments for 'client|id' command\r\n",
            ),
            (
                "CLIENT NOPE",
                "-ERR unknown subcommand 'NOPE'. Try CLIENT HELP.\r\n",
            ),
            ("SELECT 0", "+OK\r\n"),
            ("SELECT 1", "-ERR DB index is out of range\r\n"),
            ("ECHO hi", "$2\r\nhi\r\n"),
        ],
    );
}

/// Commands are parsed a batch at a time; the batch must end after `AUTH`, so that a request
/// pipelined right behind it is parsed with the authenticated limits, as Redis parses it.
#[test]
fn a_pipelined_request_after_auth_is_parsed_with_the_lifted_limits() {
    let settings = Settings {
        requirepass: Some("pw".to_string()),
        ..Settings::default()
    };
    let ctx = context(settings);
    let mut session = RespSession::new(1);
    let mut input = command(&["GET", "k"]);
    input.extend_from_slice(&command(&["AUTH", "pw"]));
    // 12 arguments: over the 10 Redis allows before authentication.
    let mset: Vec<String> = std::iter::once("MSET".to_string())
        .chain((0..11).map(|i| format!("k{i}")))
        .collect();
    let mset: Vec<&str> = mset.iter().map(String::as_str).collect();
    // An odd count, so MSET answers with its arity error: parsed, then run.
    input.extend_from_slice(&command(&mset));
    let mut out = Vec::new();
    let processed = session.process(&input, &ctx, &mut out);
    assert_eq!(
        out.escape_ascii().to_string(),
        "-NOAUTH Authentication required.\r\n+OK\r\n\
         -ERR wrong number of arguments for 'mset' command\r\n"
            .as_bytes()
            .escape_ascii()
            .to_string()
    );
    assert!(!processed.close);
}

/// More commands than one batch holds, with SETs and GETs of the same keys interleaved: every
/// reply comes back in order and each GET sees the SET before it.
#[test]
fn a_long_pipeline_runs_in_order_across_batches() {
    let ctx = context(Settings::default());
    let mut session = RespSession::new(1);
    let mut input = Vec::new();
    let mut expected = Vec::new();
    for i in 0..(3 * strata_engine::PREFETCH_KEYS_MAX + 5) {
        let key = format!("k{}", i % 7);
        let value = format!("v{i}");
        input.extend_from_slice(&command(&["SET", &key, &value]));
        input.extend_from_slice(&command(&["GET", &key]));
        if i % 10 == 0 {
            input.extend_from_slice(b"*0\r\n"); // skipped without a reply
            input.extend_from_slice(&command(&["PING"])); // ends a batch
            expected.extend_from_slice(b"+OK\r\n");
            expected.extend_from_slice(format!("${}\r\n{value}\r\n", value.len()).as_bytes());
            expected.extend_from_slice(b"+PONG\r\n");
        } else {
            expected.extend_from_slice(b"+OK\r\n");
            expected.extend_from_slice(format!("${}\r\n{value}\r\n", value.len()).as_bytes());
        }
    }
    input.extend_from_slice(b"*2\r\n$3\r\nGET\r\n$2\r\nk"); // incomplete
    let mut out = Vec::new();
    let processed = session.process(&input, &ctx, &mut out);
    assert_eq!(
        out.escape_ascii().to_string(),
        expected.escape_ascii().to_string()
    );
    assert_eq!(
        processed,
        Processed {
            consumed: input.len() - 18,
            close: false,
            ..Processed::default()
        }
    );
}

/// A protocol error inside a batch: the commands before it run and reply, then the error, and
/// nothing after it runs.
#[test]
fn a_protocol_error_mid_batch_answers_what_came_before() {
    let ctx = context(Settings::default());
    let mut session = RespSession::new(1);
    let mut input = command(&["SET", "a", "1"]);
    input.extend_from_slice(&command(&["GET", "a"]));
    input.extend_from_slice(b"*1\r\n$x\r\n");
    input.extend_from_slice(&command(&["SET", "a", "2"]));
    let mut out = Vec::new();
    let processed = session.process(&input, &ctx, &mut out);
    assert!(processed.close);
    assert_eq!(
        out.escape_ascii().to_string(),
        "+OK\r\n$1\r\n1\r\n-ERR Protocol error: invalid bulk length\r\n"
            .as_bytes()
            .escape_ascii()
            .to_string()
    );
    assert_eq!(run(&mut RespSession::new(2), &ctx, "GET a"), b"$1\r\n1\r\n");
}

/// Feeds `input` to `session` in pieces of `piece` bytes, as reads would bring it, keeping
/// what a call leaves unconsumed for the next; returns the replies and the largest input a
/// call had to be given (what the connection would have buffered).
fn feed(
    session: &mut RespSession,
    ctx: &ServerContext,
    input: &[u8],
    piece: usize,
) -> (Vec<u8>, usize, Processed) {
    let (mut out, mut pending, mut held_max) = (Vec::new(), Vec::new(), 0);
    let mut last = Processed::default();
    for chunk in input.chunks(piece) {
        pending.extend_from_slice(chunk);
        held_max = held_max.max(pending.len());
        last = session.process(&pending, ctx, &mut out);
        pending.drain(..last.consumed);
        if last.close {
            break;
        }
    }
    (out, held_max, last)
}

/// A context whose largest value is 1 KiB, so bulks over 1 KiB + 64 KiB are dropped unread.
fn small_value_context() -> ServerContext {
    context(Settings {
        value_len_max: 1024,
        ..Settings::default()
    })
}

#[test]
fn an_argument_over_the_value_limit_is_dropped_as_it_arrives_and_refused() {
    let ctx = small_value_context();
    let mut session = RespSession::new(1);
    let big = "v".repeat(1 << 20);
    let mut input = command(&["SET", "k", &big]);
    input.extend(command(&["SET", "after", "1"]));
    let (out, held_max, last) = feed(&mut session, &ctx, &input, 4096);
    assert_eq!(
        String::from_utf8_lossy(&out),
        "-ERR string exceeds maximum allowed size (max-value-size)\r\n+OK\r\n"
    );
    assert!(!last.close, "the connection stays open");
    assert!(
        held_max <= 2 * 4096,
        "buffered {held_max} bytes of a 1 MiB argument"
    );
    assert!(ctx.engine.get(b"k", |_| ()).is_none());
    assert!(ctx.engine.get(b"after", |_| ()).is_some());
}

#[test]
fn the_arguments_after_a_too_long_one_are_dropped_with_it() {
    let ctx = small_value_context();
    let mut session = RespSession::new(1);
    let big = "v".repeat(200 << 10);
    let mut input = command(&["MSET", "a", &big, "b", &big, "c", "3"]);
    input.extend(b"PING\r\n");
    for piece in [1, 7, 1 << 20] {
        let (out, _, last) = feed(&mut session, &ctx, &input, piece);
        let text = String::from_utf8_lossy(&out);
        assert_eq!(
            text, "-ERR string exceeds maximum allowed size (max-value-size)\r\n+PONG\r\n",
            "in pieces of {piece}"
        );
        assert!(!last.close);
        assert!(ctx.engine.get(b"c", |_| ()).is_none(), "nothing of it ran");
    }
    let info = run(&mut session, &ctx, "INFO stats");
    let info = String::from_utf8_lossy(&info);
    assert!(info.contains("total_error_replies:3\r\n"), "{info}");
}

#[test]
fn a_too_long_argument_is_refused_silently_under_client_reply_off() {
    let ctx = small_value_context();
    let mut session = RespSession::new(1);
    let big = "v".repeat(100 << 10);
    let mut input = command(&["CLIENT", "REPLY", "OFF"]);
    input.extend(command(&["SET", "k", &big]));
    input.extend(command(&["CLIENT", "REPLY", "ON"]));
    let (out, _, _) = feed(&mut session, &ctx, &input, 1000);
    assert_eq!(out, b"+OK\r\n", "only CLIENT REPLY ON answers");
}

#[test]
fn past_the_protocol_limit_or_in_a_broken_stream_the_connection_closes() {
    let ctx = small_value_context();
    let invalid = b"-ERR Protocol error: invalid bulk length\r\n";
    for (input, reply) in [
        (
            &b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$536870913\r\n"[..],
            &invalid[..],
        ),
        (
            b"*3\r\n$3\r\nSET\r\n$70000\r\n",
            b"-ERR Protocol error: expected '$', got 'x'\r\n",
        ),
    ] {
        let mut input = input.to_vec();
        if input.ends_with(b"$70000\r\n") {
            // The long key is dropped; the next argument's line is not a bulk line.
            input.extend(vec![b'k'; 70_000]);
            input.extend(b"\r\nxyz\r\n");
        }
        let mut session = RespSession::new(1);
        let (out, _, last) = feed(&mut session, &ctx, &input, 1000);
        assert_eq!(
            out.escape_ascii().to_string(),
            reply.escape_ascii().to_string()
        );
        assert!(last.close);
    }
}

#[test]
fn latency_monitor_keeps_spikes_past_its_threshold() {
    let ctx = context(Settings::default());
    let mut session = RespSession::new(1);
    // No wall-clock threshold in a test: the spike is handed to the monitor as a command that
    // took 5 ms would be (the session does this after every command).
    ctx.latency.command(false, 5_000);
    assert_eq!(
        run(&mut session, &ctx, "LATENCY LATEST"),
        b"*0\r\n",
        "off at 0"
    );
    run(&mut session, &ctx, "CONFIG SET latency-monitor-threshold 1");
    ctx.latency.command(false, 5_000);
    ctx.latency.command(true, 999);
    let latest = String::from_utf8(run(&mut session, &ctx, "LATENCY LATEST")).unwrap();
    assert!(
        latest.starts_with("*1\r\n*4\r\n$7\r\ncommand\r\n:"),
        "{latest}"
    );
    assert!(
        latest.ends_with(":5\r\n:5\r\n"),
        "latest and worst: {latest}"
    );
    let history = String::from_utf8(run(&mut session, &ctx, "LATENCY HISTORY command")).unwrap();
    assert!(history.starts_with("*1\r\n*2\r\n:"), "{history}");
    let doctor = String::from_utf8(run(&mut session, &ctx, "LATENCY DOCTOR")).unwrap();
    assert!(doctor.contains("- command: 1 spikes kept"), "{doctor}");
    assert_eq!(run(&mut session, &ctx, "LATENCY RESET"), b":1\r\n");
    assert_eq!(run(&mut session, &ctx, "LATENCY LATEST"), b"*0\r\n");
}

/// A transaction's queue is bounded by what it holds in memory, parsed arguments included: a
/// client queuing millions of tiny commands is refused long before their arguments alone
/// outgrow the bound (each PING's bytes are 14 of the more than 60 it holds).
#[test]
fn a_transaction_of_tiny_commands_is_bounded_by_what_it_holds() {
    let ctx = context(Settings::default());
    let mut session = RespSession::new(ctx.next_client_id());
    assert_eq!(run(&mut session, &ctx, "MULTI"), b"+OK\r\n");
    let ping = command(&["PING"]);
    let chunk: Vec<u8> = ping.repeat(100_000);
    let mut queued = 0usize;
    let mut out = Vec::new();
    let refused = loop {
        out.clear();
        let processed = session.process(&chunk, &ctx, &mut out);
        assert_eq!(processed.consumed, chunk.len());
        let replies = out.split(|&b| b == b'\n').filter(|l| !l.is_empty());
        let mut refused = false;
        for reply in replies {
            if reply.starts_with(b"+QUEUED") {
                queued += 1;
            } else {
                assert!(
                    reply.starts_with(b"-ERR strata's transaction limit"),
                    "{reply:?}"
                );
                refused = true;
            }
        }
        if refused {
            break queued;
        }
    };
    let bytes_only = super::multi::QUEUED_BYTES_MAX / ping.len();
    assert!(refused < bytes_only / 3, "{refused} queued of {bytes_only}");
    assert!(
        refused > 1_000_000,
        "{refused}: a real transaction still fits"
    );
    assert_eq!(
        run(&mut session, &ctx, "EXEC"),
        b"-EXECABORT Transaction discarded because of previous errors.\r\n"
    );
}

/// Past 20,000 items in memory, INFO keyspace's `expires` is sampled, and the sample is kept
/// for a second (redis-cli `--stat` asks every second, per client): a second INFO at once
/// reports the same share, one a second later samples again.
#[test]
fn info_keyspace_keeps_a_sampled_expiry_count_for_a_second() {
    let clock = Arc::new(strata_engine::ManualClock::new(1_700_000_000_000));
    let engine = Engine::open(EngineConfig {
        memory_bytes: 64 << 20,
        clock: clock.clone(),
        ..EngineConfig::default()
    })
    .expect("a DRAM engine opens");
    let ctx = ServerContext::new(Arc::new(engine), Settings::default());
    let mut session = RespSession::new(1);
    for i in 0..30_000 {
        let ttl = if i % 2 == 0 { " EX 1000" } else { "" };
        run(&mut session, &ctx, &format!("SET k{i} v{ttl}"));
    }
    let expires = |session: &mut RespSession| -> u64 {
        let keyspace = String::from_utf8(run(session, &ctx, "INFO keyspace")).unwrap();
        let db0 = keyspace.lines().find(|l| l.starts_with("db0:")).unwrap();
        let field = db0.split(',').find(|f| f.starts_with("expires=")).unwrap();
        field["expires=".len()..].parse().unwrap()
    };
    let first = expires(&mut session);
    assert!((12_000..=18_000).contains(&first), "about half: {first}");
    for i in (1..30_000).step_by(2) {
        run(&mut session, &ctx, &format!("EXPIRE k{i} 1000"));
    }
    assert_eq!(expires(&mut session), first, "the sample is kept");
    clock.advance_ms(1_001);
    let later = expires(&mut session);
    assert!(later > 27_000, "sampled again: {later}");
}

/// `CLIENT NO-TOUCH ON` (Redis 7.2): the client's reads leave the items as unread (the index
/// slot's fetched bit and read count, which eviction keeps hot items by), TOUCH aside; OFF
/// restores it; anything else is a syntax error.
#[test]
fn client_no_touch_reads_without_counting_an_access() {
    let ctx = context(Settings::default());
    let fetched = |key: &[u8]| ctx.engine.peek(key, |item| item.fetched);
    check(
        &ctx,
        &[
            ("SET a 1", "+OK\r\n"),
            ("SET b 2", "+OK\r\n"),
            ("SET c 3", "+OK\r\n"),
            ("CLIENT NO-TOUCH maybe", "-ERR syntax error\r\n"),
            (
                "CLIENT NO-TOUCH",
                "-ERR wrong number of arguments for 'client|no-touch' command\r\n",
            ),
            ("CLIENT NO-TOUCH ON", "+OK\r\n"),
            ("GET a", "$1\r\n1\r\n"),
            ("MGET a b", "*2\r\n$1\r\n1\r\n$1\r\n2\r\n"),
            ("TOUCH b nope", ":1\r\n"),
            ("CLIENT NO-TOUCH OFF", "+OK\r\n"),
            ("GET c", "$1\r\n3\r\n"),
        ],
    );
    let mut session = RespSession::new(ctx.next_client_id());
    let flags = |session: &mut RespSession| -> String {
        let info = String::from_utf8(run(session, &ctx, "CLIENT INFO")).unwrap();
        let flags = info.split(' ').find(|f| f.starts_with("flags=")).unwrap();
        flags.to_string()
    };
    assert_eq!(flags(&mut session), "flags=N");
    run(&mut session, &ctx, "CLIENT NO-TOUCH ON");
    assert_eq!(flags(&mut session), "flags=T");
    run(&mut session, &ctx, "MULTI");
    run(&mut session, &ctx, "EXEC");
    run(&mut session, &ctx, "RESET");
    assert_eq!(flags(&mut session), "flags=N", "RESET clears it");
    assert_eq!(fetched(b"a"), Some(false), "read under NO-TOUCH");
    assert_eq!(fetched(b"b"), Some(true), "touched by TOUCH");
    assert_eq!(fetched(b"c"), Some(true), "read after NO-TOUCH OFF");
}

/// `CONFIG SET maxmemory` changes the memory tier's cap while running (whole segments, at most
/// the pool, 0 for the whole pool), CONFIG GET and INFO report it, and a value that is not a
/// memory value or is below what the shards need is refused with Redis's wording, changing
/// nothing.
#[test]
fn config_set_maxmemory_caps_the_memory_tier_while_running() {
    let ctx = context(Settings::default());
    let mut session = RespSession::new(1);
    let maxmemory = |session: &mut RespSession| -> u64 {
        let reply = String::from_utf8(run(session, &ctx, "CONFIG GET maxmemory")).unwrap();
        reply.lines().nth(4).unwrap().parse().unwrap()
    };
    let pool = maxmemory(&mut session);
    assert_eq!(pool, ctx.engine.stats().memory_bytes);
    assert_eq!(
        run(&mut session, &ctx, "CONFIG SET maxmemory lots"),
        b"-ERR CONFIG SET failed (possibly related to argument 'maxmemory') - argument must be a memory value\r\n"
    );
    let refused = run(&mut session, &ctx, "CONFIG SET maxmemory 1mb");
    assert!(refused.starts_with(b"-ERR CONFIG SET failed (possibly related to argument 'maxmemory') - strata needs at least"));
    assert_eq!(maxmemory(&mut session), pool, "unchanged");
    assert_eq!(
        run(&mut session, &ctx, "CONFIG SET maxmemory 32mb"),
        b"+OK\r\n"
    );
    let capped = maxmemory(&mut session);
    assert!((30_000_000..=32 << 20).contains(&capped), "{capped}");
    assert_eq!(ctx.engine.stats().memory_limit_bytes, capped);
    let info = String::from_utf8(run(&mut session, &ctx, "INFO memory")).unwrap();
    assert!(info.contains(&format!("maxmemory:{capped}\r\n")), "{info}");
    assert_eq!(
        run(&mut session, &ctx, "CONFIG SET maxmemory 0"),
        b"+OK\r\n"
    );
    assert_eq!(maxmemory(&mut session), pool);
}

/// `CONFIG SET maxmemory-policy` changes the eviction policy while running: strata's names and
/// Redis's closest (`allkeys-lru` is strata's merge), `volatile-*` refused (strata evicts any
/// key), anything else refused with Redis's list; CONFIG GET and INFO report it.
#[test]
fn config_set_maxmemory_policy_changes_eviction_while_running() {
    let ctx = context(Settings::default());
    let mut session = RespSession::new(1);
    let policy = |session: &mut RespSession| -> String {
        let reply = String::from_utf8(run(session, &ctx, "CONFIG GET maxmemory-policy")).unwrap();
        reply.lines().nth(4).unwrap().to_string()
    };
    assert_eq!(policy(&mut session), "merge");
    assert_eq!(
        run(&mut session, &ctx, "CONFIG SET maxmemory-policy noeviction"),
        b"+OK\r\n"
    );
    assert_eq!(policy(&mut session), "noeviction");
    assert_eq!(
        ctx.engine.eviction_policy(),
        strata_engine::EvictionPolicy::None
    );
    assert_eq!(
        run(
            &mut session,
            &ctx,
            "CONFIG SET maxmemory-policy allkeys-random"
        ),
        b"+OK\r\n"
    );
    assert_eq!(policy(&mut session), "random");
    assert_eq!(
        run(
            &mut session,
            &ctx,
            "CONFIG SET maxmemory-policy ALLKEYS-LRU"
        ),
        b"+OK\r\n"
    );
    assert_eq!(policy(&mut session), "merge");
    let info = String::from_utf8(run(&mut session, &ctx, "INFO memory")).unwrap();
    assert!(info.contains("maxmemory_policy:merge\r\n"), "{info}");
    let volatile = run(
        &mut session,
        &ctx,
        "CONFIG SET maxmemory-policy volatile-ttl",
    );
    assert!(volatile.starts_with(b"-ERR CONFIG SET failed (possibly related to argument 'maxmemory-policy') - strata evicts any key"));
    assert_eq!(
        run(&mut session, &ctx, "CONFIG SET maxmemory-policy sometimes"),
        &b"-ERR CONFIG SET failed (possibly related to argument 'maxmemory-policy') - argument(s) must be one of the following: volatile-lru, volatile-lfu, volatile-random, volatile-ttl, allkeys-lru, allkeys-lfu, allkeys-random, noeviction\r\n"[..]
    );
    assert_eq!(policy(&mut session), "merge", "unchanged");
}

/// Every command's run time goes to its histogram (GET and SET by batch, at the batch's end):
/// `INFO latencystats` (not in INFO's default sections) reports the configured percentiles of
/// each command that ran, `LATENCY HISTOGRAM` their calls, and CONFIG SET turns tracking off
/// and changes the percentiles with Redis's checks.
#[test]
fn latency_tracking_reports_each_command_that_ran() {
    let ctx = context(Settings::default());
    let mut session = RespSession::new(1);
    run(&mut session, &ctx, "SET k v");
    run(&mut session, &ctx, "GET k");
    run(&mut session, &ctx, "GET k");
    run(&mut session, &ctx, "INCR n");
    let info = String::from_utf8(run(&mut session, &ctx, "INFO latencystats")).unwrap();
    for name in ["get", "set", "incr"] {
        let prefix = format!("latency_percentiles_usec_{name}:p50=");
        let line = info.lines().find(|l| l.starts_with(&prefix));
        let line = line.unwrap_or_else(|| panic!("{name}: {info}"));
        assert!(line.contains(",p99=") && line.contains(",p99.9="), "{line}");
    }
    let default = String::from_utf8(run(&mut session, &ctx, "INFO")).unwrap();
    assert!(!default.contains("Latencystats"), "not a default section");
    let all = String::from_utf8(run(&mut session, &ctx, "INFO all")).unwrap();
    assert!(all.contains("latency_percentiles_usec_get:"));
    let histogram =
        String::from_utf8(run(&mut session, &ctx, "LATENCY HISTOGRAM get nosuch")).unwrap();
    assert!(
        histogram.starts_with(
            "*2\r\n$3\r\nget\r\n*4\r\n$5\r\ncalls\r\n:2\r\n$14\r\nhistogram_usec\r\n*"
        ),
        "{histogram}"
    );
    assert_eq!(
        run(&mut session, &ctx, "LATENCY HISTOGRAM nosuch"),
        b"*0\r\n"
    );
}

/// CONFIG SET changes the percentiles INFO latencystats reports and turns tracking off, with
/// Redis's checks; CONFIG RESETSTAT empties the histograms.
#[test]
fn latency_tracking_is_configured_as_redis() {
    const PERCENTILES: &str = "latency-tracking-info-percentiles";
    let ctx = context(Settings::default());
    let mut session = RespSession::new(1);
    run(&mut session, &ctx, "GET k");
    assert_eq!(
        run_args(
            &mut session,
            &ctx,
            &["CONFIG", "SET", PERCENTILES, "50 101"]
        ),
        b"-ERR CONFIG SET failed (possibly related to argument \
          'latency-tracking-info-percentiles') - latency-tracking-info-percentiles parameters \
          should sit between [0.0,100.0]\r\n"
    );
    run_args(
        &mut session,
        &ctx,
        &["CONFIG", "SET", PERCENTILES, "50.0 99.90"],
    );
    assert_eq!(
        run(
            &mut session,
            &ctx,
            "CONFIG GET latency-tracking-info-percentiles"
        ),
        b"*2\r\n$33\r\nlatency-tracking-info-percentiles\r\n$7\r\n50 99.9\r\n"
    );
    let info = String::from_utf8(run(&mut session, &ctx, "INFO latencystats")).unwrap();
    assert!(info.contains("latency_percentiles_usec_get:p50="), "{info}");
    assert!(!info.contains(",p99="), "{info}");
    run(&mut session, &ctx, "CONFIG SET latency-tracking no");
    let info = String::from_utf8(run(&mut session, &ctx, "INFO latencystats")).unwrap();
    assert_eq!(
        info.lines().filter(|l| l.contains(':')).count(),
        0,
        "{info}"
    );
    assert_eq!(
        run(&mut session, &ctx, "CONFIG SET latency-tracking maybe"),
        b"-ERR CONFIG SET failed (possibly related to argument 'latency-tracking') - argument \
          must be 'yes' or 'no'\r\n"
    );
    run(&mut session, &ctx, "CONFIG SET latency-tracking yes");
    run(&mut session, &ctx, "CONFIG RESETSTAT");
    assert_eq!(run(&mut session, &ctx, "LATENCY HISTOGRAM get"), b"*0\r\n");
}

/// A write that would take a hash past the largest value gets an error that says it is the
/// hash (one record) that is too large, and the hash keeps what it had.
#[test]
fn a_hash_past_the_largest_value_is_refused_and_kept() {
    let ctx = context(Settings::default());
    let mut session = RespSession::new(1);
    let big = "v".repeat(600 * 1024);
    assert_eq!(
        run_args(&mut session, &ctx, &["HSET", "h", "a", &big]),
        b":1\r\n"
    );
    assert_eq!(
        run_args(&mut session, &ctx, &["HSET", "h", "b", &big]),
        b"-ERR hash exceeds maximum allowed size (max-value-size): strata keeps a hash in one \
          record of at most --max-value-size\r\n"
    );
    assert_eq!(run(&mut session, &ctx, "HLEN h"), b":1\r\n");
    assert_eq!(run(&mut session, &ctx, "HEXISTS h b"), b":0\r\n");
}

/// The writes that copy a hash's kept entries as bytes keep what each field should: HINCRBY
/// keeps the field's place and expiry, HSET keeps its place and clears its expiry, HDEL keeps
/// the others' expiries, and a field expired meanwhile is gone from what is written.
#[test]
fn hash_rewrites_keep_places_and_expiries_and_drop_expired_fields() {
    let now_ms = 1_700_000_000_000u64;
    let clock = Arc::new(strata_engine::ManualClock::new(now_ms));
    let engine = Engine::open(EngineConfig {
        clock: clock.clone(),
        ..EngineConfig::default()
    })
    .expect("a DRAM engine opens");
    let ctx = ServerContext::new(Arc::new(engine), Settings::default());
    let mut session = RespSession::new(1);
    run(&mut session, &ctx, "HSET h a 1 b 2 c 3 d 4 e 5");
    let (soon, later) = (now_ms + 5_000, now_ms + 60_000);
    run(
        &mut session,
        &ctx,
        &format!("HPEXPIREAT h {soon} FIELDS 1 b"),
    );
    run(
        &mut session,
        &ctx,
        &format!("HPEXPIREAT h {later} FIELDS 2 c e"),
    );
    assert_eq!(run(&mut session, &ctx, "HINCRBY h c 10"), b":13\r\n");
    assert_eq!(run(&mut session, &ctx, "HSET h e 50"), b":0\r\n");
    let times = run(&mut session, &ctx, "HPEXPIRETIME h FIELDS 5 a b c d e");
    let want = format!("*5\r\n:-1\r\n:{soon}\r\n:{later}\r\n:-1\r\n:-1\r\n");
    assert_eq!(String::from_utf8(times).unwrap(), want);
    clock.advance_ms(6_000);
    assert_eq!(run(&mut session, &ctx, "HDEL h d"), b":1\r\n");
    assert_eq!(
        run(&mut session, &ctx, "HGETALL h"),
        b"*6\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nc\r\n$2\r\n13\r\n$1\r\ne\r\n$2\r\n50\r\n"
    );
    assert_eq!(
        run(&mut session, &ctx, "HPEXPIRETIME h FIELDS 1 c"),
        format!("*1\r\n:{later}\r\n").into_bytes()
    );
    let stored = ctx
        .engine
        .peek(b"h", |item| {
            strata_types::hash::Hash::parse(item.value)
                .unwrap()
                .stored_len()
        })
        .unwrap();
    assert_eq!(
        stored, 3,
        "the expired field b went with the HDEL's rewrite"
    );
}

/// CONFIG SET changes the idle timeout and the output limits while running, 0 meaning none
/// as in Redis; a limit under four of the largest values, a soft limit or time for the normal
/// class, or a limit for a class strata has no clients of, is refused with why.
#[test]
fn config_set_changes_the_timeout_and_output_limits_live() {
    let ctx = context(Settings::default());
    let mut session = RespSession::new(1);
    let mut set = |args: &[&str]| {
        let mut all = vec!["CONFIG", "SET"];
        all.extend_from_slice(args);
        String::from_utf8(run_args(&mut session, &ctx, &all)).unwrap()
    };
    assert_eq!(set(&["timeout", "300"]), "+OK\r\n");
    assert_eq!(
        set(&["client-output-buffer-limit", "normal 8mb 0 0"]),
        "+OK\r\n"
    );
    assert_eq!(set(&["maxmemory-clients", "32mb"]), "+OK\r\n");
    let refused = [
        (
            vec!["timeout", "-1"],
            "argument must be between 0 and 2147483647 inclusive",
        ),
        (
            vec!["client-output-buffer-limit", "normal 1mb 0 0"],
            "at least 4194304 bytes",
        ),
        (
            vec!["client-output-buffer-limit", "normal 8mb 2mb 60"],
            "a quarter of the hard",
        ),
        (
            vec!["client-output-buffer-limit", "pubsub 32mb 8mb 60"],
            "no pubsub clients",
        ),
        (
            vec!["client-output-buffer-limit", "normal 8mb 0"],
            "Wrong number of arguments",
        ),
        (
            vec!["client-output-buffer-limit", "robots 1 0 0"],
            "Invalid client class",
        ),
        (vec!["maxmemory-clients", "10%"], "must be a memory value"),
    ];
    for (args, why) in refused {
        let reply = set(&args);
        assert!(
            reply.starts_with("-ERR CONFIG SET failed"),
            "{args:?}: {reply}"
        );
        assert!(reply.contains(why), "{args:?}: {reply}");
    }
    assert_eq!(ctx.live.idle_timeout_secs(), 300);
    assert_eq!(ctx.live.output().buffered_bytes_hard, 8 << 20);
    assert_eq!(ctx.live.output().buffered_bytes_soft, 2 << 20);
    assert_eq!(ctx.output_budget.limit_bytes(), 32 << 20);
    assert_eq!(
        set(&["client-output-buffer-limit", "normal 0 0 0 replica 0 0 0"]),
        "+OK\r\n"
    );
    assert_eq!(set(&["maxmemory-clients", "0"]), "+OK\r\n");
    let get = run(&mut session, &ctx, "CONFIG GET *o*t*");
    let get = String::from_utf8(get).unwrap();
    assert!(get.contains("$7\r\ntimeout\r\n$3\r\n300\r\n"), "{get}");
    assert!(
        get.contains("$17\r\nmaxmemory-clients\r\n$1\r\n0\r\n"),
        "{get}"
    );
    assert!(
        get.contains("normal 0 0 0 slave 0 0 0 pubsub 0 0 0"),
        "{get}"
    );
}
