//! The flash tier through the engine's API: demotion, reads, promotion, writes that supersede a
//! flash copy, keys sharing hash bits, a slow medium, and reopening.
//!
//! The medium is a RAM disk (`MemoryMedium`) or a slowed one (`SimulatedMedium`); the flash
//! thread runs for real, so tests wait for what it does (bounded polls, never a fixed sleep).
#![allow(
    clippy::too_many_lines,
    reason = "a test scenario reads best as one function"
)]

use std::sync::Arc;
use std::time::Duration;

use strata_engine::*;
use strata_pool::testing::MemoryMedium;
use strata_pool::Medium;

mod support;
use support::{flash_stats, wait_for};

const REGION_SIZE_BYTES: u64 = 16 << 10;

fn config(medium: Arc<dyn Medium>, collisions: bool) -> EngineConfig {
    EngineConfig {
        memory_bytes: 48 * 4096,
        segment_size_bytes: 4096,
        shard_count: 2,
        item_size_bytes_expected: 2048,
        value_len_max: 3000,
        hash_collisions_for_tests: collisions,
        flash: Some(FlashConfig {
            medium: FlashMedium::Given(medium),
            region_size_bytes: REGION_SIZE_BYTES,
            admission: FlashAdmission::All,
            write_bytes_per_sec_max: 0,
            read_delay_for_tests: std::time::Duration::ZERO,
        }),
        ..EngineConfig::default()
    }
}

fn ram_disk(regions: usize) -> Arc<dyn Medium> {
    Arc::new(MemoryMedium::new(
        4096 + regions * REGION_SIZE_BYTES as usize,
        4096,
    ))
}

fn value_of(i: u32) -> Vec<u8> {
    let mut value = format!("value-{i}-").into_bytes();
    value.resize(900, b'v');
    value
}

/// The keys of `keys` whose reads need the flash medium.
fn keys_on_flash<'k>(engine: &Engine, keys: &'k [Vec<u8>]) -> Vec<&'k [u8]> {
    keys.iter()
        .filter(|key| engine.flash_read_needed(key))
        .map(|key| &key[..])
        .collect()
}

fn get(engine: &Engine, key: &[u8]) -> Option<Vec<u8>> {
    engine.get(key, |item| item.value.to_vec())
}

fn peek(engine: &Engine, key: &[u8]) -> Option<Vec<u8>> {
    engine.peek(key, |item| item.value.to_vec())
}

/// A directory of its own under the temporary directory, removed when dropped.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("strata-flash-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

/// A flash medium on a real file (O_DIRECT where the temporary directory's file system has it,
/// io_uring where the kernel allows it) of 64 regions, in a directory of its own.
fn direct_file(name: &str) -> (TempDir, Arc<dyn Medium>) {
    let dir = TempDir::new(name);
    let path = dir.0.join("flash");
    let medium = strata_pool::DirectFile::open(&path, 4096 + 64 * REGION_SIZE_BYTES).unwrap();
    (dir, Arc::new(medium))
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The test configuration (see [`config`]) with a new file pool in a directory of its own.
fn file_pool_config(
    name: &str,
    medium: Arc<dyn Medium>,
    collisions: bool,
) -> (TempDir, EngineConfig) {
    let dir = TempDir::new(name);
    let config = EngineConfig {
        pool: PoolLocation::File(dir.0.join("pool")),
        fresh: true,
        ..config(medium, collisions)
    };
    (dir, config)
}

/// Closes `engine` cleanly and opens its file pool (`config`) again.
fn close_and_reopen(engine: Engine, config: &EngineConfig) -> Engine {
    engine.close().unwrap();
    drop(engine);
    Engine::open(EngineConfig {
        fresh: false,
        ..config.clone()
    })
    .unwrap()
}

/// Writes `count` keys, far more than memory holds, and waits until the flash thread has
/// written what was demoted. Returns the keys.
fn fill(engine: &Engine, count: u32) -> Vec<Vec<u8>> {
    let keys: Vec<Vec<u8>> = (0..count)
        .map(|i| format!("key-{i:05}").into_bytes())
        .collect();
    for (i, key) in keys.iter().enumerate() {
        engine
            .set(key, &value_of(i as u32), 0, Expiry::Never)
            .unwrap();
        // A test thread outruns the flash thread (which then refuses items, extstore's rule
        // when flash is behind): let it write what was sealed before going on.
        wait_for("the write queue to drain", || {
            flash_stats(engine).regions_queued == 0
        });
    }
    keys
}

#[test]
fn evicted_items_are_served_from_flash_and_promoted_after_two_reads() {
    let engine = Engine::open(config(ram_disk(64), false)).unwrap();
    let keys = fill(&engine, 600);
    let flash = flash_stats(&engine);
    assert!(
        flash.appended_items > 300,
        "most items were demoted: {flash:?}"
    );
    assert_eq!(flash.refused_items, 0, "flash kept up: {flash:?}");
    // Every key is in one tier or the other, with its own value.
    for (i, key) in keys.iter().enumerate() {
        assert_eq!(peek(&engine, key), Some(value_of(i as u32)), "{key:?}");
    }
    let hits_before = flash_stats(&engine).hits;
    assert!(hits_before > 300, "peeks of demoted items were flash hits");
    // The first key was demoted early; two reads bring it back to memory.
    let key = &keys[0];
    let promoted_before = flash_stats(&engine).promoted_items;
    assert_eq!(get(&engine, key), Some(value_of(0)));
    assert_eq!(get(&engine, key), Some(value_of(0)));
    assert_eq!(flash_stats(&engine).promoted_items, promoted_before + 1);
    let hits = flash_stats(&engine).hits;
    assert_eq!(get(&engine, key), Some(value_of(0)));
    assert_eq!(flash_stats(&engine).hits, hits, "served from memory now");
    engine.check_integrity().unwrap();
}

#[test]
fn a_write_or_delete_of_a_flash_resident_key_supersedes_its_copy_at_once() {
    let engine = Engine::open(config(ram_disk(64), false)).unwrap();
    let keys = fill(&engine, 600);
    let key = &keys[1];
    assert!(flash_stats(&engine).items > 0);
    engine.set(key, b"new", 0, Expiry::Never).unwrap();
    assert_eq!(peek(&engine, key).as_deref(), Some(&b"new"[..]));
    assert_eq!(
        engine.delete(key, None).unwrap(),
        DeleteOutcome::Deleted,
        "the memory copy"
    );
    assert_eq!(
        peek(&engine, key),
        None,
        "the flash copy does not come back"
    );
    // A delete of a key only flash holds.
    let key = &keys[2];
    assert_eq!(engine.delete(key, None).unwrap(), DeleteOutcome::Deleted);
    assert_eq!(peek(&engine, key), None);
    assert_eq!(engine.delete(key, None).unwrap(), DeleteOutcome::NotFound);
    // Read-modify-writes see the flash copy.
    let key = &keys[3];
    assert!(engine.concat(key, b"+tail", false).unwrap().is_some());
    let mut expected = value_of(3);
    expected.extend_from_slice(b"+tail");
    assert_eq!(peek(&engine, key), Some(expected));
    engine.check_integrity().unwrap();
}

/// An engine with 6 stored hash bits (flash entries share them with several keys each),
/// filled with 500 keys, its suspects settled; with the keys and which of them read back
/// (filling may lose a flash copy whose key's memory entry was evicted while a write beside it
/// waited for the flash thread: rare with 24 bits, common with 6).
fn filled_with_shared_hash_bits() -> (Engine, Vec<Vec<u8>>, Vec<usize>) {
    let engine = Engine::open(config(ram_disk(64), true)).unwrap();
    let keys = fill(&engine, 500);
    wait_for("suspects to settle", || flash_stats(&engine).suspects == 0);
    let readable: Vec<usize> = (0..keys.len())
        .filter(|&i| peek(&engine, &keys[i]).is_some())
        .collect();
    (engine, keys, readable)
}

/// With 6 stored hash bits, a store with an expiry already past (memcached's negative exptime:
/// a delete that reads nothing) of a key held nowhere meets several other keys' flash entries
/// sharing its bits. It drops only those their region's key filter cannot rule out (it
/// dropped every one before), and a flash item deleted that way is never read again.
#[test]
fn an_expired_store_spares_other_keys_flash_copies_their_filters_rule_out() {
    let (engine, keys, readable) = filled_with_shared_hash_bits();
    let flash_before = flash_stats(&engine).items;
    assert!(flash_before > 200, "{flash_before} flash items");
    // 64 tags over 2 shards: each such store meets about flash_before / 128 entries.
    let stores = 64u64;
    let past = Expiry::AtMs(1);
    for i in 0..stores {
        let absent = format!("absent-{i}");
        engine.set(absent.as_bytes(), b"gone", 0, past).unwrap();
        assert_eq!(peek(&engine, absent.as_bytes()), None);
    }
    let dropped = flash_before - flash_stats(&engine).items;
    let met = stores * flash_before / 128;
    assert!(
        dropped * 5 < met,
        "{dropped} flash entries dropped by {stores} expired stores that met about {met}"
    );
    // What stayed reads back whole; what went is a miss, never another value.
    let mut lost = 0;
    for &i in &readable {
        match peek(&engine, &keys[i]) {
            Some(value) => assert_eq!(value, value_of(i as u32), "key {i}"),
            None => lost += 1,
        }
    }
    assert!(lost as u64 <= dropped, "{lost} lost, {dropped} dropped");
    // A flash item stored again with a past expiry is gone for good.
    let on_flash: Vec<usize> = readable
        .iter()
        .copied()
        .filter(|&i| i < 100)
        .take(5)
        .collect();
    assert!(!on_flash.is_empty());
    for &i in &on_flash {
        engine.set(&keys[i], b"gone", 0, past).unwrap();
        assert_eq!(
            get(&engine, &keys[i]),
            None,
            "key {i} after its expired store"
        );
    }
    engine.check_integrity().unwrap();
}

/// With 6 stored hash bits, flash entries share them with several keys each. A write of one
/// key must not lose the others' flash copies (the flash thread reads which key each suspect
/// holds), and must never let its own older copy come back.
#[test]
fn keys_sharing_hash_bits_keep_their_flash_copies_when_one_is_written() {
    // The baseline is what is readable after the fill.
    let (engine, keys, readable) = filled_with_shared_hash_bits();
    assert!(readable.len() > 300, "{} readable", readable.len());
    let on_flash: Vec<usize> = readable.iter().copied().filter(|&i| i < 200).collect();
    assert!(
        flash_stats(&engine).items > 100,
        "{:?}",
        flash_stats(&engine)
    );
    // Rewrite four keys that are on flash (early keys were demoted) with small values: they
    // fit the open segments' room, so nothing is evicted meanwhile, and each write meets other
    // keys' flash entries sharing its hash bits.
    let rewritten: Vec<usize> = on_flash.iter().copied().step_by(37).take(4).collect();
    let settle_reads_before = flash_stats(&engine).settle_reads;
    let suspects_made = {
        let mut made = 0;
        for &i in &rewritten {
            engine
                .set(&keys[i], b"rewritten", 0, Expiry::Never)
                .unwrap();
            made += flash_stats(&engine).suspects;
        }
        made
    };
    assert!(
        suspects_made > 0,
        "the writes met other keys' flash entries"
    );
    wait_for("suspects to settle", || flash_stats(&engine).suspects == 0);
    // Settling read the suspects' keys (from the medium: their regions were written long
    // ago), and those reads are told apart from requests' reads.
    let stats = flash_stats(&engine);
    assert!(
        stats.settle_reads > settle_reads_before && stats.settle_reads <= stats.reads,
        "{stats:?}"
    );
    for &i in &readable {
        let expected = if rewritten.contains(&i) {
            b"rewritten".to_vec()
        } else {
            value_of(i as u32)
        };
        assert_eq!(peek(&engine, &keys[i]), Some(expected), "key {i}");
    }
    // Deleting a rewritten key leaves nothing behind, settled or not.
    for &i in &rewritten {
        engine.set(&keys[i], b"again", 0, Expiry::Never).unwrap();
        assert_eq!(
            engine.delete(&keys[i], None).unwrap(),
            DeleteOutcome::Deleted
        );
        assert_eq!(peek(&engine, &keys[i]), None, "key {i} stays deleted");
    }
    engine.check_integrity().unwrap();
}

/// A medium whose writes wait at a gate until the test opens it.
#[derive(Debug)]
struct GatedMedium {
    inner: Arc<dyn Medium>,
    open: std::sync::Mutex<bool>,
    opened: std::sync::Condvar,
    writes_done: std::sync::atomic::AtomicU64,
}

impl GatedMedium {
    /// `inner` behind a gate, closed.
    fn new(inner: Arc<dyn Medium>) -> GatedMedium {
        GatedMedium {
            inner,
            open: std::sync::Mutex::new(false),
            opened: std::sync::Condvar::new(),
            writes_done: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn close_gate(&self) {
        *self.open.lock().unwrap() = false;
    }

    fn open_gate(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }
}

impl Medium for GatedMedium {
    fn len_bytes(&self) -> u64 {
        self.inner.len_bytes()
    }
    fn domain(&self) -> strata_pool::PersistenceDomain {
        self.inner.domain()
    }
    fn block_size_bytes(&self) -> usize {
        self.inner.block_size_bytes()
    }
    fn read_align_bytes(&self) -> usize {
        self.inner.read_align_bytes()
    }
    fn is_direct(&self) -> bool {
        self.inner.is_direct()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), strata_pool::MediumError> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), strata_pool::MediumError> {
        // The superblock (offset 0) is written at open, before the test closes anything.
        if offset > 0 {
            let mut open = self.open.lock().unwrap();
            while !*open {
                open = self.opened.wait(open).unwrap();
            }
        }
        let result = self.inner.write_at(offset, data);
        self.writes_done
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        result
    }
    fn persist(&self, offset: u64, len: u64) -> Result<(), strata_pool::PersistError> {
        self.inner.persist(offset, len)
    }
    fn discard(&self, offset: u64, len: u64) -> Result<(), strata_pool::MediumError> {
        self.inner.discard(offset, len)
    }
}

/// A medium stuck on its first region write: writes of keys keep going to memory, and what
/// flash cannot take is dropped (counted as refused). If any write waited for the medium,
/// this test would never finish.
#[test]
fn a_stuck_medium_never_makes_a_write_wait() {
    let gated = Arc::new(GatedMedium::new(ram_disk(64)));
    let engine = Engine::open(config(Arc::clone(&gated) as Arc<dyn Medium>, false)).unwrap();
    let superblock_writes = gated.writes_done.load(std::sync::atomic::Ordering::SeqCst);
    // 2,000 writes of 900 B through a 192 KiB memory tier: ~1.8 MB evicted.
    for i in 0..2000u32 {
        engine
            .set(format!("k{i}").as_bytes(), &value_of(i), 0, Expiry::Never)
            .unwrap();
    }
    let flash = flash_stats(&engine);
    assert_eq!(
        gated.writes_done.load(std::sync::atomic::Ordering::SeqCst),
        superblock_writes,
        "no region write finished: the medium was stuck the whole time"
    );
    assert!(
        flash.refused_items > 1000,
        "flash was behind and memory's tail was dropped: {flash:?}"
    );
    assert!(
        get(&engine, b"k1999").is_some(),
        "the newest write is served"
    );
    // Rewriting keys that flash holds (in its region buffers: the medium is stuck) leaves a
    // suspect beside each new memory copy until the flash thread reads it, which it cannot
    // now; the item count stays one per key meanwhile (tiny values: nothing is evicted).
    let before = engine.stats();
    let rewritten: Vec<String> = (0..400u32)
        .map(|i| format!("k{i}"))
        .filter(|key| peek(&engine, key.as_bytes()).is_some())
        .take(40)
        .collect();
    for key in &rewritten {
        engine.set(key.as_bytes(), b"x", 0, Expiry::Never).unwrap();
    }
    let after = engine.stats();
    let suspects = flash_stats(&engine).suspects;
    // Opened before the checks: a failed one must not leave the flash thread stuck (dropping
    // the engine joins it).
    gated.open_gate();
    assert!(!rewritten.is_empty());
    assert_eq!(after.evicted_items, before.evicted_items, "nothing evicted");
    assert!(suspects > 0, "some rewritten key had a flash copy");
    assert_eq!(after.items, before.items, "a suspect is not a second item");
    engine.check_integrity().unwrap();
}

/// A key written to memory over its flash copy leaves that copy indexed, a suspect, until the
/// flash thread has read which key it holds. A process crash before then that catches the
/// shard changing rebuilds it from its segments and reads its flash entries back from its
/// tables; when the memory record has expired by then, recovery drops it, and the flash copy
/// it superseded must not come back in its place (it did: the flash model test saw an old
/// value return after a crash in about one run in twenty).
#[test]
fn a_crash_rebuild_never_brings_back_a_flash_copy_that_an_expired_write_superseded() {
    let gated = Arc::new(GatedMedium::new(ram_disk(64)));
    gated.open_gate();
    let clock = ManualClock::new(1_800_000_000_000);
    let (dir, config) = file_pool_config("expired-over-flash", Arc::clone(&gated) as _, false);
    let config = EngineConfig {
        index_placement: IndexPlacement::Pool,
        clock: Arc::new(clock.clone()),
        ..config
    };
    let engine = Engine::open(config.clone()).unwrap();
    let keys = fill(&engine, 600);
    // The flash thread, stuck in a region write, settles no suspect meanwhile. (The gate
    // opens before the engine drops, a failed check's included: the drop joins the thread.)
    let _opens = OpensOnDrop(Arc::clone(&gated));
    gated.close_gate();
    let writes_before = gated.writes_done.load(std::sync::atomic::Ordering::SeqCst);
    for i in 600..640u32 {
        let key = format!("key-{i:05}");
        engine
            .set(key.as_bytes(), &value_of(i), 0, Expiry::Never)
            .unwrap();
    }
    // A region waits for the medium: the flash thread writes it before it settles anything.
    assert!(flash_stats(&engine).regions_queued > 0);
    assert_eq!(
        gated.writes_done.load(std::sync::atomic::Ordering::SeqCst),
        writes_before
    );
    let rewritten: Vec<Vec<u8>> = keys_on_flash(&engine, &keys)
        .into_iter()
        .take(40)
        .map(<[u8]>::to_vec)
        .collect();
    assert_eq!(rewritten.len(), 40);
    let expires_at_ms = clock.now_ms() + 10_000;
    for key in &rewritten {
        engine
            .set(key, b"short-lived", 0, Expiry::AtMs(expires_at_ms))
            .unwrap();
    }
    assert!(
        flash_stats(&engine).suspects > 0,
        "the flash copies are suspects"
    );
    clock.advance_ms(20_000);
    // The crash: the pool and its index files as the process leaves them, both shards caught
    // changing (`docs/POOL_FORMAT.md`); the engine itself goes on and is dropped after.
    let image = TempDir::new("expired-over-flash-image");
    copy_tree(&dir.0, &image.0);
    let control = image.0.join("pool.index").join("control");
    let mut bytes = std::fs::read(&control).unwrap();
    for shard in 0..2 {
        bytes[64 * (1 + shard)] = 1;
    }
    std::fs::write(&control, bytes).unwrap();
    gated.open_gate();
    drop(engine);

    let engine = Engine::open(EngineConfig {
        pool: PoolLocation::File(image.0.join("pool")),
        fresh: false,
        ..config
    })
    .unwrap();
    let report = engine.recovery_report().clone();
    assert!(report.flash_items_salvaged > 0, "{report:?}");
    assert!(report.records_expired >= 40, "{report:?}");
    for key in &rewritten {
        let found = peek(&engine, key)
            .map(|value| String::from_utf8_lossy(&value[..value.len().min(12)]).to_string());
        let key = String::from_utf8_lossy(key);
        assert_eq!(found, None, "{key} expired: no older copy may return");
    }
    for (i, key) in keys.iter().enumerate() {
        if let Some(value) = peek(&engine, key) {
            assert!(!rewritten.contains(key));
            assert_eq!(value, value_of(i as u32), "key {i}");
        }
    }
    engine.check_integrity().unwrap();
}

/// Opens a gate when dropped.
struct OpensOnDrop(Arc<GatedMedium>);

impl Drop for OpensOnDrop {
    fn drop(&mut self) {
        self.0.open_gate();
    }
}

/// Copies directory `from` (files, and directories one level down) into `to`.
fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_tree(&path, &target);
        } else {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

/// The offline check (`strata flash verify`) of a medium a clean close left: sound, every
/// record counted; refused while the engine holds the medium; and a flipped byte inside one
/// record is exactly one damaged record and one damaged payload, a damaged region header one
/// damaged region.
#[test]
fn the_offline_check_counts_records_and_finds_each_damage() {
    let (flash_dir, medium) = direct_file("verify");
    let path = flash_dir.0.join("flash");
    let (_dir, config) = file_pool_config("verify", medium, false);
    let engine = Engine::open(config).unwrap();
    fill(&engine, 600);
    let err = check_flash_file(&path).unwrap_err();
    assert!(err.to_string().contains("a server has it open"), "{err}");
    engine.close().unwrap();
    drop(engine);
    let report = check_flash_file(&path).unwrap();
    assert!(report.is_sound(), "{report:?}");
    assert!(
        report.regions_written > 10 && report.records > 300,
        "{report:?}"
    );
    assert_eq!(report.regions_damaged + report.records_damaged, 0);

    let superblock = report.superblock.unwrap();
    let region_at = |i: u64| 4096 + i * superblock.region_size_bytes;
    let mut bytes = std::fs::read(&path).unwrap();
    // The first record of the first written region: its value, past the stamp and header.
    let first_written = (0..superblock.region_count)
        .find(|&i| bytes[region_at(i) as usize..][..8] == *b"STRATARG")
        .unwrap();
    let record_byte = (region_at(first_written) + 4096 + 200) as usize;
    bytes[record_byte] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    let report = check_flash_file(&path).unwrap();
    assert_eq!(
        (
            report.records_damaged,
            report.payloads_damaged,
            report.regions_damaged
        ),
        (1, 1, 0),
        "{report:?}"
    );
    assert!(!report.is_sound());
    bytes[region_at(first_written) as usize + 30] ^= 0x01; // Its header's seq.
    std::fs::write(&path, &bytes).unwrap();
    let report = check_flash_file(&path).unwrap();
    assert_eq!(report.regions_damaged, 1, "{report:?}");
    assert_eq!(
        report.records_damaged, 0,
        "the damaged region's records are not read"
    );
}

#[test]
fn a_clean_close_keeps_the_flash_tier_with_a_file_pool() {
    let (_dir, config) = file_pool_config("test", ram_disk(64), false);
    let engine = Engine::open(config.clone()).unwrap();
    let keys = fill(&engine, 600);
    let on_flash = flash_stats(&engine).items;
    assert!(on_flash > 300);
    let engine = close_and_reopen(engine, &config);
    let report = engine.recovery_report();
    assert_eq!(report.flash_items_dropped, 0, "{report:?}");
    assert_eq!(report.flash_items_kept, on_flash, "{report:?}");
    for (i, key) in keys.iter().enumerate() {
        assert_eq!(peek(&engine, key), Some(value_of(i as u32)), "{key:?}");
    }
    engine.check_integrity().unwrap();
}

/// One flipped byte anywhere that matters in the flash medium, with the server stopped: the
/// superblock, every region header, and a byte in every 127 elsewhere (records, stamps,
/// directories, the zeros after them). Each time, from the same cleanly closed pool and the
/// medium with that one byte flipped: the engine opens, every key reads as its own value or
/// absent (never another value), a whole scan and random keys return only written keys, and
/// it closes.
#[test]
fn a_flipped_byte_anywhere_in_the_flash_medium_never_serves_a_wrong_value() {
    const REGIONS: usize = 16;
    let (dir, config) = file_pool_config("flip", ram_disk(REGIONS), false);
    let image_medium = match &config.flash.as_ref().unwrap().medium {
        FlashMedium::Given(medium) => Arc::clone(medium),
        _ => unreachable!("a given medium"),
    };
    let engine = Engine::open(config.clone()).unwrap();
    let keys = fill(&engine, 600);
    let on_flash = flash_stats(&engine).items;
    assert!(on_flash > 60, "{on_flash} flash items");
    engine.close().unwrap();
    drop(engine);
    let mut image = vec![0u8; image_medium.len_bytes() as usize];
    image_medium.read_at(0, &mut image).unwrap();
    let pool_files: Vec<(std::path::PathBuf, Vec<u8>)> = std::fs::read_dir(&dir.0)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_file())
        .map(|path| {
            let bytes = std::fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect();
    let region_size = REGION_SIZE_BYTES as usize;
    let mut positions: Vec<usize> = (0..128).collect();
    for region in 0..REGIONS {
        positions.extend((0..96).map(|b| 4096 + region * region_size + b));
    }
    positions.extend((0..image.len()).step_by(127));
    positions.sort_unstable();
    positions.dedup();
    let (mut opened, mut served_from_flash, mut opens_with_losses) = (0, 0, 0);
    for &at in &positions {
        for (path, bytes) in &pool_files {
            std::fs::write(path, bytes).unwrap();
        }
        let mut damaged = image.clone();
        damaged[at] ^= 0x5A;
        let mut config = EngineConfig {
            fresh: false,
            ..config.clone()
        };
        config.flash.as_mut().unwrap().medium =
            FlashMedium::Given(Arc::new(MemoryMedium::from_image(damaged, 4096)));
        let engine = Engine::open(config)
            .unwrap_or_else(|e| panic!("byte {at} flipped: the open failed: {e}"));
        opened += 1;
        let mut served = 0;
        for (i, key) in keys.iter().enumerate() {
            let on_flash = engine.flash_read_needed(key);
            if let Some(value) = peek(&engine, key) {
                assert_eq!(value, value_of(i as u32), "byte {at} flipped: {key:?}");
                served += usize::from(on_flash);
            }
        }
        served_from_flash += served;
        opens_with_losses += usize::from(served < on_flash as usize);
        let mut cursor = 0;
        loop {
            cursor = engine.scan(cursor, 64, &mut |key| {
                assert!(
                    keys.iter().any(|k| k == key),
                    "byte {at} flipped: scan gave {key:?}"
                );
            });
            if cursor == 0 {
                break;
            }
        }
        for seed in 1..=4 {
            if let Some(key) = engine.random_key(seed + at as u64) {
                assert!(keys.contains(&key), "byte {at} flipped: random key {key:?}");
            }
        }
        engine.close().unwrap();
    }
    assert_eq!(opened, positions.len());
    eprintln!(
        "{opened} opens, each with one flipped byte; {served_from_flash} flash items served \
         right, none wrong ({on_flash} on flash before); {opens_with_losses} opens lost some"
    );
    // The flips hit live records, headers and directories: damage was found, not only missed.
    assert!(
        opens_with_losses * 10 > opened,
        "{opens_with_losses} of {opened} opens lost items"
    );
    assert!(
        served_from_flash > positions.len() * on_flash as usize / 2,
        "flash items were read back: {served_from_flash} in {} opens",
        positions.len()
    );
}

/// A random key (RANDOMKEY) comes from flash as often as from memory, by their shares of the
/// keys, each one a key the engine holds (a flash key costs a read of its record).
#[test]
fn random_keys_come_from_flash_too() {
    let engine = Engine::open(config(ram_disk(64), false)).unwrap();
    let keys = fill(&engine, 600);
    let on_flash: std::collections::HashSet<&[u8]> =
        keys_on_flash(&engine, &keys).into_iter().collect();
    assert!(on_flash.len() > 300, "{} keys on flash", on_flash.len());
    let mut from_flash = 0;
    for seed in 1..=2000u64 {
        let key = engine.random_key(seed).expect("a key");
        assert!(keys.contains(&key), "{key:?} was never written");
        from_flash += usize::from(on_flash.contains(&key[..]));
    }
    // Half or more of the keys are on flash: a memory-only choice would give none.
    assert!(
        from_flash >= 600,
        "{from_flash} of 2000 random keys from flash"
    );
}

/// Switching the index placement after a clean close keeps the flash tier, whose items no pool
/// record names: DRAM → pool takes the flash entries from the clean-close snapshot into the
/// files the shards are rebuilt in, and pool → DRAM takes them from the files before they are
/// removed. (A server with `--pool` and `--flash` changed its default placement to the pool.)
#[test]
fn a_switch_of_index_placement_after_a_clean_close_keeps_the_flash_tier() {
    let (_dir, dram) = file_pool_config("switch", ram_disk(64), false);
    assert_eq!(dram.index_placement, IndexPlacement::Dram);
    let in_pool = EngineConfig {
        index_placement: IndexPlacement::Pool,
        ..dram.clone()
    };
    let mut engine = Engine::open(dram.clone()).unwrap();
    let keys = fill(&engine, 600);
    let on_flash = flash_stats(&engine).items;
    assert!(on_flash > 300);
    for (placement, config) in [
        ("pool", &in_pool),
        ("dram", &dram),
        ("pool again", &in_pool),
    ] {
        let reopened = close_and_reopen(engine, config);
        engine = reopened;
        let report = engine.recovery_report();
        assert!(!report.from_snapshot, "{placement}: rebuilt, {report:?}");
        assert_eq!(report.flash_items_dropped, 0, "{placement}: {report:?}");
        assert_eq!(report.flash_items_kept, on_flash, "{placement}: {report:?}");
        for (i, key) in keys.iter().enumerate() {
            assert_eq!(
                peek(&engine, key),
                Some(value_of(i as u32)),
                "{placement}: {key:?}"
            );
        }
        engine.check_integrity().unwrap();
    }
}

/// A crash in the middle of the first open after a switch of index placement (the rebuild that
/// carries the flash entries over), at each of its recovery steps in turn, both ways: the next open,
/// in the new placement, serves every key as its own value or not at all, and the memory
/// tier's items all come back. (What the switch's salvage had not finished is lost, never
/// served wrong: the crash leaves the pool not cleanly closed, so neither the snapshot nor the
/// files are trusted again.)
#[test]
fn a_crash_during_a_placement_switch_serves_no_wrong_value() {
    for (from, to) in [
        (IndexPlacement::Dram, IndexPlacement::Pool),
        (IndexPlacement::Pool, IndexPlacement::Dram),
    ] {
        for stop_at in 0.. {
            let name = format!("switch-crash-{}-{stop_at}", from.name());
            let (_dir, base) = file_pool_config(&name, ram_disk(64), false);
            let before = EngineConfig {
                index_placement: from,
                ..base.clone()
            };
            let after = EngineConfig {
                index_placement: to,
                fresh: false,
                ..base
            };
            let engine = Engine::open(before).unwrap();
            let keys = fill(&engine, 600);
            let in_memory: Vec<usize> = (0..keys.len())
                .filter(|&i| !engine.flash_read_needed(&keys[i]))
                .filter(|&i| peek(&engine, &keys[i]).is_some())
                .collect();
            engine.close().unwrap();
            drop(engine);
            let steps = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let counter = Arc::clone(&steps);
            let crashing = EngineConfig {
                recovery_observer: Some(RecoveryObserver(Arc::new(move |_| {
                    if counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == stop_at {
                        panic!("crash injected at recovery step {stop_at}");
                    }
                }))),
                ..after.clone()
            };
            let crashed =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Engine::open(crashing)));
            if crashed.is_ok() {
                // Every step was a crash point: the open ran to its end this time.
                assert!(stop_at >= 2, "{name}: only {stop_at} recovery steps");
                break;
            }
            let engine = Engine::open(after).unwrap();
            for (i, key) in keys.iter().enumerate() {
                if let Some(value) = peek(&engine, key) {
                    assert_eq!(value, value_of(i as u32), "{name}: {key:?}");
                }
            }
            for &i in &in_memory {
                assert!(
                    peek(&engine, &keys[i]).is_some(),
                    "{name}: memory item {i} lost"
                );
            }
            engine.check_integrity().unwrap();
        }
    }
}

/// A switch from the pool placement to DRAM after a clean close takes the flash entries from
/// the index files, whose tables carry no checksum of their own: with entries damaged in every
/// other bucket of every table (still well-formed enough to open), the entries read back name
/// records that fail their stamp, checksum or key check, and are dropped. Every key reads as
/// its own value or not at all, and every memory item comes back (rebuilt from the segments).
#[test]
fn damaged_tables_before_a_switch_to_dram_serve_no_wrong_value() {
    let (dir, dram) = file_pool_config("switch-damaged", ram_disk(64), false);
    let in_pool = EngineConfig {
        index_placement: IndexPlacement::Pool,
        ..dram.clone()
    };
    let engine = Engine::open(in_pool).unwrap();
    let keys = fill(&engine, 600);
    let on_flash = flash_stats(&engine).items;
    assert!(on_flash > 300, "{on_flash} items on flash");
    let in_memory: Vec<usize> = (0..keys.len())
        .filter(|&i| !engine.flash_read_needed(&keys[i]))
        .filter(|&i| peek(&engine, &keys[i]).is_some())
        .collect();
    engine.close().unwrap();
    drop(engine);
    let mut tables = 0;
    for entry in std::fs::read_dir(dir.0.join("pool.index")).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().is_some_and(|name| name != "control") {
            let mut table = std::fs::read(&path).unwrap();
            for bucket in table.chunks_mut(64).step_by(2) {
                for slot in bucket.chunks_mut(8).take(7) {
                    slot[1] ^= 0x5a;
                }
            }
            std::fs::write(&path, table).unwrap();
            tables += 1;
        }
    }
    assert!(tables >= 2, "{tables} table files");

    let engine = Engine::open(EngineConfig {
        fresh: false,
        ..dram
    })
    .unwrap();
    let report = engine.recovery_report().clone();
    assert!(report.flash_items_salvaged > 0, "{report:?}");
    let mut served_from_flash = 0;
    for (i, key) in keys.iter().enumerate() {
        let from_flash = engine.flash_read_needed(key);
        if let Some(value) = peek(&engine, key) {
            assert_eq!(value, value_of(i as u32), "{key:?}");
            served_from_flash += u64::from(from_flash);
        }
    }
    for &i in &in_memory {
        assert!(peek(&engine, &keys[i]).is_some(), "memory item {i} lost");
    }
    // The damage cost flash items (it was read), and the undamaged half was kept.
    assert!(
        served_from_flash > 0 && served_from_flash < on_flash,
        "{served_from_flash} of {on_flash} flash items served: {report:?}"
    );
    engine.check_integrity().unwrap();
}

/// A process crash that catches a shard changing (its control line's state 1: its tables were
/// right before the change began) rebuilds the shard's memory entries from its segments and
/// reads its flash entries back from those tables, as does a consistent shard (state 0) whose
/// segment books are damaged, or one with superseded records waiting for their dead marks
/// (state 3); a shard whose files say they cannot describe it (state 2), or whose state word
/// is no state at all (a flipped byte), is rebuilt without them; and tables read back with
/// flipped bytes never serve a wrong value.
/// The control file and tables are changed (`docs/POOL_FORMAT.md`) between the crash and the
/// reopen.
#[test]
fn a_crash_that_catches_a_shard_changing_keeps_its_flash_entries() {
    #[derive(Debug, PartialEq)]
    enum Damage {
        None,
        Books,
        Tables,
    }
    // (state of both shards, what else the crash left damaged)
    let cases = [
        (1u64, Damage::None),
        (2, Damage::None),
        (3, Damage::None),
        (0x41, Damage::None),
        (0, Damage::Books),
        (1, Damage::Tables),
    ];
    for (state, damage) in cases {
        let name = format!("salvage-{state}-{damage:?}");
        let (dir, config) = file_pool_config(&name, ram_disk(64), false);
        let config = EngineConfig {
            index_placement: IndexPlacement::Pool,
            ..config
        };
        let engine = Engine::open(config.clone()).unwrap();
        let keys = fill(&engine, 600);
        let on_flash = flash_stats(&engine).items;
        let in_memory = engine.stats().items - on_flash;
        assert!(on_flash > 300, "{on_flash} items on flash");
        drop(engine); // A process crash: every store stays, nothing is closed.

        let control = dir.0.join("pool.index").join("control");
        let mut bytes = std::fs::read(&control).unwrap();
        for shard in 0..2 {
            let word = 64 * (1 + shard);
            assert_eq!(
                bytes[word..word + 8],
                [0; 8],
                "shard {shard} was consistent"
            );
            bytes[word..word + 8].copy_from_slice(&state.to_le_bytes());
        }
        if damage == Damage::Books {
            // The books follow the header and the two shard lines; a write offset of
            // u64::MAX fits no segment.
            bytes[64 * 3..].fill(0xff);
        }
        std::fs::write(&control, &bytes).unwrap();
        if damage == Damage::Tables {
            // In every other 64-byte bucket, a flipped byte in each of the seven entry slots
            // (the eighth may link to an overflow bucket): the entries now point elsewhere,
            // still well-formed enough for the tables to open and be read back.
            for entry in std::fs::read_dir(dir.0.join("pool.index")).unwrap() {
                let path = entry.unwrap().path();
                if path.file_name().is_some_and(|name| name != "control") {
                    let mut table = std::fs::read(&path).unwrap();
                    for bucket in table.chunks_mut(64).step_by(2) {
                        for slot in bucket.chunks_mut(8).take(7) {
                            slot[1] ^= 0x5a;
                        }
                    }
                    std::fs::write(&path, table).unwrap();
                }
            }
        }

        let engine = Engine::open(EngineConfig {
            fresh: false,
            ..config.clone()
        })
        .unwrap();
        let report = engine.recovery_report().clone();
        assert_eq!(report.shards_from_index_files, 0, "{report:?}");
        let present: Vec<usize> = (0..keys.len())
            .filter(|&i| match peek(&engine, &keys[i]) {
                None => false,
                Some(value) => {
                    assert_eq!(value, value_of(i as u32), "key {i}, state {state}");
                    true
                }
            })
            .collect();
        if damage == Damage::Tables {
            // The tables were read back, and whatever their garbage named, nothing wrong was
            // served (checked above); memory was rebuilt from the segments.
            assert!(report.flash_items_salvaged > 0, "{report:?}");
            assert!(present.len() as u64 >= in_memory, "{report:?}");
        } else if matches!(state, 0 | 1 | 3) {
            // Every entry is read back; those of the region still in DRAM at the crash are
            // then dropped, as after any crash.
            assert_eq!(report.flash_items_salvaged, on_flash, "{report:?}");
            assert_eq!(
                report.flash_items_kept + report.flash_items_dropped,
                on_flash,
                "{report:?}"
            );
            let region_items = REGION_SIZE_BYTES / 900;
            assert!(report.flash_items_dropped <= region_items, "{report:?}");
            assert_eq!(present.len() as u64, in_memory + report.flash_items_kept);
        } else {
            assert_eq!(report.flash_items_salvaged, 0, "{report:?}");
            assert_eq!(report.flash_items_kept, 0, "{report:?}");
            assert_eq!(present.len() as u64, in_memory);
        }
        engine.check_integrity().unwrap();
        // The restored entries serve reads, and a write supersedes one at once.
        let last = *present.last().unwrap();
        engine.set(&keys[last], b"new", 0, Expiry::Never).unwrap();
        assert_eq!(get(&engine, &keys[last]).as_deref(), Some(&b"new"[..]));
    }
}

/// Under group commit an overwritten record's dead mark waits for the commit, and the record
/// is marked *superseded* meanwhile. A process crash with such overwrites waiting rebuilds
/// their shards from their segments, where superseded records count as dead, and reads their
/// flash entries back from their tables: the flash tier is kept whole and every overwritten
/// key reads its newest value. After the commit the shards' files are current and are mapped
/// as they are; a shard a crash caught changing is rebuilt like one with marks waiting.
/// (Until superseded records existed, a shard with marks waiting was rebuilt without its flash
/// entries.)
#[test]
fn a_crash_with_overwrites_waiting_for_a_commit_keeps_the_flash_tier() {
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Crash {
        MarksWaiting,
        Committed,
        CaughtChanging,
    }
    for crash in [Crash::MarksWaiting, Crash::Committed, Crash::CaughtChanging] {
        let (dir, config) = file_pool_config(&format!("waiting-{crash:?}"), ram_disk(64), false);
        let config = EngineConfig {
            index_placement: IndexPlacement::Pool,
            durability: Durability::Sync,
            group_commit: true,
            ..config
        };
        let engine = Engine::open(config.clone()).unwrap();
        let keys = fill(&engine, 600);
        engine.commit().unwrap();
        let on_flash = flash_stats(&engine).items;
        assert!(on_flash > 300, "{on_flash} items on flash");
        // The newest keys are in memory: overwrite them.
        let overwritten: Vec<usize> = (560..600).collect();
        for &i in &overwritten {
            assert!(engine.peek(&keys[i], |_| ()).is_some(), "key {i} in memory");
            engine
                .set(&keys[i], format!("new-{i}").as_bytes(), 0, Expiry::Never)
                .unwrap();
        }
        if crash != Crash::MarksWaiting {
            engine.commit().unwrap();
        }
        assert_eq!(
            flash_stats(&engine).items,
            on_flash,
            "no demotion since: {:?}",
            engine.stats()
        );
        drop(engine); // A process crash: every store stays, nothing is closed.

        let control = dir.0.join("pool.index").join("control");
        let mut bytes = std::fs::read(&control).unwrap();
        for shard in 0..2 {
            let word = 64 * (1 + shard);
            let expected: u64 = if crash == Crash::MarksWaiting { 3 } else { 0 };
            assert_eq!(
                bytes[word..word + 8],
                expected.to_le_bytes(),
                "shard {shard}'s state"
            );
            if crash == Crash::CaughtChanging {
                bytes[word..word + 8].copy_from_slice(&1u64.to_le_bytes());
            }
        }
        std::fs::write(&control, &bytes).unwrap();

        let engine = Engine::open(EngineConfig {
            fresh: false,
            ..config.clone()
        })
        .unwrap();
        let report = engine.recovery_report().clone();
        if crash == Crash::Committed {
            assert_eq!(report.shards_from_index_files, 2, "{report:?}");
        } else {
            assert_eq!(report.shards_from_index_files, 0, "{report:?}");
            assert_eq!(report.flash_items_salvaged, on_flash, "{report:?}");
        }
        assert_eq!(
            report.flash_items_kept + report.flash_items_dropped,
            on_flash,
            "{report:?}"
        );
        assert!(report.flash_items_kept > 0, "{report:?}");
        for (i, key) in keys.iter().enumerate() {
            let expected = if overwritten.contains(&i) {
                format!("new-{i}").into_bytes()
            } else {
                value_of(i as u32)
            };
            match peek(&engine, key) {
                Some(value) => assert_eq!(value, expected, "key {i}, {crash:?}"),
                None => assert!(
                    !overwritten.contains(&i),
                    "overwritten key {i} lost, {crash:?}"
                ),
            }
        }
        engine.check_integrity().unwrap();
    }
}

/// Power cuts of the flash medium: the engine writes rounds of new values of the same keys
/// through a flash tier so small that regions are reclaimed and reused again and again, the
/// process dies, and the medium keeps a random subset of the sectors written since their last
/// persist (torn and reordered region writes). Whatever survived, every key reads as its last
/// value or not at all: a record of an earlier generation of a region (still holding valid
/// CRCs) is never served.
#[test]
fn a_power_cut_of_the_flash_medium_never_serves_an_older_value() {
    use rand::{Rng, SeedableRng};
    use strata_pool::testing::{Faults, SimulatedMedium};
    const KEYS: usize = 300;
    const ROUNDS: usize = 6;
    let dir = std::env::temp_dir().join(format!("strata-flash-cut-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut kept_over_seeds = 0;
    for seed in 0..6u64 {
        let pool = dir.join(format!("pool-{seed}"));
        let simulated = Arc::new(SimulatedMedium::new(
            MemoryMedium::new(4096 + 12 * REGION_SIZE_BYTES as usize, 4096),
            Faults::default(),
        ));
        let base = EngineConfig {
            pool: PoolLocation::File(pool.clone()),
            index_placement: IndexPlacement::Pool,
            fresh: true,
            ..config(Arc::clone(&simulated) as Arc<dyn Medium>, false)
        };
        let engine = Engine::open(base.clone()).unwrap();
        let value = |i: usize, round: usize| {
            let mut value = format!("k{i}-round{round}-").into_bytes();
            value.resize(700 + i % 200, b'r');
            value
        };
        for round in 0..ROUNDS {
            for i in 0..KEYS {
                let key = format!("key-{i:04}");
                engine
                    .set(key.as_bytes(), &value(i, round), 0, Expiry::Never)
                    .unwrap();
                wait_for("the write queue to drain", || {
                    flash_stats(&engine).regions_queued == 0
                });
            }
        }
        let flash = flash_stats(&engine);
        assert!(
            flash.reclaimed_regions > 12,
            "regions were reused: {flash:?}"
        );
        drop(engine); // The process dies: nothing is closed.
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let image = simulated.crash_image(&mut |_| rng.gen_bool(0.5));
        let medium: Arc<dyn Medium> = Arc::new(MemoryMedium::from_image(image, 4096));
        let engine = Engine::open(EngineConfig {
            pool: base.pool.clone(),
            index_placement: IndexPlacement::Pool,
            fresh: false,
            ..config(medium, false)
        })
        .unwrap();
        let mut present = 0;
        for i in 0..KEYS {
            let key = format!("key-{i:04}");
            if let Some(got) = peek(&engine, key.as_bytes()) {
                assert_eq!(got, value(i, ROUNDS - 1), "seed {seed}: {key} is stale");
                present += 1;
            }
        }
        assert!(present > 0, "seed {seed}: memory's items at least");
        // Coverage, not a promise per image: a region survives only if its header's changed
        // sector did (half the time here, where nothing persisted the region writes), so one
        // image in dozens keeps none.
        kept_over_seeds += engine.recovery_report().flash_items_kept;
        engine.check_integrity().unwrap();
        drop(engine);
        let _ = std::fs::remove_file(&pool);
        let _ = std::fs::remove_dir_all(format!("{}.index", pool.display()));
    }
    assert!(kept_over_seeds > 0, "some image kept flash items");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every flash item costs an index slot in DRAM: small items must not grow the index past the
/// memory budget (the flash thread reclaims the oldest region at the bound, and evicted items
/// are refused meanwhile), and the memory tier keeps its segments.
#[test]
fn small_items_on_flash_keep_the_index_within_the_memory_budget() {
    let engine = Engine::open(config(ram_disk(512), false)).unwrap();
    for i in 0..60_000u32 {
        engine
            .set(
                format!("small-{i}").as_bytes(),
                b"12345678",
                0,
                Expiry::Never,
            )
            .unwrap();
        if i % 64 == 0 {
            wait_for("the write queue to drain", || {
                flash_stats(&engine).regions_queued == 0
            });
        }
    }
    // Then writes that flash refuses (its queue is left to fill): they cycle through memory.
    for i in 0..2_000u32 {
        let key = format!("late-{i}");
        engine
            .set(key.as_bytes(), b"12345678", 0, Expiry::Never)
            .unwrap();
    }
    let stats = engine.stats();
    let flash = stats.flash.clone().expect("a flash tier");
    assert!(flash.items > 2_000, "{flash:?}");
    assert!(
        stats.index_bytes <= stats.memory_bytes / 2 + 64 * 1024,
        "index {} bytes of a {} byte budget: {stats:?}",
        stats.index_bytes,
        stats.memory_bytes
    );
    assert!(
        flash.evicted_items > 0,
        "the oldest regions went: {flash:?}"
    );
    // The index grew many times; each growth takes its size from the segment budget once. The
    // memory tier keeps the rest (each growth used to charge the index's whole size against
    // what the earlier ones had left, until memory was down to a single segment).
    let segment = stats.segment_size_bytes;
    let index_segments = stats.index_bytes.div_ceil(segment);
    let memory_segments = stats.segments_used + stats.segments_free;
    assert!(
        memory_segments + index_segments + 2 >= stats.segments_total,
        "{memory_segments} segments serve memory, the index takes {index_segments} of \
         {}: {stats:?}",
        stats.segments_total
    );
    assert!(
        get(&engine, b"late-1999").is_some(),
        "the newest item is served"
    );
    engine.check_integrity().unwrap();
}

/// A server has an I/O thread read a key's flash record ahead (`read_flash_ahead`) while the
/// request waits; the read that follows, with the records lent, then does no I/O, and a write
/// in between still wins. Records lent to one run are not another's.
#[test]
fn a_record_read_ahead_serves_the_next_read_without_io() {
    let engine = Engine::open(config(ram_disk(64), false)).unwrap();
    let keys = fill(&engine, 600);
    let key = &keys[5];
    assert!(engine.flash_read_needed(key), "on flash, not read ahead");
    let mut records = ReadAhead::default();
    engine.read_flash_ahead(&[key], &mut records);
    assert_eq!(records.len(), 1);
    assert!(
        engine.flash_read_needed(key),
        "not lent: read ahead for someone else"
    );
    let reads = flash_stats(&engine).reads;
    engine.with_read_ahead(&mut records, || {
        assert!(!engine.flash_read_needed(key), "lent");
        assert_eq!(peek(&engine, key), Some(value_of(5)));
        assert!(engine.flash_read_needed(key), "taken by that read");
    });
    assert!(records.is_empty());
    let flash = flash_stats(&engine);
    assert_eq!(flash.reads, reads, "no medium read: {flash:?}");
    assert_eq!(flash.staged_reads, 1);
    // Read ahead, then written: the new value is served, never the one read ahead, which is
    // left over and counted when discarded.
    let key = &keys[6];
    engine.read_flash_ahead(&[key], &mut records);
    engine.set(key, b"newer", 0, Expiry::Never).unwrap();
    engine.with_read_ahead(&mut records, || {
        assert!(!engine.flash_read_needed(key), "memory holds it");
        assert_eq!(peek(&engine, key).as_deref(), Some(&b"newer"[..]));
    });
    assert_eq!(records.len(), 1, "the record nobody took");
    engine.discard_read_ahead(&mut records);
    assert!(records.is_empty());
    assert_eq!(flash_stats(&engine).staged_dropped, 1);
    assert!(
        !engine.flash_read_needed(&keys[599]),
        "the newest key is in memory"
    );
}

/// An I/O thread reads ahead the keys of many waiting requests in one batch (all in flight at
/// once through io_uring on a real O_DIRECT file): each key's next read is then served from
/// what the batch read, without I/O, with its own value; keys not on flash are skipped.
#[test]
fn a_batch_read_ahead_on_a_direct_file_serves_each_key_its_own_value() {
    let (_dir, medium) = direct_file("batch-stage");
    let engine = Engine::open(config(medium, false)).unwrap();
    let keys = fill(&engine, 600);
    let on_flash: Vec<usize> = (0..keys.len())
        .filter(|&i| engine.flash_read_needed(&keys[i]))
        .take(100)
        .collect();
    assert!(on_flash.len() >= 80, "{} on flash", on_flash.len());
    let in_memory = keys.len() - 1;
    assert!(!engine.flash_read_needed(&keys[in_memory]));
    let mut batch: Vec<&[u8]> = on_flash.iter().map(|&i| &keys[i][..]).collect();
    batch.push(&keys[in_memory]);
    let reads = flash_stats(&engine).reads;
    let mut records = ReadAhead::default();
    engine.read_flash_ahead(&batch, &mut records);
    let staged = flash_stats(&engine);
    assert_eq!(
        staged.reads - reads,
        on_flash.len() as u64,
        "one read per key on flash: {staged:?}"
    );
    assert_eq!(records.len(), on_flash.len());
    engine.with_read_ahead(&mut records, || {
        for &i in &on_flash {
            assert!(!engine.flash_read_needed(&keys[i]), "key {i} read ahead");
        }
        for &i in &on_flash {
            assert_eq!(peek(&engine, &keys[i]), Some(value_of(i as u32)), "key {i}");
        }
    });
    assert!(records.is_empty(), "every record taken");
    let served = flash_stats(&engine);
    assert_eq!(
        served.reads, staged.reads,
        "no more medium reads: {served:?}"
    );
    assert_eq!(
        served.staged_reads - staged.staged_reads,
        on_flash.len() as u64
    );
}

/// A server's own reads (`plan_flash_reads`, a `ReadRing`, `finish_flash_read`): values both
/// shorter and longer than a first read (4 KiB past the record's start), so some reads come
/// back as `ReadMore` and go again; then each key is served its own value without I/O.
#[test]
fn reads_a_server_does_on_its_own_ring_stage_short_and_long_records() {
    let (_dir, medium) = direct_file("ring-stage");
    let engine = Engine::open(EngineConfig {
        memory_bytes: 48 * 8192,
        segment_size_bytes: 8192,
        value_len_max: 7000,
        ..config(medium, false)
    })
    .unwrap();
    let Some(file) = engine.flash_read_file() else {
        eprintln!("io_uring is not available here: the I/O threads' path is the one in use");
        assert_eq!(
            strata_pool::IoEngine::best().0,
            strata_pool::IoEngine::Pread
        );
        return;
    };
    let value = |i: usize| {
        let len = if i.is_multiple_of(2) { 900 } else { 6000 };
        let mut value = format!("value-{i}-").into_bytes();
        value.resize(len, b'a' + (i % 26) as u8);
        value
    };
    let keys: Vec<Vec<u8>> = (0..200)
        .map(|i| format!("ring-{i:04}").into_bytes())
        .collect();
    for (i, key) in keys.iter().enumerate() {
        engine.set(key, &value(i), 0, Expiry::Never).unwrap();
        wait_for("the write queue to drain", || {
            flash_stats(&engine).regions_queued == 0
        });
    }
    let on_flash: Vec<usize> = (0..keys.len())
        .filter(|&i| engine.flash_read_needed(&keys[i]))
        .collect();
    assert!(
        on_flash.iter().filter(|&&i| i % 2 == 1).count() >= 40,
        "long values on flash: {on_flash:?}"
    );
    let wanted: Vec<&[u8]> = on_flash.iter().map(|&i| &keys[i][..]).collect();
    let mut reads = engine.plan_flash_reads(&wanted);
    // One read per key, but for those still in a region buffer (no I/O needed).
    let planned = reads.len();
    assert!(
        planned <= on_flash.len() && planned + 8 >= on_flash.len(),
        "{planned} reads for {} keys",
        on_flash.len()
    );
    let mut ring = strata_pool::ReadRing::new(64, file).unwrap();
    let (mut staged, mut again) = (0, 0);
    let mut records = ReadAhead::default();
    let mut done = Vec::new();
    while !reads.is_empty() || ring.in_flight() > 0 {
        while ring.in_flight() < ring.capacity() {
            let Some(read) = reads.pop() else { break };
            let (offset, len) = (read.offset(), read.len_bytes());
            assert!(ring.queue_read(offset, len, 4096, read).is_ok());
        }
        ring.submit().unwrap();
        ring.complete(&mut done);
        for (mut read, result) in done.drain(..) {
            match engine.finish_flash_read(&mut read, result.as_deref().ok(), &mut records) {
                ReadOutcome::Staged => staged += 1,
                ReadOutcome::ReadMore => {
                    again += 1;
                    reads.push(read);
                }
                ReadOutcome::Miss => panic!("a record on flash missed"),
            }
        }
        std::thread::yield_now();
    }
    assert_eq!(staged, planned);
    assert_eq!(records.len(), planned);
    assert!(again >= 20, "{again} long records read again");
    let reads_before = flash_stats(&engine).reads;
    engine.with_read_ahead(&mut records, || {
        let still_needed = on_flash
            .iter()
            .filter(|&&i| engine.flash_read_needed(&keys[i]))
            .count();
        assert_eq!(
            still_needed,
            on_flash.len() - planned,
            "the rest are in buffers"
        );
        for &i in &on_flash {
            assert_eq!(peek(&engine, &keys[i]), Some(value(i)), "key {i}");
        }
    });
    assert_eq!(
        flash_stats(&engine).reads,
        reads_before,
        "served without I/O"
    );
}

/// A first read covers about one average record past the record's start, not 4 KiB: records
/// of ~1 KiB mostly need one 4 KiB block, and a 4 KiB guess made nearly every read two blocks
/// long (a record rarely starts at a block's first byte). Each read is still one read.
#[test]
fn first_reads_of_small_records_are_about_their_size() {
    let engine = Engine::open(config(ram_disk(64), false)).unwrap();
    let keys = fill(&engine, 600);
    let on_flash = keys_on_flash(&engine, &keys);
    let reads = engine.plan_flash_reads(&on_flash);
    assert!(reads.len() > 200, "{} reads planned", reads.len());
    let one_block = reads.iter().filter(|read| read.len_bytes() == 4096).count();
    assert!(
        reads.iter().all(|read| read.len_bytes() <= 8192),
        "no first read longer than two blocks"
    );
    assert!(
        one_block * 2 > reads.len(),
        "{one_block} of {} first reads are one block",
        reads.len()
    );
    // Each planned read, done, stages its record without a second read.
    let before = flash_stats(&engine).reads;
    let mut records = ReadAhead::default();
    engine.read_flash_ahead(&on_flash, &mut records);
    assert_eq!(flash_stats(&engine).reads - before, reads.len() as u64);
    assert_eq!(records.len(), reads.len());
}

/// SCAN over a cache whose keys are mostly on flash returns every key, and a call reads at
/// most [`SCAN_FLASH_READS_PER_CALL_MAX`] records past one step's (a server worker waits for
/// them: one call once held its worker for a read per key, hundreds of them), even when the
/// caller asks for more keys than that.
#[test]
fn scan_returns_every_flash_key_a_bounded_number_of_reads_at_a_time() {
    let engine = Engine::open(config(ram_disk(64), false)).unwrap();
    let keys = fill(&engine, 600);
    let present: std::collections::BTreeSet<Vec<u8>> = keys
        .iter()
        .filter(|key| peek(&engine, key).is_some())
        .cloned()
        .collect();
    let on_flash = keys.iter().filter(|k| engine.flash_read_needed(k)).count();
    assert!(on_flash > 300, "{on_flash} keys on flash");
    let step_entries_max = (SCAN_BUCKETS_PER_FLASH_STEP * 8) as u64;
    let mut seen = std::collections::BTreeSet::new();
    let (mut cursor, mut calls, mut flash_bound) = (0, 0, 0);
    loop {
        let before = flash_stats(&engine).reads;
        let step = engine.scan_step(cursor, 10_000, &mut |key| {
            seen.insert(key.to_vec());
        });
        cursor = step.next;
        flash_bound += usize::from(step.flash_bound);
        let reads = flash_stats(&engine).reads - before;
        assert!(
            reads < SCAN_FLASH_READS_PER_CALL_MAX as u64 + step_entries_max,
            "{reads} flash reads in one call"
        );
        calls += 1;
        if cursor == 0 {
            break;
        }
    }
    assert!(calls > 2, "{calls} calls: the flash reads bounded each");
    assert!(
        flash_bound + 1 >= calls,
        "{flash_bound} of {calls} calls said so"
    );
    let missing: Vec<_> = present.difference(&seen).collect();
    assert!(missing.is_empty(), "{} keys never returned", missing.len());
    assert!(
        seen.is_subset(&keys.iter().cloned().collect()),
        "no stranger key"
    );
}

/// Records of 4 KiB values (each just over 4 KiB with its key, header and stamp) are read
/// whole by their first read: the guess is the average record with a quarter to spare, and is
/// not held to one 4 KiB block (which left about one read in twelve short: a second disk
/// round trip for that GET).
#[test]
fn first_reads_of_4_kib_records_hold_the_whole_record() {
    let mut config = config(ram_disk(0), false);
    let medium = Arc::new(MemoryMedium::new(4096 + 64 * (64 << 10), 4096));
    config.memory_bytes = 16 * (16 << 10);
    config.segment_size_bytes = 16 << 10;
    config.value_len_max = 8192;
    config.item_size_bytes_expected = 4200;
    if let Some(flash) = config.flash.as_mut() {
        flash.medium = FlashMedium::Given(medium);
        flash.region_size_bytes = 64 << 10;
    }
    let engine = Engine::open(config).unwrap();
    let value = |i: u32| {
        let mut value = format!("big-{i}-").into_bytes();
        value.resize(4096, b'a' + (i % 26) as u8);
        value
    };
    let keys: Vec<Vec<u8>> = (0..300u32)
        .map(|i| format!("key-{i:05}").into_bytes())
        .collect();
    for (i, key) in (0u32..).zip(&keys) {
        engine.set(key, &value(i), 0, Expiry::Never).unwrap();
        wait_for("the write queue to drain", || {
            flash_stats(&engine).regions_queued == 0
        });
    }
    let on_flash = keys_on_flash(&engine, &keys);
    let reads = engine.plan_flash_reads(&on_flash);
    assert!(reads.len() > 100, "{} reads planned", reads.len());
    let before = flash_stats(&engine).reads;
    let mut records = ReadAhead::default();
    engine.read_flash_ahead(&on_flash, &mut records);
    assert_eq!(
        flash_stats(&engine).reads - before,
        reads.len() as u64,
        "no record needed a second read"
    );
    engine.with_read_ahead(&mut records, || {
        for (i, key) in (0u32..).zip(&keys) {
            if on_flash.contains(&&key[..]) {
                assert_eq!(peek(&engine, key), Some(value(i)), "key {i}");
            }
        }
    });
}

/// A read planned, then its region reclaimed and written again before the read is done (a
/// worker's ring read in flight while the flash thread reclaims): what the read brings back is
/// another generation's bytes, and finishing it never makes a read serve a wrong value.
#[test]
fn a_read_planned_before_its_region_is_reused_never_serves_a_wrong_value() {
    let medium = ram_disk(64);
    let engine = Engine::open(config(Arc::clone(&medium), false)).unwrap();
    let keys = fill(&engine, 600);
    let on_flash: Vec<usize> = (0..keys.len())
        .filter(|&i| engine.flash_read_needed(&keys[i]))
        .collect();
    let wanted: Vec<&[u8]> = on_flash.iter().map(|&i| &keys[i][..]).collect();
    let mut reads = engine.plan_flash_reads(&wanted);
    assert!(reads.len() > 100, "{} reads planned", reads.len());
    // Far more than flash holds: every region of the planned reads is reclaimed and reused.
    let reclaimed_before = flash_stats(&engine).reclaimed_regions;
    for i in 0..3_000u32 {
        let key = format!("later-{i:05}");
        engine
            .set(key.as_bytes(), &value_of(i), 0, Expiry::Never)
            .unwrap();
        wait_for("the write queue to drain", || {
            flash_stats(&engine).regions_queued == 0
        });
    }
    assert!(flash_stats(&engine).reclaimed_regions > reclaimed_before + 64);
    let mut staged = 0;
    let mut records = ReadAhead::default();
    for read in &mut reads {
        let mut buf = strata_pool::AlignedBuf::zeroed(read.len_bytes(), 4096);
        medium.read_at(read.offset(), &mut buf).unwrap();
        if engine.finish_flash_read(read, Some(&buf), &mut records) == ReadOutcome::Staged {
            staged += 1;
        }
    }
    engine.with_read_ahead(&mut records, || {
        for &i in &on_flash {
            if let Some(got) = peek(&engine, &keys[i]) {
                assert_eq!(got, value_of(i as u32), "key {i}");
            }
        }
    });
    eprintln!(
        "{staged} of {} stale reads staged; none served",
        reads.len()
    );
}

/// A key whose older value is on flash and whose newer value in memory has expired is absent:
/// the expired memory record shadows the flash copy (found by the model test: the older value
/// came back once the newer one expired).
#[test]
fn an_expired_memory_record_shadows_an_older_flash_copy() {
    let clock = ManualClock::new(1_800_000_000_000);
    let engine = Engine::open(EngineConfig {
        clock: Arc::new(clock.clone()),
        ..config(ram_disk(64), false)
    })
    .unwrap();
    let keys = fill(&engine, 600);
    let key = &keys[4];
    assert!(
        engine.flash_read_needed(key),
        "the key's first value is on flash"
    );
    let expires = Expiry::AtMs(clock.now_ms() + 10_000);
    engine.set(key, b"newer, expiring", 0, expires).unwrap();
    assert_eq!(peek(&engine, key).as_deref(), Some(&b"newer, expiring"[..]));
    clock.advance_ms(20_000);
    assert_eq!(
        get(&engine, key),
        None,
        "expired, and the older flash copy stays hidden"
    );
    assert!(!engine.contains(key));
    assert!(
        !engine.flash_read_needed(key),
        "nothing to read from flash for it"
    );
    engine.check_integrity().unwrap();
}

/// A medium that starts failing its writes mid-run (a dying device, a full thin-provisioned
/// volume): each failed region write is counted, its items read as misses (their records fail
/// their checks: never a wrong or older value), the regions written before the failure keep
/// serving, and writes keep going to memory.
#[test]
fn failing_region_writes_cost_only_their_items() {
    use strata_pool::testing::{Faults, SimulatedMedium};
    let simulated = Arc::new(SimulatedMedium::new(
        MemoryMedium::new(4096 + 64 * REGION_SIZE_BYTES as usize, 4096),
        Faults {
            // The superblock's write, then a few regions, then every write fails.
            fail_write_from: Some(6),
            ..Faults::default()
        },
    ));
    let engine = Engine::open(config(Arc::clone(&simulated) as Arc<dyn Medium>, false)).unwrap();
    let keys = fill(&engine, 900);
    let flash = flash_stats(&engine);
    assert!(flash.written_regions >= 1, "{flash:?}");
    assert!(flash.write_errors >= 3, "{flash:?}");
    let mut from_flash = 0;
    let mut absent = 0;
    for (i, key) in keys.iter().enumerate() {
        let hits = flash_stats(&engine).hits;
        match peek(&engine, key) {
            Some(value) => {
                assert_eq!(value, value_of(i as u32), "{key:?}");
                from_flash += u64::from(flash_stats(&engine).hits > hits);
            }
            None => absent += 1,
        }
    }
    assert!(from_flash > 0, "regions written before the failure serve");
    assert!(absent > 0, "the failed regions' items are gone");
    let flash = flash_stats(&engine);
    assert!(
        flash.damaged_records > 0,
        "their records failed their checks: {flash:?}"
    );
    // Memory goes on taking writes and serving them.
    engine
        .set(b"after", b"the failure", 0, Expiry::Never)
        .unwrap();
    assert_eq!(get(&engine, b"after"), Some(b"the failure".to_vec()));
    for (i, key) in keys.iter().enumerate().rev().take(20) {
        assert_eq!(peek(&engine, key), Some(value_of(i as u32)), "newest keys");
    }
    engine.check_integrity().unwrap();
}

/// A clean close settles every suspect before it saves the index, so the open after it lists
/// none again (after a crash it must: the list was lost); listing them only set the flash
/// thread re-reading other keys' copies. Every key shares hash bits here (6 bits kept), so
/// nearly every flash entry sits beside a memory entry with its bits.
#[test]
fn a_clean_close_leaves_no_suspects_to_list_again() {
    let (_dir, config) = file_pool_config("suspects", ram_disk(64), true);
    let engine = Engine::open(config.clone()).unwrap();
    let keys = fill(&engine, 600);
    assert!(flash_stats(&engine).items > 300);
    // With so few hash bits, removing a memory entry also drops the unsettled suspects that
    // share them, some of them other keys' only copies: those keys are gone before the close.
    let before: Vec<Option<Vec<u8>>> = keys.iter().map(|key| peek(&engine, key)).collect();
    assert!(before.iter().filter(|v| v.is_some()).count() > 300);
    let engine = close_and_reopen(engine, &config);
    assert_eq!(flash_stats(&engine).suspects, 0, "none listed again");
    // The regions' key filters are rebuilt from their directories in the background; reads
    // before that look at the first colliding candidates unfiltered (here, with 6 hash bits,
    // past them lie keys found before the close).
    wait_for("the key filters to be rebuilt", || {
        flash_stats(&engine).regions_unfiltered == 0
    });
    assert!(flash_stats(&engine).filter_bytes > 0);
    for (i, key) in keys.iter().enumerate() {
        let expected = before[i].as_ref().map(|_| value_of(i as u32));
        assert_eq!(peek(&engine, key), expected, "{key:?} as before the close");
    }
    engine.check_integrity().unwrap();
}

/// Records read ahead belong to the request they were read for: 5,000 requests' reads ahead
/// (more than the tier-wide staging area of before held: it dropped the early ones, whose
/// requests then read the medium on the worker) each serve their own request without I/O and
/// with its own value; a region reclaimed meanwhile makes a miss, never a wrong value.
#[test]
fn read_aheads_belong_to_their_request_however_many_wait() {
    const STAGED_RECORDS_MAX_BEFORE: u64 = 4096;
    let engine = Engine::open(config(ram_disk(512), false)).unwrap();
    let key = |i: u32| format!("s{i:05}").into_bytes();
    let value = |i: u32| {
        let mut value = format!("small-{i}-").into_bytes();
        value.resize(48, b's');
        value
    };
    for i in 0..20_000u32 {
        engine.set(&key(i), &value(i), 0, Expiry::Never).unwrap();
        if i % 64 == 0 {
            wait_for("the write queue to drain", || {
                flash_stats(&engine).regions_queued == 0
            });
        }
    }
    // The last writes' regions too (only written regions are read ahead).
    wait_for("the write queue to drain", || {
        flash_stats(&engine).regions_queued == 0
    });
    let on_flash: Vec<u32> = (0..20_000u32)
        .filter(|&i| engine.flash_read_needed(&key(i)))
        .take(5_000)
        .collect();
    assert!(
        on_flash.len() as u64 > STAGED_RECORDS_MAX_BEFORE,
        "{} keys on flash: {:?}",
        on_flash.len(),
        flash_stats(&engine)
    );
    let mut waiting: Vec<ReadAhead> = on_flash
        .iter()
        .map(|&i| {
            let mut records = ReadAhead::default();
            engine.read_flash_ahead(&[key(i)], &mut records);
            records
        })
        .collect();
    let before = flash_stats(&engine);
    let mut found = 0;
    for (&i, records) in on_flash.iter().zip(&mut waiting) {
        engine.with_read_ahead(records, || {
            // A region reclaimed meanwhile (the flash thread keeps its item bound) makes a
            // miss, never a wrong value.
            if let Some(got) = peek(&engine, &key(i)) {
                assert_eq!(got, value(i), "key {i}");
                found += 1;
            }
        });
    }
    let flash = flash_stats(&engine);
    assert!(found > on_flash.len() / 2, "{found} found: {flash:?}");
    // Every hit took a lent record (and, below, none read the medium). A record may also be
    // taken by a read that then misses: the flash thread reclaimed its region meanwhile, or it
    // was a candidate of the key's bucket under another key. So at least one per hit, and
    // a few more: two per miss at most, and a handful of shared buckets.
    let staged = flash.staged_reads - before.staged_reads;
    assert!(
        staged >= found as u64 && staged <= (found + 2 * (on_flash.len() - found) + 8) as u64,
        "every hit served from its own records: {staged} taken, {found} found: {flash:?}"
    );
    assert_eq!(
        flash.reads - flash.settle_reads,
        before.reads - before.settle_reads,
        "no request read the medium: {flash:?}"
    );
    engine.check_integrity().unwrap();
}

/// Two reads of one flash item at once, the item due for promotion: the one that finishes
/// first moves it to memory, and the other, whose entry moved under it, must look again and
/// hit, not answer a miss for a key that was there all along (a slowed medium holds both
/// reads in flight together).
#[test]
fn a_read_racing_a_promotion_of_its_key_still_hits() {
    let mut config = config(ram_disk(64), false);
    if let Some(flash) = config.flash.as_mut() {
        flash.read_delay_for_tests = Duration::from_millis(20);
    }
    let engine = Engine::open(config).unwrap();
    let keys = fill(&engine, 600);
    let on_flash: Vec<usize> = (0..200)
        .filter(|&i| engine.flash_read_needed(&keys[i]))
        .collect();
    assert!(on_flash.len() > 20, "{} keys on flash", on_flash.len());
    let promoted_before = flash_stats(&engine).promoted_items;
    for &i in on_flash.iter().take(20) {
        let key = &keys[i];
        assert_eq!(get(&engine, key), Some(value_of(i as u32)), "first read");
        let barrier = std::sync::Barrier::new(2);
        let (a, b) = std::thread::scope(|s| {
            let read = || {
                barrier.wait();
                get(&engine, key)
            };
            let a = s.spawn(read);
            let b = s.spawn(read);
            (a.join().unwrap(), b.join().unwrap())
        });
        let value = Some(value_of(i as u32));
        assert!(
            a == value,
            "key {i}: the first of the pair read {:?}",
            a.map(|v| v.len())
        );
        assert!(
            b == value,
            "key {i}: the second of the pair read {:?}",
            b.map(|v| v.len())
        );
    }
    assert!(flash_stats(&engine).promoted_items >= promoted_before + 20);
}

/// Writes `value` under `key` as a value of `kind` (a typed write, as the hash commands make).
fn set_kind(engine: &Engine, key: &[u8], value: &[u8], kind: Kind) {
    engine
        .modify(key, |_, buffer| {
            buffer.extend_from_slice(value);
            match kind {
                Kind::String => Change::Write {
                    client_flags: 0,
                    expiry: Expiry::Never,
                    keep_cas: false,
                },
                kind => Change::WriteKind {
                    kind,
                    expiry: Expiry::Never,
                },
            }
        })
        .unwrap();
}

#[test]
fn a_record_keeps_its_kind_on_flash_back_in_memory_and_across_a_reopen() {
    let (_dir, config) = file_pool_config("kinds", ram_disk(64), false);
    let engine = Engine::open(config.clone()).unwrap();
    let kind_of = |i: usize| {
        if i.is_multiple_of(3) {
            Kind::Hash
        } else {
            Kind::String
        }
    };
    let keys: Vec<Vec<u8>> = (0..600)
        .map(|i| format!("key-{i:05}").into_bytes())
        .collect();
    for (i, key) in keys.iter().enumerate() {
        set_kind(&engine, key, &value_of(i as u32), kind_of(i));
        wait_for("the write queue to drain", || {
            flash_stats(&engine).regions_queued == 0
        });
    }
    let on_flash = keys_on_flash(&engine, &keys).len();
    assert!(on_flash > 100, "only {on_flash} keys on flash");
    let check = |engine: &Engine, when: &str| {
        for (i, key) in keys.iter().enumerate() {
            let found = engine.peek(key, |item| (item.kind, item.value.to_vec()));
            if let Some((kind, value)) = found {
                assert_eq!(kind, kind_of(i), "{when}: kind of key {i}");
                assert_eq!(value, value_of(i as u32), "{when}: value of key {i}");
            }
        }
    };
    check(&engine, "memory and flash");
    // Reads promote flash items back into memory (two reads each), kinds and all.
    for key in keys_on_flash(&engine, &keys).into_iter().take(50) {
        get(&engine, key);
        get(&engine, key);
    }
    check(&engine, "after promotion");
    // A touch (keep_cas: its own value back, a new expiry) keeps the kind; memcached's touch
    // leaves a hash alone; a string write replaces a hash with a string.
    let hash_key = &keys[3];
    engine
        .modify(hash_key, |item, buffer| {
            buffer.extend_from_slice(item.expect("present").value);
            Change::Write {
                client_flags: 0,
                expiry: Expiry::AtMs(u64::MAX / 2),
                keep_cas: true,
            }
        })
        .unwrap();
    assert_eq!(engine.peek(hash_key, |item| item.kind), Some(Kind::Hash));
    assert!(!engine.touch(hash_key, Expiry::Never).unwrap());
    let engine = close_and_reopen(engine, &config);
    check(&engine, "after a clean reopen");
    engine
        .set(hash_key, b"now a string", 0, Expiry::Never)
        .unwrap();
    assert_eq!(engine.peek(hash_key, |item| item.kind), Some(Kind::String));
    // modify_as refuses a key of another kind and leaves it as it was.
    assert_eq!(
        engine.modify_as(&keys[0], Kind::String, |_, _| Change::Delete),
        Err(WriteError::WrongKind)
    );
    assert_eq!(engine.peek(&keys[0], |item| item.kind), Some(Kind::Hash));
    // memcached's string operations do not treat a hash as a string.
    assert_eq!(engine.concat(&keys[0], b"x", false), Ok(None));
    assert_eq!(engine.arith(&keys[0], 1, false), Ok(Arith::NotNumeric));
}

/// A transaction over keys only flash holds: its reads see their values (read ahead first,
/// as a server's plan does, so without I/O under the locks), its read-modify-write brings the
/// key back to memory and changes it, its delete removes the flash copy, and `read_together`
/// sees them all at once.
#[test]
fn a_transaction_reads_changes_and_deletes_keys_only_flash_holds() {
    let engine = Engine::open(config(ram_disk(64), false)).unwrap();
    let keys = fill(&engine, 600);
    let on_flash = keys_on_flash(&engine, &keys);
    assert!(on_flash.len() > 300, "most keys on flash");
    let (read, changed, deleted) = (on_flash[0], on_flash[1], on_flash[2]);
    let index = |key: &[u8]| keys.iter().position(|k| k == key).unwrap() as u32;
    let mut records = ReadAhead::default();
    engine.read_flash_ahead(&[read, changed, deleted], &mut records);
    let staged_before = flash_stats(&engine).staged_reads;
    engine.with_read_ahead(&mut records, || {
        let txn = engine
            .transaction(&[read, changed, deleted], &[changed, deleted])
            .unwrap();
        assert_eq!(
            txn.get(read, |item| item.value.to_vec()),
            Some(value_of(index(read)))
        );
        txn.modify(changed, |current, buffer| {
            buffer.extend_from_slice(current.expect("seen on flash").value);
            buffer.extend_from_slice(b"+txn");
            Change::Write {
                client_flags: 0,
                expiry: Expiry::Never,
                keep_cas: false,
            }
        })
        .unwrap();
        assert_eq!(txn.delete(deleted, None).unwrap(), DeleteOutcome::Deleted);
        txn.finish().unwrap();
    });
    assert!(records.is_empty(), "the transaction took every record");
    assert!(
        flash_stats(&engine).staged_reads >= staged_before + 3,
        "the transaction used the records read ahead"
    );
    let mut expected = value_of(index(changed));
    expected.extend_from_slice(b"+txn");
    assert!(!engine.flash_read_needed(changed), "back in memory");
    assert_eq!(peek(&engine, changed), Some(expected.clone()));
    assert_eq!(peek(&engine, deleted), None);
    let together = engine.read_together(&[read, changed, deleted]);
    assert_eq!(
        together.peek(read, |item| item.value.to_vec()),
        Some(value_of(index(read)))
    );
    assert_eq!(
        together.peek(changed, |item| item.value.to_vec()),
        Some(expected)
    );
    assert!(!together.contains(deleted));
    drop(together);
    engine.check_integrity().unwrap();
}
