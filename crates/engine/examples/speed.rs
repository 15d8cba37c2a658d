//! In-process speed: ns per get, set and get_many(100) on 1M items of 16-byte keys and 32-byte
//! values, uniform and zipf(0.99) keys, 1 and 2 threads. Prints the median of 5 rounds.
//!
//! Run: `cargo run --release -p strata-engine --example speed`; with `STRATA_VALIDATE_READS=1`
//! every read validates its record's checksum (`EngineConfig::validate_every_read`), the cost
//! of checking on read rather than scrubbing once.

use std::sync::Arc;
use std::time::Instant;

use rand::{Rng, SeedableRng};
use strata_engine::{Engine, EngineConfig, Expiry};

const ITEMS: u64 = 1_000_000;
const OPS_PER_ROUND: u64 = 2_000_000;
const ROUNDS: usize = 5;

fn key(i: u64) -> [u8; 16] {
    let mut key = [0u8; 16];
    key.copy_from_slice(format!("key:{i:012}").as_bytes());
    key
}

/// Zipf(s) over 0..n by inverse CDF on a precomputed table (fine for 1M keys).
fn zipf_keys(n: u64, s: f64, count: usize, seed: u64) -> Vec<u64> {
    let mut cdf = Vec::with_capacity(n as usize);
    let mut total = 0.0;
    for rank in 1..=n {
        total += 1.0 / (rank as f64).powf(s);
        cdf.push(total);
    }
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    (0..count)
        .map(|_| {
            let u = rng.gen::<f64>() * total;
            cdf.partition_point(|&c| c < u) as u64
        })
        .collect()
}

fn uniform_keys(n: u64, count: usize, seed: u64) -> Vec<u64> {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    (0..count).map(|_| rng.gen_range(0..n)).collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn measure(engine: &Arc<Engine>, keys: &Arc<Vec<[u8; 16]>>, threads: usize, op: &str) -> f64 {
    let per_thread = OPS_PER_ROUND as usize / threads;
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (engine, keys, op) = (Arc::clone(engine), Arc::clone(keys), op.to_string());
            std::thread::spawn(move || {
                let value = [b'v'; 32];
                let slice = &keys[t * per_thread..(t + 1) * per_thread];
                let mut hits = 0u64;
                match op.as_str() {
                    "get" => slice.iter().for_each(|k| {
                        hits += u64::from(engine.get(k, |i| i.value.len()).is_some())
                    }),
                    "set" => slice
                        .iter()
                        .for_each(|k| hits += engine.set(k, &value, 0, Expiry::Never).unwrap() & 1),
                    _ => slice.chunks(100).for_each(|batch| {
                        engine.get_many(batch.iter().map(|k| &k[..]), |_, item| {
                            hits += u64::from(item.is_some())
                        })
                    }),
                }
                hits
            })
        })
        .collect();
    handles.into_iter().for_each(|h| drop(h.join()));
    start.elapsed().as_nanos() as f64 / (per_thread * threads) as f64 * threads as f64
}

fn main() {
    let engine = Arc::new(
        Engine::open(EngineConfig {
            memory_bytes: 512 << 20,
            validate_every_read: std::env::var("STRATA_VALIDATE_READS").is_ok_and(|v| v == "1"),
            ..EngineConfig::default()
        })
        .unwrap(),
    );
    for i in 0..ITEMS {
        engine.set(&key(i), &[b'v'; 32], 0, Expiry::Never).unwrap();
    }
    println!(
        "{:<8} {:<8} {:>7} {:>14}",
        "keys", "op", "threads", "ns/op (median)"
    );
    for (name, draw) in [("uniform", 0), ("zipf0.99", 1)] {
        let indices = if draw == 0 {
            uniform_keys(ITEMS, OPS_PER_ROUND as usize, 7)
        } else {
            zipf_keys(ITEMS, 0.99, OPS_PER_ROUND as usize, 7)
        };
        let keys: Arc<Vec<[u8; 16]>> = Arc::new(indices.into_iter().map(key).collect());
        for op in ["get", "set", "get_many100"] {
            for threads in [1, 2] {
                let samples = (0..ROUNDS)
                    .map(|_| measure(&engine, &keys, threads, op))
                    .collect();
                // ns per op per thread: wall time × threads / ops.
                println!("{name:<8} {op:<8} {threads:>7} {:>14.1}", median(samples));
            }
        }
    }
}
