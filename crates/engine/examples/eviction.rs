//! Eviction quality: a cache-aside loop (get; on a miss, set) over a zipf(0.99) key space four
//! times larger than what the memory holds; prints the hit ratio of each eviction policy.
//!
//! Run: `cargo run --release -p strata-engine --example eviction`

use rand::{Rng, SeedableRng};
use strata_engine::{Engine, EngineConfig, EvictionPolicy, Expiry};

const MEMORY_BYTES: u64 = 32 << 20;
const RECORD_BYTES: u64 = 56;
const REQUESTS: usize = 6_000_000;

fn main() {
    let fits = MEMORY_BYTES / (RECORD_BYTES + 9);
    let keyspace = fits * 4;
    let mut cdf = Vec::with_capacity(keyspace as usize);
    let mut total = 0.0;
    for rank in 1..=keyspace {
        total += 1.0 / (rank as f64).powf(0.99);
        cdf.push(total);
    }
    let mut rng = rand::rngs::SmallRng::seed_from_u64(42);
    // Scatter ranks over key ids so that popularity is not correlated with insertion order.
    let draws: Vec<u64> = (0..REQUESTS)
        .map(|_| {
            let u = rng.gen::<f64>() * total;
            let rank = cdf.partition_point(|&c| c < u) as u64;
            rank.wrapping_mul(0x9E37_79B9_7F4A_7C15) % keyspace
        })
        .collect();
    println!("keyspace {keyspace} keys, memory holds about {fits}; {REQUESTS} requests, zipf 0.99");
    for policy in [
        EvictionPolicy::Merge,
        EvictionPolicy::Fifo,
        EvictionPolicy::Random,
    ] {
        let engine = Engine::open(EngineConfig {
            memory_bytes: MEMORY_BYTES,
            eviction: policy,
            ..EngineConfig::default()
        })
        .unwrap();
        let value = [b'v'; 32];
        let (mut hits, mut measured) = (0u64, 0u64);
        for (i, &id) in draws.iter().enumerate() {
            let key = format!("key:{id:012}");
            let hit = engine.get(key.as_bytes(), |_| ()).is_some();
            if !hit {
                engine
                    .set(key.as_bytes(), &value, 0, Expiry::Never)
                    .unwrap();
            }
            if i >= REQUESTS / 3 {
                measured += 1;
                hits += u64::from(hit);
            }
        }
        println!(
            "{:<7} hit ratio {:.4} (last two thirds of requests)",
            policy.name(),
            hits as f64 / measured as f64
        );
    }
}
