//! Several threads write and read overlapping keys; a checker verifies that every value read is
//! one that some thread wrote for that key (values carry their key and a writer stamp), never a
//! torn mix or another key's value, and that per-thread counters only move forward.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use strata_engine::*;

fn value_for(key: u32, writer: u32, stamp: u64, len: usize) -> Vec<u8> {
    let mut value = format!("{key}:{writer}:{stamp}:").into_bytes();
    let fill = (key as u8).wrapping_add(stamp as u8);
    value.resize(len.max(value.len()), fill);
    value
}

fn check(key: u32, value: &[u8]) {
    let text = String::from_utf8_lossy(value);
    let mut parts = text.splitn(4, ':');
    let got_key: u32 = parts.next().and_then(|p| p.parse().ok()).expect("key part");
    assert_eq!(got_key, key, "a value of another key was returned");
    let _writer: u32 = parts
        .next()
        .and_then(|p| p.parse().ok())
        .expect("writer part");
    let stamp: u64 = parts
        .next()
        .and_then(|p| p.parse().ok())
        .expect("stamp part");
    let prefix = format!("{key}:{_writer}:{stamp}:").len();
    let fill = (key as u8).wrapping_add(stamp as u8);
    assert!(
        value[prefix..].iter().all(|&b| b == fill),
        "torn value for key {key}"
    );
}

/// Three writers (sets, deletes, appends) and two readers over `keys` keys of 16 to 315
/// bytes in a 4 MiB pool of 64 KiB segments, with a flash tier below it if given; returns the
/// engine once the writers are done.
fn write_and_read_concurrently(keys: u64, flash: Option<FlashConfig>) -> Arc<Engine> {
    let engine = Arc::new(
        Engine::open(EngineConfig {
            memory_bytes: 4 << 20,
            segment_size_bytes: 64 << 10,
            shard_count: 4,
            flash,
            ..EngineConfig::default()
        })
        .unwrap(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for writer in 0..3u32 {
        let engine = Arc::clone(&engine);
        handles.push(std::thread::spawn(move || {
            for stamp in 0..60_000u64 {
                let key = ((stamp * 7 + u64::from(writer) * 13) % keys) as u32;
                let len = 16 + (stamp % 300) as usize;
                let value = value_for(key, writer, stamp, len);
                let name = format!("k{key}");
                match stamp % 10 {
                    0 => drop(engine.delete(name.as_bytes(), None).unwrap()),
                    1 => drop(engine.concat(name.as_bytes(), b"", false).unwrap()),
                    _ => drop(
                        engine
                            .set(name.as_bytes(), &value, writer, Expiry::Never)
                            .unwrap(),
                    ),
                }
            }
        }));
    }
    let mut readers = Vec::new();
    for reader in 0..2u32 {
        let (engine, stop) = (Arc::clone(&engine), Arc::clone(&stop));
        readers.push(std::thread::spawn(move || {
            let mut reads = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let key = ((reads * 31 + u64::from(reader)) % keys) as u32;
                engine.get(format!("k{key}").as_bytes(), |item| check(key, item.value));
                reads += 1;
            }
            reads
        }));
    }
    for handle in handles {
        handle.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for reader in readers {
        assert!(reader.join().unwrap() > 0);
    }
    engine.check_integrity().unwrap();
    engine
}

/// About 1 MiB of live data in a 4 MiB pool that the writers fill many times over: the cleaner
/// keeps every item, while readers race its moves.
#[test]
fn readers_and_writers_on_shared_keys_see_only_whole_values() {
    let engine = write_and_read_concurrently(5000, None);
    let stats = engine.stats();
    assert!(
        stats.cleaner_segments_freed > 0,
        "the cleaner ran: {stats:?}"
    );
    assert_eq!(stats.evicted_items, 0, "live data fits: {stats:?}");
}

/// About 8 MiB of live data in a 4 MiB pool: eviction must run, beside the cleaner.
#[test]
fn readers_and_writers_see_only_whole_values_while_eviction_runs() {
    let engine = write_and_read_concurrently(40_000, None);
    let stats = engine.stats();
    assert!(stats.evicted_segments > 0, "eviction ran: {stats:?}");
}

/// The same over a 16 MiB flash tier (in memory), about 4 MiB of live data: evicted items go
/// down to flash and reads bring them back while the cleaner moves records in memory (with a
/// flash tier it takes only segments at least half dead, which twice the memory's live data
/// would leave it none of), and every read is whole.
#[test]
fn readers_and_writers_see_only_whole_values_while_items_move_between_tiers() {
    let medium: Arc<dyn strata_pool::Medium> = Arc::new(strata_pool::testing::MemoryMedium::new(
        4096 + 64 * (256 << 10),
        4096,
    ));
    let flash = FlashConfig {
        medium: FlashMedium::Given(medium),
        region_size_bytes: 256 << 10,
        admission: FlashAdmission::All,
        write_bytes_per_sec_max: 0,
        read_delay_for_tests: std::time::Duration::ZERO,
    };
    let engine = write_and_read_concurrently(20_000, Some(flash));
    let stats = engine.stats();
    let tier = stats.flash.as_ref().expect("a flash tier");
    assert!(stats.cleaner_items_moved > 0, "{stats:?}");
    assert!(tier.appended_items > 0 && tier.hits > 0, "{tier:?}");
}
