//! Unit tests: request bytes through [`MemcacheSession::process`] against a real engine, and
//! the exact reply bytes memcached 1.6.18 gives (the differential test checks the same against
//! a running memcached; these run without one).

use std::sync::Arc;

use strata_engine::{Engine, EngineConfig, ManualClock};

use super::{MemcacheSession, VERSION};
use crate::context::{Processed, ServerContext, Session, Settings};

/// 2030-01-01T00:00:00Z, a fixed "now" for expiry tests.
const NOW_MS: u64 = 1_893_456_000_000;

fn context_with(settings: Settings, clock: Option<ManualClock>) -> ServerContext {
    let mut config = EngineConfig::default();
    if let Some(clock) = clock {
        config.clock = Arc::new(clock);
    }
    let engine = Engine::open(config).expect("open engine");
    ServerContext::new(Arc::new(engine), settings)
}

fn context() -> ServerContext {
    context_with(Settings::default(), None)
}

/// Feeds `input` to `session` once; returns the output and what `process` said.
fn feed(ctx: &ServerContext, session: &mut MemcacheSession, input: &[u8]) -> (String, Processed) {
    let mut out = Vec::new();
    let processed = session.process(input, ctx, &mut out);
    assert!(processed.consumed <= input.len());
    (String::from_utf8_lossy(&out).into_owned(), processed)
}

/// Runs each `(request, reply)` in order on one session, asserting every reply and that every
/// request is consumed whole.
fn check_table(ctx: &ServerContext, table: &[(&[u8], &str)]) {
    let mut session = MemcacheSession::new();
    for &(input, want) in table {
        let (got, processed) = feed(ctx, &mut session, input);
        let shown = String::from_utf8_lossy(input);
        assert_eq!(got, want, "{shown:?}");
        assert_eq!(processed.consumed, input.len(), "{shown:?}");
        assert!(!processed.close, "{shown:?}");
    }
}

#[test]
fn retrieval_and_storage() {
    check_table(
        &context(),
        &[
            (b"get a\r\n", "END\r\n"),
            (b"set a 5 0 3\r\nabc\r\n", "STORED\r\n"),
            (
                b"get a zz a\r\n",
                "VALUE a 5 3\r\nabc\r\nVALUE a 5 3\r\nabc\r\nEND\r\n",
            ),
            (b"add a 0 0 1\r\nx\r\n", "NOT_STORED\r\n"),
            (b"replace zz 0 0 1\r\nx\r\n", "NOT_STORED\r\n"),
            (b"replace a 7 0 2\r\nxy\r\n", "STORED\r\n"),
            (
                b"append a 0 0 1\r\n>\r\nprepend a 0 0 1\r\n<\r\n",
                "STORED\r\nSTORED\r\n",
            ),
            (b"append zz 0 0 1\r\n>\r\n", "NOT_STORED\r\n"),
            (b"get a\r\n", "VALUE a 7 4\r\n<xy>\r\nEND\r\n"),
            (b"cas zz 0 0 1 1\r\nx\r\n", "NOT_FOUND\r\n"),
            (b"cas a 0 0 1 1\r\nx\r\n", "EXISTS\r\n"),
            (
                b"set n 0 0 1 noreply\r\n1\r\nget n\r\n",
                "VALUE n 0 1\r\n1\r\nEND\r\n",
            ),
            (b"set e 0 -1 1\r\nx\r\nget e\r\n", "STORED\r\nEND\r\n"),
            (b"gat 100 a zz\r\n", "VALUE a 7 4\r\n<xy>\r\nEND\r\n"),
            (b"gat 10\r\n", "END\r\n"),
        ],
    );
}

#[test]
fn cas_values_round_trip() {
    let ctx = context();
    let mut session = MemcacheSession::new();
    feed(&ctx, &mut session, b"set k 0 0 1\r\nx\r\n");
    let (reply, _) = feed(&ctx, &mut session, b"gets k\r\n");
    let cas = reply.split_whitespace().nth(4).expect("cas").to_string();
    let (reply, _) = feed(&ctx, &mut session, b"gats 0 k\r\n");
    assert_eq!(
        reply.split_whitespace().nth(4),
        Some(&cas[..]),
        "gat keeps the CAS"
    );
    let request = format!("cas k 0 0 1 {cas}\r\ny\r\ncas k 0 0 1 {cas}\r\nz\r\n");
    let (reply, _) = feed(&ctx, &mut session, request.as_bytes());
    assert_eq!(reply, "STORED\r\nEXISTS\r\n");
}

#[test]
fn delete_touch_and_counters() {
    check_table(
        &context(),
        &[
            (b"delete a\r\n", "NOT_FOUND\r\n"),
            (
                b"set a 0 0 1\r\nx\r\ndelete a\r\nget a\r\n",
                "STORED\r\nDELETED\r\nEND\r\n",
            ),
            (b"delete a noreply\r\n", ""),
            (b"touch a 10\r\n", "NOT_FOUND\r\n"),
            (
                b"set a 0 0 1\r\nx\r\ntouch a 10\r\n",
                "STORED\r\nTOUCHED\r\n",
            ),
            (b"touch a -1\r\nget a\r\n", "TOUCHED\r\nEND\r\n"),
            (b"incr n 1\r\n", "NOT_FOUND\r\n"),
            (b"set n 3 0 3\r\n100\r\ndecr n 1\r\n", "STORED\r\n99\r\n"),
            (b"get n\r\n", "VALUE n 3 3\r\n99 \r\nEND\r\n"),
            (b"incr n 18446744073709551517\r\n", "0\r\n"),
            (b"decr n 5\r\nincr n 1000\r\n", "0\r\n1000\r\n"),
            (b"get n\r\n", "VALUE n 3 4\r\n1000\r\nEND\r\n"),
            (b"incr n 1 noreply\r\n", ""),
            (
                b"set x 0 0 2\r\n1x\r\nincr x 1\r\n",
                "STORED\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
            ),
        ],
    );
}

#[test]
fn admin_commands() {
    let version = format!("VERSION {VERSION}\r\n");
    check_table(
        &context(),
        &[
            (b"version\r\n", &version),
            (b"verbosity 1\r\nverbosity 1 noreply\r\n", "OK\r\n"),
            (
                b"set a 0 0 1\r\nx\r\nflush_all\r\nget a\r\n",
                "STORED\r\nOK\r\nEND\r\n",
            ),
            (b"flush_all noreply\r\nflush_all 0\r\n", "OK\r\n"),
            (b"shutdown\r\n", "ERROR: shutdown not enabled\r\n"),
            (b"shutdown graceful\r\n", "ERROR: shutdown not enabled\r\n"),
            (b"stats reset\r\nstats nonsense\r\n", "RESET\r\nERROR\r\n"),
            (
                b"stats detail\r\n",
                "CLIENT_ERROR usage: stats detail on|off|dump\r\n",
            ),
            (b"stats sizes\r\n", "STAT sizes_status disabled\r\nEND\r\n"),
            (b"stats items\r\nstats conns\r\n", "END\r\nEND\r\n"),
        ],
    );
    let ctx = context_with(
        Settings {
            flush_enabled: false,
            ..Settings::default()
        },
        None,
    );
    check_table(
        &ctx,
        &[
            (b"flush_all\r\n", "CLIENT_ERROR flush_all not allowed\r\n"),
            (b"flush_all noreply\r\n", ""),
        ],
    );
}

#[test]
fn quit_closes_without_a_reply() {
    let ctx = context();
    let mut session = MemcacheSession::new();
    let (out, processed) = feed(&ctx, &mut session, b"version\r\nquit\r\nversion\r\n");
    assert_eq!(out, format!("VERSION {VERSION}\r\n"));
    assert_eq!(
        processed,
        Processed {
            consumed: 15,
            close: true,
            ..Processed::default()
        }
    );
}

#[test]
fn stats_agree_with_the_shared_counters() {
    let ctx = context();
    let mut session = MemcacheSession::new();
    let input = b"set a 0 0 1\r\nx\r\nget a b\r\ngets a\r\nmg a v\r\nmg zz\r\ntouch a 0\r\n";
    feed(&ctx, &mut session, input);
    let (stats, _) = feed(&ctx, &mut session, b"stats\r\n");
    for line in [
        "STAT cmd_get 5\r\n",
        "STAT get_hits 3\r\n",
        "STAT get_misses 2\r\n",
        "STAT cmd_set 1\r\n",
        "STAT cmd_touch 1\r\n",
        "STAT cmd_meta 2\r\n",
        "STAT curr_items 1\r\n",
        "STAT strata_pool_backend dram\r\n",
    ] {
        assert!(stats.contains(line), "{line:?} in {stats}");
    }
    assert!(stats.starts_with("STAT pid ") && stats.ends_with("END\r\n"));
    let (settings, _) = feed(&ctx, &mut session, b"stats settings\r\n");
    assert!(
        settings.contains("STAT item_size_max 1048576\r\n"),
        "{settings}"
    );
    assert!(settings.contains("STAT evictions on\r\n"), "{settings}");
    let (items, _) = feed(&ctx, &mut session, b"stats items\r\n");
    assert!(items.starts_with("STAT items:1:number 1\r\n"), "{items}");
    let (slabs, _) = feed(&ctx, &mut session, b"stats slabs\r\n");
    assert!(slabs.contains("STAT active_slabs 1\r\n"), "{slabs}");
    let (reset, _) = feed(&ctx, &mut session, b"stats reset\r\nstats\r\n");
    assert!(reset.starts_with("RESET\r\n") && reset.contains("STAT cmd_get 0\r\n"));
}

#[test]
fn pipelined_and_split_input() {
    let ctx = context();
    let script: &[u8] = b"set a 0 0 5\r\nhello\r\nget a\r\nincr a 1\r\nmn\r\ndelete a\r\n";
    let want = "STORED\r\nVALUE a 0 5\r\nhello\r\nEND\r\n\
                CLIENT_ERROR cannot increment or decrement non-numeric value\r\nMN\r\nDELETED\r\n";
    // Every split point: the first part is processed as far as it is complete, the rest waits.
    for split in 0..=script.len() {
        let mut session = MemcacheSession::new();
        let (first, processed) = feed(&ctx, &mut session, &script[..split]);
        let mut rest = script[processed.consumed..].to_vec();
        let (second, processed) = feed(&ctx, &mut session, &rest);
        rest.drain(..processed.consumed);
        assert!(rest.is_empty(), "split at {split}");
        assert_eq!(first + &second, want, "split at {split}");
    }
}

#[test]
fn partial_requests_consume_nothing() {
    let ctx = context();
    let mut session = MemcacheSession::new();
    for input in [
        &b"get a"[..],
        b"set a 0 0 5\r\nhel",
        b"set a 0 0 5\r\nhello\r",
        b"mn",
    ] {
        let (out, processed) = feed(&ctx, &mut session, input);
        assert_eq!((out.as_str(), processed.consumed), ("", 0), "{input:?}");
    }
}

#[test]
fn malformed_input_keeps_the_connection() {
    check_table(
        &context(),
        &[
            (b"GET a\r\nfoo\r\n\r\n", "ERROR\r\nERROR\r\nERROR\r\n"),
            (b"set a 0 0 1\r\nx\r\n", "STORED\r\n"),
            // memcached drops exactly 2 + 2 bytes; the lone `\n` left is an empty command.
            (
                b"set a 0 0 2\r\nxyz\r\n",
                "CLIENT_ERROR bad data chunk\r\nERROR\r\n",
            ),
            (b"get a\r\n", "VALUE a 0 1\r\nx\r\nEND\r\n"),
            (
                b"set a x 0 1\r\n",
                "CLIENT_ERROR bad command line format\r\n",
            ),
            (
                b"incr a x\r\n",
                "CLIENT_ERROR invalid numeric delta argument\r\n",
            ),
            (
                b"delete a 5\r\n",
                "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n",
            ),
            (b"gat x a\r\n", "CLIENT_ERROR invalid exptime argument\r\n"),
            (b"mg a v v\r\n", "CLIENT_ERROR duplicate flag\r\n"),
            (b"set a 0 0 2 noreply\r\nxyz\r\n", "ERROR\r\n"),
            (b"get a\r\n", "VALUE a 0 1\r\nx\r\nEND\r\n"),
        ],
    );
    let ctx = context();
    let mut session = MemcacheSession::new();
    // Past memcached's 16 KiB read buffer without a newline, as memcached does.
    let mut long = b"set ".to_vec();
    long.resize(16_385, b'k');
    let (out, processed) = feed(&ctx, &mut session, &long);
    assert_eq!(
        (out.as_str(), processed.close),
        ("", true),
        "an endless line closes"
    );
}

#[test]
fn too_large_values_are_refused_swallowed_and_remove_the_old_value() {
    let settings = Settings {
        value_len_max: 10,
        ..Settings::default()
    };
    let ctx = context_with(settings, None);
    let mut session = MemcacheSession::new();
    feed(
        &ctx,
        &mut session,
        b"set k 0 0 1\r\nx\r\nset j 0 0 1\r\ny\r\n",
    );
    // The 11-byte block arrives in two reads; neither part may be read as a command.
    let (out, processed) = feed(&ctx, &mut session, b"set k 0 0 11\r\nget k\r\n");
    assert_eq!(out, "SERVER_ERROR object too large for cache\r\n");
    assert_eq!(processed.consumed, 21);
    let (out, processed) = feed(&ctx, &mut session, b"xxxx\r\nget k j\r\n");
    assert_eq!(out, "VALUE j 0 1\r\ny\r\nEND\r\n");
    assert_eq!(processed.consumed, 15);
    let (out, _) = feed(
        &ctx,
        &mut session,
        b"add j 0 0 11 noreply\r\n0123456789a\r\nget j\r\n",
    );
    assert_eq!(
        out, "VALUE j 0 1\r\ny\r\nEND\r\n",
        "add leaves the old value"
    );
    let (out, _) = feed(
        &ctx,
        &mut session,
        b"ms j 11 q\r\n0123456789a\r\nmg j v\r\n",
    );
    assert_eq!(out, "SERVER_ERROR object too large for cache\r\nEN\r\n");
}

#[test]
fn expiry_follows_memcached_rules() {
    let clock = ManualClock::new(NOW_MS);
    let ctx = context_with(Settings::default(), Some(clock.clone()));
    let absolute = NOW_MS / 1000 + 100;
    let set_absolute = format!("set abs 0 {absolute} 1\r\nx\r\n");
    check_table(
        &ctx,
        &[
            (
                b"set rel 0 100 1\r\nx\r\nset never 0 0 1\r\nx\r\n",
                "STORED\r\nSTORED\r\n",
            ),
            (set_absolute.as_bytes(), "STORED\r\n"),
            (
                b"set past 0 1000000000 1\r\nx\r\nget past\r\n",
                "STORED\r\nEND\r\n",
            ),
            (
                b"set wraps 0 4000000000 1\r\nx\r\nget wraps\r\n",
                "STORED\r\nEND\r\n",
            ),
            (
                b"mg rel t\r\nmg abs t\r\nmg never t\r\n",
                "HD t100\r\nHD t100\r\nHD t-1\r\n",
            ),
        ],
    );
    clock.advance_ms(100_000);
    check_table(
        &ctx,
        &[(b"get rel abs never\r\n", "VALUE never 0 1\r\nx\r\nEND\r\n")],
    );
}

#[test]
fn meta_commands() {
    check_table(
        &context(),
        &[
            (b"mg a v\r\nmg a v q\r\nmn\r\n", "EN\r\nMN\r\n"),
            (b"ms a 2 F5 T0\r\nhi\r\n", "HD\r\n"),
            (b"mg a s v f t k O9\r\n", "VA 2 s2 f5 t-1 ka O9\r\nhi\r\n"),
            (b"mg a\r\nmg a q k\r\n", "HD\r\nHD ka\r\n"),
            (
                b"ms a 2 MA q\r\n!!\r\nms b 1 MA\r\nx\r\nms a 1 ME\r\nx\r\n",
                "NS\r\nNS\r\n",
            ),
            (b"ms a 1 C1\r\nx\r\nms zz 1 C1\r\nx\r\n", "EX\r\nNF\r\n"),
            (b"mg a v\r\n", "VA 4\r\nhi!!\r\n"),
            (b"md a q\r\nmd a\r\nmd a q O7 k\r\n", "NF\r\nNF O7 ka\r\n"),
            (
                b"ma c\r\nma c N0 J10 v\r\nma c MD D20 v\r\n",
                "NF\r\nVA 2\r\n10\r\nVA 1\r\n0\r\n",
            ),
            (b"ma c q D5\r\nma c v k O1\r\n", "VA 1 kc O1\r\n6\r\n"),
            (
                b"mg YQ== b k v\r\nms YQ== 1 b k\r\ny\r\nget a\r\n",
                "EN kYQ== b\r\nHD kYQ== b\r\nVALUE a 0 1\r\ny\r\nEND\r\n",
            ),
            (
                b"mg a E5\r\nmd a x\r\n",
                "HD\r\nCLIENT_ERROR invalid or duplicate flag\r\n",
            ),
            (b"me zz\r\nmn\r\n", "EN\r\nMN\r\n"),
        ],
    );
}

/// `E<cas>` gives the item that CAS wherever a meta command writes it with a new one (memcached
/// after 1.6.18, whose replies these are; 1.6.18 refuses the flag): `ms` in every mode, `ma`
/// updating or creating, `md I`, `mg N` creating. Where nothing gets a new CAS (a refused
/// store, a plain delete, `mg` on a hit, `mg T`) it does nothing. The CAS is the item's for
/// every later command: `gets`, `cas`, `C` compares.
#[test]
fn meta_e_gives_the_written_item_that_cas() {
    check_table(
        &context(),
        &[
            (b"ms a 1 E12345 c\r\nx\r\n", "HD c12345\r\n"),
            (b"mg a c v\r\n", "VA 1 c12345\r\nx\r\n"),
            (b"gets a\r\n", "VALUE a 0 1 12345\r\nx\r\nEND\r\n"),
            (
                b"ms a 1 C1 E9 c\r\nz\r\nms a 1 ME E9\r\nz\r\n",
                "EX\r\nNS\r\n",
            ),
            (b"ms a 1 C12345 E777 c\r\ny\r\n", "HD c777\r\n"),
            (b"ms a 1 MA E778 c k\r\n!\r\n", "HD c778 ka\r\n"),
            (
                b"mg a c v E1\r\nmg a T100 E2 c\r\n",
                "VA 2 c778\r\ny!\r\nHD c778\r\n",
            ),
            (
                b"cas a 0 0 1 778\r\nz\r\nmg a v\r\n",
                "STORED\r\nVA 1\r\nz\r\n",
            ),
            (b"ms b 1 ME E0 c\r\nx\r\nms b 1 C0 q\r\ny\r\n", "HD c0\r\n"),
            (b"ma n N0 J5 E42 c v\r\n", "VA 1 c42\r\n5\r\n"),
            (
                b"ma n E43 c\r\nma n C1 E44\r\nma zz E45\r\n",
                "HD c43\r\nEX\r\nNF\r\n",
            ),
            (
                b"mg n c v\r\nmd n E99\r\nmg n\r\n",
                "VA 1 c43\r\n6\r\nHD\r\nEN\r\n",
            ),
            (
                b"mg z E5\r\nmg z N30 E600 c v\r\n",
                "EN\r\nVA 0 c600 W\r\n\r\n",
            ),
            (b"mg z N30 E700 c\r\n", "HD c600 Z\r\n"),
            (
                b"md z I E500 T30\r\nmg z c v\r\n",
                "HD\r\nVA 0 c500 X W\r\n\r\n",
            ),
            // The lease recorded for CAS 500 does not carry over to a new item given CAS 500.
            (
                b"ms z 1 E500\r\nx\r\nmg z c v\r\n",
                "HD\r\nVA 1 c500\r\nx\r\n",
            ),
        ],
    );
}

/// `h` is whether the item was read since it was written, before this access (memcached bumps
/// after answering); the replies are memcached 1.6.18's. Reads: `get` and `mg` (not with `u`),
/// touches (`touch`, `gat`, `mg T`) and `mg N` on a hit. Writes start over. `me` shows the same
/// state as `fetch=` without being a read itself, and leaves out `la=`; `mg` refuses `l`.
#[test]
fn meta_h_is_read_since_written() {
    check_table(
        &context(),
        &[
            (
                b"ms a 1\r\nx\r\nmg a h u\r\nmg a h u\r\n",
                "HD\r\nHD h0\r\nHD h0\r\n",
            ),
            (b"mg a h\r\nmg a h v\r\n", "HD h0\r\nVA 1 h1\r\nx\r\n"),
            (b"ms a 1\r\ny\r\nmg a h\r\n", "HD\r\nHD h0\r\n"),
            (
                b"get a\r\nmg a h\r\n",
                "VALUE a 0 1\r\ny\r\nEND\r\nHD h1\r\n",
            ),
            (b"ms a 1 MA\r\n!\r\nmg a h\r\n", "HD\r\nHD h0\r\n"),
            (
                b"ms b 1\r\nx\r\ntouch b 100\r\nmg b h\r\n",
                "HD\r\nTOUCHED\r\nHD h1\r\n",
            ),
            (
                b"ms c 1\r\nx\r\ngat 100 c\r\nmg c h\r\n",
                "HD\r\nVALUE c 0 1\r\nx\r\nEND\r\nHD h1\r\n",
            ),
            (
                b"ms d 1\r\nx\r\nmg d T100 h\r\nmg d h\r\n",
                "HD\r\nHD h0\r\nHD h1\r\n",
            ),
            (
                b"ms e 1\r\nx\r\nmg e N30 h\r\nmg e h\r\n",
                "HD\r\nHD h0\r\nHD h1\r\n",
            ),
            (
                b"ms f 1 E7\r\nx\r\nme f\r\n",
                "HD\r\nME f exp=-1 cas=7 fetch=no cls=1 size=58\r\n",
            ),
            (
                b"me f\r\nmg f\r\n",
                "ME f exp=-1 cas=7 fetch=no cls=1 size=58\r\nHD\r\n",
            ),
            (b"me f\r\n", "ME f exp=-1 cas=7 fetch=yes cls=1 size=58\r\n"),
            (
                b"mg f l\r\nmg f v h l\r\n",
                "CLIENT_ERROR invalid flag\r\nCLIENT_ERROR invalid flag\r\n",
            ),
            (b"md f l q\r\nmg f\r\n", "EN\r\n"),
        ],
    );
}

#[test]
fn meta_stale_while_revalidate() {
    check_table(
        &context(),
        &[
            (b"mg v N30 v t\r\n", "VA 0 t30 W\r\n\r\n"),
            (b"mg v N30 v t\r\nmg v\r\n", "VA 0 t30 Z\r\n\r\nHD Z\r\n"),
            (b"ms v 3\r\nnew\r\nmg v v\r\n", "HD\r\nVA 3\r\nnew\r\n"),
            (
                b"md v I T30\r\nmg v v t\r\n",
                "HD\r\nVA 3 t30 X W\r\nnew\r\n",
            ),
            (b"mg v v\r\n", "VA 3 Z X\r\nnew\r\n"),
            (
                b"ms r 1 T100\r\nx\r\nmg r R30\r\nmg r R200\r\nmg r R200\r\n",
                "HD\r\nHD\r\nHD W\r\nHD Z\r\n",
            ),
        ],
    );
}

/// Requests are parsed a batch at a time. A long pipeline of stores and gets (one get with more
/// keys than a batch prefetches) answers in order, each get seeing the store before it; a
/// too-large store in the middle of a batch still swallows its data block, which holds text that
/// would parse as commands, and the pipeline goes on after it.
#[test]
fn a_long_pipeline_runs_in_order_across_batches() {
    let settings = Settings {
        value_len_max: 100,
        ..Settings::default()
    };
    let ctx = context_with(settings, None);
    let mut session = MemcacheSession::new();
    let mut input = Vec::new();
    let mut want = String::new();
    let rounds = 3 * strata_engine::PREFETCH_KEYS_MAX + 5;
    for i in 0..rounds {
        let key = format!("k{}", i % 7);
        let value = format!("v{i}");
        input.extend_from_slice(format!("set {key} 0 0 {}\r\n{value}\r\n", value.len()).as_bytes());
        input.extend_from_slice(format!("get {key}\r\n").as_bytes());
        want.push_str("STORED\r\n");
        want.push_str(&format!(
            "VALUE {key} 0 {}\r\n{value}\r\nEND\r\n",
            value.len()
        ));
        if i == rounds / 2 {
            let block = "get k0\r\n".repeat(13); // 104 bytes: over the limit
            input
                .extend_from_slice(format!("set k0 0 0 {}\r\n{block}\r\n", block.len()).as_bytes());
            want.push_str("SERVER_ERROR object too large for cache\r\n");
        }
    }
    let keys: Vec<String> = (0..40).map(|i| format!("k{}", i % 7)).collect();
    input.extend_from_slice(format!("get {}\r\n", keys.join(" ")).as_bytes());
    // Every key was stored again in the last seven rounds, after the refused store.
    for key in &keys {
        let n: usize = key[1..].parse().unwrap();
        let i = (rounds - 7..rounds).find(|i| i % 7 == n).unwrap();
        let value = format!("v{i}");
        want.push_str(&format!("VALUE {key} 0 {}\r\n{value}\r\n", value.len()));
    }
    want.push_str("END\r\n");
    let (out, processed) = feed(&ctx, &mut session, &input);
    assert_eq!(out, want);
    assert_eq!(
        processed,
        Processed {
            consumed: input.len(),
            close: false,
            ..Processed::default()
        }
    );
}

/// `cache_memlimit` sets the memory tier's limit (what `stats settings`' `maxbytes` then
/// reports); one below what the shards need fails as memcached's out-of-bounds adjustment, one
/// at or past the pool means the whole pool.
#[test]
fn cache_memlimit_sets_the_memory_tier_limit() {
    let ctx = context();
    let pool = ctx.engine.stats().memory_bytes;
    check_table(
        &ctx,
        &[
            (b"cache_memlimit 32\r\n", "OK\r\n"),
            (
                b"cache_memlimit 8\r\n",
                "MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust\r\n",
            ),
        ],
    );
    let capped = ctx.engine.stats().memory_limit_bytes;
    assert!(capped <= 32 << 20 && capped > 30 << 20, "{capped}");
    let mut session = MemcacheSession::new();
    let (settings, _) = feed(&ctx, &mut session, b"stats settings\r\n");
    assert!(
        settings.contains(&format!("STAT maxbytes {capped}\r\n")),
        "{settings}"
    );
    check_table(&ctx, &[(b"cache_memlimit 100000\r\n", "OK\r\n")]);
    assert_eq!(ctx.engine.stats().memory_limit_bytes, pool);
}

/// A metadump of more items than one call dumps pauses, unconsumed, and resumes from its
/// cursor when the request is fed again (as the connection does once the output is written):
/// every item is listed exactly once, then `END`, and the request after it runs.
#[test]
fn a_long_metadump_pauses_and_resumes_listing_every_item_once() {
    let ctx = context();
    let mut session = MemcacheSession::new();
    let items = 10_000;
    let mut stores = Vec::new();
    for i in 0..items {
        stores.extend_from_slice(format!("set key:{i} 0 0 1 noreply\r\nx\r\n").as_bytes());
    }
    let (_, processed) = feed(&ctx, &mut session, &stores);
    assert_eq!(processed.consumed, stores.len());
    let input = b"lru_crawler metadump all\r\nversion\r\n";
    let mut text = String::new();
    let mut calls = 0;
    loop {
        let (out, processed) = feed(&ctx, &mut session, input);
        text.push_str(&out);
        calls += 1;
        if !processed.paused {
            assert_eq!(processed.consumed, input.len());
            break;
        }
        assert_eq!(processed.consumed, 0, "the paused dump stays unconsumed");
        let bound = 2 * super::dump::KEYS_PER_CALL_MAX;
        assert!(out.lines().count() <= bound, "bounded per call");
    }
    assert!(calls > 1, "paused at least once");
    let (dump, after) = text.split_once("END\r\n").expect("END");
    assert!(after.starts_with("VERSION "), "{after}");
    let mut keys: Vec<&str> = dump
        .lines()
        .map(|line| {
            assert!(line.contains(" cls=1 size="), "{line}");
            line.split(' ').next().unwrap()
        })
        .collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), items, "each item once");
    assert!(dump
        .lines()
        .all(|l| l.contains(" exp=-1 la=0 cas=") && l.contains(" fetch=no ")));
}
