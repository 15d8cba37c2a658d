//! What operators reach for: the latency monitor and histograms, INFO keyspace's sampling,
//! CLIENT NO-TOUCH, and the settings CONFIG SET changes while running.

use std::sync::Arc;

use strata_engine::{Engine, EngineConfig};

use super::*;

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

/// A pipeline of data commands buffers their run times (no publish before each): a command
/// later in the same input that reads the histograms (`LATENCY HISTOGRAM`, `INFO
/// latencystats`) sees every call before it, and so does one in the next input.
#[test]
fn latency_of_a_pipelined_batch_is_seen_by_a_command_behind_it() {
    let ctx = context(Settings::default());
    let mut session = RespSession::new(1);
    let mut input = Vec::new();
    for i in 0..5 {
        input.extend_from_slice(&super::command(&["HSET", "h", &format!("f{i}"), "v"]));
    }
    input.extend_from_slice(&super::command(&["HGET", "h", "f1"]));
    input.extend_from_slice(&super::command(&["LATENCY", "HISTOGRAM", "hset", "hget"]));
    let mut out = Vec::new();
    session.process(&input, &ctx, &mut out);
    let out = String::from_utf8(out).unwrap();
    assert!(
        out.contains("$4\r\nhset\r\n*4\r\n$5\r\ncalls\r\n:5\r\n"),
        "{out}"
    );
    assert!(
        out.contains("$4\r\nhget\r\n*4\r\n$5\r\ncalls\r\n:1\r\n"),
        "{out}"
    );
    run(&mut session, &ctx, "HSET h f9 v");
    let info = String::from_utf8(run(&mut session, &ctx, "LATENCY HISTOGRAM hset")).unwrap();
    assert!(info.contains("calls\r\n:6\r\n"), "{info}");
}
