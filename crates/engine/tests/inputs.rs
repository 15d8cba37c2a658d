//! Bad input: every refusal is a typed error and leaves stored data alone.

use strata_engine::*;

fn engine() -> Engine {
    Engine::open(EngineConfig {
        memory_bytes: 4 << 20,
        segment_size_bytes: 64 << 10,
        value_len_max: 32 << 10,
        ..EngineConfig::default()
    })
    .unwrap()
}

#[test]
fn empty_and_oversize_keys_are_refused() {
    let engine = engine();
    assert_eq!(
        engine.set(b"", b"v", 0, Expiry::Never),
        Err(WriteError::KeyEmpty)
    );
    let long = vec![b'k'; KEY_LEN_MAX + 1];
    assert_eq!(
        engine.set(&long, b"v", 0, Expiry::Never),
        Err(WriteError::KeyTooLong {
            len: KEY_LEN_MAX + 1,
            max: KEY_LEN_MAX
        })
    );
    let longest_allowed = vec![b'k'; 60_000];
    engine
        .set(&longest_allowed, b"v", 0, Expiry::Never)
        .unwrap();
    assert_eq!(
        engine.get(&longest_allowed, |i| i.value.to_vec()),
        Some(b"v".to_vec())
    );
}

#[test]
fn oversize_values_are_refused_and_the_old_value_stays() {
    let engine = engine();
    engine.set(b"k", b"old", 0, Expiry::Never).unwrap();
    let err = engine
        .set(b"k", &vec![0u8; (32 << 10) + 1], 0, Expiry::Never)
        .unwrap_err();
    assert!(matches!(err, WriteError::TooLarge { len, .. } if len == (32 << 10) + 1));
    assert_eq!(
        engine.get(b"k", |i| i.value.to_vec()),
        Some(b"old".to_vec())
    );
    engine
        .set(b"k", &vec![1u8; 32 << 10], 0, Expiry::Never)
        .unwrap();
    assert_eq!(engine.get(b"k", |i| i.value.len()), Some(32 << 10));
    let err = engine.concat(b"k", b"x", false).unwrap_err();
    assert!(
        matches!(err, WriteError::TooLarge { .. }),
        "append past the limit is refused"
    );
}

#[test]
fn a_string_past_a_segment_is_accepted_up_to_the_configured_limit() {
    let engine = Engine::open(EngineConfig {
        memory_bytes: 4 << 20,
        segment_size_bytes: 64 << 10,
        value_len_max: 1 << 20,
        ..EngineConfig::default()
    })
    .unwrap();
    let max = engine.value_len_max();
    assert_eq!(max, 1 << 20);
    assert_eq!(max, engine.value_len_max_for_key(250));
    let one_record = engine.record_value_len_max(250);
    assert!(one_record < 64 << 10 && one_record > 60 << 10);
    assert!(engine.record_value_len_max(1000) < one_record);
    engine
        .set(b"big", &vec![7u8; max], 0, Expiry::Never)
        .unwrap();
    assert_eq!(engine.get(b"big", |i| i.value.len()), Some(max));
    assert!(matches!(
        engine.set(b"big", &vec![7u8; max + 1], 0, Expiry::Never),
        Err(WriteError::TooLarge { .. })
    ));
}

#[test]
fn past_expiry_deletes_and_expiry_is_exact() {
    let clock = ManualClock::new(1_000_000);
    let engine = Engine::open(EngineConfig {
        clock: std::sync::Arc::new(clock.clone()),
        ..EngineConfig::default()
    })
    .unwrap();
    engine.set(b"k", b"v", 0, Expiry::Never).unwrap();
    engine.set(b"k", b"v2", 0, Expiry::AtMs(999_999)).unwrap();
    assert!(!engine.contains(b"k"), "a past expiry deletes the item");
    engine.set(b"t", b"v", 0, Expiry::AtMs(1_000_500)).unwrap();
    clock.set_ms(1_000_499);
    assert!(engine.contains(b"t"));
    clock.set_ms(1_000_500);
    assert!(
        !engine.contains(b"t"),
        "gone exactly at its expiry, not a bucket width early or late"
    );
}

#[test]
fn bad_configuration_is_refused_with_a_reason() {
    for (config, reason) in [
        (
            EngineConfig {
                segment_size_bytes: 16 << 20,
                ..Default::default()
            },
            "at most 8 MiB",
        ),
        (
            EngineConfig {
                segment_size_bytes: 5000,
                ..Default::default()
            },
            "multiple of 4 KiB",
        ),
        (
            EngineConfig {
                memory_bytes: 4096,
                segment_size_bytes: 4096,
                ..Default::default()
            },
            "two segments",
        ),
        (
            EngineConfig {
                shard_count: 0,
                ..Default::default()
            },
            "shard count",
        ),
    ] {
        let err = Engine::open(config).unwrap_err().to_string();
        assert!(err.contains(reason), "{err}");
    }
}

#[test]
fn a_failed_persist_refuses_every_later_write() {
    let dir = std::env::temp_dir().join(format!("strata-engine-fault-{}", std::process::id()));
    let config = EngineConfig {
        memory_bytes: 1 << 20,
        segment_size_bytes: 64 << 10,
        pool: PoolLocation::Simulated(strata_pool::testing::SimulatedPersistence::failing_from(30)),
        durability: Durability::Sync,
        ..EngineConfig::default()
    };
    let _ = dir;
    let engine = Engine::open(config).unwrap();
    let mut first_error = None;
    for i in 0..100u32 {
        if let Err(err) = engine.set(format!("k{i}").as_bytes(), b"value", 0, Expiry::Never) {
            first_error.get_or_insert(i);
            let WriteError::Persist(persist) = err else {
                panic!("{err}");
            };
            assert_eq!(
                engine.write_failure(),
                Some(persist),
                "the latch reports the failure"
            );
        } else {
            assert_eq!(
                engine.write_failure(),
                None,
                "write {i} succeeded: no latch"
            );
            assert!(
                first_error.is_none(),
                "write {i} succeeded after a failed persist"
            );
        }
    }
    assert!(first_error.is_some());
    assert_eq!(
        engine.get(b"k0", |i| i.value.to_vec()),
        Some(b"value".to_vec()),
        "reads still work"
    );
}

#[test]
fn scan_returns_every_key_and_random_key_finds_a_lone_key() {
    let engine = engine();
    assert_eq!(engine.random_key(1), None);
    engine.set(b"lonely", b"v", 0, Expiry::Never).unwrap();
    for seed in 0..50 {
        assert_eq!(
            engine.random_key(seed),
            Some(b"lonely".to_vec()),
            "seed {seed}"
        );
    }
    for i in 0..3000u32 {
        engine
            .set(format!("k{i}").as_bytes(), b"v", 0, Expiry::Never)
            .unwrap();
    }
    let mut seen = std::collections::HashSet::new();
    let mut cursor = 0;
    let mut calls = 0;
    loop {
        let mut batch = 0;
        cursor = engine.scan(cursor, 10, &mut |key| {
            batch += 1;
            seen.insert(key.to_vec());
        });
        calls += 1;
        if cursor == 0 {
            break;
        }
        assert!(
            batch >= 10,
            "a call returns at least COUNT keys while keys remain"
        );
    }
    assert_eq!(seen.len(), 3001);
    assert!(calls <= 3001 / 10 + 10, "{calls} calls");
}

/// Regression: each shard used to keep one open segment per TTL bucket, so writes with many
/// different TTLs (here up to 23 days, a few hundred buckets × 8 shards) held thousands of
/// partly filled segments; a 64 MiB pool then evicted live keys after 5,000 small writes. Open
/// segments are now capped per shard and writes share the nearest longer-TTL open segment.
#[test]
fn writes_with_many_different_ttls_do_not_exhaust_the_pool() {
    let engine = Engine::open(EngineConfig {
        memory_bytes: 64 << 20,
        segment_size_bytes: 256 << 10,
        ..EngineConfig::default()
    })
    .unwrap();
    let now = engine.now_ms();
    for i in 0..5000u64 {
        let expiry = if i % 3 == 0 {
            Expiry::Never
        } else {
            Expiry::AtMs(now + 3_600_000 + i * 400_000)
        };
        engine
            .set(
                format!("k{}", i % 3000).as_bytes(),
                format!("v{i}").as_bytes(),
                0,
                expiry,
            )
            .unwrap();
    }
    engine.expire().unwrap();
    let stats = engine.stats();
    assert_eq!(stats.evicted_items, 0, "{stats:?}");
    assert!(stats.segments_used <= 8 * 8 + 8, "{stats:?}");
    for i in 2000..5000u64 {
        assert_eq!(
            engine.get(format!("k{}", i % 3000).as_bytes(), |it| it.value.to_vec()),
            Some(format!("v{i}").into_bytes())
        );
    }
}
