//! The cleaner keeps every live item that fits: a store (`EvictionPolicy::None`) takes writes
//! until its live data nearly fills memory, however the keys are overwritten, and a cache
//! evicts nothing while its live data fits. Figures of space, not of time: no timing here.
#![allow(
    clippy::too_many_lines,
    reason = "a test scenario reads best as one function"
)]

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use strata_engine::*;

const MEMORY_BYTES: u64 = 64 << 20;

fn engine(policy: EvictionPolicy) -> Engine {
    Engine::open(EngineConfig {
        memory_bytes: MEMORY_BYTES,
        eviction: policy,
        shard_count: shard_count_for(MEMORY_BYTES, SEGMENT_SIZE_BYTES_DEFAULT),
        ..EngineConfig::default()
    })
    .unwrap()
}

fn key(i: u64) -> Vec<u8> {
    format!("key:{i:010}").into_bytes()
}

/// Keys of `value_len`-byte values whose records fill `percent` of memory.
fn keys_for(value_len: usize, percent: u64) -> u64 {
    let record = (8 + 14 + value_len).next_multiple_of(8) as u64;
    MEMORY_BYTES * percent / 100 / record
}

/// Writes every key once, then `rounds` times as many random overwrites; returns the first
/// refused write's live fraction, or `None` when none was refused.
fn fill_and_overwrite(engine: &Engine, keys: u64, value_len: usize, rounds: u64) -> Option<f64> {
    let mut rng = SmallRng::seed_from_u64(keys);
    let value = vec![b'v'; value_len];
    let writes = (0..keys).chain((0..keys * rounds).map(|_| rng.gen_range(0..keys)));
    for i in writes {
        if let Err(err) = engine.set(&key(i), &value, 0, Expiry::Never) {
            assert!(matches!(err, WriteError::OutOfMemory), "{err}");
            return Some(engine.stats().live_bytes as f64 / MEMORY_BYTES as f64);
        }
    }
    None
}

/// The share of memory that live records and the index take.
fn used_fraction(stats: &EngineStats) -> f64 {
    (stats.live_bytes + stats.index_bytes) as f64 / MEMORY_BYTES as f64
}

/// `--eviction none` takes three rounds of random overwrites with live records at 70% of memory
/// for 100-byte values (with the index, which grows to what they need, 79%) and 84% for 1 KiB
/// ones (85%); before the cleaner it refused them at a third full. (Moved records carry their
/// CAS, 8 bytes more: a 128-byte record becomes 136, which leaves small records less room.)
#[test]
fn a_store_takes_overwrites_with_live_data_at_seventy_to_eighty_four_percent_of_memory() {
    for (value_len, percent) in [(100, 70), (1000, 84)] {
        let engine = engine(EvictionPolicy::None);
        let keys = keys_for(value_len, percent);
        let refused = fill_and_overwrite(&engine, keys, value_len, 3);
        let stats = engine.stats();
        assert_eq!(refused, None, "{value_len} B values: {stats:?}");
        assert!(used_fraction(&stats) >= percent as f64 / 100.0, "{stats:?}");
        // The index grew to what the items need: 1 KiB values need under 1% of memory for it
        // (a table sized at start for 56-byte items took 13%).
        if value_len == 1000 {
            assert!(stats.index_bytes * 100 <= MEMORY_BYTES, "{stats:?}");
        }
        assert!(stats.cleaner_items_moved > 0, "{stats:?}");
        for i in (0..keys).step_by(997) {
            assert!(engine.get(&key(i), |_| ()).is_some(), "key {i}");
        }
        engine.check_integrity().unwrap();
    }
}

/// A store refuses a write only when live data fills memory: at the refusal, live records and
/// the index take at least 80% of it, whatever the overwrites left dead before.
#[test]
fn a_store_refuses_writes_only_when_live_data_fills_memory() {
    let engine = engine(EvictionPolicy::None);
    let keys = keys_for(1000, 120);
    let mut rng = SmallRng::seed_from_u64(3);
    let value = vec![b'v'; 1000];
    // Overwrites over the first tenth of the keys, then new keys until a write is refused.
    for _ in 0..keys {
        engine
            .set(&key(rng.gen_range(0..keys / 10)), &value, 0, Expiry::Never)
            .unwrap();
    }
    let refused_at =
        (keys / 10..keys).find(|&i| engine.set(&key(i), &value, 0, Expiry::Never).is_err());
    let stats = engine.stats();
    assert!(refused_at.is_some(), "120% of memory cannot fit: {stats:?}");
    assert!(
        used_fraction(&stats) >= 0.8,
        "refused at {:.3}: {stats:?}",
        used_fraction(&stats)
    );
}

/// A cache whose live records take 65% of memory evicts nothing under random overwrites, under
/// each eviction policy; nor does one whose keys are skewed (a tenth of them take 90% of writes).
#[test]
fn a_cache_evicts_nothing_while_live_data_fits() {
    for policy in [
        EvictionPolicy::Merge,
        EvictionPolicy::Fifo,
        EvictionPolicy::Random,
    ] {
        let engine = engine(policy);
        let keys = keys_for(1000, 65);
        assert_eq!(fill_and_overwrite(&engine, keys, 1000, 3), None);
        let stats = engine.stats();
        assert_eq!(stats.evicted_items, 0, "{policy:?}: {stats:?}");
        assert_eq!(stats.items, keys, "{policy:?}");
    }
    let engine = engine(EvictionPolicy::Merge);
    let keys = keys_for(1000, 65);
    let value = vec![b'v'; 1000];
    let mut rng = SmallRng::seed_from_u64(5);
    for i in 0..keys {
        engine.set(&key(i), &value, 0, Expiry::Never).unwrap();
    }
    for _ in 0..keys * 3 {
        let i = if rng.gen_ratio(9, 10) {
            rng.gen_range(0..keys / 10)
        } else {
            rng.gen_range(0..keys)
        };
        engine.set(&key(i), &value, 0, Expiry::Never).unwrap();
    }
    let stats = engine.stats();
    assert_eq!(stats.evicted_items, 0, "skewed: {stats:?}");
}

/// A transaction's writes evict nothing while the dead space lies in the other shards it
/// holds: a write's own cleaner pass cannot take their locks (the transaction holds them), so
/// the transaction cleans them itself. Before, its writes took the cleaner's reserve, the next
/// pass found no destination, and a write evicted live items: the kill loop's MULTI batches
/// met it after a restart, with the pool full of the segments each restart seals.
#[test]
fn a_transaction_evicts_nothing_while_the_shards_it_holds_have_dead_space() {
    let engine = engine(EvictionPolicy::Merge);
    let shards = shard_count_for(MEMORY_BYTES, SEGMENT_SIZE_BYTES_DEFAULT);
    let value = vec![b'v'; 1000];
    // Dead space everywhere but shard 0: a small working set overwritten until the pool has
    // been written twice over (writes clean their own shards, leaving the reserve free).
    let churn: Vec<Vec<u8>> = (0u64..)
        .map(|i| format!("churn:{i}").into_bytes())
        .filter(|k| engine.shard_index(k) != 0)
        .take(2_000)
        .collect();
    let mut rng = SmallRng::seed_from_u64(18);
    for _ in 0..(2 * MEMORY_BYTES / 1000) {
        let k = &churn[rng.gen_range(0..churn.len())];
        engine.set(k, &value, 0, Expiry::Never).unwrap();
    }
    let anchors: Vec<Vec<u8>> = (0..shards)
        .map(|shard| {
            (0u64..)
                .map(|i| format!("anchor:{i}").into_bytes())
                .find(|k| engine.shard_index(k) == shard)
                .unwrap()
        })
        .collect();
    // New keys into shard 0 only, 20 to a transaction that holds every shard: shard 0 has
    // nothing to clean, and a quarter of memory in new items is far more than the reserve.
    let mut fresh = (0u64..)
        .map(|i| format!("fresh:{i}").into_bytes())
        .filter(|k| engine.shard_index(k) == 0);
    let mut written = Vec::new();
    while written.len() < (MEMORY_BYTES / 4 / 1000) as usize {
        let batch: Vec<Vec<u8>> = fresh.by_ref().take(20).collect();
        let keys: Vec<&[u8]> = anchors.iter().chain(&batch).map(Vec::as_slice).collect();
        let txn = engine.transaction(&keys, &[]).unwrap();
        for k in &batch {
            txn.set(k, &value, 0, Expiry::Never).unwrap();
        }
        txn.finish().unwrap();
        written.extend(batch);
    }
    let stats = engine.stats();
    assert_eq!(stats.evicted_items, 0, "{stats:?}");
    for k in written.iter().chain(&churn) {
        assert!(
            engine.get(k, |_| ()).is_some(),
            "{}",
            String::from_utf8_lossy(k)
        );
    }
    engine.check_integrity().unwrap();
}

/// Overwrites through transactions of one key each (as a hash command's are) clean the shard
/// the transaction holds: its lock is the writer's own, and a pass there gains. Keys of one
/// shard only, so no other shard's pass can make the room instead; cold keys written once
/// first, so an eviction of the oldest segment loses live items, and the hot ones overwritten
/// until memory was written twice.
#[test]
fn a_transaction_of_one_key_cleans_its_own_shard() {
    let engine = engine(EvictionPolicy::Merge);
    let keys: Vec<Vec<u8>> = (0u64..)
        .map(key)
        .filter(|k| engine.shard_index(k) == 0)
        .take(4_000)
        .collect();
    let (cold, hot) = keys.split_at(2_000);
    let value = vec![b'v'; 1000];
    let mut rng = SmallRng::seed_from_u64(19);
    let writes = (cold.iter().chain(hot))
        .chain((0..2 * MEMORY_BYTES / 1000).map(|_| &hot[rng.gen_range(0..hot.len())]));
    for k in writes {
        let txn = engine.transaction(&[k], &[]).unwrap();
        txn.set(k, &value, 0, Expiry::Never).unwrap();
        txn.finish().unwrap();
    }
    let stats = engine.stats();
    assert_eq!(stats.evicted_segments, 0, "{stats:?}");
    assert!(stats.cleaner_passes > 0, "{stats:?}");
    assert_eq!(stats.items, keys.len() as u64, "{stats:?}");
}

/// With more live data than memory holds, a cache evicts, and the cleaner still works beside
/// eviction: what is held is most of what fits.
#[test]
fn a_cache_over_full_evicts_and_keeps_most_of_what_fits() {
    let engine = engine(EvictionPolicy::Merge);
    let keys = keys_for(1000, 150);
    fill_and_overwrite(&engine, keys, 1000, 2);
    let stats = engine.stats();
    assert!(stats.evicted_items > 0, "{stats:?}");
    assert!(
        used_fraction(&stats) >= 0.75,
        "held {:.3}: {stats:?}",
        used_fraction(&stats)
    );
    engine.check_integrity().unwrap();
}

/// Cleaning ahead of need (what the server's maintenance thread does every 10 ms), called here
/// after every 200 writes: writes then find free segments, so nearly all the cleaning happens
/// in its steps (each holding a shard for one victim), not in passes of the writes; nothing is
/// evicted, and every key is there.
#[test]
fn cleaning_ahead_of_need_leaves_writes_little_to_clean() {
    let engine = engine(EvictionPolicy::Merge);
    let keys = keys_for(1000, 55);
    let value = vec![b'v'; 1000];
    let mut rng = SmallRng::seed_from_u64(9);
    for i in 0..keys {
        engine.set(&key(i), &value, 0, Expiry::Never).unwrap();
    }
    for n in 0..keys * 3 {
        engine
            .set(&key(rng.gen_range(0..keys)), &value, 0, Expiry::Never)
            .unwrap();
        if n % 200 == 0 {
            engine.clean_ahead().unwrap();
        }
    }
    let stats = engine.stats();
    assert_eq!(stats.evicted_items, 0, "{stats:?}");
    assert!(stats.cleaner_steps_ahead > 0, "{stats:?}");
    assert!(
        stats.cleaner_passes * 10 <= stats.cleaner_steps_ahead,
        "writes ran {} passes, cleaning ahead {} steps",
        stats.cleaner_passes,
        stats.cleaner_steps_ahead
    );
    for i in (0..keys).step_by(101) {
        assert!(engine.get(&key(i), |_| ()).is_some(), "key {i}");
    }
    engine.check_integrity().unwrap();
}

/// Overwrites of a small working set in a large DRAM pool, cleaning ahead as the server does:
/// writes reuse the segments the cleaner recycles instead of touching new ones, so the memory
/// written stays near the live data (a few segments), not the whole pool, while every key keeps
/// its latest value. Without cleaning ahead the same writes touch a segment per megabyte
/// written, and a pass of a write's own runs only once nothing untouched is left.
#[test]
fn overwrites_of_a_small_working_set_reuse_memory_instead_of_touching_new_segments() {
    let store = engine(EvictionPolicy::Merge);
    let segments = store.stats().segments_total;
    assert_eq!(
        store.stats().segments_untouched,
        store.stats().segments_free
    );
    // 2,000 keys of 500 bytes: about 1 MiB live, 30 MiB written over them.
    let keys = 2_000;
    let mut rng = SmallRng::seed_from_u64(5);
    let mut latest = vec![0u32; keys as usize];
    for n in 0..60_000u32 {
        let i = rng.gen_range(0..keys);
        latest[i as usize] = n;
        let value = format!("{n:0500}");
        store
            .set(&key(i), value.as_bytes(), 0, Expiry::Never)
            .unwrap();
        if n % 200 == 0 {
            store.clean_ahead().unwrap();
        }
    }
    let stats = store.stats();
    let touched = segments - stats.segments_retired - stats.segments_untouched;
    assert!(
        touched <= 16,
        "{touched} of {segments} segments written for about 1 MiB live: {stats:?}"
    );
    assert!(stats.cleaner_steps_ahead > 0, "{stats:?}");
    assert_eq!(stats.evicted_items, 0, "{stats:?}");
    for (i, n) in latest.iter().enumerate() {
        let value = store.get(&key(i as u64), |item| item.value.to_vec());
        let expected = format!("{n:0500}").into_bytes();
        assert_eq!(value.as_deref(), Some(&expected[..]), "key {i}");
    }
    store.check_integrity().unwrap();

    // The same writes with no cleaning ahead touch a new segment for every one they fill.
    let plain = engine(EvictionPolicy::Merge);
    let value = vec![b'v'; 500];
    for _ in 0..60_000u32 {
        plain
            .set(&key(rng.gen_range(0..keys)), &value, 0, Expiry::Never)
            .unwrap();
    }
    let stats = plain.stats();
    let touched = segments - stats.segments_retired - stats.segments_untouched;
    assert!(touched >= 25, "{touched} segments written: {stats:?}");
}

/// Writes of values near a segment each, thirty of them between two calls of cleaning ahead
/// (SETs of 1 MiB at 3 GB/s with the server's 10 ms tick): each call recycles as many dead
/// segments as the writes took since the last one, so the memory written stays near the live
/// data. With a fixed eight kept ahead, the writes past them took segments never written
/// (640 MiB of a server's memory written for 20 MiB live).
#[test]
fn writes_of_a_segment_each_reuse_memory_however_many_come_between_ticks() {
    let memory_bytes = 512 << 20;
    let store = Engine::open(EngineConfig {
        memory_bytes,
        eviction: EvictionPolicy::Merge,
        shard_count: shard_count_for(memory_bytes, SEGMENT_SIZE_BYTES_DEFAULT),
        ..EngineConfig::default()
    })
    .unwrap();
    let stats = store.stats();
    let segments = stats.segments_total;
    assert!(stats.segment_size_bytes < 2 << 20, "one value a segment");
    let keys = 20u64;
    let value = |n: u64| {
        let mut value = vec![b'v'; 1 << 20];
        value[..8].copy_from_slice(&n.to_le_bytes());
        value
    };
    let mut latest = vec![0u64; keys as usize];
    for tick in 0..40u64 {
        for i in 0..30u64 {
            let n = tick * 30 + i;
            latest[(n % keys) as usize] = n;
            store
                .set(&key(n % keys), &value(n), 0, Expiry::Never)
                .unwrap();
        }
        store.clean_ahead().unwrap();
    }
    let stats = store.stats();
    let touched = segments - stats.segments_retired - stats.segments_untouched;
    assert!(
        touched <= keys + 2 * 30 + 16,
        "{touched} of {segments} segments written for {keys} live: {stats:?}"
    );
    assert_eq!(stats.evicted_items, 0, "{stats:?}");
    for (i, &n) in latest.iter().enumerate() {
        let found = store.get(&key(i as u64), |item| item.value == &value(n)[..]);
        assert_eq!(found, Some(true), "key {i}");
    }
    store.check_integrity().unwrap();
}

/// Once writes stop, cleaning ahead compacts what overwrites left half dead and gives the free
/// segments' pages back to the OS: the segments in use come down to about the live data, every
/// free segment but the cleaner's reserve counts as never written again, every key keeps its
/// latest value, and writes after it take the released segments (read as zero, not filled) and
/// read back right. While writes go on (more than a sixteenth of a segment into a shard between
/// two calls), nothing is compacted or given back.
#[test]
fn quiet_shards_are_compacted_and_their_free_pages_given_back() {
    let store = engine(EvictionPolicy::Merge);
    let segment_bytes = store.stats().segment_size_bytes;
    // 16,000 keys of 500 bytes: about 8.5 MiB live, 48,000 overwrites over them.
    let keys = 16_000;
    let mut rng = SmallRng::seed_from_u64(23);
    let mut latest = vec![0u32; keys as usize];
    let mut write = |store: &Engine, n: u32| {
        // Every key once, then random overwrites.
        let i = if n < keys as u32 {
            u64::from(n)
        } else {
            rng.gen_range(0..keys)
        };
        latest[i as usize] = n;
        let value = format!("{n:0500}");
        store
            .set(&key(i), value.as_bytes(), 0, Expiry::Never)
            .unwrap();
    };
    for n in 0..64_000u32 {
        write(&store, n);
        if n % 4_000 == 0 {
            store.clean_ahead().unwrap(); // About 2 MiB written between calls: busy.
        }
    }
    let busy = store.stats();
    assert_eq!(busy.segments_released, 0, "{busy:?}");
    let used_busy_bytes = busy.segments_used * segment_bytes;
    assert!(
        used_busy_bytes > busy.live_bytes * 5 / 4,
        "overwrites leave dead space to compact: {busy:?}"
    );

    for _ in 0..400 {
        store.clean_ahead().unwrap();
    }
    let quiet = store.stats();
    let shards = 3 * 2; // An open and a cleaner segment per shard may be part full.
    assert!(
        quiet.segments_used * segment_bytes <= quiet.live_bytes * 8 / 7 + shards * segment_bytes,
        "compacted to about the live data: {quiet:?}"
    );
    assert!(quiet.segments_released > 0, "{quiet:?}");
    assert!(
        quiet.segments_free - quiet.segments_untouched <= 2,
        "only the cleaner's reserve stays backed: {quiet:?}"
    );
    // (A moved record carries its CAS, 8 bytes more: the live bytes grow a little.)
    assert_eq!(quiet.items, busy.items, "compaction moves, never drops");
    assert_eq!(quiet.evicted_items, 0, "{quiet:?}");
    store.check_integrity().unwrap();

    for n in 64_000..96_000u32 {
        write(&store, n);
    }
    assert!(store.stats().segments_untouched < quiet.segments_untouched);
    for (i, n) in latest.iter().enumerate() {
        let value = store.get(&key(i as u64), |item| item.value.to_vec());
        let expected = format!("{n:0500}").into_bytes();
        assert_eq!(value.as_deref(), Some(&expected[..]), "key {i}");
    }
    store.check_integrity().unwrap();
}

/// A cache whose memory ran short (it evicted, as every flash-tiered one under load demotes)
/// is not compacted until a second of the engine's clock has passed with no eviction: each
/// segment compaction freed would go to the next writes at once, so it would only spend the
/// maintenance thread. Here the cache is filled past its memory (the oldest keys evicted),
/// then the older half of what it kept is deleted and every other key of the rest (segments
/// left empty, others half dead, nothing written): while the clock stands, quiet as the
/// shards are, nothing is compacted or given back; once it has moved on a second, the shards
/// are compacted and free pages given back, every remaining item kept.
#[test]
fn a_cache_that_evicted_lately_is_compacted_only_once_it_stopped() {
    let clock = ManualClock::new(1_700_000_000_000);
    let store = Engine::open(EngineConfig {
        memory_bytes: MEMORY_BYTES,
        eviction: EvictionPolicy::Fifo,
        shard_count: shard_count_for(MEMORY_BYTES, SEGMENT_SIZE_BYTES_DEFAULT),
        clock: std::sync::Arc::new(clock.clone()),
        ..EngineConfig::default()
    })
    .unwrap();
    // Twice memory's worth of keys of 500 bytes (about the newest half kept), then deletes.
    let keys = keys_for(500, 200);
    let kept = |i: u64| i >= keys * 3 / 4 && i % 2 == 1;
    let value = vec![b'v'; 500];
    for i in 0..keys {
        store.set(&key(i), &value, 0, Expiry::Never).unwrap();
    }
    for i in (0..keys).filter(|&i| !kept(i)) {
        store.delete(&key(i), None).unwrap();
    }
    let full = store.stats();
    assert!(full.evicted_segments > 0, "{full:?}");
    for _ in 0..400 {
        store.clean_ahead().unwrap();
    }
    let waited = store.stats();
    assert_eq!(waited.segments_released, 0, "{waited:?}");
    assert_eq!(waited.items, full.items, "{waited:?}");
    assert!(
        waited.segments_free > 2,
        "the empty segments freed: {waited:?}"
    );
    clock.advance_ms(1_000);
    for _ in 0..400 {
        store.clean_ahead().unwrap();
    }
    let quiet = store.stats();
    assert!(quiet.segments_released > 0, "{quiet:?}");
    assert!(
        quiet.segments_used * 3 < waited.segments_used * 2,
        "half the data gone, compacted: {waited:?} {quiet:?}"
    );
    assert_eq!(quiet.items, full.items, "compaction moves, never drops");
    assert_eq!(quiet.evicted_segments, full.evicted_segments, "{quiet:?}");
    store.check_integrity().unwrap();
    for i in keys - 1000..keys {
        let found = store.get(&key(i), |item| item.value.len());
        assert_eq!(found, kept(i).then_some(500), "key {i}");
    }
}

/// The free pool's count of segments never written stays true while segments leave and come
/// back by every path: a memory limit lowered (free segments retired, their memory given back)
/// and raised again, writes past the lowered limit evicting, the cleaner's destinations and
/// passes. A segment handed out as never written is not zero-filled, so a wrong count would
/// serve a stale record or break a log's end: every value read back is the latest one written
/// (or absent, once evicted), and the integrity check walks every segment's log.
#[test]
fn segments_never_written_are_counted_right_across_limits_evictions_and_cleaning() {
    let store = engine(EvictionPolicy::Merge);
    let segment_bytes = store.stats().segment_size_bytes;
    let keys = 30_000u64;
    let mut rng = SmallRng::seed_from_u64(11);
    let mut latest = vec![None; keys as usize];
    for n in 0..120_000u32 {
        match n {
            20_000 => {
                assert!(store.stats().segments_untouched > 0, "{:?}", store.stats());
                store.set_memory_limit(Some(8 * segment_bytes)).unwrap();
            }
            60_000 => {
                store.set_memory_limit(None).unwrap();
            }
            _ => {}
        }
        let i = rng.gen_range(0..keys);
        let value = format!("{n:0300}");
        store
            .set(&key(i), value.as_bytes(), 0, Expiry::Never)
            .unwrap();
        latest[i as usize] = Some(value.into_bytes());
        if n % 150 == 0 {
            store.clean_ahead().unwrap();
        }
        let stats = store.stats();
        assert!(stats.segments_untouched <= stats.segments_free, "{stats:?}");
    }
    let stats = store.stats();
    assert!(
        stats.evicted_items > 0,
        "the lowered limit evicted: {stats:?}"
    );
    let mut held = 0;
    for (i, expected) in latest.iter().enumerate() {
        if let Some(value) = store.get(&key(i as u64), |item| item.value.to_vec()) {
            assert_eq!(Some(&value), expected.as_ref(), "key {i}");
            held += 1;
        }
    }
    assert!(held > keys / 4, "{held} of {keys} held: {stats:?}");
    store.check_integrity().unwrap();
}

/// Bytes of a pool changed while it was closed (a flipped byte in live records), then a restart
/// from the clean-close snapshot, whose segments stay unchecked until the scrub walks them. No
/// scrub runs here: overwrites make the cleaner take those segments first, and it checks each
/// before moving its records. A damaged record is never moved or served; every other key keeps
/// its exact value; the damage is counted; nothing is evicted. (Until the scrub had checked the
/// whole index after a restart, the cleaner did not run at all, and writes evicted instead.)
#[test]
fn the_cleaner_checks_a_segment_adopted_unchecked_before_moving_it() {
    let path = std::env::temp_dir().join(format!("strata-cleaner-{}.pool", std::process::id()));
    let config = EngineConfig {
        memory_bytes: 4 << 20,
        segment_size_bytes: 64 << 10,
        shard_count: 2,
        pool: PoolLocation::File(path.clone()),
        fresh: true,
        ..EngineConfig::default()
    };
    let value = |i: u64, round: u64| {
        let mut v = format!("value-{i:06}-round-{round:03}-").into_bytes();
        v.resize(200, b'x');
        v
    };
    // Live records take a quarter of the memory: enough that the cleaner must move records
    // rather than only free segments the overwrites emptied.
    let keys = 5000;
    let engine = Engine::open(config.clone()).unwrap();
    for round in 0..3 {
        for i in 0..keys {
            engine
                .set(&key(i), &value(i, round), 0, Expiry::Never)
                .unwrap();
        }
    }
    engine.close().unwrap();
    drop(engine);
    // Flip a byte inside the current value of every 50th key.
    let mut bytes = std::fs::read(&path).unwrap();
    let damaged: Vec<u64> = (0..keys).step_by(50).collect();
    for &i in &damaged {
        let needle = format!("value-{i:06}-round-002-").into_bytes();
        let at = bytes
            .windows(needle.len())
            .position(|w| w == &needle[..])
            .expect("the current value is in the pool");
        bytes[at + needle.len() + 10] ^= 0x20;
    }
    std::fs::write(&path, &bytes).unwrap();

    let engine = Engine::open(EngineConfig {
        fresh: false,
        ..config
    })
    .unwrap();
    assert!(engine.stats().segments_unverified > 0, "adopted unchecked");
    let mut rng = SmallRng::seed_from_u64(13);
    for n in 0..keys * 20 {
        // Every fifth key is never rewritten: its record stays in an adopted segment, for the
        // cleaner to move (or, for every 50th, damaged, to leave behind).
        let i = rng.gen_range(0..keys);
        if i % 5 != 0 {
            engine
                .set(&key(i), &value(i, 3 + n % 7), 0, Expiry::Never)
                .unwrap();
        }
    }
    let stats = engine.stats();
    assert!(stats.cleaner_items_moved > 0, "{stats:?}");
    assert_eq!(stats.evicted_items, 0, "{stats:?}");
    assert!(stats.records_damaged.iter().sum::<u64>() > 0, "{stats:?}");
    for i in 0..keys {
        let got = engine.get(&key(i), |item| item.value.to_vec());
        if i % 50 == 0 {
            assert!(
                got.is_none() || got == Some(value(i, 2)),
                "key {i}: {got:?}"
            );
        } else if i % 5 == 0 {
            assert_eq!(got, Some(value(i, 2)), "key {i}, moved by the cleaner");
        } else {
            let got = got.unwrap_or_else(|| panic!("undamaged key {i} lost"));
            assert!(got.starts_with(format!("value-{i:06}-round-").as_bytes()));
        }
    }
    // The segments the cleaner did not take are checked by the scrub, as after any restart.
    while !engine.scrub_step() {}
    engine.check_integrity().unwrap();
    drop(engine);
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(format!("{}.sidecar", path.display()));
    let _ = std::fs::remove_file(format!("{}.txlog", path.display()));
}

/// The cleaner keeps a moved record in its TTL group: after overwrites of keys with a TTL and
/// keys without, interleaved so that the cleaner moves both kinds, the TTL keys' segments
/// still expire whole once the TTL passes, leaving about what the keys without a TTL need.
/// (With one cleaner segment for every group, the two kinds shared segments that never
/// expired whole: a segment expires at its latest record's expiry, never for a record with
/// none.)
#[test]
fn moved_records_stay_in_their_ttl_group_so_segments_still_expire_whole() {
    let clock = ManualClock::new(1_000_000_000);
    let engine = Engine::open(EngineConfig {
        memory_bytes: 8 << 20,
        segment_size_bytes: 64 << 10,
        shard_count: 1,
        clock: std::sync::Arc::new(clock.clone()),
        ..EngineConfig::default()
    })
    .unwrap();
    let keys = 6_000u64;
    let value = vec![b'v'; 400];
    let expiry = |i: u64| {
        if i.is_multiple_of(2) {
            Expiry::AtMs(1_000_000_000 + 3_600_000)
        } else {
            Expiry::Never
        }
    };
    let mut rng = SmallRng::seed_from_u64(5);
    for i in (0..keys).chain((0..keys * 6).map(|_| rng.gen_range(0..keys))) {
        engine.set(&key(i), &value, 0, expiry(i)).unwrap();
    }
    let stats = engine.stats();
    assert!(stats.cleaner_items_moved > 0, "{stats:?}");
    assert_eq!(stats.evicted_items, 0, "{stats:?}");
    clock.advance_ms(3_600_001);
    engine.expire().unwrap();
    let stats = engine.stats();
    // Every record of a key with a TTL was in a segment that expired whole: none is left.
    assert_eq!(stats.items, keys / 2, "{stats:?}");
    for i in (0..keys).step_by(7) {
        assert_eq!(engine.contains(&key(i)), i % 2 == 1, "key {i}");
    }
}

/// Cleaner segments are capped per shard: in a small pool (20 segments of 256 KiB per shard,
/// as the kill test runs) with items of five TTL groups, a store takes four rounds of random
/// overwrites with live records at 70% of memory. (With a cleaner segment for every group and
/// shard, up to five cleaner segments per shard stood next to its five open ones, and writes
/// were refused with live records at 60%; a crash test that sized its pool by the old bound
/// saw evictions.)
#[test]
fn many_ttl_groups_in_a_small_pool_take_overwrites_at_seventy_percent_live() {
    let clock = ManualClock::new(1_000_000_000);
    let memory_bytes = 40u64 << 20;
    let engine = Engine::open(EngineConfig {
        memory_bytes,
        segment_size_bytes: 256 << 10,
        shard_count: 8,
        eviction: EvictionPolicy::None,
        clock: std::sync::Arc::new(clock.clone()),
        ..EngineConfig::default()
    })
    .unwrap();
    const TTL_SECS: [u64; 4] = [3_600, 86_400, 604_800, 2_000_000];
    let expiry = |i: u64| match (i % 5) as usize {
        4 => Expiry::Never,
        group => Expiry::AtMs(1_000_000_000 + TTL_SECS[group] * 1000),
    };
    let value = vec![b'v'; 1000];
    let record = (8 + 14 + 1000u64).next_multiple_of(8);
    let keys = memory_bytes * 70 / 100 / record;
    let mut rng = SmallRng::seed_from_u64(7);
    for i in (0..keys).chain((0..keys * 4).map(|_| rng.gen_range(0..keys))) {
        if let Err(err) = engine.set(&key(i), &value, 0, expiry(i)) {
            let stats = engine.stats();
            panic!(
                "{err}: refused with live records at {:.3} of memory: {stats:?}",
                stats.live_bytes as f64 / memory_bytes as f64
            );
        }
    }
    assert_eq!(engine.stats().evicted_items, 0);
    engine.check_integrity().unwrap();
}

/// A DRAM segment taken again for writes is not zero-filled (`Inner::zero_for_reuse`): the
/// records written over old ones must be whole by themselves. Overwrites and deletes of values
/// of random lengths (so new records end where old ones did not) over a small working set,
/// with cleaning ahead freeing and reusing segments: every key reads its latest value, a full
/// scrub finds no damaged record, and the shards' invariants hold.
#[test]
fn segments_reused_without_a_zero_fill_hold_only_whole_records() {
    let store = engine(EvictionPolicy::Merge);
    let keys = 2_000;
    let mut rng = SmallRng::seed_from_u64(17);
    let mut latest: Vec<Option<Vec<u8>>> = vec![None; keys as usize];
    for n in 0..80_000u32 {
        let i = rng.gen_range(0..keys);
        if rng.gen_ratio(1, 10) {
            store.delete(&key(i), None).unwrap();
            latest[i as usize] = None;
        } else {
            let len = rng.gen_range(1..900);
            let value: Vec<u8> = (0..len).map(|_| rng.gen_range(1..=255u8)).collect();
            store.set(&key(i), &value, 0, Expiry::Never).unwrap();
            latest[i as usize] = Some(value);
        }
        if n % 200 == 0 {
            store.clean_ahead().unwrap();
        }
    }
    let stats = store.stats();
    assert!(
        stats.cleaner_segments_freed > 10,
        "segments reused: {stats:?}"
    );
    assert_eq!(stats.evicted_items, 0, "{stats:?}");
    for (i, expected) in latest.iter().enumerate() {
        let value = store.get(&key(i as u64), |item| item.value.to_vec());
        assert_eq!(&value, expected, "key {i}");
    }
    while !store.scrub_step() {}
    let stats = store.stats();
    assert_eq!(stats.records_damaged.iter().sum::<u64>(), 0, "{stats:?}");
    store.check_integrity().unwrap();
}

/// The scenario of `a_transaction_evicts_nothing_while_the_shards_it_holds_have_dead_space`
/// on a simulated pool whose persists fail from one number on, at points spread over its
/// transactions, where `Txn::make_room` cleans the shards they hold (in a diagnostic build, 5
/// of the 12 points failed inside one of its passes, the rest in the writes): every
/// transaction that finished keeps every item it wrote, with its value; the first failure is
/// a persist error (not an eviction or a wrong value), every write after it is refused, and
/// the engine's structures stay whole.
#[test]
fn a_failed_persist_while_transactions_make_room_loses_no_finished_transaction() {
    let value = vec![b'v'; 1000];
    let run = |simulation: std::sync::Arc<strata_pool::testing::SimulatedPersistence>| {
        let engine = Engine::open(EngineConfig {
            memory_bytes: MEMORY_BYTES,
            eviction: EvictionPolicy::Merge,
            shard_count: shard_count_for(MEMORY_BYTES, SEGMENT_SIZE_BYTES_DEFAULT),
            pool: PoolLocation::Simulated(simulation.clone()),
            ..EngineConfig::default()
        })
        .unwrap();
        let churn: Vec<Vec<u8>> = (0u64..)
            .map(|i| format!("churn:{i}").into_bytes())
            .filter(|k| engine.shard_index(k) != 0)
            .take(2_000)
            .collect();
        let mut rng = SmallRng::seed_from_u64(18);
        for _ in 0..(2 * MEMORY_BYTES / 1000) {
            let k = &churn[rng.gen_range(0..churn.len())];
            engine.set(k, &value, 0, Expiry::Never).unwrap();
        }
        let before = (simulation.persist_calls(), engine.stats().cleaner_passes);
        let shards = shard_count_for(MEMORY_BYTES, SEGMENT_SIZE_BYTES_DEFAULT);
        let anchors: Vec<Vec<u8>> = (0..shards)
            .map(|shard| {
                (0u64..)
                    .map(|i| format!("anchor:{i}").into_bytes())
                    .find(|k| engine.shard_index(k) == shard)
                    .unwrap()
            })
            .collect();
        let mut fresh = (0u64..)
            .map(|i| format!("fresh:{i}").into_bytes())
            .filter(|k| engine.shard_index(k) == 0);
        let (mut finished, mut failure) = (Vec::new(), None);
        while finished.len() < (MEMORY_BYTES / 4 / 1000) as usize {
            let batch: Vec<Vec<u8>> = fresh.by_ref().take(20).collect();
            let keys: Vec<&[u8]> = anchors.iter().chain(&batch).map(Vec::as_slice).collect();
            let outcome = engine.transaction(&keys, &[]).and_then(|txn| {
                for k in &batch {
                    txn.set(k, &value, 0, Expiry::Never)?;
                }
                txn.finish()
            });
            match outcome {
                Ok(()) => finished.extend(batch),
                Err(err) => {
                    failure = Some(err);
                    break;
                }
            }
        }
        let after = (simulation.persist_calls(), engine.stats().cleaner_passes);
        (engine, churn, finished, failure, before, after)
    };
    let (_, _, _, failure, before, after) = run(strata_pool::testing::SimulatedPersistence::new());
    assert!(failure.is_none(), "{failure:?}");
    assert!(after.1 > before.1, "the transactions ran cleaner passes");
    let span = after.0 - before.0;
    for point in 1..=12 {
        let fail_from = before.0 + span * point / 13;
        let simulation = strata_pool::testing::SimulatedPersistence::failing_from(fail_from);
        let (engine, churn, finished, failure, _, _) = run(simulation);
        let Some(WriteError::Persist(_)) = failure else {
            panic!("persist {fail_from} of {}: {failure:?}", after.0);
        };
        assert_eq!(engine.stats().evicted_items, 0, "persist {fail_from}");
        for k in finished.iter().chain(&churn) {
            assert_eq!(
                engine.get(k, |item| item.value == &value[..]),
                Some(true),
                "persist {fail_from}: {}",
                String::from_utf8_lossy(k)
            );
        }
        assert!(
            engine.set(b"later", b"x", 0, Expiry::Never).is_err(),
            "persist {fail_from}: a write after the failure is refused"
        );
        engine.check_integrity().unwrap();
    }
}
