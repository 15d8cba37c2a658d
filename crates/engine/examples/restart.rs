//! Restart time: 2M items (16-byte keys, 32-byte values) in a pool on /dev/shm; reopen after a
//! crash (the engine dropped without `close`) and after a clean `close`, timing open → first hit.
//!
//! Run: `cargo run --release -p strata-engine --example restart [items] [memory_mib]`

use std::time::Instant;

use strata_engine::{Engine, EngineConfig, Expiry, PoolLocation};

fn main() {
    let items: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2_000_000);
    let memory_mib: u64 = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(256);
    let path = std::path::PathBuf::from(format!(
        "/dev/shm/strata-restart-{}.pool",
        std::process::id()
    ));
    let config = EngineConfig {
        memory_bytes: memory_mib << 20,
        pool: PoolLocation::File(path.clone()),
        ..EngineConfig::default()
    };
    let key = |i: u64| format!("key:{i:012}");
    {
        let engine = Engine::open(config.clone()).unwrap();
        for i in 0..items {
            engine
                .set(key(i).as_bytes(), &[b'v'; 32], 0, Expiry::Never)
                .unwrap();
        }
    } // dropped without close: a crash as far as the pool can tell
    for label in ["after crash", "after clean close"] {
        let started = Instant::now();
        let engine = Engine::open(config.clone()).unwrap();
        let opened = started.elapsed();
        let hit = engine
            .get(key(items - 1).as_bytes(), |i| i.value.len())
            .is_some();
        let first_hit = started.elapsed();
        println!(
            "{label:<18} open {:>7.1} ms, first hit {:>7.1} ms (hit: {hit}), items {}, from snapshot {}",
            opened.as_secs_f64() * 1e3,
            first_hit.as_secs_f64() * 1e3,
            engine.recovery_report().items_recovered,
            engine.recovery_report().from_snapshot
        );
        // A clean close either way: it makes the next open (the second label) the clean case.
        engine.close().unwrap();
    }
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(format!("{}.sidecar", path.display()));
}
