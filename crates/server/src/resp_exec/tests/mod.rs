//! Session tests: raw RESP in, exact reply bytes out, against a real engine.

use std::sync::Arc;

use strata_engine::{Engine, EngineConfig};

use super::RespSession;
use crate::context::{Processed, ServerContext, Session, Settings};

mod hashes;
mod operators;
mod power_cuts;

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

/// A long pipeline of hash and keyspace commands, which batches go on past (`Command::batches`),
/// with MULTI/EXEC, a RENAME and PINGs (which end batches) among them: every reply is the one a
/// command run alone gets, in order, across several batches.
#[test]
fn a_long_pipeline_of_hash_and_keyspace_commands_runs_in_order_across_batches() {
    let ctx = context(Settings::default());
    let mut session = RespSession::new(1);
    let (mut input, mut expected) = (Vec::new(), Vec::new());
    let mut counters = [0i64; 5];
    let mut push = |args: &[&str], reply: String| {
        input.extend_from_slice(&command(args));
        expected.extend_from_slice(reply.as_bytes());
    };
    for i in 0..(3 * strata_engine::PREFETCH_KEYS_MAX + 5) {
        let slot = i % counters.len();
        let (key, field, value) = (format!("h{slot}"), format!("f{i}"), format!("v{i}"));
        push(&["HSET", &key, &field, &value], ":1\r\n".into());
        counters[slot] += 1;
        let count = counters[slot].to_string();
        push(&["HINCRBY", &key, "n", "1"], format!(":{count}\r\n"));
        push(
            &["HGET", &key, &field],
            format!("${}\r\n{value}\r\n", value.len()),
        );
        push(&["EXISTS", &key, "nothing"], ":1\r\n".into());
        match i % 9 {
            0 => {
                push(&["DEL", &key], ":1\r\n".into());
                counters[slot] = 0;
            }
            3 => {
                push(&["RENAME", &key, "moved"], "+OK\r\n".into());
                push(
                    &["HGET", "moved", "n"],
                    format!("${}\r\n{count}\r\n", count.len()),
                );
                push(&["RENAME", "moved", &key], "+OK\r\n".into());
            }
            5 => {
                push(&["MULTI"], "+OK\r\n".into());
                push(&["HGET", &key, "n"], "+QUEUED\r\n".into());
                push(&["HDEL", &key, &field], "+QUEUED\r\n".into());
                let reply = format!("*2\r\n${}\r\n{count}\r\n:1\r\n", count.len());
                push(&["EXEC"], reply);
            }
            7 => push(&["PING"], "+PONG\r\n".into()),
            _ => {}
        }
    }
    let mut out = Vec::new();
    let processed = session.process(&input, &ctx, &mut out);
    assert_eq!(
        out.escape_ascii().to_string(),
        expected.escape_ascii().to_string()
    );
    assert_eq!(processed.consumed, input.len());
    assert!(!processed.close);
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

/// A connection's transactions back to back reuse the first one's buffers: none sees what an
/// earlier one queued, how it failed or the arguments it held (a long one's included), after
/// EXEC, DISCARD or EXECABORT alike.
#[test]
fn transactions_back_to_back_start_empty() {
    let ctx = context(Settings::default());
    let set_long = format!("SET a {}", "v".repeat(100_000));
    check(
        &ctx,
        &[
            ("MULTI", "+OK\r\n"),
            (&set_long, "+QUEUED\r\n"),
            ("SET b 2 EX 100", "+QUEUED\r\n"),
            ("EXEC", "*2\r\n+OK\r\n+OK\r\n"),
            ("MULTI", "+OK\r\n"),
            ("STRLEN a", "+QUEUED\r\n"),
            ("EXEC", "*1\r\n:100000\r\n"),
            ("MULTI", "+OK\r\n"),
            (
                "NOSUCH",
                "-ERR unknown command 'NOSUCH', with args beginning with: \r\n",
            ),
            (
                "EXEC",
                "-EXECABORT Transaction discarded because of previous errors.\r\n",
            ),
            ("MULTI", "+OK\r\n"),
            ("GET b", "+QUEUED\r\n"),
            ("DISCARD", "+OK\r\n"),
            ("MULTI", "+OK\r\n"),
            ("TTL b", "+QUEUED\r\n"),
            ("GET b", "+QUEUED\r\n"),
            ("EXEC", "*2\r\n:100\r\n$1\r\n2\r\n"),
            ("MULTI", "+OK\r\n"),
            ("EXEC", "*0\r\n"),
        ],
    );
}

/// Hash reads count in `keyspace_hits`/`keyspace_misses` as Redis 7.0.15 counts them (the
/// figures are its, for the same commands): one per read command's key, a hit when the key is
/// there whatever it holds (a WRONGTYPE read is a hit), a miss when it is not; writes count
/// nothing; a read queued in a transaction counts when EXEC runs it.
#[test]
fn hash_reads_count_as_keyspace_hits_and_misses() {
    let ctx = context(Settings::default());
    let mut session = RespSession::new(ctx.next_client_id());
    for line in [
        "HSET h f v",
        "HGET h f",
        "HGET h nope",
        "HGET nokey f",
        "HLEN nokey",
        "SET s v",
        "HGET s f",
        "HGETALL h",
        "HSET h f2 v2",
        "HINCRBY h n 1",
        "MULTI",
        "HGET h f",
        "EXEC",
    ] {
        run(&mut session, &ctx, line);
    }
    let info = String::from_utf8(run(&mut session, &ctx, "INFO stats")).unwrap();
    assert!(
        info.contains("keyspace_hits:5\r\nkeyspace_misses:2\r\n"),
        "{info}"
    );
}
