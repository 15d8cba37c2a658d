//! Replays the committed seeds and saved regressions through the fuzz targets' checks, on stable
//! Rust without libFuzzer: `cargo test --manifest-path fuzz/Cargo.toml`. A regression is an
//! input that once failed a check (`fuzz/regressions/<target>/`); once its bug is fixed, it stays
//! here so the bug cannot come back unnoticed.

use std::path::{Path, PathBuf};

/// The files of `fuzz/<kind>/<target>/`, sorted; none when the folder does not exist.
fn inputs(kind: &str, target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(kind)
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .map(|entry| entry.expect("list inputs").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
}

/// Runs `check` on every input and names those that fail.
fn replay(files: &[PathBuf], check: fn(&[u8])) {
    let failed: Vec<String> = files
        .iter()
        .filter(|path| {
            let data = std::fs::read(path).expect("read an input");
            std::panic::catch_unwind(|| check(&data)).is_err()
        })
        .map(|path| path.display().to_string())
        .collect();
    assert!(failed.is_empty(), "inputs failing their check: {failed:#?}");
}

#[test]
fn memcache_seeds_and_regressions_pass() {
    let seeds = inputs("seeds", "memcache_parse");
    assert!(seeds.len() >= 20, "the memcache seed corpus is missing");
    replay(&seeds, strata_fuzz::memcache::check);
    replay(
        &inputs("regressions", "memcache_parse"),
        strata_fuzz::memcache::check,
    );
}

#[test]
fn resp_seeds_and_regressions_pass() {
    let seeds = inputs("seeds", "resp_parse");
    assert!(seeds.len() >= 20, "the RESP seed corpus is missing");
    replay(&seeds, strata_fuzz::resp::check);
    replay(
        &inputs("regressions", "resp_parse"),
        strata_fuzz::resp::check,
    );
}

#[test]
fn pool_seeds_pass() {
    let seeds = inputs("seeds", "pool_open");
    assert!(seeds.len() >= 10, "the pool seed corpus is missing");
    replay(&seeds, strata_fuzz::pool::check);
    strata_fuzz::pool::remove_scratch_dir();
}

/// Damaged pools on which the engine once panicked instead of refusing them or opening them
/// soundly (issue 17: reads trusted index entries, snapshot contents and header fields that
/// nothing validated), or opened them inconsistently; fuzz/README.md lists them. Each file is an
/// input the pool_open target saved; they now guard the fixes. (`root-shard-count-16170-slow-open`
/// took tens of seconds to open; its shard count is now refused as out of range.)
#[test]
fn pool_regressions_pass() {
    replay(
        &inputs("regressions", "pool_open"),
        strata_fuzz::pool::check,
    );
    strata_fuzz::pool::remove_scratch_dir();
}

/// The pool seeds are only useful if they get past the header checks: the mixed ones open with
/// their items (27 written, one deleted; the TTL ones gone with the late clock), the empty ones
/// open empty, and a pool from another boot written without durability is discarded.
#[test]
fn pool_seeds_open_with_their_items() {
    use strata_fuzz::pool::{run, Outcome};
    for path in inputs("seeds", "pool_open") {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let outcome = run(&std::fs::read(&path).unwrap());
        let keys = match outcome {
            Outcome::Opened { keys, sound: true } => keys,
            other => panic!("seed {name}: {other:?}"),
        };
        let want = match name.as_str() {
            "clean-empty" | "created" | "crash-dram-other-boot" => 0..=0,
            "clean-dram-late" => 17..=17,
            n if n.contains("evicted") => 20..=1500,
            _ => 26..=26,
        };
        assert!(
            want.contains(&keys),
            "seed {name}: {keys} keys, expected {want:?}"
        );
    }
    strata_fuzz::pool::remove_scratch_dir();
}

#[test]
fn session_seeds_and_regressions_pass() {
    let seeds = inputs("seeds", "resp_session");
    assert!(seeds.len() >= 10, "the session seed corpus is missing");
    replay(&seeds, strata_fuzz::session::check);
    replay(
        &inputs("regressions", "resp_session"),
        strata_fuzz::session::check,
    );
}

#[test]
fn hash_seeds_and_regressions_pass() {
    let seeds = inputs("seeds", "hash_decode");
    assert!(seeds.len() >= 5, "the hash seed corpus is missing");
    replay(&seeds, strata_fuzz::hash::check);
    replay(
        &inputs("regressions", "hash_decode"),
        strata_fuzz::hash::check,
    );
}

#[test]
fn bundle_seeds_and_regressions_pass() {
    let seeds = inputs("seeds", "flash_bundle");
    assert!(seeds.len() >= 2, "the bundle seed corpus is missing");
    replay(&seeds, strata_fuzz::bundle::check);
    replay(
        &inputs("regressions", "flash_bundle"),
        strata_fuzz::bundle::check,
    );
}

#[test]
fn flash_medium_seeds_and_regressions_pass() {
    let seeds = inputs("seeds", "flash_verify");
    assert!(seeds.len() >= 4, "the flash medium seed corpus is missing");
    replay(&seeds, strata_fuzz::flash::check);
    let unchanged: Vec<PathBuf> = seeds
        .into_iter()
        .filter(|path| path.to_string_lossy().ends_with("-unchanged"))
        .collect();
    assert!(unchanged.len() >= 2, "media as the engine wrote them");
    replay(&unchanged, strata_fuzz::flash::check_sound);
    replay(
        &inputs("regressions", "flash_verify"),
        strata_fuzz::flash::check,
    );
}

/// A byte flipped in a region header of a seed (its checksum left as it was) makes the sound
/// check fail (the region is reported damaged), and the plain check pass: the invariant can
/// fail.
#[test]
fn a_flipped_byte_in_a_flash_seed_is_reported() {
    let mut seed = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds/flash_verify/families-unchanged"),
    )
    .expect("the seed");
    let at = seed
        .windows(8)
        .position(|window| window == b"STRATARG")
        .expect("a region header in the seed");
    seed[at + 16] ^= 1; // Its flash id.
    let report = strata_fuzz::flash::run(&seed).expect("a medium");
    assert_eq!(report.regions_damaged, 1, "{report:?}");
    assert!(std::panic::catch_unwind(|| strata_fuzz::flash::check_sound(&seed)).is_err());
}
