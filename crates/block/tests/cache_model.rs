//! The cache against a model of the store: random reads, writes, zeroes and trims through an
//! export in each cache mode, with a cache far smaller than the store (so lines are filled,
//! updated, invalidated and evicted all the time); every read must return the model's bytes,
//! and at the end the store must hold them (after write-back's dirty lines are written back).
//! Write-back runs with a DRAM cache and with a pool, and switches modes now and then. Then
//! threads writing and reading overlapping ranges at once: when they are done (and dirty lines
//! written back), what the export serves must be what the store holds.
#![allow(
    clippy::too_many_lines,
    reason = "a test scenario reads best as one function"
)]

use std::path::PathBuf;
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use strata_block::cache::{Cache, SHARDS};
use strata_block::export::{Export, Mode};
use strata_block::pool_cache::{self, StoreIdentity};

const STORE_BYTES: usize = 4 << 20;

struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str) -> TempFile {
        let path =
            std::env::temp_dir().join(format!("strata-cache-model-{}-{name}", std::process::id()));
        let bytes: Vec<u8> = (0..STORE_BYTES).map(|i| (i * 13 % 241) as u8).collect();
        std::fs::write(&path, bytes).unwrap();
        TempFile(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A cache of two lines per shard (128 lines): far smaller than the store.
fn small_cache(line_bytes: usize) -> Cache {
    Cache::new(128 * line_bytes as u64, line_bytes, 1)
}

/// A cache in a pool on tmpfs (or the temp dir); the file is removed when the first is dropped.
fn pool_cache_file(name: &str, line_bytes: usize) -> (TempFile, Cache) {
    {
        let dir = if std::path::Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let path = dir.join(format!(
            "strata-cache-model-pool-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&path);
        let store = StoreIdentity {
            size_bytes: STORE_BYTES as u64,
            device: 0,
            inode: 0,
        };
        let capacity = SHARDS as u64 * pool_cache::SEGMENT_BYTES;
        let cache = pool_cache::open(&path, capacity, line_bytes, 1, store).unwrap();
        (TempFile(path), cache)
    }
}

#[test]
fn every_mode_serves_the_model_s_bytes_and_leaves_them_in_the_store() {
    for (mode, line_bytes, in_pool) in [
        (Mode::WriteThrough, 4096, false),
        (Mode::WriteThrough, 16384, false),
        (Mode::WriteAround, 4096, false),
        (Mode::WriteInvalidate, 8192, false),
        (Mode::PassThrough, 4096, false),
        (Mode::WriteBack, 4096, false),
        (Mode::WriteBack, 16384, false),
        (Mode::WriteBack, 65536, true),
        (Mode::WriteBack, 4096, true),
    ] {
        let name = format!("{}-{line_bytes}-{in_pool}", mode.name());
        let file = TempFile::new(&name);
        let mut model = std::fs::read(&file.0).unwrap();
        let (_pool, cache) = if in_pool {
            let (pool, cache) = pool_cache_file(&name, line_bytes);
            (Some(pool), cache)
        } else {
            (None, small_cache(line_bytes))
        };
        let export = Export::open("m", &file.0, mode, Some(cache)).unwrap();
        let mut rng = SmallRng::seed_from_u64(line_bytes as u64 ^ mode.name().len() as u64);
        // Keep to a hot quarter of the store half the time, so hits happen.
        let range = |rng: &mut SmallRng| {
            let span = if rng.gen_bool(0.5) {
                STORE_BYTES / 4
            } else {
                STORE_BYTES
            };
            let len = rng.gen_range(1..3 * line_bytes);
            let offset = rng.gen_range(0..span - len);
            (offset, len)
        };
        for step in 0..4000 {
            let (offset, len) = range(&mut rng);
            if mode == Mode::WriteBack && rng.gen_ratio(1, 100) {
                match rng.gen_range(0..4) {
                    0 => export.flush().unwrap(),
                    1 => {
                        export.clean_oldest(5, None).unwrap();
                    }
                    // Out of write-back and back (the switch writes every dirty line back).
                    _ => {
                        let other = [Mode::WriteThrough, Mode::WriteAround][rng.gen_range(0..2)];
                        export.set_mode(other).unwrap();
                        assert_eq!(export.cache().unwrap().dirty_lines(), 0);
                        export.set_mode(Mode::WriteBack).unwrap();
                    }
                }
            }
            match rng.gen_range(0..10) {
                0..=4 => {
                    let mut out = vec![0u8; len];
                    // The server answers reads the cache holds whole without a worker.
                    if !export.read_cached(offset as u64, &mut out) {
                        export.read(offset as u64, &mut out).unwrap();
                    }
                    assert!(
                        out == model[offset..offset + len],
                        "{mode:?}/{line_bytes} step {step}: read {offset}+{len} differs"
                    );
                }
                5..=7 => {
                    let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
                    export
                        .write(offset as u64, &data, rng.gen_bool(0.1))
                        .unwrap();
                    model[offset..offset + len].copy_from_slice(&data);
                }
                8 => {
                    export
                        .write_zeroes(offset as u64, len as u64, false)
                        .unwrap();
                    model[offset..offset + len].fill(0);
                }
                _ => {
                    // A trim drops the whole 4 KiB blocks inside the range (they read as zeroes).
                    export.trim(offset as u64, len as u64, false).unwrap();
                    let first = offset.div_ceil(4096) * 4096;
                    let end = (offset + len) / 4096 * 4096;
                    if first < end {
                        model[first..end].fill(0);
                    }
                }
            }
        }
        let mut all = vec![0u8; STORE_BYTES];
        export.read(0, &mut all).unwrap();
        assert!(
            all == model,
            "{mode:?}/{line_bytes}: the export's bytes at the end"
        );
        let cache = export.cache().expect("every case has a cache");
        if mode == Mode::WriteBack {
            let writes = cache
                .counters
                .dirty_writes
                .load(std::sync::atomic::Ordering::Relaxed);
            assert!(writes > 0, "write-back wrote no dirty line");
            export.clean_all().unwrap();
            assert_eq!(cache.dirty_lines(), 0);
        }
        let hits = cache
            .counters
            .read_hits
            .load(std::sync::atomic::Ordering::Relaxed);
        if mode == Mode::PassThrough {
            assert_eq!(hits, 0, "pass-through read the cache");
        } else {
            assert!(hits > 0, "{mode:?}: no read ever hit");
        }
        drop(export);
        assert!(
            std::fs::read(&file.0).unwrap() == model,
            "{mode:?}/{line_bytes}: the store"
        );
    }
}

#[test]
fn after_overlapping_writers_and_readers_the_cache_agrees_with_the_store() {
    for mode in [
        Mode::WriteThrough,
        Mode::WriteAround,
        Mode::WriteInvalidate,
        Mode::WriteBack,
    ] {
        let file = TempFile::new(&format!("race-{}", mode.name()));
        let export = Arc::new(Export::open("r", &file.0, mode, Some(small_cache(4096))).unwrap());
        std::thread::scope(|scope| {
            for t in 0..8u64 {
                let export = Arc::clone(&export);
                scope.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(t);
                    for _ in 0..1500 {
                        // A small hot range: threads collide on the same lines all the time.
                        let len = rng.gen_range(1..10_000);
                        let offset = rng.gen_range(0..(256 << 10) - len);
                        if mode == Mode::WriteBack && rng.gen_ratio(1, 20) {
                            // Write-back from several threads at once.
                            if rng.gen_bool(0.5) {
                                export.flush().unwrap();
                            } else {
                                export.clean_oldest(8, None).unwrap();
                            }
                        } else if rng.gen_bool(0.5) {
                            let data = vec![rng.gen::<u8>(); len];
                            export
                                .write(offset as u64, &data, rng.gen_ratio(1, 10))
                                .unwrap();
                        } else {
                            let mut out = vec![0u8; len];
                            export.read(offset as u64, &mut out).unwrap();
                        }
                    }
                });
            }
        });
        export.clean_all().unwrap();
        let mut served = vec![0u8; STORE_BYTES];
        export.read(0, &mut served).unwrap();
        let stored = std::fs::read(&file.0).unwrap();
        assert!(
            served == stored,
            "{mode:?}: the cache serves bytes the store does not hold"
        );
    }
}
