//! What the engine's integration tests share: a pool file of their own, removed with every
//! file beside it (sidecar, transaction logs, index directory) when the test ends; values that
//! say which write made them; waits on the flash thread.
#![allow(dead_code)] // Each test file uses a different part of it.

use std::path::{Path, PathBuf};

/// A pool path in `/dev/shm` (else `/tmp`); dropping it removes the pool and its companions.
pub struct TempPool(pub PathBuf);

impl Drop for TempPool {
    fn drop(&mut self) {
        let path = self.0.display().to_string();
        let _ = std::fs::remove_file(&self.0);
        let _ = std::fs::remove_file(format!("{path}.sidecar"));
        let _ = std::fs::remove_file(format!("{path}.txlog"));
        for lane in 1..4 {
            let _ = std::fs::remove_file(format!("{path}.txlog.{lane}"));
        }
        let _ = std::fs::remove_dir_all(format!("{path}.index"));
    }
}

/// A pool path named after `name` and this process (test binaries run at once).
pub fn temp_pool(name: &str) -> TempPool {
    let dir = if Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    };
    TempPool(PathBuf::from(dir).join(format!("strata-engine-{}-{name}.pool", std::process::id())))
}

/// Copies the pool at `from` and what lives beside it (its transaction log and index
/// directory) to `to`: the image a `kill -9` at this moment leaves (a file pool's stores are
/// in the page cache, which the copy reads).
#[allow(dead_code, reason = "not every test binary crashes a pool")]
pub fn crash_copy(from: &std::path::Path, to: &std::path::Path) {
    let with = |path: &std::path::Path, suffix: &str| format!("{}{suffix}", path.display());
    std::fs::copy(from, to).unwrap();
    let _ = std::fs::copy(with(from, ".txlog"), with(to, ".txlog"));
    for lane in 1.. {
        let log = format!(".txlog.{lane}");
        if std::fs::copy(with(from, &log), with(to, &log)).is_err() {
            break;
        }
    }
    let index = std::path::PathBuf::from(with(from, ".index"));
    if index.is_dir() {
        let target = std::path::PathBuf::from(with(to, ".index"));
        std::fs::create_dir_all(&target).unwrap();
        for entry in std::fs::read_dir(&index).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), target.join(entry.file_name())).unwrap();
        }
    }
}

/// Flips one byte of `needle`'s first occurrence in the pool file (at `into` bytes past its
/// start). Panics when the file does not hold it.
#[allow(dead_code, reason = "not every test binary flips bytes")]
pub fn flip_in_file(path: &std::path::Path, needle: &[u8], into: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    let at = bytes
        .windows(needle.len())
        .position(|window| window == needle)
        .expect("the pool holds the record");
    bytes[at + into] ^= 0x20;
    std::fs::write(path, bytes).unwrap();
}

/// `len` bytes that say which write made them (`tag`) and where each byte is: a part served
/// in the wrong place or from another write shows.
pub fn value(tag: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u32)
                .wrapping_mul(31)
                .wrapping_add(tag.wrapping_mul(7919)) as u8
        })
        .collect()
}

/// The engine's flash tier's figures.
pub fn flash_stats(engine: &strata_engine::Engine) -> strata_engine::FlashStats {
    engine.stats().flash.expect("a flash tier")
}

/// Polls `done` for up to ten seconds (the flash thread works in the background).
pub fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let began = std::time::Instant::now();
    while !done() {
        assert!(
            began.elapsed() < std::time::Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}
