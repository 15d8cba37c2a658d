//! Hashes on a session: past the limit of one record, and what the rewrites keep.

use std::sync::Arc;

use strata_engine::{Engine, EngineConfig};

use super::*;

/// A hash past the largest value is kept in chunks (a large hash), so three fields of 400 KiB
/// each, which one record could not hold, are all there; a field too large for any record is
/// refused with the value error, and the hash keeps what it had. (Fields share a chunk by a
/// random seed: two of 600 KiB met in one chunk, past the record limit, one run in about a
/// thousand; any two of these fit one record, all three meet one run in about a million.)
#[test]
fn a_hash_past_the_largest_value_is_kept_in_chunks() {
    let ctx = context(Settings::default());
    let mut session = RespSession::new(1);
    let big = "v".repeat(400 * 1024);
    for field in ["a", "b", "d"] {
        assert_eq!(
            run_args(&mut session, &ctx, &["HSET", "h", field, &big]),
            b":1\r\n"
        );
    }
    assert_eq!(run(&mut session, &ctx, "HLEN h"), b":3\r\n");
    assert_eq!(run(&mut session, &ctx, "HSTRLEN h b"), b":409600\r\n");
    assert_eq!(
        run(&mut session, &ctx, "OBJECT ENCODING h"),
        b"$9\r\nhashtable\r\n"
    );
    let huge = "v".repeat(2 << 20);
    let refused = run_args(&mut session, &ctx, &["HSET", "h", "c", &huge]);
    assert!(
        refused.starts_with(b"-"),
        "{}",
        String::from_utf8_lossy(&refused)
    );
    assert_eq!(run(&mut session, &ctx, "HLEN h"), b":3\r\n");
    assert_eq!(run(&mut session, &ctx, "HEXISTS h c"), b":0\r\n");
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

/// A hash whose stored encoding is damaged (what only a bug could write: records are
/// checksummed) is never read past the damage: a read by name answers the fields its walk
/// reaches before it and refuses the others, whole (HMGET sends no partial array); every read
/// that walks all the fields refuses it (HGETALL's reply so far is taken back). A write that
/// replaces one field walks to it: before the damage it writes, copying the entries after the
/// field as they are (the damage stays, as refused as before); at or past it, and for the
/// writes that walk every field, it refuses and leaves the hash as it was.
#[test]
fn a_damaged_hash_is_read_only_up_to_its_damage() {
    let ctx = context(Settings::default());
    let mut session = RespSession::new(1);
    run(&mut session, &ctx, "HSET h a 1 b 22 c 333");
    let stored = ctx.engine.peek(b"h", |item| item.value.to_vec()).unwrap();
    // The last entry cut short: `a` and `b` lie before the damage, `c` in it.
    let damaged = stored[..stored.len() - 1].to_vec();
    ctx.engine
        .modify(b"h", |_, buffer| {
            buffer.extend_from_slice(&damaged);
            strata_engine::Change::WriteKind {
                kind: strata_engine::Kind::Hash,
                expiry: strata_engine::Expiry::Never,
            }
        })
        .unwrap();
    let refused = b"-ERR the stored hash is damaged (strata could not decode it)\r\n";
    assert_eq!(run(&mut session, &ctx, "HGET h a"), b"$1\r\n1\r\n");
    assert_eq!(run(&mut session, &ctx, "HSTRLEN h b"), b":2\r\n");
    // HLEN answers the header's count, as Redis answers HLEN in O(1): no entry is read.
    assert_eq!(run(&mut session, &ctx, "HLEN h"), b":3\r\n");
    for command in [
        "HGET h c",
        "HGET h absent",
        "HEXISTS h absent",
        "HSTRLEN h c",
        "HMGET h a c",
        "HGETALL h",
        "HKEYS h",
        "HVALS h",
        "HSET h c 9",
        "HSET h absent 9",
        "HSET h a 9 b 9",
        "HDEL h c",
        "HDEL h absent",
        "HDEL h a b",
        "HINCRBY h c 1",
        "HINCRBY h absent 1",
    ] {
        assert_eq!(run(&mut session, &ctx, command), refused, "{command}");
    }
    let now = ctx.engine.peek(b"h", |item| item.value.to_vec()).unwrap();
    assert_eq!(now, damaged, "left as it was");
    assert_eq!(run(&mut session, &ctx, "HINCRBY h a 9"), b":10\r\n");
    assert_eq!(run(&mut session, &ctx, "HSET h b 0"), b":0\r\n");
    assert_eq!(
        run(&mut session, &ctx, "HMGET h a b"),
        b"*2\r\n$2\r\n10\r\n$1\r\n0\r\n"
    );
    assert_eq!(
        run(&mut session, &ctx, "HGET h c"),
        refused,
        "the damage stays"
    );
}

/// HSET on a hash with no expiring field copies the runs between the fields it sets in one
/// checked walk: the encoding it writes is the one built field by field, whichever fields it
/// updates (first, middle, last, one named twice) and adds.
#[test]
fn hset_without_expiring_fields_writes_what_a_build_writes() {
    use strata_types::hash::{Builder, Field};
    let ctx = context(Settings::default());
    let mut session = RespSession::new(1);
    run(&mut session, &ctx, "HSET h a 1 b 22 c 333 d 4444");
    assert_eq!(
        run(&mut session, &ctx, "HSET h a x c yy d zzz a w e 5 f 6 e 7"),
        b":2\r\n"
    );
    let stored = ctx.engine.peek(b"h", |item| item.value.to_vec()).unwrap();
    let mut expected = Vec::new();
    let mut builder = Builder::new(&mut expected);
    for (name, value) in [
        ("a", "w"),
        ("b", "22"),
        ("c", "yy"),
        ("d", "zzz"),
        ("e", "7"),
        ("f", "6"),
    ] {
        builder.push(Field {
            name: name.as_bytes(),
            value: value.as_bytes(),
            expires_at_ms: None,
        });
    }
    builder.finish(None);
    assert_eq!(stored, expected);
    assert_eq!(run(&mut session, &ctx, "HSET h b 0"), b":0\r\n");
    assert_eq!(
        run(&mut session, &ctx, "HMGET h a b f"),
        b"*3\r\n$1\r\nw\r\n$1\r\n0\r\n$1\r\n6\r\n"
    );
}
