//! Damaged pools (issues 10 and 17): bytes of a pool, its sidecar or its index files changed
//! while no process held them (a bad sector, a stray `dd`, a bit flip in a file at rest). For
//! each kind of damage, at offsets spread over the file, the engine reopens the pool and every
//! read path runs: no damaged value is ever served, nothing panics, every record the damage did
//! not touch is still served, the damage is counted, and `check_pool_file` (`strata pool
//! verify`) reports it.
//!
//! Invariants checked, per case: each key reads back as its exact value or as absent; absent
//! only if the damage touched its record (or its index entry, with the index in the pool, until
//! the scrub puts it back); `check_integrity` holds after the scrub; a scan visits no key that
//! reads as absent.
#![allow(
    clippy::too_many_lines,
    reason = "a test scenario reads best as one function"
)]

use std::path::{Path, PathBuf};

use strata_engine::*;

mod support;
use support::temp_pool;

fn sidecar(pool: &Path) -> PathBuf {
    PathBuf::from(format!("{}.sidecar", pool.display()))
}

fn index_dir(pool: &Path) -> PathBuf {
    PathBuf::from(format!("{}.index", pool.display()))
}

const KEYS: usize = 6000;

fn key(i: usize) -> Vec<u8> {
    format!("damage-key-{i:06}").into_bytes()
}

fn value(i: usize) -> Vec<u8> {
    let mut v = format!("value-of-{i:06}-").into_bytes();
    v.resize(100 + i % 200, b'a' + (i % 26) as u8);
    v
}

fn config(path: &Path, placement: IndexPlacement) -> EngineConfig {
    EngineConfig {
        memory_bytes: 8 << 20,
        segment_size_bytes: 64 << 10,
        pool: PoolLocation::File(path.to_path_buf()),
        index_placement: placement,
        ..EngineConfig::default()
    }
}

/// How the process that wrote the pool stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    Clean,
    Crash,
}

fn write_pool(path: &Path, placement: IndexPlacement, stop: Stop) {
    let engine = Engine::open(config(path, placement)).unwrap();
    for i in 0..KEYS {
        engine.set(&key(i), &value(i), 0, Expiry::Never).unwrap();
    }
    // Some dead records too, so damage also lands on records recovery must skip.
    for i in (0..KEYS).step_by(7) {
        engine.set(&key(i), &value(i), 0, Expiry::Never).unwrap();
    }
    if stop == Stop::Clean {
        engine.close().unwrap();
    }
}

/// Where each key's live record lies in the pool file: the byte range of its header, key and
/// value. Walks each segment's records (short form, no optional fields: what this test writes;
/// POOL_FORMAT.md) from the undamaged file.
fn record_ranges(pool_bytes: &[u8]) -> Vec<Option<(usize, usize)>> {
    let (segment_size, segments, data_offset) = pool_geometry(pool_bytes);
    let mut ranges = vec![None; KEYS];
    for segment in 0..segments {
        let base = data_offset + segment * segment_size;
        let data = &pool_bytes[base..base + segment_size];
        let mut at = 0;
        while at + 8 <= data.len() && data[at] != 0 {
            let key_len = data[at + 1] as usize;
            let value_len = u16::from_le_bytes([data[at + 2], data[at + 3]]) as usize;
            let end = at + 8 + key_len + value_len;
            let k = &data[at + 8..at + 8 + key_len];
            if data[at] & 0xF0 == 0xA0 && k.starts_with(b"damage-key-") {
                let i: usize = std::str::from_utf8(&k[11..]).unwrap().parse().unwrap();
                ranges[i] = Some((base + at, base + end));
            }
            at = end.next_multiple_of(8);
        }
    }
    ranges
}

/// A damage: byte ranges of one file and what to write there.
#[derive(Clone, Debug)]
enum Damage {
    FlipByte(usize),
    Zero(usize, usize),
    Random(usize, usize, u64),
}

impl Damage {
    fn range(&self) -> (usize, usize) {
        match *self {
            Damage::FlipByte(at) => (at, at + 1),
            Damage::Zero(at, len) | Damage::Random(at, len, _) => (at, at + len),
        }
    }

    fn apply(&self, path: &Path) {
        let mut bytes = std::fs::read(path).unwrap();
        let (start, end) = self.range();
        let end = end.min(bytes.len());
        match *self {
            Damage::FlipByte(at) => bytes[at] ^= 0x20,
            Damage::Zero(..) => bytes[start..end].fill(0),
            Damage::Random(_, _, seed) => {
                let mut x = seed | 1;
                for b in &mut bytes[start..end] {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    *b = x as u8;
                }
            }
        }
        std::fs::write(path, bytes).unwrap();
    }
}

/// Opens the damaged pool and checks every read path. `touched[i]`: the damage may have made
/// key `i` absent. Returns the engine's damage counts after the scrub.
fn check_reads(path: &Path, placement: IndexPlacement, touched: &[bool], case: &str) -> u64 {
    check_reads_healing(path, placement, touched, false, case)
}

/// [`check_reads`]; with `index_damaged`, items may be missing until the scrub has walked the
/// segments (their index entries were damaged: only a walk finds them again).
fn check_reads_healing(
    path: &Path,
    placement: IndexPlacement,
    touched: &[bool],
    index_damaged: bool,
    case: &str,
) -> u64 {
    let engine = match Engine::open(config(path, placement)) {
        Ok(engine) => engine,
        Err(err) => panic!("{case}: the damaged pool was refused: {err}"),
    };
    let read_all = |when: &str, may_miss: bool| {
        let mut absent = 0;
        for (i, &may_lack) in touched.iter().enumerate() {
            let got = engine.get(&key(i), |item| item.value.to_vec());
            match got {
                Some(v) => assert_eq!(v, value(i), "{case} ({when}): key {i} served damaged"),
                None => {
                    assert!(
                        may_lack || may_miss,
                        "{case} ({when}): undamaged key {i} lost"
                    );
                    absent += 1;
                }
            }
            // Every other read path of the same key agrees.
            let peeked = engine.peek(&key(i), |item| item.value.to_vec());
            assert!(
                peeked.as_ref().is_none_or(|v| *v == value(i)),
                "{case}: peek"
            );
        }
        absent
    };
    read_all("before the scrub", index_damaged);
    engine.repair();
    let mut steps = 0;
    while !engine.scrub_step() {
        steps += 1;
        assert!(steps < 1_000_000, "{case}: the scrub does not end");
    }
    let absent = read_all("after the scrub", false);
    let mut scanned = 0;
    let mut cursor = 0;
    loop {
        cursor = engine.scan(cursor, 1000, &mut |k| {
            let i: usize = std::str::from_utf8(&k[11..]).unwrap().parse().unwrap();
            assert!(
                engine.contains(&key(i)),
                "{case}: scan saw a key reads miss"
            );
            scanned += 1;
        });
        if cursor == 0 {
            break;
        }
    }
    assert_eq!(
        scanned,
        KEYS - absent,
        "{case}: scan visits every present key once"
    );
    engine
        .check_integrity()
        .unwrap_or_else(|e| panic!("{case}: {e}"));
    // Writes work on top of the damage, and a clean close and reopen keep it all.
    engine
        .set(b"after-damage", b"ok", 0, Expiry::Never)
        .unwrap();
    let stats = engine.stats();
    engine.close().unwrap();
    drop(engine);
    let engine = Engine::open(config(path, placement)).unwrap();
    assert_eq!(
        engine.get(b"after-damage", |i| i.value.to_vec()),
        Some(b"ok".to_vec())
    );
    stats.records_damaged.iter().sum::<u64>() + stats.damaged_items_dropped
}

fn pool_geometry(bytes: &[u8]) -> (usize, usize, usize) {
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
    // Header: segment_size at 16, segment_count at 24, data_offset at 40 (POOL_FORMAT.md).
    (u64_at(16), u64_at(24), u64_at(40))
}

/// Damage to record bytes of the pool file, after a clean stop and after a crash, with the
/// index in DRAM (snapshot / recovery scan) and in the pool (mapped files).
#[test]
fn damaged_records_are_never_served_and_cost_only_themselves() {
    for placement in [IndexPlacement::Dram, IndexPlacement::Pool] {
        for stop in [Stop::Clean, Stop::Crash] {
            let pool = temp_pool(&format!("records-{placement:?}-{stop:?}"));
            write_pool(&pool.0, placement, stop);
            let original = std::fs::read(&pool.0).unwrap();
            let ranges = record_ranges(&original);
            assert!(
                ranges.iter().all(Option::is_some),
                "every key's record found"
            );
            let (segment_size, segments, data_offset) = pool_geometry(&original);
            let data_end = data_offset + segment_size * segments;
            let middle = |fraction: usize| {
                (data_offset + (ranges[KEYS * fraction / 10].unwrap().0 - data_offset)) & !7
            };
            let cases = [
                Damage::FlipByte(ranges[1234].unwrap().1 - 3), // a value byte
                Damage::FlipByte(ranges[2000].unwrap().0),     // a record's state byte
                Damage::FlipByte(ranges[3000].unwrap().0 + 2), // a length byte
                Damage::Zero(middle(5) & !4095, 4096),
                Damage::Random(middle(7) & !4095, 4096, 99),
                Damage::Random(middle(3), 100, 7),
            ];
            for damage in cases {
                let case = format!("{placement:?} {stop:?} {damage:?}");
                let copy = temp_pool(&format!("case-{placement:?}-{stop:?}"));
                std::fs::copy(&pool.0, &copy.0).unwrap();
                if Path::new(&sidecar(&pool.0)).exists() {
                    std::fs::copy(sidecar(&pool.0), sidecar(&copy.0)).unwrap();
                }
                copy_dir(&index_dir(&pool.0), &index_dir(&copy.0));
                damage.apply(&copy.0);
                let (start, end) = damage.range();
                assert!(end <= data_end);
                let touched: Vec<bool> = ranges
                    .iter()
                    .map(|r| r.is_some_and(|(a, b)| a < end && start < b))
                    .collect();
                let report = check_pool_file(&copy.0).unwrap();
                assert!(
                    report.records_damaged > 0 || stop == Stop::Crash,
                    "{case}: verify found nothing: {report:?}"
                );
                assert!(!report.problems.is_empty() || stop == Stop::Crash, "{case}");
                let counted = check_reads(&copy.0, placement, &touched, &case);
                assert!(counted > 0, "{case}: the damage was not counted");
            }
        }
    }
}

fn copy_dir(from: &Path, to: &Path) {
    let Ok(entries) = std::fs::read_dir(from) else {
        return;
    };
    std::fs::create_dir_all(to).unwrap();
    for entry in entries {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

/// Which keys' records lie in the segments whose data starts in `[start, end)` of the file.
fn keys_in_segments(ranges: &[Option<(usize, usize)>], bytes: &[u8], ids: &[usize]) -> Vec<bool> {
    let (segment_size, _, data_offset) = pool_geometry(bytes);
    ranges
        .iter()
        .map(|r| r.is_some_and(|(a, _)| ids.contains(&((a - data_offset) / segment_size))))
        .collect()
}

/// Damage to what describes the records rather than to the records: segment header lines, the
/// clean-close sidecar, the index files, and a pool file cut short.
#[test]
fn damaged_metadata_costs_at_most_what_it_describes() {
    for placement in [IndexPlacement::Dram, IndexPlacement::Pool] {
        for stop in [Stop::Clean, Stop::Crash] {
            let pool = temp_pool(&format!("meta-{placement:?}-{stop:?}"));
            write_pool(&pool.0, placement, stop);
            let original = std::fs::read(&pool.0).unwrap();
            let ranges = record_ranges(&original);
            let (segment_size, segments, data_offset) = pool_geometry(&original);
            let header_line = |id: usize| 4096 + 64 * id;
            let used: Vec<usize> = (0..segments)
                .filter(|&id| original[header_line(id)] == 1)
                .collect();
            assert!(used.len() > 10);
            let victim = used[used.len() / 2];
            // (what to damage, which file, which segments' records it may cost)
            let mut cases: Vec<(Damage, PathBuf, Vec<usize>)> = vec![
                (
                    Damage::FlipByte(header_line(victim) + 9),
                    pool.0.clone(),
                    vec![victim],
                ),
                (
                    Damage::Zero(header_line(victim), 64),
                    pool.0.clone(),
                    vec![victim],
                ),
            ];
            if stop == Stop::Clean && placement == IndexPlacement::Dram {
                let side = sidecar(&pool.0);
                let len = std::fs::metadata(&side).unwrap().len() as usize;
                cases.push((Damage::FlipByte(len / 2), side.clone(), vec![]));
                cases.push((Damage::Zero(0, 4096.min(len)), side.clone(), vec![]));
                cases.push((Damage::Random(len / 3, 200, 5), side, vec![]));
            }
            if placement == IndexPlacement::Pool {
                for entry in std::fs::read_dir(index_dir(&pool.0)).unwrap() {
                    let path = entry.unwrap().path();
                    let len = std::fs::metadata(&path).unwrap().len() as usize;
                    cases.push((Damage::FlipByte(len / 2 + 3), path.clone(), vec![]));
                    cases.push((
                        Damage::Random((len / 4) & !63, 4096.min(len / 2), 11),
                        path.clone(),
                        vec![],
                    ));
                    // The hash bits of an occupied slot (the top byte of a little-endian word):
                    // its item can no longer be found through it.
                    let name = path.file_name().unwrap().to_str().unwrap().to_string();
                    if name.contains("-p") {
                        let bytes = std::fs::read(&path).unwrap();
                        let occupied = (len / 2 / 8..len / 8)
                            .find(|&w| bytes[w * 8..w * 8 + 8] != [0; 8] && w % 8 != 7)
                            .expect("an occupied slot");
                        cases.push((Damage::FlipByte(occupied * 8 + 6), path, vec![]));
                    }
                }
            }
            for (damage, file, lost_segments) in cases {
                let case = format!("{placement:?} {stop:?} {damage:?} of {}", file.display());
                let copy = temp_pool(&format!("meta-case-{placement:?}-{stop:?}"));
                std::fs::copy(&pool.0, &copy.0).unwrap();
                if sidecar(&pool.0).exists() {
                    std::fs::copy(sidecar(&pool.0), sidecar(&copy.0)).unwrap();
                }
                copy_dir(&index_dir(&pool.0), &index_dir(&copy.0));
                let target = file
                    .to_str()
                    .unwrap()
                    .replace(pool.0.to_str().unwrap(), copy.0.to_str().unwrap());
                damage.apply(Path::new(&target));
                let touched = keys_in_segments(&ranges, &original, &lost_segments);
                let index_damaged = file.starts_with(index_dir(&pool.0));
                check_reads_healing(&copy.0, placement, &touched, index_damaged, &case);
            }
            // A pool file cut short: the segments past the cut are lost, the rest served.
            let copy = temp_pool(&format!("meta-cut-{placement:?}-{stop:?}"));
            std::fs::copy(&pool.0, &copy.0).unwrap();
            let cut = data_offset + segment_size * (segments - segments / 4) + 1000;
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(&copy.0)
                .unwrap();
            file.set_len(cut as u64).unwrap();
            drop(file);
            let report = check_pool_file(&copy.0);
            assert!(
                report.as_ref().map_or(true, |r| !r.problems.is_empty()),
                "verify must report the cut: {report:?}"
            );
            let lost: Vec<usize> = ((cut - data_offset) / segment_size..segments).collect();
            let touched = keys_in_segments(&ranges, &original, &lost);
            check_reads(
                &copy.0,
                placement,
                &touched,
                &format!("{placement:?} {stop:?} cut"),
            );
        }
    }
}

/// Damage to the pool header (geometry, state line) cannot be worked around: the pool is refused
/// with a message that names the file and the problem, nothing is overwritten, and verify says
/// the same.
#[test]
fn a_damaged_pool_header_is_refused_with_a_clear_message() {
    let pool = temp_pool("header");
    write_pool(&pool.0, IndexPlacement::Dram, Stop::Clean);
    for at in [0, 20, 60, 130, 140, 150] {
        let copy = temp_pool("header-case");
        std::fs::copy(&pool.0, &copy.0).unwrap();
        Damage::FlipByte(at).apply(&copy.0);
        let before = std::fs::read(&copy.0).unwrap();
        let err = Engine::open(config(&copy.0, IndexPlacement::Dram)).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(copy.0.to_str().unwrap()) || text.contains("pool"),
            "{text}"
        );
        assert_eq!(
            std::fs::read(&copy.0).unwrap(),
            before,
            "byte {at}: file changed"
        );
        assert!(
            check_pool_file(&copy.0).is_err(),
            "byte {at}: verify passed"
        );
    }
}
