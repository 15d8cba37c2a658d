//! Keyspace figures: `Engine::sample_expiry`, what INFO keyspace's `expires` and `avg_ttl`
//! come from, exact on a small keyspace and close on a large one.

use strata_engine::*;

#[test]
fn the_expiry_sample_counts_exactly_when_small_and_estimates_when_large() {
    let clock = std::sync::Arc::new(ManualClock::new(1_000_000));
    let engine = Engine::open(EngineConfig {
        memory_bytes: 64 << 20,
        clock: clock.clone(),
        ..EngineConfig::default()
    })
    .unwrap();
    for i in 0..40_000u64 {
        let expiry = match i % 4 {
            0 => Expiry::AtMs(1_000_000 + 60_000),
            1 => Expiry::AtMs(1_000_000 + 1), // Expires below: never counted.
            _ => Expiry::Never,
        };
        engine
            .set(format!("key:{i}").as_bytes(), b"value", 0, expiry)
            .unwrap();
    }
    clock.advance_ms(10);
    let all = engine.sample_expiry(1_000_000, 7);
    assert!(all.exact, "{all:?}");
    assert_eq!(all.walked, 40_000);
    assert_eq!((all.sampled, all.with_expiry), (30_000, 10_000));
    assert_eq!(all.ttl_ms_sum / all.with_expiry, 60_000 - 10);
    let some = engine.sample_expiry(4_000, 7);
    assert!(!some.exact, "{some:?}");
    assert!((3_000..=6_000).contains(&some.walked), "{some:?}");
    let share = some.with_expiry as f64 / some.sampled as f64;
    assert!(
        (0.28..0.39).contains(&share),
        "a third carry a TTL: {share} ({some:?})"
    );
    assert_eq!(some.ttl_ms_sum / some.with_expiry, 60_000 - 10);
}

#[test]
fn memory_usage_is_the_record_and_the_index_slot() {
    let clock = std::sync::Arc::new(ManualClock::new(1_000_000));
    let engine = Engine::open(EngineConfig {
        clock: clock.clone(),
        ..EngineConfig::default()
    })
    .unwrap();
    engine.set(b"k", &[7u8; 32], 0, Expiry::Never).unwrap();
    engine
        .set(b"t", &[7u8; 32], 0, Expiry::AtMs(1_000_010))
        .unwrap();
    let plain = engine.memory_usage(b"k").unwrap();
    let with_ttl = engine.memory_usage(b"t").unwrap();
    // 8-byte header + key + value, padded to 8; the expiry field adds 8; the slot the same.
    assert_eq!(with_ttl, plain + 8);
    assert!((48..48 + 64).contains(&plain), "{plain}");
    assert_eq!(engine.memory_usage(b"absent"), None);
    clock.advance_ms(10);
    assert_eq!(engine.memory_usage(b"t"), None, "expired");
    let (hits, misses) = (engine.stats().hits, engine.stats().misses);
    assert_eq!(
        (hits, misses),
        (0, 0),
        "no hit or miss counted for memory items"
    );
}

/// A memory limit set while running (Redis's `CONFIG SET maxmemory`): free segments past it
/// give their memory back at once, the writes that follow evict until the segments in use fit,
/// and lifting it lets the tier fill the whole pool again. Limits outside the pool are refused.
#[test]
fn a_memory_limit_set_while_running_shrinks_and_grows_the_tier() {
    let engine = Engine::open(EngineConfig {
        memory_bytes: 8 << 20,
        segment_size_bytes: 64 << 10,
        shard_count: 4,
        ..EngineConfig::default()
    })
    .unwrap();
    let value = [7u8; 1000];
    let write = |from: u32, to: u32| {
        for i in from..to {
            engine
                .set(format!("key-{i}").as_bytes(), &value, 0, Expiry::Never)
                .unwrap();
        }
    };
    write(0, 4_000);
    let before = engine.stats();
    assert_eq!(before.evicted_items, 0);
    assert_eq!(before.memory_limit_bytes, 8 << 20);
    assert!(
        engine.set_memory_limit(Some(1 << 30)).is_err(),
        "past the pool"
    );
    assert!(
        engine.set_memory_limit(Some(0)).is_err(),
        "below what the shards need"
    );
    assert_eq!(engine.set_memory_limit(Some(2 << 20)), Ok(2 << 20));
    let capped = engine.stats();
    assert_eq!(capped.memory_limit_bytes, 2 << 20);
    assert!(
        capped.segments_retired > before.segments_retired,
        "free memory given back"
    );
    write(4_000, 6_000);
    let shrunk = engine.stats();
    assert!(shrunk.segments_used <= 32, "{shrunk:?}");
    assert!(shrunk.evicted_items > 0);
    assert!(
        shrunk.items < 2_100,
        "about what 2 MiB holds: {}",
        shrunk.items
    );
    assert_eq!(engine.set_memory_limit(None), Ok(8 << 20));
    write(6_000, 12_000);
    let grown = engine.stats();
    assert_eq!(grown.memory_limit_bytes, 8 << 20);
    assert!(grown.segments_used > 64, "{grown:?}");
    assert!(grown.items > 5_000, "the whole pool again: {}", grown.items);
    engine.check_integrity().unwrap();
}

/// The eviction policy changed while running takes effect at the next write that needs room:
/// `None` refuses it, `Merge` again evicts.
#[test]
fn an_eviction_policy_set_while_running_decides_the_next_write() {
    let engine = Engine::open(EngineConfig {
        memory_bytes: 4 << 20,
        segment_size_bytes: 64 << 10,
        shard_count: 2,
        eviction: EvictionPolicy::None,
        ..EngineConfig::default()
    })
    .unwrap();
    let value = [7u8; 1000];
    let mut refused_at = None;
    for i in 0..10_000u32 {
        match engine.set(format!("key-{i}").as_bytes(), &value, 0, Expiry::Never) {
            Ok(_) => {}
            Err(WriteError::OutOfMemory) => {
                refused_at = Some(i);
                break;
            }
            Err(other) => panic!("{other:?}"),
        }
    }
    let refused_at = refused_at.expect("a full store refuses under None");
    engine.set_eviction_policy(EvictionPolicy::Merge);
    assert_eq!(engine.eviction_policy(), EvictionPolicy::Merge);
    for i in refused_at..refused_at + 2_000 {
        engine
            .set(format!("key-{i}").as_bytes(), &value, 0, Expiry::Never)
            .unwrap();
    }
    assert!(engine.stats().evicted_items > 0);
    engine.set_eviction_policy(EvictionPolicy::None);
    let refused = (0..2_000u32).any(|i| {
        matches!(
            engine.set(format!("new-{i}").as_bytes(), &value, 0, Expiry::Never),
            Err(WriteError::OutOfMemory)
        )
    });
    assert!(refused, "None again refuses");
}
