//! Restart time and speed after a restart, with the index in DRAM and in the pool.
//!
//! Fills a pool on /dev/shm with small items (16-byte keys, 32-byte values), then for each index
//! placement reopens it after a crash (the engine dropped without `close`: every store is in the
//! page cache, as after `kill -9`) and after a clean `close`, and reports open time, open → first
//! hit, and GET and SET rates right after the open (the first touches fault the mapped pages in)
//! and once warm.
//!
//! Run: `cargo run --release -p strata-engine --example restart [items] [memory_mib] [placements]`
//! where placements is `dram`, `pool` or `dram,pool` (the default). The 10 GiB figure in
//! docs/BENCHMARKS.md: `... --example restart 160000000 10240`.

use std::time::{Duration, Instant};

use strata_engine::{Engine, EngineConfig, Expiry, IndexPlacement, PoolLocation};

/// Keys read or written per rate measurement.
const PROBE_OPS: u64 = 1_000_000;

fn key(i: u64) -> String {
    format!("key:{i:012}")
}

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn fill(engine: &Engine, items: u64) -> Duration {
    let started = Instant::now();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    std::thread::scope(|scope| {
        for t in 0..threads {
            scope.spawn(move || {
                for i in (t..items).step_by(threads as usize) {
                    engine
                        .set(key(i).as_bytes(), &[b'v'; 32], 0, Expiry::Never)
                        .unwrap();
                }
            });
        }
    });
    started.elapsed()
}

/// Million operations per second over `PROBE_OPS` random keys.
fn rate(items: u64, rng: &mut Rng, mut op: impl FnMut(&[u8])) -> f64 {
    let started = Instant::now();
    for _ in 0..PROBE_OPS {
        op(key(rng.below(items)).as_bytes());
    }
    PROBE_OPS as f64 / started.elapsed().as_secs_f64() / 1e6
}

fn measure(config: &EngineConfig, label: &str, items: u64) -> Engine {
    let started = Instant::now();
    let engine = Engine::open(config.clone()).unwrap();
    let opened = started.elapsed();
    let hit = engine.get(key(items - 1).as_bytes(), |i| i.value.len()) == Some(32);
    let first_hit = started.elapsed();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    // Not every probe hits: the SET rate measurements of earlier rounds overwrite enough to
    // make merge eviction drop some items (`items` shows how many remain).
    let get = |k: &[u8]| {
        let _ = engine.get(k, |i| i.value.len());
    };
    let cold_get = rate(items, &mut rng, get);
    let warm_get = rate(items, &mut rng, get);
    // What the open adopted unread (snapshot, mapped index) is checked in the background by
    // the server; reads validate until then. Timed here on this thread.
    let scrub_started = Instant::now();
    while !engine.scrub_step() {}
    let scrubbed = scrub_started.elapsed();
    let checked_get = rate(items, &mut rng, get);
    let set = rate(items, &mut rng, |k| {
        engine.set(k, &[b'w'; 32], 0, Expiry::Never).unwrap();
    });
    let report = engine.recovery_report();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "| {} | {label} | {:.1} | {:.1} | {hit} | {:.2} | {:.2} | {:.0} | {:.2} | {:.2} | {} | {} | {} |",
        config.index_placement.name(),
        ms(opened),
        ms(first_hit),
        cold_get,
        warm_get,
        ms(scrubbed),
        checked_get,
        set,
        report.items_recovered,
        report.from_snapshot,
        report.shards_from_index_files,
    );
    engine
}

fn main() {
    let arg = |n: usize| std::env::args().nth(n);
    let items: u64 = arg(1).and_then(|a| a.parse().ok()).unwrap_or(2_000_000);
    let memory_mib: u64 = arg(2).and_then(|a| a.parse().ok()).unwrap_or(256);
    let placements: Vec<IndexPlacement> = arg(3)
        .unwrap_or_else(|| "dram,pool".into())
        .split(',')
        .map(|p| IndexPlacement::parse(p).expect("placement: dram or pool"))
        .collect();
    let path = std::path::PathBuf::from(format!(
        "/dev/shm/strata-restart-{}.pool",
        std::process::id()
    ));
    let config = EngineConfig {
        memory_bytes: memory_mib << 20,
        pool: PoolLocation::File(path.clone()),
        index_placement: placements[0],
        ..EngineConfig::default()
    };
    {
        let engine = Engine::open(config.clone()).unwrap();
        let took = fill(&engine, items);
        let stats = engine.stats();
        println!(
            "filled {} items ({} offered, {} evicted) in {:.1} s; pool {} MiB",
            stats.items,
            items,
            stats.evicted_items,
            took.as_secs_f64(),
            memory_mib
        );
        assert_eq!(stats.evicted_items, 0, "size the pool to keep every item");
    } // dropped without close: a crash as far as the pool can tell
    println!(
        "| index | restart | open ms | first hit ms | hit | GET M/s just after | GET M/s warm | scrub ms | GET M/s scrubbed | SET M/s | items | from snapshot | shards mapped |"
    );
    println!("|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|---:|");
    for (n, &placement) in placements.iter().enumerate() {
        let config = EngineConfig {
            index_placement: placement,
            ..config.clone()
        };
        if n > 0 {
            // Switching placement: the first open rebuilds the index in its new home.
            let engine = measure(&config, "switch (rebuild)", items);
            drop(engine); // crash
        }
        let engine = measure(&config, "after crash", items);
        engine.close().unwrap();
        drop(engine);
        let engine = measure(&config, "after clean close", items);
        engine.close().unwrap();
    }
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(format!("{}.sidecar", path.display()));
    let _ = std::fs::remove_dir_all(format!("{}.index", path.display()));
}
