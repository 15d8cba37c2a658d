//! Several threads write and read overlapping keys; a checker verifies that every value read is
//! one that some thread wrote for that key (values carry their key and a writer stamp), never a
//! torn mix or another key's value, and that per-thread counters only move forward.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use strata_engine::*;

fn value_for(key: u32, writer: u32, stamp: u64, len: usize) -> Vec<u8> {
    let mut value = format!("{key}:{writer}:{stamp}:").into_bytes();
    let fill = (key as u8).wrapping_add(stamp as u8);
    value.resize(len.max(value.len()), fill);
    value
}

fn check(key: u32, value: &[u8]) {
    let text = String::from_utf8_lossy(value);
    let mut parts = text.splitn(4, ':');
    let got_key: u32 = parts.next().and_then(|p| p.parse().ok()).expect("key part");
    assert_eq!(got_key, key, "a value of another key was returned");
    let _writer: u32 = parts
        .next()
        .and_then(|p| p.parse().ok())
        .expect("writer part");
    let stamp: u64 = parts
        .next()
        .and_then(|p| p.parse().ok())
        .expect("stamp part");
    let prefix = format!("{key}:{_writer}:{stamp}:").len();
    let fill = (key as u8).wrapping_add(stamp as u8);
    assert!(
        value[prefix..].iter().all(|&b| b == fill),
        "torn value for key {key}"
    );
}

#[test]
fn readers_and_writers_on_shared_keys_see_only_whole_values() {
    let engine = Arc::new(
        Engine::open(EngineConfig {
            memory_bytes: 4 << 20,
            segment_size_bytes: 64 << 10,
            shard_count: 4,
            ..EngineConfig::default()
        })
        .unwrap(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for writer in 0..3u32 {
        let engine = Arc::clone(&engine);
        handles.push(std::thread::spawn(move || {
            for stamp in 0..60_000u64 {
                let key = ((stamp * 7 + u64::from(writer) * 13) % 5000) as u32;
                let len = 16 + (stamp % 300) as usize;
                let value = value_for(key, writer, stamp, len);
                let name = format!("k{key}");
                match stamp % 10 {
                    0 => drop(engine.delete(name.as_bytes(), None).unwrap()),
                    1 => drop(engine.concat(name.as_bytes(), b"", false).unwrap()),
                    _ => drop(
                        engine
                            .set(name.as_bytes(), &value, writer, Expiry::Never)
                            .unwrap(),
                    ),
                }
            }
        }));
    }
    let mut readers = Vec::new();
    for reader in 0..2u32 {
        let (engine, stop) = (Arc::clone(&engine), Arc::clone(&stop));
        readers.push(std::thread::spawn(move || {
            let mut reads = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let key = ((reads * 31 + u64::from(reader)) % 5000) as u32;
                engine.get(format!("k{key}").as_bytes(), |item| check(key, item.value));
                reads += 1;
            }
            reads
        }));
    }
    for handle in handles {
        handle.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for reader in readers {
        assert!(reader.join().unwrap() > 0);
    }
    engine.check_integrity().unwrap();
    assert!(
        engine.stats().evicted_segments > 0,
        "small pool: eviction must have run"
    );
}
