//! Write-back against crash images of its pool (the pool crate's power-failure simulator: a
//! power cut keeps what was persisted plus any subset of the 64-byte lines stored since). A
//! random workload of whole-block writes (some with FUA), zeroes, flushes and cleaner rounds
//! runs on an export whose cache (64 KiB lines, three per shard: writes wait for room all the
//! time) is far smaller than its store; then the pool is cut: every block must read back as the
//! last write to it acknowledged (by FUA or a later FLUSH) or a write issued after that one,
//! never older. Cuts between requests now and then, three at the end of each run (nothing
//! unpersisted kept, everything, a random half), a process crash on the same boot, and a power
//! cut after that process crash's recovery. `STRATA_WB_POWER_RUNS` sets the runs (8).
//!
//! The backing store is taken to keep every write it was given (a file copied at the cut): the
//! simulator covers the pool, not the store's own write cache.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use strata_block::backing::Backing;
use strata_block::cache::SHARDS;
use strata_block::cleaner::{self, Policy};
use strata_block::export::{Export, Mode};
use strata_block::pool_cache::{self, StoreIdentity};
use strata_pool::testing::SimulatedPersistence;
use strata_pool::{Location, OpenMode, Pool, PoolOptions};

const LINE_BYTES: usize = 64 << 10;
const BLOCK_BYTES: usize = 4096;
const STORE_BLOCKS: u64 = 8192; // 32 MiB: 512 lines against the cache's 192.
/// The tag of a zeroed block.
const ZERO: u64 = u64::MAX;
const STORE: StoreIdentity = StoreIdentity {
    size_bytes: STORE_BLOCKS * BLOCK_BYTES as u64,
    device: 0,
    inode: 0,
};

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("strata-wb-power-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn block_bytes(tag: u64) -> Vec<u8> {
    if tag == ZERO {
        return vec![0; BLOCK_BYTES];
    }
    tag.to_le_bytes().repeat(BLOCK_BYTES / 8)
}

fn tag_of(bytes: &[u8]) -> Option<u64> {
    if bytes.iter().all(|&b| b == 0) {
        return Some(ZERO);
    }
    let tag = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    (block_bytes(tag) == bytes).then_some(tag)
}

/// Each block's writes in order, with whether each is acknowledged.
struct Model {
    history: Vec<Vec<(u64, bool)>>,
}

impl Model {
    fn new() -> Model {
        Model {
            history: (0..STORE_BLOCKS)
                .map(|b| vec![(initial_tag(b), true)])
                .collect(),
        }
    }

    fn write(&mut self, block: u64, tag: u64, acked: bool) {
        self.history[block as usize].push((tag, acked));
    }

    fn flush(&mut self) {
        for writes in &mut self.history {
            for write in writes.iter_mut() {
                write.1 = true;
            }
        }
    }

    fn latest(&self, block: u64) -> u64 {
        self.history[block as usize].last().unwrap().0
    }

    /// The tags a crash may leave: the last acknowledged write and every later one.
    fn allowed(&self, block: u64) -> &[(u64, bool)] {
        let writes = &self.history[block as usize];
        let last_acked = writes.iter().rposition(|w| w.1).unwrap();
        &writes[last_acked..]
    }
}

/// A new cache pool of the least size, watched by `simulation`.
fn new_simulated_pool(simulation: &Arc<SimulatedPersistence>) -> Pool {
    Pool::open(PoolOptions {
        location: Location::Simulated(Arc::clone(simulation)),
        geometry: pool_cache::geometry(SHARDS as u64),
        mode: OpenMode::OpenOrCreate,
    })
    .unwrap()
}

fn new_export(pool: Pool, store_path: &Path) -> Export {
    let cache = pool_cache::attach(pool, LINE_BYTES, 1, STORE).unwrap();
    let backing = Backing::open(store_path).unwrap();
    Export::new("wb", backing, Mode::WriteBack, Some(cache)).unwrap()
}

/// Every block reads back as the model allows.
fn check(export: &Export, model: &Model, what: &str) {
    let mut out = vec![0u8; BLOCK_BYTES];
    for block in 0..STORE_BLOCKS {
        export.read(block * BLOCK_BYTES as u64, &mut out).unwrap();
        let tag = tag_of(&out).unwrap_or_else(|| panic!("{what}: block {block} is torn"));
        let allowed = model.allowed(block);
        assert!(
            allowed.iter().any(|w| w.0 == tag),
            "{what}: block {block} reads {tag:#x}; allowed {allowed:x?}"
        );
    }
}

/// Runs `steps` random operations on `export`, recording them in `model`, and calls `cut`
/// between two of them now and then.
fn workload(
    export: &Export,
    model: &mut Model,
    rng: &mut SmallRng,
    steps: usize,
    serial: &mut u64,
    cut: &mut dyn FnMut(&Export, &Model, &mut SmallRng),
) {
    for _ in 0..steps {
        if rng.gen_ratio(1, 60) {
            cut(export, model, rng);
        }
        let hot = rng.gen_bool(0.6);
        let span = if hot { STORE_BLOCKS / 8 } else { STORE_BLOCKS };
        let count = rng.gen_range(1..=4u64);
        let first = rng.gen_range(0..span - count);
        let offset = first * BLOCK_BYTES as u64;
        match rng.gen_range(0..100) {
            0..=79 => {
                let fua = rng.gen_ratio(1, 10);
                let mut data = Vec::new();
                let mut tags = Vec::new();
                for block in first..first + count {
                    *serial += 1;
                    let tag = (block << 32) | *serial;
                    data.extend(block_bytes(tag));
                    tags.push((block, tag));
                }
                export.write(offset, &data, fua).unwrap();
                for (block, tag) in tags {
                    model.write(block, tag, fua);
                }
            }
            80..=84 => {
                let len = count * BLOCK_BYTES as u64;
                export.write_zeroes(offset, len, false).unwrap();
                for block in first..first + count {
                    model.write(block, ZERO, false);
                }
            }
            85..=89 => {
                export.flush().unwrap();
                model.flush();
            }
            90..=92 => {
                let policy = Policy {
                    staleness: std::time::Duration::ZERO,
                    lines_per_sec: 0,
                };
                cleaner::round(export, policy).unwrap();
            }
            _ => {
                let mut out = vec![0u8; BLOCK_BYTES];
                export.read(offset, &mut out).unwrap();
                assert_eq!(tag_of(&out), Some(model.latest(first)), "a live read");
            }
        }
    }
}

fn fill_store(path: &Path) {
    let mut bytes = Vec::with_capacity(STORE.size_bytes as usize);
    for block in 0..STORE_BLOCKS {
        bytes.extend(block_bytes(initial_tag(block)));
    }
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_power_cut_or_a_crash_never_loses_an_acknowledged_write_back_write() {
    let runs: u64 = std::env::var("STRATA_WB_POWER_RUNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(8);
    let dir = TempDir::new("runs");
    let (mut room_waits, mut superseded_writes) = (0, 0);
    for run in 0..runs {
        let seed = 70_000_000 + run;
        let mut rng = SmallRng::seed_from_u64(seed);
        let store = dir.0.join("store");
        fill_store(&store);
        let simulation = SimulatedPersistence::new();
        let pool = new_simulated_pool(&simulation);
        let export = new_export(pool, &store);
        let mut model = Model::new();
        let mut serial = 0;
        let steps = rng.gen_range(100..600);
        let mut cuts_between = 0;
        let mut cut = |export: &Export, model: &Model, rng: &mut SmallRng| {
            // A power cut between two requests, keeping nothing or a random half unpersisted.
            let live = export.cache().unwrap().pool_live_image().unwrap();
            let share = [0.0, 0.5][rng.gen_range(0..2)];
            let image = simulation.crash_image(&live, &mut |_| rng.gen_bool(share));
            let store_after = dir.0.join("store-between");
            std::fs::copy(&store, &store_after).unwrap();
            let reopened = Pool::open_image(&image, SimulatedPersistence::new()).unwrap();
            let export = new_export(reopened, &store_after);
            cuts_between += 1;
            let what = format!("seed {seed}: cut {cuts_between} mid-run, {share} kept");
            check(&export, model, &what);
        };
        workload(&export, &mut model, &mut rng, steps, &mut serial, &mut cut);
        check(&export, &model, &format!("seed {seed}: live"));
        let cache = export.cache().unwrap();
        let counters = &cache.counters;
        room_waits += counters.room_waits.load(Ordering::Relaxed);
        superseded_writes += counters.dirty_write_hits.load(Ordering::Relaxed);
        let live = cache.pool_live_image().unwrap();
        let store_copy = dir.0.join("store-at-cut");
        std::fs::copy(&store, &store_copy).unwrap();
        let cuts: [(&str, f64); 3] = [("nothing kept", 0.0), ("all kept", 1.0), ("half kept", 0.5)];
        for (what, share) in cuts {
            let image = simulation.crash_image(&live, &mut |_| rng.gen_bool(share));
            let store_after = dir.0.join("store-after");
            std::fs::copy(&store_copy, &store_after).unwrap();
            let reopened = Pool::open_image(&image, SimulatedPersistence::new()).unwrap();
            let export = new_export(reopened, &store_after);
            check(&export, &model, &format!("seed {seed}: power cut, {what}"));
        }
        // A process crash on this boot (the mapping keeps every store, the media only what
        // was persisted), then a power cut before anything else happens.
        let persisted = simulation.crash_image(&live, &mut |_| false);
        let store_after = dir.0.join("store-after");
        std::fs::copy(&store_copy, &store_after).unwrap();
        let simulation_after = SimulatedPersistence::new();
        let reopened =
            Pool::open_image_after_process_crash(&live, &persisted, simulation_after.clone())
                .unwrap();
        let export = new_export(reopened, &store_after);
        let what = format!("seed {seed}: process crash");
        check(&export, &model, &what);
        let live_after = export.cache().unwrap().pool_live_image().unwrap();
        let image = simulation_after.crash_image(&live_after, &mut |_| false);
        let store_last = dir.0.join("store-last");
        std::fs::copy(&store_after, &store_last).unwrap();
        let reopened = Pool::open_image(&image, SimulatedPersistence::new()).unwrap();
        let export = new_export(reopened, &store_last);
        check(&export, &model, &format!("{what}, then a power cut"));
    }
    // The runs went where the bugs would be: full shards, lines rewritten while dirty.
    assert!(room_waits > 0 && superseded_writes > 0);
}

/// A block's bytes before any write (never all zeroes).
fn initial_tag(block: u64) -> u64 {
    (block << 32) | 0x8000_0000
}

/// A version superseded by a newer one must be durably gone before the newer one's entry may
/// disappear: the settle persists its clear before the slot is freed. Laid out by hand on one
/// shard of three slots: without that persist a power cut brings back a dirty line's older
/// version over the store's newer bytes.
#[test]
fn a_replaced_version_does_not_come_back_once_the_newer_one_was_written_back_and_evicted() {
    let simulation = SimulatedPersistence::new();
    let pool = new_simulated_pool(&simulation);
    let cache = pool_cache::attach(pool, LINE_BYTES, 1, STORE).unwrap();
    // Four lines of one shard (its three slots are taken in turn by the CLOCK hand).
    let shard = cache.shard_of(0);
    let same: Vec<u64> = (0..STORE_BLOCKS * BLOCK_BYTES as u64 / LINE_BYTES as u64)
        .filter(|&line| cache.shard_of(line) == shard)
        .take(4)
        .collect();
    let (l, x, y, m) = (same[0], same[1], same[2], same[3]);
    let bytes = |v: u8| vec![v; LINE_BYTES];
    let mut no_read =
        |_: &mut [u8]| -> Result<(), strata_pool::MediumError> { panic!("whole lines only") };
    let store = std::sync::Mutex::new(std::collections::HashMap::new());
    let write_store = |line: u64, data: &[u8]| {
        store.lock().unwrap().insert(line, data[0]);
        Ok(())
    };
    cache
        .write_dirty(l, 0, &bytes(1), false, &mut no_read)
        .unwrap(); // slot 0
    cache
        .write_dirty(x, 0, &bytes(9), false, &mut no_read)
        .unwrap(); // slot 1
    cache.settle().unwrap();
    cache
        .write_dirty(l, 0, &bytes(2), false, &mut no_read)
        .unwrap(); // slot 2; 0 superseded
    cache.settle().unwrap(); // slot 0's clear durable, slot 0 free
    let lines = strata_block::cache::CleanScope::Lines(l..l + 1);
    assert_eq!(cache.clean(&lines, &write_store, &|| Ok(())).unwrap(), 1);
    assert_eq!(store.lock().unwrap().get(&l), Some(&2));
    let mut out = bytes(0);
    let generation = cache.read(y, &mut out).unwrap_err();
    cache.fill(y, &bytes(7), generation); // slot 0, not persisted
    cache
        .write_dirty(m, 0, &bytes(5), true, &mut no_read)
        .unwrap(); // evicts l: slot 2, FUA
    assert!(!cache.holds(l), "l was evicted");
    let live = cache.pool_live_image().unwrap();
    let image = simulation.crash_image(&live, &mut |_| false);
    let reopened = Pool::open_image(&image, SimulatedPersistence::new()).unwrap();
    let after = pool_cache::attach(reopened, LINE_BYTES, 1, STORE).unwrap();
    assert!(
        after.read(l, &mut out).is_err(),
        "line {l} came back from the cache (version {}) over the store's newer bytes",
        out[0]
    );
    after.read(m, &mut out).expect("the FUA write");
    assert_eq!(out[0], 5);
    after.read(x, &mut out).expect("a settled dirty line");
    assert_eq!(out[0], 9);
}
