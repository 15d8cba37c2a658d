//! Items of several records (an owner and its parts) through the engine's API: read back whole,
//! never seen as keys, rewritten and deleted with their parts, evicted, expired, cleaned and
//! reopened as one item, demoted to flash whole. Every check reads every family back: an owner
//! present owns all its parts (each holding the owner's latest tag), an owner absent leaves no
//! part behind.
#![allow(
    clippy::too_many_lines,
    reason = "a test scenario reads best as one function"
)]

use std::collections::HashMap;
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use strata_engine::*;
use strata_pool::testing::{MemoryMedium, SimulatedPersistence};
use strata_pool::Pool;

mod support;
use support::{crash_copy, flip_in_file, temp_pool};

/// Most parts a family of these tests has: the absent check looks that far.
const PARTS_MAX: u32 = 24;

fn owner(i: u32) -> Vec<u8> {
    format!("owner:{i:06}").into_bytes()
}

fn part_value(owner: &[u8], part: u32, tag: u32, len: usize) -> Vec<u8> {
    let mut value = format!("{}/{part}/{tag}/", String::from_utf8_lossy(owner)).into_bytes();
    value.resize(len, b'p');
    value
}

fn owner_value(tag: u32) -> Vec<u8> {
    format!("tag={tag}").into_bytes()
}

/// Writes `owner` as a family of `parts` parts of `part_len` bytes tagged `tag`: the parts
/// first, then the owner. Returns whether the family stands (a write's eviction may drop it).
fn write_family(engine: &Engine, owner: &[u8], parts: u32, tag: u32, part_len: usize) -> bool {
    let txn = engine.transaction(&[owner], &[]).unwrap();
    for part in 0..parts {
        txn.write_part(owner, part, &part_value(owner, part, tag, part_len))
            .unwrap();
    }
    let kind = if parts == 0 { Kind::String } else { Kind::Hash };
    let cas = txn
        .write_owner(owner, &owner_value(tag), kind, Expiry::Never, parts)
        .unwrap();
    txn.finish().unwrap();
    cas.is_some()
}

/// What a check of a family allows, beyond an owner that owns all its parts.
#[derive(Clone, Copy, PartialEq)]
enum After {
    /// Nothing else: no crash came between.
    Nothing,
    /// Orphans: parts no owner owns (a crash; see the engine's `shard::parts`).
    Orphans,
    /// Orphans, and parts of another of the owner's writes (a power cut under deferred
    /// durability, until the transaction log keeps parts): still never a missing part.
    Torn,
}

/// The family under `owner` as the engine holds it: `Some((tag, parts))`, or `None` when the
/// owner is absent. Panics when it is not whole: a part missing or of another tag, a part past
/// the owner's count, or a part left by an absent owner.
fn read_family(engine: &Engine, owner: &[u8]) -> Option<(u32, u32)> {
    read_family_after(engine, owner, After::Nothing)
}

/// [`read_family`], allowing what `after` allows.
fn read_family_after(engine: &Engine, owner: &[u8], after: After) -> Option<(u32, u32)> {
    // Held for writing, as a large hash's command holds it: a family on flash is promoted to
    // be read (a read-only hold reads only its owner there).
    let txn = engine.transaction(&[owner], &[]).unwrap();
    let found = txn.read(owner, false, |item| {
        let tag: u32 = std::str::from_utf8(&item.value[4..])
            .unwrap()
            .parse()
            .unwrap();
        (tag, item.parts)
    });
    let parts = found.map_or(0, |(_, parts)| parts);
    for part in 0..PARTS_MAX.max(parts) {
        let Ok(value) = txn.read_part(owner, part, <[u8]>::to_vec) else {
            panic!("{owner:?} ({found:?}) lacks part {part}, which it owns");
        };
        match (found, value) {
            (Some((tag, parts)), Some(value)) if part < parts => {
                let expected = part_value(owner, part, tag, value.len());
                if after == After::Torn {
                    let prefix = format!("{}/{part}/", String::from_utf8_lossy(owner));
                    assert!(
                        value.starts_with(prefix.as_bytes()),
                        "part {part} of {owner:?}"
                    );
                } else {
                    assert_eq!(value, expected, "part {part} of {owner:?}");
                }
            }
            (Some((_, parts)), None) if part < parts => {
                panic!("{owner:?} owns {parts} parts but lacks part {part}")
            }
            (_, Some(_)) if after == After::Nothing => {
                panic!("{owner:?} ({found:?}) left part {part} behind")
            }
            _ => {}
        }
    }
    found
}

#[test]
fn families_read_back_whole_and_their_parts_are_never_keys() {
    // One shard: a user key with a part's bytes has the part's index bits too (both hash the
    // same bytes), so only the part bit tells them apart.
    let engine = Engine::open(EngineConfig {
        memory_bytes: 16 << 20,
        shard_count: 1,
        ..EngineConfig::default()
    })
    .unwrap();
    for i in 0..50 {
        assert!(write_family(&engine, &owner(i), i % 7 + 1, i, 300));
    }
    // A user key with a part's very bytes is a key of its own, beside the part.
    let mut lookalike = owner(3);
    lookalike.extend_from_slice(&0u32.to_le_bytes());
    engine
        .set(&lookalike, b"a user's", 0, Expiry::Never)
        .unwrap();
    for i in 0..50 {
        assert_eq!(read_family(&engine, &owner(i)), Some((i, i % 7 + 1)));
    }
    assert_eq!(
        engine.get(&lookalike, |item| item.value.to_vec()).unwrap(),
        b"a user's"
    );
    let mut other = owner(4);
    other.extend_from_slice(&1u32.to_le_bytes());
    assert!(engine.get(&other, |_| ()).is_none(), "a part read as a key");
    assert_eq!(engine.len(), 51);
    assert_eq!(engine.stats().items, 51);
    let mut scanned = Vec::new();
    let mut cursor = 0;
    loop {
        cursor = engine.scan(cursor, 100, &mut |key| scanned.push(key.to_vec()));
        if cursor == 0 {
            break;
        }
    }
    scanned.sort();
    let mut expected: Vec<Vec<u8>> = (0..50).map(owner).collect();
    expected.push(lookalike.clone());
    expected.sort();
    assert_eq!(scanned, expected);
    for seed in 0..200 {
        let key = engine.random_key(seed).unwrap();
        assert!(expected.contains(&key), "random key {key:?}");
    }
    engine.check_integrity().unwrap();
}

#[test]
fn rewriting_an_owner_drops_the_parts_it_no_longer_owns_and_a_delete_drops_them_all() {
    let engine = Engine::open(EngineConfig {
        memory_bytes: 16 << 20,
        ..EngineConfig::default()
    })
    .unwrap();
    let key = owner(1);
    let empty = engine.stats().live_bytes;
    assert!(write_family(&engine, &key, 10, 1, 1000));
    assert!(write_family(&engine, &key, 4, 2, 1000));
    assert_eq!(read_family(&engine, &key), Some((2, 4)));
    // A string written over it, as SET over a large hash.
    engine.set(&key, b"tag=3", 0, Expiry::Never).unwrap();
    assert_eq!(read_family(&engine, &key), Some((3, 0)));
    assert!(engine.stats().live_bytes < empty + 100);
    assert!(write_family(&engine, &key, 12, 4, 1000));
    assert_eq!(engine.stats().items, 1);
    assert_eq!(engine.delete(&key, None).unwrap(), DeleteOutcome::Deleted);
    assert_eq!(read_family(&engine, &key), None);
    assert_eq!(engine.stats().live_bytes, empty);
    assert_eq!(engine.stats().items, 0);
    // A touch keeps the item whole.
    assert!(write_family(&engine, &key, 5, 5, 1000));
    let txn = engine.transaction(&[&key[..]], &[]).unwrap();
    txn.modify(&key, |item, buffer| {
        buffer.extend_from_slice(item.unwrap().value);
        Change::Write {
            client_flags: 0,
            expiry: Expiry::Never,
            keep_cas: true,
        }
    })
    .unwrap();
    txn.finish().unwrap();
    assert_eq!(read_family(&engine, &key), Some((5, 5)));
    engine.check_integrity().unwrap();
}

/// Families of 1 to 20 parts and strings, written and rewritten at random in a memory a
/// fraction of their size: every eviction policy drops whole families only, counts each as
/// one item, and keeps reads of hot ones.
#[test]
fn eviction_drops_whole_families_under_every_policy() {
    for policy in [
        EvictionPolicy::Merge,
        EvictionPolicy::Fifo,
        EvictionPolicy::Random,
    ] {
        let engine = Engine::open(EngineConfig {
            memory_bytes: 4 << 20,
            segment_size_bytes: 64 << 10,
            shard_count: 2,
            eviction: policy,
            ..EngineConfig::default()
        })
        .unwrap();
        let mut rng = SmallRng::seed_from_u64(7);
        let mut tags = HashMap::new();
        for tag in 0..6000u32 {
            let i = rng.gen_range(0..800);
            let parts = rng.gen_range(0..=20);
            write_family(&engine, &owner(i), parts, tag, rng.gen_range(100..2000));
            tags.insert(i, tag);
            if rng.gen_ratio(1, 2) {
                let _ = engine.get(&owner(rng.gen_range(0..800)), |_| ());
            }
        }
        let stats = engine.stats();
        assert!(stats.evicted_items > 1000, "{policy:?}: {stats:?}");
        let mut present = 0;
        for (&i, &tag) in &tags {
            if let Some((found, _)) = read_family(&engine, &owner(i)) {
                assert_eq!(
                    found, tag,
                    "{policy:?}: owner {i} went back to an older write"
                );
                present += 1;
            }
        }
        assert!(present > 50, "{policy:?}: {present}");
        assert_eq!(engine.stats().items, present, "{policy:?}");
        engine.check_integrity().unwrap();
    }
}

/// A store (no eviction) whose families are rewritten over and over: the cleaner moves their
/// parts, and every family stays whole at its latest write.
#[test]
fn the_cleaner_moves_parts_and_keeps_families_whole() {
    let engine = Engine::open(EngineConfig {
        memory_bytes: 8 << 20,
        segment_size_bytes: 64 << 10,
        shard_count: 2,
        eviction: EvictionPolicy::None,
        ..EngineConfig::default()
    })
    .unwrap();
    let mut rng = SmallRng::seed_from_u64(11);
    let mut families = HashMap::new();
    for tag in 0..4000u32 {
        let i = rng.gen_range(0..100);
        let parts = rng.gen_range(1..=16);
        assert!(write_family(&engine, &owner(i), parts, tag, 700));
        families.insert(i, (tag, parts));
        if tag % 50 == 0 {
            engine.clean_ahead().unwrap();
        }
    }
    let stats = engine.stats();
    assert!(stats.cleaner_items_moved > 1000, "{stats:?}");
    assert_eq!(stats.evicted_items, 0, "{stats:?}");
    for (&i, &family) in &families {
        assert_eq!(read_family(&engine, &owner(i)), Some(family), "owner {i}");
    }
    assert_eq!(engine.len(), families.len());
    engine.check_integrity().unwrap();
}

/// An owner with a TTL takes its parts along when it expires, whether its segment is freed or
/// the cleaner finds it expired.
#[test]
fn an_expired_owner_takes_its_parts_along() {
    let clock = ManualClock::new(1_000_000);
    let engine = Engine::open(EngineConfig {
        memory_bytes: 8 << 20,
        segment_size_bytes: 64 << 10,
        shard_count: 1,
        clock: Arc::new(clock.clone()),
        ..EngineConfig::default()
    })
    .unwrap();
    for i in 0..20 {
        let key = owner(i);
        let txn = engine.transaction(&[&key[..]], &[]).unwrap();
        for part in 0..8 {
            txn.write_part(&key, part, &part_value(&key, part, i, 2000))
                .unwrap();
        }
        txn.write_owner(
            &key,
            &owner_value(i),
            Kind::Hash,
            Expiry::AtMs(1_001_000),
            8,
        )
        .unwrap();
        txn.finish().unwrap();
    }
    assert!(write_family(&engine, &owner(100), 3, 100, 100));
    clock.advance_ms(2_000);
    engine.expire().unwrap();
    for i in 0..20 {
        assert_eq!(read_family(&engine, &owner(i)), None, "owner {i}");
    }
    assert_eq!(read_family(&engine, &owner(100)), Some((100, 3)));
    assert_eq!(engine.len(), 1);
    engine.check_integrity().unwrap();
}

/// Families in a pool file come back whole after a clean close and after a crash (no close),
/// with the index rebuilt from the records and with the index in the pool; parts are still not
/// keys, and the pool then takes more writes of them.
#[test]
fn families_survive_a_reopen_with_either_index() {
    for placement in [IndexPlacement::Dram, IndexPlacement::Pool] {
        for clean in [true, false] {
            let pool = temp_pool(&format!("{placement:?}-{clean}"));
            let config = EngineConfig {
                memory_bytes: 8 << 20,
                segment_size_bytes: 64 << 10,
                pool: PoolLocation::File(pool.0.clone()),
                index_placement: placement,
                ..EngineConfig::default()
            };
            {
                let engine = Engine::open(config.clone()).unwrap();
                for i in 0..60 {
                    assert!(write_family(&engine, &owner(i), i % 9 + 1, i, 500));
                }
                assert!(write_family(&engine, &owner(5), 2, 1005, 500));
                engine.delete(&owner(6), None).unwrap();
                if clean {
                    engine.close().unwrap();
                }
            }
            let engine = Engine::open(config.clone()).unwrap();
            let case = format!("{placement:?}, clean {clean}");
            while !engine.scrub_step() {}
            for i in 0..60 {
                let expected = match i {
                    5 => Some((1005, 2)),
                    6 => None,
                    i => Some((i, i % 9 + 1)),
                };
                assert_eq!(
                    read_family(&engine, &owner(i)),
                    expected,
                    "{case}: owner {i}"
                );
            }
            assert_eq!(engine.len(), 59, "{case}");
            assert!(write_family(&engine, &owner(7), 12, 2007, 500));
            assert_eq!(read_family(&engine, &owner(7)), Some((2007, 12)), "{case}");
            engine.check_integrity().unwrap();
        }
    }
}

/// With a flash tier below, evicted strings are demoted, and families too, each whole as one
/// flash record: every family read back (after its promotion) is whole and its latest write.
#[test]
fn a_flash_tier_takes_strings_and_never_half_a_family() {
    let region_bytes = 16 << 10;
    let medium = Arc::new(MemoryMedium::new(4096 + 64 * region_bytes, 4096));
    let engine = Engine::open(EngineConfig {
        memory_bytes: 48 * 4096,
        segment_size_bytes: 4096,
        shard_count: 2,
        item_size_bytes_expected: 2048,
        value_len_max: 3000,
        flash: Some(FlashConfig {
            medium: FlashMedium::Given(medium),
            region_size_bytes: region_bytes as u64,
            admission: FlashAdmission::All,
            write_bytes_per_sec_max: 0,
            read_delay_for_tests: std::time::Duration::ZERO,
        }),
        ..EngineConfig::default()
    })
    .unwrap();
    let mut tags = HashMap::new();
    for tag in 0..400u32 {
        let i = tag % 100;
        write_family(&engine, &owner(i), tag % 4 + 1, tag, 600);
        tags.insert(i, tag);
        let string = format!("string:{tag}");
        engine
            .set(string.as_bytes(), &[b's'; 600], 0, Expiry::Never)
            .unwrap();
    }
    assert!(engine.flash_items() > 0);
    let mut families_found = 0;
    for (&i, &tag) in &tags {
        if let Some((found, _)) = read_family(&engine, &owner(i)) {
            assert_eq!(found, tag, "owner {i}");
            families_found += 1;
        }
    }
    let refused = engine.stats().flash.expect("a flash tier").refused_items;
    assert!(
        families_found + refused >= 100,
        "{families_found} families found, {refused} items refused by flash"
    );
    let on_flash = engine.flash_items();
    let strings_found = (0..400)
        .filter(|tag| {
            engine
                .get(format!("string:{tag}").as_bytes(), |_| ())
                .is_some()
        })
        .count();
    assert!(
        strings_found as u64 >= on_flash.min(300),
        "{strings_found} {on_flash}"
    );
    engine.check_integrity().unwrap();
}

/// Families written, shrunk, deleted and overwritten by strings on a simulated pool, cut
/// between operations: by a power cut under `sync` (every acknowledged write durable, the
/// pool keeping any share of the lines written since), and by a process crash (every store
/// kept) under each level. Recovery indexes parts by their part hash (reads find them), and
/// every owner it serves owns all its parts, each of the owner's own write; the parts a
/// shrink or delete dropped may come back only as orphans. A power cut under deferred
/// durability may keep part of a family's writes since the last commit: recovery drops an
/// owner that lacks a part, so families are still whole, though a part may hold another of
/// its owner's writes until the transaction log keeps parts (docs/ARCHITECTURE.md, "Values
/// larger than one record").
#[test]
fn a_crash_between_writes_leaves_every_family_whole() {
    for seed in 0..40u64 {
        for (durability, power_cut) in [
            (Durability::Sync, true),
            (Durability::Sync, false),
            (Durability::Interval { ms: 10 }, false),
            (Durability::Interval { ms: 10 }, true),
        ] {
            // Under deferred durability a power cut may keep some of the writes since the
            // last commit: families are still whole (recovery drops an owner that lacks a
            // part), and what each holds is one its key was written with.
            let torn = power_cut && durability != Durability::Sync;
            let after = if torn { After::Torn } else { After::Orphans };
            let config = EngineConfig {
                memory_bytes: 32 * 16384,
                segment_size_bytes: 16384,
                shard_count: 2,
                pool: PoolLocation::Simulated(SimulatedPersistence::new()),
                durability,
                ..EngineConfig::default()
            };
            let PoolLocation::Simulated(simulation) = &config.pool else {
                unreachable!()
            };
            let mut rng = SmallRng::seed_from_u64(seed);
            let engine = Engine::open(config.clone()).unwrap();
            let mut written: HashMap<u32, Vec<u32>> = HashMap::new();
            let mut latest: HashMap<u32, Option<u32>> = HashMap::new();
            for tag in 0..rng.gen_range(1..120u32) {
                let i = rng.gen_range(0..12);
                let stands = match rng.gen_range(0..10) {
                    0 => {
                        engine.delete(&owner(i), None).unwrap();
                        false
                    }
                    1 => {
                        let value = owner_value(tag);
                        engine.set(&owner(i), &value, 0, Expiry::Never).unwrap();
                        true
                    }
                    _ => write_family(&engine, &owner(i), rng.gen_range(1..=8), tag, 300),
                };
                written.entry(i).or_default().push(tag);
                latest.insert(i, stands.then_some(tag));
            }
            assert_eq!(
                engine.stats().evicted_items,
                0,
                "the workload must not evict"
            );
            let case = format!("seed {seed}, {durability:?}, power cut {power_cut}");
            let pool = if power_cut {
                let keep_percent = [0, 50, 100][rng.gen_range(0..3)];
                let image =
                    engine.crash_image(simulation, &mut |_| rng.gen_range(0..100) < keep_percent);
                Pool::open_image(&image, SimulatedPersistence::new()).unwrap()
            } else {
                let live = engine.crash_image(simulation, &mut |_| true);
                let persisted = engine.crash_image(simulation, &mut |_| false);
                Pool::open_image_after_process_crash(&live, &persisted, SimulatedPersistence::new())
                    .unwrap()
            };
            drop(engine);
            let engine = Engine::from_pool(pool, &config).unwrap();
            engine
                .check_integrity()
                .unwrap_or_else(|e| panic!("{case}: {e}"));
            for (i, tags) in &written {
                if let Some((tag, _)) = read_family_after(&engine, &owner(*i), after) {
                    assert!(tags.contains(&tag), "{case}: owner {i} holds tag {tag}");
                }
            }
            // Every write was acknowledged: `sync` made each durable, and a process crash
            // keeps every store.
            for (i, expected) in latest.iter().filter(|_| !torn) {
                let found = read_family_after(&engine, &owner(*i), after).map(|(tag, _)| tag);
                assert_eq!(found, *expected, "{case}: owner {i}");
            }
            assert!(write_family(&engine, &owner(99), 5, 9999, 300), "{case}");
        }
    }
}

/// A pool at `path` holding 30 families of 4 parts of 500 bytes (owner `i` tagged `i`),
/// closed cleanly or not (a crash: the engine dropped); returns its configuration.
fn pool_of_families(path: &std::path::Path, clean: bool) -> EngineConfig {
    let config = EngineConfig {
        memory_bytes: 8 << 20,
        segment_size_bytes: 64 << 10,
        pool: PoolLocation::File(path.to_path_buf()),
        ..EngineConfig::default()
    };
    let engine = Engine::open(config.clone()).unwrap();
    for i in 0..30 {
        assert!(write_family(&engine, &owner(i), 4, i, 500));
    }
    if clean {
        engine.close().unwrap();
    }
    config
}

/// Flips a byte of part `part` of owner `i` in every copy in the pool file: its key (the
/// owner's, then the part as u32 LE), then its value.
fn flip_part(path: &std::path::Path, i: u32, part: u32) {
    let mut record = owner(i);
    record.extend_from_slice(&part.to_le_bytes());
    record.extend_from_slice(format!("owner:{i:06}/{part}/").as_bytes());
    flip_in_file(path, &record, record.len() - 2);
}

/// A flipped byte in a pool file, in one family's part and in another's owner, after a clean
/// close (the snapshot adopts the segments unread; the scrub walks them) and after a crash
/// (recovery walks them): neither is ever served as it was damaged. The family that lost a part
/// is dropped whole (counted as damaged), the one that lost its owner leaves only orphans, every
/// other family is whole, and the pool takes new families.
#[test]
fn a_flipped_byte_in_a_part_or_an_owner_drops_that_item_and_serves_no_half() {
    for clean in [true, false] {
        let pool = temp_pool(&format!("parts-flip-{clean}"));
        let config = pool_of_families(&pool.0, clean);
        flip_part(&pool.0, 5, 2);
        // Owner 3: its key, then its value.
        let owner_record = [owner(3), owner_value(3)].concat();
        flip_in_file(&pool.0, &owner_record, owner_record.len() - 1);
        let engine = Engine::open(config).unwrap();
        while !engine.scrub_step() {}
        engine.repair();
        let case = format!("clean close {clean}");
        assert_eq!(
            read_family_after(&engine, &owner(5), After::Orphans),
            None,
            "{case}"
        );
        assert_eq!(
            read_family_after(&engine, &owner(3), After::Orphans),
            None,
            "{case}"
        );
        for i in (0..30).filter(|i| ![3, 5].contains(i)) {
            assert_eq!(
                read_family(&engine, &owner(i)),
                Some((i, 4)),
                "{case}: owner {i}"
            );
        }
        assert!(engine.stats().damaged_items_dropped >= 1, "{case}");
        assert_eq!(engine.len(), 28, "{case}");
        assert!(write_family(&engine, &owner(5), 6, 500, 500), "{case}");
        assert_eq!(read_family(&engine, &owner(5)), Some((500, 6)), "{case}");
        engine.check_integrity().unwrap();
    }
}

/// Parts whose records a stopped server's pool damaged, read after a clean close and before
/// the scrub has walked their segments (the read itself finds the damage): the read says the
/// family is broken, never that the part is absent (a large hash would be served without that
/// chunk's fields), and the family is dropped whole before the reader answers anyone: at once
/// under a write hold (the same transaction then finds the key absent), as a read-only hold
/// ends (its repair) otherwise, with no repair tick or scrub step between.
#[test]
fn a_part_found_damaged_by_a_read_drops_its_family_before_the_reader_answers() {
    let pool = temp_pool("parts-read-broken");
    let config = pool_of_families(&pool.0, true);
    flip_part(&pool.0, 5, 2);
    flip_part(&pool.0, 7, 1);
    let engine = Engine::open(config).unwrap();
    let dropped_before = engine.stats().damaged_items_dropped;
    {
        let txn = engine.transaction(&[&owner(5)], &[]).unwrap();
        let parts = txn.read(&owner(5), false, |item| item.parts);
        assert_eq!(parts, Some(4), "the owner is sound");
        for part in [0, 1, 3] {
            let read = txn.read_part(&owner(5), part, <[u8]>::len);
            assert_eq!(read, Ok(Some(500)), "part {part} is sound");
        }
        assert_eq!(
            txn.read_part(&owner(5), 2, <[u8]>::len),
            Err(FamilyBroken),
            "the damaged part"
        );
        // Dropped at once: the rest of the transaction finds no item and no part.
        assert_eq!(txn.read(&owner(5), false, |item| item.parts), None);
        assert_eq!(txn.read_part(&owner(5), 0, <[u8]>::len), Ok(None));
    }
    assert_eq!(engine.stats().damaged_items_dropped, dropped_before + 1);
    {
        let txn = engine.read_together(&[&owner(7)]);
        assert_eq!(txn.read(&owner(7), false, |item| item.parts), Some(4));
        let read = txn.read_part(&owner(7), 1, <[u8]>::len);
        assert_eq!(read, Err(FamilyBroken), "the damaged part, read-only");
    }
    // The read-only transaction repaired the engine as it ended: the damaged entries (their
    // keys unreadable, each counted as an item) and the family went.
    assert_eq!(read_family_after(&engine, &owner(5), After::Orphans), None);
    assert_eq!(read_family_after(&engine, &owner(7), After::Orphans), None);
    assert_eq!(engine.stats().damaged_items_dropped, dropped_before + 4);
    for i in (0..30).filter(|&i| i != 5 && i != 7) {
        assert_eq!(read_family(&engine, &owner(i)), Some((i, 4)), "owner {i}");
    }
    while !engine.scrub_step() {}
    engine.repair();
    assert_eq!(engine.len(), 28);
    engine.check_integrity().unwrap();
}

/// A logged transaction (EXEC on a pool) that rewrites one family larger, deletes another and
/// makes a third, and then a crash (`kill -9`: the pool copied as it is) before it ends: the
/// reopen puts both old families back whole, parts and all, and leaves nothing of the new one.
/// The original, which went on and ended its transaction, holds every change, and the
/// deleted family's parts are gone once the log said done.
#[test]
fn a_crash_inside_a_logged_transaction_puts_families_back_whole() {
    for durability in [Durability::None, Durability::Sync] {
        for placement in [IndexPlacement::Dram, IndexPlacement::Pool] {
            let label = format!("{durability:?} {placement:?}");
            let original = temp_pool(&format!("logged-{durability:?}-{placement:?}"));
            let crashed = temp_pool(&format!("logged-{durability:?}-{placement:?}-crashed"));
            let config = |path: &std::path::Path| EngineConfig {
                memory_bytes: 8 << 20,
                segment_size_bytes: 64 << 10,
                pool: PoolLocation::File(path.to_path_buf()),
                durability,
                index_placement: placement,
                ..EngineConfig::default()
            };
            let (grown, deleted, made) = (owner(1), owner(2), owner(3));
            {
                let engine = Engine::open(EngineConfig {
                    fresh: true,
                    ..config(&original.0)
                })
                .unwrap();
                assert!(write_family(&engine, &grown, 5, 1, 500));
                assert!(write_family(&engine, &deleted, 3, 1, 500));
                engine.commit().unwrap();
                let keys: [&[u8]; 3] = [&grown, &deleted, &made];
                let txn = engine.transaction(&keys, &keys).unwrap();
                for part in 0..7 {
                    txn.write_part(&grown, part, &part_value(&grown, part, 2, 400))
                        .unwrap();
                }
                txn.write_owner(&grown, &owner_value(2), Kind::Hash, Expiry::Never, 7)
                    .unwrap();
                txn.delete(&deleted, None).unwrap();
                for part in 0..2 {
                    txn.write_part(&made, part, &part_value(&made, part, 2, 400))
                        .unwrap();
                }
                txn.write_owner(&made, &owner_value(2), Kind::Hash, Expiry::Never, 2)
                    .unwrap();
                crash_copy(&original.0, &crashed.0);
                txn.finish().unwrap();
                assert_eq!(read_family(&engine, &grown), Some((2, 7)), "{label}");
                assert_eq!(read_family(&engine, &deleted), None, "{label}");
                assert_eq!(read_family(&engine, &made), Some((2, 2)), "{label}");
                engine.check_integrity().unwrap();
            }
            let engine = Engine::open(config(&crashed.0)).unwrap();
            let report = engine.recovery_report();
            assert_eq!(report.transaction_keys_restored, 3 + 7 + 2, "{label}");
            assert_eq!(read_family(&engine, &grown), Some((1, 5)), "{label}");
            assert_eq!(read_family(&engine, &deleted), Some((1, 3)), "{label}");
            assert_eq!(read_family(&engine, &made), None, "{label}");
            engine.check_integrity().unwrap();
            drop(engine);
            let engine = Engine::open(config(&original.0)).unwrap();
            assert_eq!(engine.recovery_report().transaction_keys_restored, 0);
            assert_eq!(read_family(&engine, &grown), Some((2, 7)), "{label}");
            assert_eq!(read_family(&engine, &deleted), None, "{label}");
        }
    }
}

/// An atomic group (an EXEC that runs alone) whose single-key writes delete a family: its
/// log took the family's parts up front, so a crash inside it puts the family back whole.
#[test]
fn a_crash_inside_an_atomic_group_puts_a_deleted_family_back_whole() {
    let original = temp_pool("atomic-family");
    let crashed = temp_pool("atomic-family-crashed");
    let config = |path: &std::path::Path| EngineConfig {
        memory_bytes: 8 << 20,
        segment_size_bytes: 64 << 10,
        pool: PoolLocation::File(path.to_path_buf()),
        durability: Durability::Sync,
        ..EngineConfig::default()
    };
    let family = owner(7);
    {
        let engine = Engine::open(EngineConfig {
            fresh: true,
            ..config(&original.0)
        })
        .unwrap();
        assert!(write_family(&engine, &family, 4, 1, 500));
        engine
            .atomically(&[&family], || {
                engine.delete(&family, None).unwrap();
                crash_copy(&original.0, &crashed.0);
            })
            .unwrap();
        assert_eq!(read_family(&engine, &family), None);
    }
    let engine = Engine::open(config(&crashed.0)).unwrap();
    assert_eq!(engine.recovery_report().transaction_keys_restored, 5);
    assert_eq!(read_family(&engine, &family), Some((1, 4)));
    engine.check_integrity().unwrap();
}
