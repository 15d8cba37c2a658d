//! Memory efficiency: with a budget of `--memory` (default 256 MiB) for pool + index, offer N
//! distinct items (default 6M) of 16-byte keys and 32-byte values, then count how many are
//! still retrievable and read this process's RSS. Prints bytes per retained item, all-in.
//!
//! Run: `cargo run --release -p strata-engine --example memory [items] [memory_mib]`

use strata_engine::{Engine, EngineConfig, Expiry};

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn key(i: u64) -> [u8; 16] {
    let mut key = [0u8; 16];
    key.copy_from_slice(format!("key:{i:012}").as_bytes());
    key
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let items: u64 = args
        .get(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(6_000_000);
    let memory_mib: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(256);
    let rss_start = rss_bytes();
    let engine = Engine::open(EngineConfig {
        memory_bytes: memory_mib << 20,
        ..EngineConfig::default()
    })
    .expect("open");
    let value = [b'v'; 32];
    for i in 0..items {
        engine.set(&key(i), &value, 0, Expiry::Never).expect("set");
    }
    let retained = (0..items)
        .filter(|&i| engine.get(&key(i), |item| item.value.len() == 32) == Some(true))
        .count() as u64;
    let rss = rss_bytes();
    let stats = engine.stats();
    println!("offered_items {items}");
    println!("retained_items {retained}");
    println!("rss_mib {:.1}", rss as f64 / (1 << 20) as f64);
    println!(
        "rss_at_start_mib {:.1}",
        rss_start as f64 / (1 << 20) as f64
    );
    println!(
        "bytes_per_retained_item {:.1}",
        rss as f64 / retained as f64
    );
    println!(
        "index_bytes_per_item {:.1}",
        stats.index_bytes as f64 / retained as f64
    );
    println!(
        "record_bytes_per_item {:.1}",
        stats.live_bytes as f64 / retained as f64
    );
    println!(
        "index_overflow_buckets {} of {}",
        stats.index_overflow_buckets, stats.index_buckets
    );
    println!(
        "segments used/free/retired/total {}/{}/{}/{}",
        stats.segments_used, stats.segments_free, stats.segments_retired, stats.segments_total
    );
}
