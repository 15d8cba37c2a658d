//! What opening an empty engine costs, in memory touched (a figure of space, not of time): a
//! large budget must not be paid for at open. The index tables are anonymous mappings whose
//! pages the kernel zeroes on first use, and nothing walks an empty index at open; before,
//! the allocator wrote zeroes over every table (64-byte alignment defeats `calloc`'s lazy
//! zero pages) and a walk for flash entries read all of it, which took most of an empty
//! server's start (0.5 s at 4 GiB, 2.4 s at 16 GiB).

use strata_engine::*;

/// Resident set of this process, in bytes (Linux).
fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kib * 1024
}

#[test]
fn opening_a_large_empty_engine_touches_little_memory() {
    let memory_bytes: u64 = 8 << 30;
    let before = resident_bytes();
    let engine = Engine::open(EngineConfig {
        memory_bytes,
        shard_count: shard_count_for(memory_bytes, SEGMENT_SIZE_BYTES_DEFAULT),
        ..EngineConfig::default()
    })
    .unwrap();
    let stats = engine.stats();
    let grown = resident_bytes().saturating_sub(before);
    // The index alone is 69 MB of tables at this budget; what open touches must be far less.
    assert!(stats.index_bytes > 32 << 20, "{stats:?}");
    assert!(
        grown < 16 << 20,
        "open made {grown} bytes resident for an index of {} bytes",
        stats.index_bytes
    );
    engine.set(b"k", b"v", 0, Expiry::Never).unwrap();
    assert!(engine.contains(b"k"));
}
