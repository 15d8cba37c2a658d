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

fn account(i: u64) -> Vec<u8> {
    format!("account-{i}").into_bytes()
}

fn balance(bytes: &[u8]) -> i64 {
    std::str::from_utf8(bytes).unwrap().parse().unwrap()
}

/// Moves `amount` from the first of `keys` to the others, in one transaction.
fn transfer(engine: &Engine, keys: &[&[u8]], amount: i64) {
    let txn = engine.transaction(keys, keys).unwrap();
    let from = txn
        .get(keys[0], |item| balance(item.value))
        .expect("present");
    txn.set(
        keys[0],
        (from - amount).to_string().as_bytes(),
        0,
        Expiry::Never,
    )
    .unwrap();
    // The amount spread over the others, the rest to the last.
    let others = keys.len() as i64 - 1;
    let share = amount / others;
    for (i, key) in keys.iter().enumerate().skip(1) {
        let extra = if i == keys.len() - 1 {
            amount - share * others
        } else {
            0
        };
        txn.modify(key, |current, buffer| {
            let now = balance(current.expect("present").value);
            buffer.extend_from_slice((now + share + extra).to_string().as_bytes());
            Change::Write {
                client_flags: 0,
                expiry: Expiry::Never,
                keep_cas: false,
            }
        })
        .unwrap();
    }
    txn.finish().unwrap();
}

/// Sums `keys` in one `read_together` until `stop`, checking each sum; returns how many.
fn sum_until(engine: &Engine, keys: &[&[u8]], total: i64, stop: &AtomicBool) -> u64 {
    let mut sums = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let together = engine.read_together(keys);
        let sum: i64 = keys
            .iter()
            .map(|key| {
                together
                    .get(key, |item| balance(item.value))
                    .expect("present")
            })
            .sum();
        drop(together);
        assert_eq!(sum, total, "a read saw part of a transfer");
        sums += 1;
    }
    sums
}

/// 5,000 transfers between two to five random accounts of `accounts`.
fn random_transfers(engine: &Engine, thread: u64, accounts: u64) {
    let mut seed = thread * 7919 + 1;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..5_000 {
        let count = 2 + next() % 4;
        let mut picked: Vec<Vec<u8>> = Vec::new();
        while (picked.len() as u64) < count {
            let key = account(next() % accounts);
            if !picked.contains(&key) {
                picked.push(key);
            }
        }
        let keys: Vec<&[u8]> = picked.iter().map(Vec::as_slice).collect();
        transfer(engine, &keys, (next() % 50) as i64);
    }
}

/// Transfers between accounts, each a transaction over two to five random accounts (so over
/// random sets of shards, locked in one order: the test would hang on a deadlock), beside
/// readers that sum every account in one `read_together` and single-key writers of other keys
/// that keep the cleaner busy: every sum is the total, and no transfer is lost.
#[test]
fn transactions_over_random_key_sets_are_isolated_and_never_deadlock() {
    const ACCOUNTS: u64 = 64;
    const TOTAL: i64 = 64_000;
    let engine = Arc::new(
        Engine::open(EngineConfig {
            memory_bytes: 4 << 20,
            segment_size_bytes: 64 << 10,
            shard_count: 8,
            ..EngineConfig::default()
        })
        .unwrap(),
    );
    let start = (TOTAL / ACCOUNTS as i64).to_string();
    for i in 0..ACCOUNTS {
        engine
            .set(&account(i), start.as_bytes(), 0, Expiry::Never)
            .unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for thread in 0..4u64 {
        let engine = Arc::clone(&engine);
        handles.push(std::thread::spawn(move || {
            random_transfers(&engine, thread, ACCOUNTS)
        }));
    }
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (engine, stop) = (Arc::clone(&engine), Arc::clone(&stop));
            std::thread::spawn(move || {
                let keys: Vec<Vec<u8>> = (0..ACCOUNTS).map(account).collect();
                let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
                sum_until(&engine, &keys, TOTAL, &stop)
            })
        })
        .collect();
    let noise = {
        let (engine, stop) = (Arc::clone(&engine), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("noise-{}", i % 2_000);
                engine
                    .set(key.as_bytes(), &[7u8; 200], 0, Expiry::Never)
                    .unwrap();
                i += 1;
            }
        })
    };
    for handle in handles {
        handle.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    noise.join().unwrap();
    for reader in readers {
        assert!(reader.join().unwrap() > 0, "the reader read");
    }
    let sum: i64 = (0..ACCOUNTS)
        .map(|i| engine.get(&account(i), |item| balance(item.value)).unwrap())
        .sum();
    assert_eq!(sum, TOTAL, "no transfer lost");
    assert_eq!(engine.stats().evicted_items, 0);
}
