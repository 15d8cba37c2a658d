//! Items of several records (large strings, and owners with parts as a large hash keeps
//! them) evicted to the flash tier: demoted whole as one record, read back whole (a large
//! string straight from flash, a family with parts after a promotion), promoted whole,
//! superseded by writes and deletes, and kept by a clean reopen. Every read is checked
//! against the latest write: the same bytes, never a mix of two writes or a part missing.
#![allow(
    clippy::too_many_lines,
    reason = "a test scenario reads best as one function"
)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use strata_engine::*;
use strata_pool::testing::MemoryMedium;
use strata_pool::Medium;

mod support;
use support::{flash_stats, value, wait_for};

/// Segments of 64 KiB: a string past about 64 KiB takes parts (of 28 KiB).
const SEGMENT_BYTES: u64 = 64 << 10;
/// Regions of 1 MiB: a family's bundle up to about that goes to flash.
const REGION_SIZE_BYTES: u64 = 1 << 20;
/// Regions of the RAM disk: room for everything the tests write.
const REGIONS: usize = 96;

fn ram_disk() -> Arc<dyn Medium> {
    Arc::new(MemoryMedium::new(
        4096 + REGIONS * REGION_SIZE_BYTES as usize,
        4096,
    ))
}

fn config(medium: Arc<dyn Medium>) -> EngineConfig {
    EngineConfig {
        memory_bytes: 4 << 20,
        segment_size_bytes: SEGMENT_BYTES,
        shard_count: 2,
        value_len_max: 4 << 20,
        flash: Some(FlashConfig {
            medium: FlashMedium::Given(medium),
            region_size_bytes: REGION_SIZE_BYTES,
            admission: FlashAdmission::All,
            write_bytes_per_sec_max: 0,
            read_delay_for_tests: Duration::ZERO,
        }),
        ..EngineConfig::default()
    }
}

/// Lets the flash thread write what was sealed (a test thread outruns it, and a tier that is
/// behind refuses items).
fn drain(engine: &Engine) {
    wait_for("the write queue to drain", || {
        flash_stats(engine).regions_queued == 0
    });
}

/// The string at `key`, read without counting an access, joined and in pieces (which must
/// agree).
fn peek_string(engine: &Engine, key: &[u8]) -> Option<Vec<u8>> {
    let joined = engine.peek(key, |item| item.value.to_vec());
    let pieces = engine.get_pieces(key, false, |_, pieces| pieces.concat());
    assert!(joined == pieces, "{key:?}: joined and in pieces differ");
    joined
}

fn string_key(i: u32) -> Vec<u8> {
    format!("string:{i:03}").into_bytes()
}

#[test]
fn large_strings_evicted_to_flash_read_back_whole_and_promote_whole() {
    let engine = Engine::open(config(ram_disk())).unwrap();
    let len = 200 << 10; // 8 parts
    let mut latest: HashMap<u32, u32> = HashMap::new();
    for i in 0..60u32 {
        engine
            .set(&string_key(i), &value(i, len), 0, Expiry::Never)
            .unwrap();
        latest.insert(i, i);
        drain(&engine);
    }
    let on_flash: Vec<u32> = (0..60)
        .filter(|&i| engine.flash_read_needed(&string_key(i)))
        .collect();
    let stats = engine.stats();
    assert!(
        on_flash.len() >= 30,
        "most strings went to flash ({} did): {:?}",
        on_flash.len(),
        stats.flash
    );
    assert_eq!(stats.evicted_items, 0, "none was dropped: {stats:?}");
    for (&i, &tag) in &latest {
        let got = peek_string(&engine, &string_key(i));
        assert!(got == Some(value(tag, len)), "string {i}: not its write");
    }
    // Two reads of a flash-resident string bring it back to memory, in parts again.
    let key = string_key(on_flash[0]);
    let promoted = flash_stats(&engine).promoted_items;
    for _ in 0..2 {
        let got = engine.get(&key, |item| item.value.to_vec());
        assert!(got == Some(value(on_flash[0], len)));
    }
    assert_eq!(flash_stats(&engine).promoted_items, promoted + 1);
    assert!(!engine.flash_read_needed(&key), "in memory now");
    let parts = engine.get_pieces(&key, false, |_, pieces| pieces.len());
    assert_eq!(parts, Some(8), "promoted whole, in its parts");
    // A write and a delete of flash-resident strings supersede their flash copies.
    let (rewritten, deleted) = (on_flash[1], on_flash[2]);
    engine
        .set(&string_key(rewritten), &value(1000, len), 0, Expiry::Never)
        .unwrap();
    latest.insert(rewritten, 1000);
    assert_eq!(
        engine.delete(&string_key(deleted), None).unwrap(),
        DeleteOutcome::Deleted
    );
    latest.remove(&deleted);
    assert_eq!(peek_string(&engine, &string_key(deleted)), None);
    for (&i, &tag) in &latest {
        let got = peek_string(&engine, &string_key(i));
        assert!(got == Some(value(tag, len)), "string {i}: not its write");
    }
    // An append to a flash-resident string promotes it whole first.
    let appended = on_flash[3];
    let key = string_key(appended);
    let txn = engine.transaction(&[&key], &[]).unwrap();
    let outcome = txn.modify(&key, |current, buffer| {
        let current = current.expect("on flash, still there");
        buffer.extend_from_slice(current.value);
        buffer.extend_from_slice(b"tail");
        Change::Write {
            client_flags: 0,
            expiry: Expiry::Never,
            keep_cas: false,
        }
    });
    outcome.unwrap();
    txn.finish().unwrap();
    let mut expected = value(appended, len);
    expected.extend_from_slice(b"tail");
    assert!(peek_string(&engine, &string_key(appended)) == Some(expected));
    engine.check_integrity().unwrap();
}

fn owner_key(i: u32) -> Vec<u8> {
    format!("family:{i:03}").into_bytes()
}

fn part_value(owner: &[u8], part: u32, tag: u32) -> Vec<u8> {
    let mut bytes = format!("{}/{part}/{tag}/", String::from_utf8_lossy(owner)).into_bytes();
    bytes.resize(2000 + part as usize * 37, b'p');
    bytes
}

/// Writes a family of `parts` parts tagged `tag` under `owner`, as a large hash's are
/// written: the parts, then the owner, in one transaction.
fn write_family(engine: &Engine, owner: &[u8], parts: u32, tag: u32) {
    let txn = engine.transaction(&[owner], &[]).unwrap();
    for part in 0..parts {
        txn.write_part(owner, part, &part_value(owner, part, tag))
            .unwrap();
    }
    txn.write_owner(
        owner,
        format!("tag={tag}").as_bytes(),
        Kind::Hash,
        Expiry::Never,
        parts,
    )
    .unwrap();
    txn.finish().unwrap();
}

/// The family at `owner`, read as a large hash's command reads it (with the key held for
/// writing): `(tag, parts)`, after checking every part is there with the owner's tag.
fn read_family(engine: &Engine, owner: &[u8]) -> Option<(u32, u32)> {
    let txn = engine.transaction(&[owner], &[]).unwrap();
    let (tag, parts) = txn.read(owner, false, |item| {
        let tag: u32 = std::str::from_utf8(&item.value[4..])
            .unwrap()
            .parse()
            .unwrap();
        (tag, item.parts)
    })?;
    for part in 0..parts {
        let got = txn.read_part(owner, part, <[u8]>::to_vec);
        assert!(
            got == Ok(Some(part_value(owner, part, tag))),
            "{owner:?} part {part}: missing or not of tag {tag}"
        );
    }
    Some((tag, parts))
}

#[test]
fn families_evicted_to_flash_come_back_whole_when_read() {
    let engine = Engine::open(config(ram_disk())).unwrap();
    let parts = 12;
    for i in 0..300u32 {
        write_family(&engine, &owner_key(i), parts, i);
        drain(&engine);
    }
    let on_flash: Vec<u32> = (0..300)
        .filter(|&i| engine.flash_read_needed(&owner_key(i)))
        .collect();
    assert!(
        on_flash.len() >= 50,
        "many families went to flash ({}): {:?}",
        on_flash.len(),
        engine.stats().flash
    );
    assert_eq!(engine.stats().evicted_items, 0);
    // A read-only hold (a large hash's read command) reads a flash-resident family whole from
    // its flash copy, without promoting it.
    let cold = owner_key(on_flash[1]);
    let together = engine.read_together(&[&cold]);
    let (tag, parts_seen) = together
        .read(&cold, false, |item| (item.value.to_vec(), item.parts))
        .expect("on flash, still there");
    assert_eq!(tag, format!("tag={}", on_flash[1]).into_bytes());
    assert_eq!(parts_seen, parts);
    for part in 0..parts {
        let got = together.read_part(&cold, part, <[u8]>::to_vec);
        assert!(
            got == Ok(Some(part_value(&cold, part, on_flash[1]))),
            "part {part}"
        );
    }
    assert_eq!(
        together.read_part(&cold, parts, <[u8]>::to_vec),
        Ok(None),
        "past its count"
    );
    drop(together);
    assert!(
        engine.flash_read_needed(&cold),
        "a read-only hold promotes nothing"
    );
    // A plain read of a flash-resident family (TYPE, a first look) promotes it: its parts are
    // read in memory only.
    let first = owner_key(on_flash[0]);
    let kind = engine.peek(&first, |item| item.kind);
    assert_eq!(kind, Some(Kind::Hash));
    assert!(!engine.flash_read_needed(&first), "promoted by the read");
    // Every family reads back whole, from memory or after its promotion.
    for i in 0..300u32 {
        assert_eq!(
            read_family(&engine, &owner_key(i)),
            Some((i, parts)),
            "family {i}"
        );
    }
    // A rewrite of a flash-resident family, with fewer parts, and a delete of another.
    let still: Vec<u32> = (0..300)
        .filter(|&i| engine.flash_read_needed(&owner_key(i)))
        .collect();
    assert!(still.len() >= 2, "reads demoted others meanwhile");
    write_family(&engine, &owner_key(still[0]), 3, 500);
    assert_eq!(
        engine.delete(&owner_key(still[1]), None).unwrap(),
        DeleteOutcome::Deleted
    );
    assert_eq!(read_family(&engine, &owner_key(still[0])), Some((500, 3)));
    assert_eq!(read_family(&engine, &owner_key(still[1])), None);
    engine.check_integrity().unwrap();
}

#[test]
fn a_clean_reopen_keeps_families_on_flash() {
    let dir = std::env::temp_dir().join(format!("strata-flash-families-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = EngineConfig {
        pool: PoolLocation::File(dir.join("pool")),
        fresh: true,
        ..config(ram_disk())
    };
    let engine = Engine::open(config.clone()).unwrap();
    let len = 150 << 10;
    for i in 0..40u32 {
        engine
            .set(&string_key(i), &value(i, len), 0, Expiry::Never)
            .unwrap();
        write_family(&engine, &owner_key(i), 6, i);
        drain(&engine);
    }
    let on_flash_before = engine.flash_items();
    assert!(on_flash_before >= 20, "{on_flash_before} items on flash");
    engine.close().unwrap();
    drop(engine);
    let engine = Engine::open(EngineConfig {
        fresh: false,
        ..config
    })
    .unwrap();
    assert_eq!(engine.flash_items(), on_flash_before, "the flash tier kept");
    for i in 0..40u32 {
        let got = peek_string(&engine, &string_key(i));
        let refused = flash_stats(&engine).refused_items;
        assert!(
            got == Some(value(i, len)),
            "string {i} ({refused} refused) {:?}",
            engine.stats()
        );
        let family = read_family(&engine, &owner_key(i));
        let refused = flash_stats(&engine).refused_items;
        assert_eq!(family, Some((i, 6)), "family {i} ({refused} refused)");
        // The family's promotion demoted others: let the flash thread write them.
        drain(&engine);
    }
    engine.check_integrity().unwrap();
    drop(engine);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Bytes of the flash medium flipped, one in every 64 KiB past the superblock, under a running
/// engine: every large string and family read back is its own write, whole, or absent (its
/// record fails its checks, counted as damaged), never other bytes or a family short of a
/// part; those the flips missed are still served.
#[test]
fn flipped_bytes_in_flash_bundles_serve_no_wrong_value() {
    let medium = ram_disk();
    let engine = Engine::open(config(Arc::clone(&medium))).unwrap();
    let len = 100 << 10;
    for i in 0..60u32 {
        engine
            .set(&string_key(i), &value(i, len), 0, Expiry::Never)
            .unwrap();
        write_family(&engine, &owner_key(i), 6, i);
        drain(&engine);
    }
    assert!(
        engine.flash_items() >= 40,
        "{} on flash",
        engine.flash_items()
    );
    let mut image = vec![0u8; medium.len_bytes() as usize];
    medium.read_at(0, &mut image).unwrap();
    for at in (4096..image.len()).step_by(64 << 10) {
        image[at] ^= 0x5A;
    }
    medium.write_at(0, &image).unwrap();
    let (mut strings, mut families) = (0, 0);
    for i in 0..60u32 {
        if let Some(got) = peek_string(&engine, &string_key(i)) {
            assert!(got == value(i, len), "string {i}: not its bytes");
            strings += 1;
        }
        // `read_family` panics on a part missing or of another write.
        if let Some(family) = read_family(&engine, &owner_key(i)) {
            assert_eq!(family, (i, 6), "family {i}");
            families += 1;
        }
        drain(&engine);
    }
    let damaged = flash_stats(&engine).damaged_records;
    eprintln!("{strings} strings and {families} families served, {damaged} damaged records");
    assert!(damaged > 0, "the flips hit records");
    assert!(
        strings + families > 0,
        "{strings} strings, {families} families served"
    );
    assert!(
        strings + families < 120,
        "every item was served: the flips missed them all"
    );
    engine.check_integrity().unwrap();
}

/// Power cuts of the flash medium under families and large strings demoted to it: rounds of
/// new writes of the same keys push each round's items out to flash as bundles, the process
/// dies (the pool file keeps what it wrote), and the medium keeps a random share of the sectors
/// written since their last persist (torn and reordered region writes): half, most, nearly all. Whatever survived,
/// every family reads whole with its last write's tag, or not at all, and every large string
/// is its last write's bytes or absent: never an older round's bundle, a mix of two, or a
/// family short of a part.
#[test]
fn a_power_cut_of_the_flash_medium_keeps_families_whole_or_absent() {
    use rand::{Rng, SeedableRng};
    use strata_pool::testing::{Faults, SimulatedMedium};
    const FAMILIES: u32 = 60;
    const ROUNDS: u32 = 3;
    let dir = std::env::temp_dir().join(format!("strata-families-cut-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let len = 100 << 10;
    let tag = |i: u32, round: u32| round * 1000 + i;
    let (mut from_flash_over_seeds, mut kept_over_seeds) = (0, 0);
    for seed in 0..3u64 {
        let pool = dir.join(format!("pool-{seed}"));
        let simulated = Arc::new(SimulatedMedium::new(
            MemoryMedium::new(4096 + REGIONS * REGION_SIZE_BYTES as usize, 4096),
            Faults::default(),
        ));
        let base = EngineConfig {
            pool: PoolLocation::File(pool.clone()),
            index_placement: IndexPlacement::Pool,
            fresh: true,
            ..config(Arc::clone(&simulated) as Arc<dyn Medium>)
        };
        let engine = Engine::open(base.clone()).unwrap();
        for round in 0..ROUNDS {
            for i in 0..FAMILIES {
                let tag = tag(i, round);
                write_family(&engine, &owner_key(i), 4 + i % 3, tag);
                let string = value(tag, len);
                engine
                    .set(&string_key(i), &string, 0, Expiry::Never)
                    .unwrap();
                drain(&engine);
            }
        }
        assert!(engine.flash_items() >= 20, "items went to flash");
        drop(engine); // The process dies: nothing is closed.
                      // A bundle spans dozens of sectors: kept at random, half of them loses every one; most
                      // of them keeps some whole.
        let keep = [0.5, 0.97, 0.995][seed as usize];
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let image = simulated.crash_image(&mut |_| rng.gen_bool(keep));
        let medium: Arc<dyn Medium> = Arc::new(MemoryMedium::from_image(image, 4096));
        let engine = Engine::open(EngineConfig {
            pool: base.pool.clone(),
            index_placement: IndexPlacement::Pool,
            fresh: false,
            ..config(medium)
        })
        .unwrap();
        kept_over_seeds += engine.recovery_report().flash_items_kept;
        let last = ROUNDS - 1;
        for i in 0..FAMILIES {
            let on_flash = engine.flash_read_needed(&owner_key(i));
            if let Some(family) = read_family(&engine, &owner_key(i)) {
                assert_eq!(family, (tag(i, last), 4 + i % 3), "seed {seed}: family {i}");
                from_flash_over_seeds += u32::from(on_flash);
            }
            let got = peek_string(&engine, &string_key(i));
            assert!(
                got.is_none_or(|got| got == value(tag(i, last), len)),
                "seed {seed}: string {i} is not its last write"
            );
            drain(&engine); // A family's promotion demotes others.
        }
        engine.check_integrity().unwrap();
        drop(engine);
        let _ = std::fs::remove_file(&pool);
        let _ = std::fs::remove_dir_all(format!("{}.index", pool.display()));
    }
    // Coverage, not a promise per image (a region survives only if its header's sectors did).
    assert!(kept_over_seeds > 0, "some image kept flash items");
    assert!(
        from_flash_over_seeds > 0,
        "some family came back whole from flash"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
