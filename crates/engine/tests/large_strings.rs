//! Strings longer than one record holds (`api::large`): written in parts by a transaction,
//! read joined, appended to, touched, overwritten by shorter and longer values, deleted,
//! evicted whole, reopened, and put back whole by a crash in the middle of their writes.
#![allow(
    clippy::too_many_lines,
    reason = "a test scenario reads best as one function"
)]

use std::collections::HashMap;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use strata_engine::*;

mod support;
use support::{crash_copy, flip_in_file, temp_pool, value};

/// Segments of 64 KiB: a string past about 64 KiB takes parts (of 28 KiB).
const SEGMENT_BYTES: u64 = 64 << 10;

fn config(memory_bytes: u64) -> EngineConfig {
    EngineConfig {
        memory_bytes,
        segment_size_bytes: SEGMENT_BYTES,
        value_len_max: 4 << 20,
        ..EngineConfig::default()
    }
}

/// The value at `key`, read joined and read again in pieces (`Engine::get_pieces`, which must
/// agree: the same bytes, or absent for both).
fn get(engine: &Engine, key: &[u8]) -> Option<Vec<u8>> {
    let joined = engine.get(key, |item| item.value.to_vec());
    let pieces = engine.get_pieces(key, false, |item, pieces| {
        assert!(
            pieces.len() == 1 || item.value.is_empty(),
            "a large string's value is its pieces"
        );
        assert_eq!(pieces.len() > 1, item.parts > 1, "one piece a part");
        pieces.concat()
    });
    assert!(joined == pieces, "{key:?}: joined and in pieces differ");
    joined
}

#[test]
fn large_strings_round_trip_and_shrink_grow_append_and_delete() {
    let engine = Engine::open(config(64 << 20)).unwrap();
    let one_record = engine.record_value_len_max(1);
    assert!(one_record < 64 << 10);
    assert_eq!(engine.value_len_max(), 4 << 20);
    let parts_before = engine.stats().items;
    for (tag, len) in [
        (1, 3 << 20),
        (2, one_record + 1),
        (3, 4 << 20),
        (4, 100),
        (5, 1 << 20),
    ] {
        engine
            .set(b"k", &value(tag, len), 9, Expiry::Never)
            .unwrap();
        let got = get(&engine, b"k").unwrap();
        assert_eq!(got.len(), len, "tag {tag}");
        assert!(got == value(tag, len), "tag {tag}: the bytes written");
        assert_eq!(engine.get(b"k", |item| item.client_flags), Some(9));
    }
    assert_eq!(
        engine.stats().items,
        parts_before + 1,
        "one item, whatever its parts"
    );
    // Append to a large one, and past the limit.
    engine.concat(b"k", b"tail", false).unwrap().unwrap();
    let mut expected = value(5, 1 << 20);
    expected.extend_from_slice(b"tail");
    assert!(get(&engine, b"k").unwrap() == expected);
    engine.concat(b"k", b"head", true).unwrap().unwrap();
    expected.splice(0..0, *b"head");
    assert!(get(&engine, b"k").unwrap() == expected);
    engine
        .set(b"k", &value(6, 4 << 20), 0, Expiry::Never)
        .unwrap();
    assert!(matches!(
        engine.concat(b"k", b"x", false),
        Err(WriteError::TooLarge { .. })
    ));
    assert!(
        get(&engine, b"k").unwrap() == value(6, 4 << 20),
        "the refused append"
    );
    assert!(matches!(
        engine.set(b"k", &vec![0; (4 << 20) + 1], 0, Expiry::Never),
        Err(WriteError::TooLarge { .. })
    ));
    // A touch keeps it whole; a conditional store sees it; a delete takes every part.
    let cas = engine.get(b"k", |item| item.cas).unwrap();
    assert!(engine.touch(b"k", Expiry::AtMs(u64::MAX / 2)).unwrap());
    assert_eq!(engine.get(b"k", |item| item.cas), Some(cas));
    assert!(get(&engine, b"k").unwrap() == value(6, 4 << 20));
    let absent_only = StoreOptions {
        condition: Condition::IfAbsent,
        ..StoreOptions::default()
    };
    let refused = engine.store(b"k", &value(7, 2 << 20), absent_only).unwrap();
    assert_eq!(refused, StoreOutcome::NotStored);
    let stored = engine
        .store(b"new", &value(7, 2 << 20), absent_only)
        .unwrap();
    assert!(matches!(stored, StoreOutcome::Stored(_)));
    assert!(get(&engine, b"new").unwrap() == value(7, 2 << 20));
    let usage = engine.memory_usage(b"new").unwrap();
    assert!(usage > 2 << 20 && usage < (2 << 20) + (64 << 10), "{usage}");
    assert_eq!(engine.delete(b"k", None).unwrap(), DeleteOutcome::Deleted);
    assert_eq!(get(&engine, b"k"), None);
    assert_eq!(engine.stats().items, parts_before + 1, "only `new` is left");
    engine.check_integrity().unwrap();
}

/// Random sets (short and long), appends, touches and deletes of a few keys against a map, in
/// a memory tier roomy enough that nothing is evicted: every read is exact.
#[test]
fn a_model_of_large_and_small_strings_agrees_with_the_engine() {
    let engine = Engine::open(config(128 << 20)).unwrap();
    let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    let mut rng = SmallRng::seed_from_u64(18);
    for step in 0..600u32 {
        let key = format!("key{}", rng.gen_range(0..6)).into_bytes();
        match rng.gen_range(0..10) {
            0..=3 => {
                let len = match rng.gen_range(0..3) {
                    0 => rng.gen_range(0..2000),
                    1 => rng.gen_range(60 << 10..200 << 10),
                    _ => rng.gen_range(200 << 10..1 << 20),
                };
                let bytes = value(step, len);
                engine.set(&key, &bytes, 0, Expiry::Never).unwrap();
                model.insert(key.clone(), bytes);
            }
            4..=5 => {
                let data = value(step, rng.gen_range(1..40 << 10));
                let prepend = rng.gen_bool(0.3);
                let done = engine.concat(&key, &data, prepend).unwrap().is_some();
                assert_eq!(done, model.contains_key(&key), "step {step}");
                if let Some(old) = model.get_mut(&key) {
                    if prepend {
                        old.splice(0..0, data);
                    } else {
                        old.extend_from_slice(&data);
                    }
                }
            }
            6 => {
                let found = engine.touch(&key, Expiry::Never).unwrap();
                assert_eq!(found, model.contains_key(&key), "step {step}");
            }
            7 => {
                let deleted = engine.delete(&key, None).unwrap() == DeleteOutcome::Deleted;
                assert_eq!(deleted, model.remove(&key).is_some(), "step {step}");
            }
            _ => {}
        }
        let got = get(&engine, &key);
        assert!(got.as_ref() == model.get(&key), "step {step}: {key:?}");
    }
    for (key, bytes) in &model {
        assert!(get(&engine, key).as_ref() == Some(bytes));
    }
    assert_eq!(engine.len(), model.len());
    engine.check_integrity().unwrap();
}

/// Long strings written over and over in a memory tier that holds a few: eviction takes them
/// whole (a read is the latest write or absent, never other bytes) and the newest fits.
#[test]
fn eviction_takes_large_strings_whole() {
    let engine = Engine::open(config(4 << 20)).unwrap();
    let mut latest: HashMap<u32, u32> = HashMap::new();
    let mut rng = SmallRng::seed_from_u64(7);
    for step in 0..200u32 {
        let key = rng.gen_range(0..20u32);
        let len = 300 << 10;
        engine
            .set(
                format!("k{key}").as_bytes(),
                &value(step, len),
                0,
                Expiry::Never,
            )
            .unwrap();
        latest.insert(key, step);
        for (key, step) in &latest {
            if let Some(got) = get(&engine, format!("k{key}").as_bytes()) {
                assert!(got == value(*step, len), "k{key}: not its latest write");
            }
        }
    }
    assert!(
        engine.stats().evicted_items > 0,
        "the tier was too small to keep them all"
    );
    let kept = (0..20u32)
        .filter(|key| engine.contains(format!("k{key}").as_bytes()))
        .count();
    assert!(kept >= 4, "it keeps what fits: {kept}");
    engine.check_integrity().unwrap();
}

/// A large string survives a clean reopen, and a crash inside the transaction that rewrites
/// it (shorter, longer) puts the old one back whole, under both durabilities and index
/// placements; after the transaction, the new one is there.
#[test]
fn a_crash_inside_a_large_strings_write_puts_the_old_one_back_whole() {
    for durability in [Durability::None, Durability::Sync] {
        for placement in [IndexPlacement::Dram, IndexPlacement::Pool] {
            for new_len in [200 << 10, 3 << 20, 500] {
                let label = format!("{durability:?} {placement:?} {new_len}");
                let original = temp_pool(&format!("large-{durability:?}-{placement:?}"));
                let crashed = temp_pool(&format!("large-{durability:?}-{placement:?}-crashed"));
                let config = |path: &std::path::Path| EngineConfig {
                    pool: PoolLocation::File(path.to_path_buf()),
                    durability,
                    index_placement: placement,
                    ..config(16 << 20)
                };
                {
                    let engine = Engine::open(EngineConfig {
                        fresh: true,
                        ..config(&original.0)
                    })
                    .unwrap();
                    engine
                        .set(b"s", &value(1, 1 << 20), 0, Expiry::Never)
                        .unwrap();
                    engine.commit().unwrap();
                    let txn = engine.transaction(&[], &[b"s"]).unwrap();
                    txn.set(b"s", &value(2, new_len), 0, Expiry::Never).unwrap();
                    crash_copy(&original.0, &crashed.0);
                    txn.finish().unwrap();
                    assert!(get(&engine, b"s").unwrap() == value(2, new_len), "{label}");
                    engine.check_integrity().unwrap();
                }
                let engine = Engine::open(config(&crashed.0)).unwrap();
                assert!(
                    engine.recovery_report().transaction_keys_restored > 0,
                    "{label}"
                );
                let got = get(&engine, b"s").expect("the old string");
                assert!(got == value(1, 1 << 20), "{label}: the old string, whole");
                engine.check_integrity().unwrap();
                drop(engine);
                let engine = Engine::open(config(&original.0)).unwrap();
                let got = get(&engine, b"s").expect("the new string");
                assert!(got == value(2, new_len), "{label}: after a clean close");
            }
        }
    }
}

/// A power cut under deferred durability on a pool with no transaction log (the simulator's)
/// may keep some parts of a rewrite and not others; strings of one length rewritten in place
/// then hold parts of two writes, which the header's checksum tells: every key reads as one of
/// its writes, whole, or as absent, never as a mix.
#[test]
fn a_power_cut_never_serves_a_string_mixed_from_two_writes() {
    use strata_pool::testing::SimulatedPersistence;
    use strata_pool::Pool;
    const LEN: usize = 150 << 10;
    let mut mixes_refused = 0;
    for seed in 0..24u64 {
        let config = EngineConfig {
            pool: PoolLocation::Simulated(SimulatedPersistence::new()),
            durability: Durability::Interval { ms: 60_000 },
            ..config(16 << 20)
        };
        let PoolLocation::Simulated(simulation) = &config.pool else {
            unreachable!()
        };
        let engine = Engine::open(config.clone()).unwrap();
        let keys: Vec<Vec<u8>> = (0..4).map(|i| format!("s{i}").into_bytes()).collect();
        for key in &keys {
            engine.set(key, &value(1, LEN), 0, Expiry::Never).unwrap();
        }
        engine.commit().unwrap();
        for (i, key) in keys.iter().enumerate() {
            engine
                .set(key, &value(2 + i as u32, LEN), 0, Expiry::Never)
                .unwrap();
        }
        let mut rng = SmallRng::seed_from_u64(seed);
        let image = engine.crash_image(simulation, &mut |_| rng.gen_bool(0.5));
        drop(engine);
        let pool = Pool::open_image(&image, SimulatedPersistence::new()).unwrap();
        let engine = Engine::from_pool(pool, &config).unwrap();
        engine.check_integrity().unwrap();
        for (i, key) in keys.iter().enumerate() {
            match get(&engine, key) {
                None => mixes_refused += 1,
                Some(got) => assert!(
                    got == value(1, LEN) || got == value(2 + i as u32, LEN),
                    "seed {seed}: {key:?} holds bytes of no single write"
                ),
            }
        }
    }
    assert!(
        mixes_refused > 0,
        "some cut kept a mix for the checksum to refuse"
    );
}

/// A flipped byte in one part of a large string in the pool file, after a clean close and
/// after a crash: the string is never served (whole or damaged); another large string beside
/// it is served whole, and the pool takes new ones.
#[test]
fn a_flipped_byte_in_a_part_drops_that_string_and_serves_no_other_bytes() {
    let mut rng = SmallRng::seed_from_u64(5);
    let hit: Vec<u8> = (0..300 << 10).map(|_| rng.gen()).collect();
    for crash in [false, true] {
        let pool = temp_pool(&format!("large-flip-{crash}"));
        let crashed = temp_pool(&format!("large-flip-{crash}-crashed"));
        let config = |path: &std::path::Path| EngineConfig {
            pool: PoolLocation::File(path.to_path_buf()),
            ..config(16 << 20)
        };
        {
            let engine = Engine::open(EngineConfig {
                fresh: true,
                ..config(&pool.0)
            })
            .unwrap();
            engine.set(b"hit", &hit, 0, Expiry::Never).unwrap();
            engine
                .set(b"kept", &value(2, 300 << 10), 0, Expiry::Never)
                .unwrap();
            if crash {
                crash_copy(&pool.0, &crashed.0);
            } else {
                engine.close().unwrap();
            }
        }
        let path = if crash { &crashed.0 } else { &pool.0 };
        // Random bytes from the middle of `hit`'s second part: they occur once.
        flip_in_file(path, &hit[200_000..200_064], 10);
        let engine = Engine::open(config(path)).unwrap();
        while !engine.scrub_done() {
            engine.scrub_step();
        }
        let served = get(&engine, b"hit").map(|bytes| bytes == hit);
        assert_eq!(
            served, None,
            "crash {crash}: the damaged string (Some(whole?))"
        );
        let kept = get(&engine, b"kept").map(|bytes| bytes == value(2, 300 << 10));
        assert_eq!(kept, Some(true), "crash {crash}");
        engine
            .set(b"new", &value(3, 200 << 10), 0, Expiry::Never)
            .unwrap();
        assert!(get(&engine, b"new").unwrap() == value(3, 200 << 10));
        engine.check_integrity().unwrap();
    }
}

/// Under `--eviction none`, a large string that does not fit is refused with OutOfMemory:
/// a key that held one record keeps it; a key that held a large string loses it whole (its
/// parts may be replaced already) and never reads as a mix; the shard takes writes after.
#[test]
fn out_of_memory_in_the_middle_of_a_large_write_serves_no_mix() {
    let engine = Engine::open(EngineConfig {
        eviction: EvictionPolicy::None,
        ..config(4 << 20)
    })
    .unwrap();
    engine.set(b"small", b"old", 0, Expiry::Never).unwrap();
    engine
        .set(b"large", &value(1, 500 << 10), 0, Expiry::Never)
        .unwrap();
    let too_big = value(2, 4 << 20);
    for key in [&b"small"[..], b"large"] {
        assert!(matches!(
            engine.set(key, &too_big, 0, Expiry::Never),
            Err(WriteError::OutOfMemory)
        ));
    }
    assert_eq!(
        get(&engine, b"small"),
        Some(b"old".to_vec()),
        "one record: kept"
    );
    assert_eq!(
        get(&engine, b"large"),
        None,
        "a large string: dropped whole"
    );
    engine.check_integrity().unwrap();
    engine
        .set(b"after", &value(3, 200 << 10), 0, Expiry::Never)
        .unwrap();
    assert!(get(&engine, b"after").unwrap() == value(3, 200 << 10));
}
