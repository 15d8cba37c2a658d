//! Reopening a file pool: items, flags, expiry and CAS survive; deleted keys stay deleted;
//! a foreign or damaged pool is refused.

use strata_engine::*;

mod support;
use support::{temp_pool, TempPool};

fn config(path: &std::path::Path) -> EngineConfig {
    EngineConfig {
        memory_bytes: 8 << 20,
        segment_size_bytes: 64 << 10,
        pool: PoolLocation::File(path.to_path_buf()),
        ..EngineConfig::default()
    }
}

#[test]
fn reopen_keeps_every_item_and_delete_with_new_unique_cas() {
    let pool = temp_pool("reopen");
    let mut cas_seen = std::collections::HashSet::new();
    {
        let engine = Engine::open(config(&pool.0)).unwrap();
        for i in 0..5000u32 {
            let cas = engine
                .set(
                    format!("k{i}").as_bytes(),
                    format!("v{i}").as_bytes(),
                    i,
                    Expiry::Never,
                )
                .unwrap();
            assert!(cas_seen.insert(cas));
        }
        for i in (0..5000u32).step_by(3) {
            engine.delete(format!("k{i}").as_bytes(), None).unwrap();
        }
        for i in (1..5000u32).step_by(3) {
            let cas = engine
                .set(format!("k{i}").as_bytes(), b"second", 7, Expiry::Never)
                .unwrap();
            assert!(cas_seen.insert(cas));
        }
        // No close: this is a crash (the process would die here).
    }
    let engine = Engine::open(config(&pool.0)).unwrap();
    let report = engine.recovery_report().clone();
    assert!(report.items_recovered > 3000, "{report:?}");
    for i in 0..5000u32 {
        let got = engine.get(format!("k{i}").as_bytes(), |item| {
            (item.value.to_vec(), item.client_flags, item.cas)
        });
        match i % 3 {
            0 => assert_eq!(got, None, "deleted key k{i} came back"),
            1 => assert_eq!(
                got.as_ref().map(|g| (&g.0[..], g.1)),
                Some((&b"second"[..], 7))
            ),
            _ => assert_eq!(
                got.as_ref().map(|g| (g.0.clone(), g.1)),
                Some((format!("v{i}").into_bytes(), i))
            ),
        }
        if let Some((_, _, cas)) = got {
            assert!(cas_seen.contains(&cas), "CAS values survive the restart");
        }
    }
    let cas = engine.set(b"new", b"x", 0, Expiry::Never).unwrap();
    assert!(
        !cas_seen.contains(&cas),
        "a new write after restart gets a never-used CAS"
    );
    engine.check_integrity().unwrap();
}

#[test]
fn a_foreign_file_is_refused_untouched() {
    let pool = temp_pool("foreign");
    std::fs::write(&pool.0, vec![0xAB; 100_000]).unwrap();
    let err = Engine::open(config(&pool.0)).unwrap_err();
    assert!(err.to_string().contains("not a strata pool"), "{err}");
    assert!(std::fs::read(&pool.0).unwrap().iter().all(|&b| b == 0xAB));
    let fresh = Engine::open(EngineConfig {
        fresh: true,
        ..config(&pool.0)
    })
    .unwrap();
    assert!(fresh.is_empty());
}

#[test]
fn a_clean_close_reopens_from_the_snapshot_with_the_same_items() {
    let pool = temp_pool("snapshot");
    {
        let engine = Engine::open(config(&pool.0)).unwrap();
        for i in 0..20_000u32 {
            engine
                .set(
                    format!("k{i}").as_bytes(),
                    format!("v{i}").as_bytes(),
                    i,
                    Expiry::Never,
                )
                .unwrap();
        }
        for i in (0..20_000u32).step_by(4) {
            engine.delete(format!("k{i}").as_bytes(), None).unwrap();
        }
        engine.close().unwrap();
    }
    let engine = Engine::open(config(&pool.0)).unwrap();
    let report = engine.recovery_report().clone();
    assert!(report.from_snapshot, "{report:?}");
    assert_eq!(report.items_recovered, 15_000);
    engine.check_integrity().unwrap();
    for i in 0..20_000u32 {
        let got = engine.get(format!("k{i}").as_bytes(), |item| {
            (item.value.to_vec(), item.client_flags)
        });
        let expected = (i % 4 != 0).then(|| (format!("v{i}").into_bytes(), i));
        assert_eq!(got, expected, "k{i}");
    }
    engine.set(b"k0", b"again", 0, Expiry::Never).unwrap();
    drop(engine); // a crash: the sidecar was consumed at open, so the next open must scan
    let engine = Engine::open(config(&pool.0)).unwrap();
    assert!(
        !engine.recovery_report().from_snapshot,
        "a stale snapshot is never used"
    );
    assert_eq!(
        engine.get(b"k0", |item| item.value.to_vec()),
        Some(b"again".to_vec())
    );
    engine.check_integrity().unwrap();
}

/// A pool on a plain (disk) file with `sync` and group commit: commits persist the whole file
/// with one msync and write overwritten records' dead marks only after that. Every committed
/// write must come back after a crash, deleted keys stay deleted.
#[test]
fn sync_group_commit_on_a_plain_file_keeps_committed_writes() {
    let path = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("sync-{}.pool", std::process::id()));
    let _cleanup = TempPool(path.clone());
    let config = EngineConfig {
        durability: Durability::Sync,
        group_commit: true,
        ..config(&path)
    };
    {
        let engine = Engine::open(config.clone()).unwrap();
        if engine.backend() != Backend::SharedFile {
            return; // the target dir is not on an ordinary filesystem here
        }
        for round in 0..5u32 {
            for i in 0..2000u32 {
                engine
                    .set(
                        format!("k{i}").as_bytes(),
                        format!("v{i}-{round}").as_bytes(),
                        0,
                        Expiry::Never,
                    )
                    .unwrap();
            }
            for i in (0..2000u32).step_by(7) {
                engine.delete(format!("k{i}").as_bytes(), None).unwrap();
            }
            engine.commit().unwrap();
        }
    } // crash
    let engine = Engine::open(config).unwrap();
    engine.check_integrity().unwrap();
    for i in 0..2000u32 {
        let expected = (i % 7 != 0).then(|| format!("v{i}-4").into_bytes());
        assert_eq!(
            engine.get(format!("k{i}").as_bytes(), |it| it.value.to_vec()),
            expected,
            "k{i}"
        );
    }
}

fn index_dir(pool: &std::path::Path) -> std::path::PathBuf {
    std::path::PathBuf::from(format!("{}.index", pool.display()))
}

fn in_pool(path: &std::path::Path) -> EngineConfig {
    EngineConfig {
        index_placement: IndexPlacement::Pool,
        // Sized for large items so that the index grows (new table files) during the test.
        item_size_bytes_expected: 4096,
        ..config(path)
    }
}

fn fill(engine: &Engine, round: u32, count: u32) {
    for i in 0..count {
        engine
            .set(
                format!("k{i}").as_bytes(),
                format!("v{i}-{round}").as_bytes(),
                round,
                Expiry::Never,
            )
            .unwrap();
    }
    for i in (0..count).step_by(5) {
        engine.delete(format!("k{i}").as_bytes(), None).unwrap();
    }
}

fn assert_round(engine: &Engine, round: u32, count: u32) {
    engine.check_integrity().unwrap();
    for i in 0..count {
        let expected = (i % 5 != 0).then(|| (format!("v{i}-{round}").into_bytes(), round));
        let got = engine.get(format!("k{i}").as_bytes(), |it| {
            (it.value.to_vec(), it.client_flags)
        });
        assert_eq!(got, expected, "k{i}");
    }
}

/// Sets word 0 (the state) of shard `shard`'s control line: 1 says a change was in progress.
fn mark_shard_changing(pool: &std::path::Path, shard: usize) {
    use std::io::{Seek, SeekFrom, Write};
    let mut control = std::fs::OpenOptions::new()
        .write(true)
        .open(index_dir(pool).join("control"))
        .unwrap();
    control
        .seek(SeekFrom::Start((64 * (1 + shard)) as u64))
        .unwrap();
    control.write_all(&1u64.to_le_bytes()).unwrap();
}

#[test]
fn the_index_in_the_pool_is_mapped_after_a_crash_and_a_clean_close() {
    let pool = temp_pool("index-in-pool");
    {
        let engine = Engine::open(in_pool(&pool.0)).unwrap();
        fill(&engine, 1, 20_000);
        assert!(engine.stats().index_bytes > 0);
    } // crash
    let engine = Engine::open(in_pool(&pool.0)).unwrap();
    let report = engine.recovery_report().clone();
    assert_eq!(report.shards_from_index_files, 8, "{report:?}");
    assert_eq!(report.items_recovered, 16_000);
    assert_round(&engine, 1, 20_000);
    fill(&engine, 2, 20_000);
    engine.close().unwrap();
    drop(engine);
    let engine = Engine::open(in_pool(&pool.0)).unwrap();
    assert_eq!(engine.recovery_report().shards_from_index_files, 8);
    assert_round(&engine, 2, 20_000);
    let files: Vec<_> = std::fs::read_dir(index_dir(&pool.0))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(
        files.len() <= 1 + 8 * 2,
        "replaced tables are deleted: {files:?}"
    );
}

#[test]
fn a_shard_caught_changing_is_rebuilt_and_the_others_are_mapped() {
    let pool = temp_pool("index-changing");
    {
        let engine = Engine::open(in_pool(&pool.0)).unwrap();
        fill(&engine, 1, 10_000);
    }
    mark_shard_changing(&pool.0, 3);
    let engine = Engine::open(in_pool(&pool.0)).unwrap();
    let report = engine.recovery_report().clone();
    assert_eq!(report.shards_from_index_files, 7, "{report:?}");
    assert_eq!(report.items_recovered, 8_000);
    assert_round(&engine, 1, 10_000);
}

#[test]
fn index_files_of_another_pool_state_are_never_trusted() {
    let pool = temp_pool("index-stale");
    let saved = std::path::PathBuf::from(format!("{}.saved-index", pool.0.display()));
    {
        let engine = Engine::open(in_pool(&pool.0)).unwrap();
        fill(&engine, 1, 5_000);
        engine.close().unwrap();
    }
    // Keep a copy of the files as that clean close left them, then change the pool.
    let _ = std::fs::remove_dir_all(&saved);
    std::fs::create_dir(&saved).unwrap();
    for entry in std::fs::read_dir(index_dir(&pool.0)).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), saved.join(entry.file_name())).unwrap();
    }
    {
        let engine = Engine::open(in_pool(&pool.0)).unwrap();
        fill(&engine, 2, 5_000);
    } // crash
    std::fs::remove_dir_all(index_dir(&pool.0)).unwrap();
    std::fs::rename(&saved, index_dir(&pool.0)).unwrap();
    let engine = Engine::open(in_pool(&pool.0)).unwrap();
    let report = engine.recovery_report().clone();
    assert_eq!(report.shards_from_index_files, 0, "{report:?}");
    assert_round(&engine, 2, 5_000);
}

#[test]
fn switching_the_index_placement_keeps_the_items() {
    let pool = temp_pool("index-switch");
    {
        let engine = Engine::open(config(&pool.0)).unwrap();
        fill(&engine, 1, 5_000);
        engine.close().unwrap();
    }
    {
        let engine = Engine::open(in_pool(&pool.0)).unwrap();
        assert_eq!(engine.recovery_report().shards_from_index_files, 0);
        assert_round(&engine, 1, 5_000);
        fill(&engine, 2, 5_000);
    }
    let engine = Engine::open(config(&pool.0)).unwrap();
    assert_round(&engine, 2, 5_000);
    assert!(
        !index_dir(&pool.0).exists(),
        "the DRAM placement removes the index files"
    );
}

/// Under `sync` with group commit an overwrite's dead mark waits for the commit, and the old
/// record is marked superseded meanwhile (its shard's control state 3). A process crash with
/// the mark waiting rebuilds that shard (the others are mapped): the superseded record is dead
/// to the rebuild, and it is marked dead in the pool, so that a later power loss, which would
/// revive a superseded record, cannot bring it back.
#[test]
fn uncommitted_dead_marks_rebuild_their_shard_and_end_dead() {
    let pool = temp_pool("index-sync");
    let config = EngineConfig {
        durability: Durability::Sync,
        group_commit: true,
        ..in_pool(&pool.0)
    };
    const OLD: &[u8] = b"old-value-of-the-superseded-record";
    {
        let engine = Engine::open(config.clone()).unwrap();
        fill(&engine, 1, 4_000);
        engine
            .set(b"superseded-key", OLD, 0, Expiry::Never)
            .unwrap();
        engine.commit().unwrap();
        // One overwrite, not committed: its shard has a dead mark waiting.
        engine
            .set(b"superseded-key", b"new", 0, Expiry::Never)
            .unwrap();
    }
    let engine = Engine::open(config.clone()).unwrap();
    let report = engine.recovery_report().clone();
    assert_eq!(report.shards_from_index_files, 7, "{report:?}");
    assert_round(&engine, 1, 4_000);
    let value = engine.get(b"superseded-key", |item| item.value.to_vec());
    assert_eq!(value.as_deref(), Some(&b"new"[..]));
    engine.close().unwrap();
    drop(engine);
    // The old record, found by its key and value (8 header bytes, no optional field, then
    // the key), is marked dead on the media.
    let bytes = std::fs::read(&pool.0).unwrap();
    let needle = [&b"superseded-key"[..], OLD].concat();
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle.as_slice())
        .expect("the old record is in the pool");
    assert_eq!(bytes[at - 8] & 0xF0, 0xD0, "state of the superseded record");
    // After a commit every shard's files agree again: a crash now maps them all.
    let engine = Engine::open(config.clone()).unwrap();
    engine
        .set(b"superseded-key", b"newer", 0, Expiry::Never)
        .unwrap();
    engine.commit().unwrap();
    drop(engine);
    let engine = Engine::open(config).unwrap();
    assert_eq!(engine.recovery_report().shards_from_index_files, 8);
    let value = engine.get(b"superseded-key", |item| item.value.to_vec());
    assert_eq!(value.as_deref(), Some(&b"newer"[..]));
    engine.check_integrity().unwrap();
}

#[test]
fn the_index_placement_pool_needs_a_file_pool() {
    let err = Engine::open(EngineConfig {
        index_placement: IndexPlacement::Pool,
        ..EngineConfig::default()
    })
    .unwrap_err();
    assert!(err.to_string().contains("needs a file pool"), "{err}");
}

/// Recovery that grows the index (more items than the initial table was sized for) must leave
/// the rest of the budget in service: a regression where it left one segment, so the next
/// writes evicted nearly everything.
#[test]
fn index_growth_during_recovery_keeps_the_segment_budget() {
    let pool = temp_pool("recovery-growth");
    let config = EngineConfig {
        item_size_bytes_expected: 4096,
        ..config(&pool.0)
    };
    {
        let engine = Engine::open(config.clone()).unwrap();
        fill(&engine, 1, 5_000);
    } // crash: the next open scans and grows the index
    let engine = Engine::open(config).unwrap();
    for i in 5_000..10_000u32 {
        engine
            .set(format!("k{i}").as_bytes(), b"more", 0, Expiry::Never)
            .unwrap();
    }
    assert_eq!(engine.stats().evicted_segments, 0, "{:?}", engine.stats());
    assert_round(&engine, 1, 5_000);
}

/// Opens the pool and stops the open, as a `kill -9` would, at recovery step `stop_at` (0: once
/// the segments are adopted; k: after the k-th shard is rebuilt). The observer panics there;
/// the pool and its index files keep every store made before, as after a process crash.
fn open_and_crash_during_recovery(config: EngineConfig, stop_at: usize) -> bool {
    let steps = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = std::sync::Arc::clone(&steps);
    let observer = RecoveryObserver(std::sync::Arc::new(move |_progress| {
        if counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == stop_at {
            panic!("crash injected at recovery step {stop_at}");
        }
    }));
    let config = EngineConfig {
        recovery_observer: Some(observer),
        ..config
    };
    let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Engine::open(config)));
    opened.is_err()
}

/// Issue 10, finding 1: a `kill -9` while a restarted server was still recovering (index in the
/// pool) lost most acknowledged keys at the next start. Recovery handed each segment to its
/// shard through a shard write, whose end marked the shard's control line consistent while its
/// index was still empty; the next open mapped that empty index and dropped the shard's items
/// (and a later rebuild brought deleted keys back). Every step of a recovery is tried here,
/// twice in a row, as the crash point.
#[test]
fn a_crash_during_recovery_loses_nothing() {
    for stop_at in 0..=8 {
        let pool = temp_pool(&format!("crash-in-recovery-{stop_at}"));
        {
            // Written with the index in DRAM and not closed: the next open with the index in
            // the pool must rebuild every shard.
            let engine = Engine::open(config(&pool.0)).unwrap();
            fill(&engine, 1, 10_000);
        }
        assert!(
            open_and_crash_during_recovery(in_pool(&pool.0), stop_at),
            "the open reached step {stop_at}"
        );
        // A crash during the recovery of a recovery that crashed, once its segments are adopted.
        assert!(open_and_crash_during_recovery(in_pool(&pool.0), 0));
        let engine = Engine::open(in_pool(&pool.0)).unwrap();
        assert_round(&engine, 1, 10_000);
        fill(&engine, 2, 10_000);
        drop(engine); // and a crash after recovery, with writes
        let engine = Engine::open(in_pool(&pool.0)).unwrap();
        assert_round(&engine, 2, 10_000);
    }
}

/// Found by the crash matrix (issue 10): under group commit an overwrite's dead mark waits for
/// the commit, but a delete's mark was written at once. A key overwritten and then deleted in
/// one commit round, followed by a crash before the commit, came back with its value from
/// before the overwrite (the deleted record dead, its predecessor still live), while writes sent
/// after the delete on the same connection had survived: a state no prefix of the requests
/// explains. The delete now marks the predecessors dead with it.
#[test]
fn a_delete_after_an_uncommitted_overwrite_keeps_the_key_deleted_after_a_crash() {
    for level in [Durability::Sync, Durability::Interval { ms: 60_000 }] {
        let pool = temp_pool("delete-after-overwrite");
        let config = EngineConfig {
            durability: level,
            group_commit: true,
            ..config(&pool.0)
        };
        {
            let engine = Engine::open(config.clone()).unwrap();
            engine.set(b"k", b"first", 0, Expiry::Never).unwrap();
            engine.set(b"chain", b"one", 0, Expiry::Never).unwrap();
            engine.commit().unwrap();
            engine.set(b"k", b"second", 0, Expiry::Never).unwrap();
            engine.set(b"chain", b"two", 0, Expiry::Never).unwrap();
            engine.set(b"chain", b"three", 0, Expiry::Never).unwrap();
            engine.delete(b"k", None).unwrap();
            engine.delete(b"chain", None).unwrap();
            engine.set(b"after", b"x", 0, Expiry::Never).unwrap();
            // No commit, no close: a process crash keeps every store made.
        }
        let engine = Engine::open(config).unwrap();
        let get = |key: &[u8]| engine.get(key, |item| item.value.to_vec());
        assert_eq!(get(b"after"), Some(b"x".to_vec()), "{level:?}");
        assert_eq!(get(b"k"), None, "{level:?}: a deleted key came back");
        assert_eq!(get(b"chain"), None, "{level:?}: a deleted key came back");
        engine.check_integrity().unwrap();
    }
}

/// A panic in a caller's `modify` closure (the server's code, not the engine's) unwinds: the
/// shard is released as it was, nothing is lost, and the key stays usable. (A panic inside the
/// engine's own change aborts the process instead: see `ShardWrite`'s drop.)
#[test]
fn a_panic_in_a_modify_closure_leaves_the_engine_whole() {
    let pool = temp_pool("modify-panic");
    let engine = Engine::open(in_pool(&pool.0)).unwrap();
    engine.set(b"k", b"v1", 0, Expiry::Never).unwrap();
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        engine.modify(b"k", |_, buffer| {
            buffer.extend_from_slice(b"half-built");
            panic!("a bug in the caller");
        })
    }));
    assert!(unwound.is_err());
    assert_eq!(engine.get(b"k", |i| i.value.to_vec()), Some(b"v1".to_vec()));
    engine.concat(b"k", b"+2", false).unwrap();
    assert_eq!(
        engine.get(b"k", |i| i.value.to_vec()),
        Some(b"v1+2".to_vec())
    );
    engine.check_integrity().unwrap();
    drop(engine); // a crash: the shard the panic left must be mapped or rebuilt whole
    let engine = Engine::open(in_pool(&pool.0)).unwrap();
    assert_eq!(
        engine.get(b"k", |i| i.value.to_vec()),
        Some(b"v1+2".to_vec())
    );
    engine.check_integrity().unwrap();
}

/// An index that grows again and again while the pool is full (small items, far more than the
/// first table was sized for) takes from the segment budget only what it holds: a regression
/// where each growth charged the whole index again against what the earlier growths had left,
/// and the memory tier ended with a single segment while most of the budget sat unused (found
/// when 15M flash items' index slots left a 256 MiB memory tier one segment).
#[test]
fn repeated_index_growth_takes_only_the_index_from_the_segment_budget() {
    let engine = Engine::open(EngineConfig {
        memory_bytes: 8 << 20,
        segment_size_bytes: 64 << 10,
        shard_count: 2,
        value_len_max: 1024,
        item_size_bytes_expected: 16 << 10,
        ..EngineConfig::default()
    })
    .unwrap();
    for i in 0..2_000_000u32 {
        engine
            .set(format!("k{i}").as_bytes(), b"v", 0, Expiry::Never)
            .unwrap();
    }
    let stats = engine.stats();
    let index_segments = stats.index_bytes.div_ceil(stats.segment_size_bytes);
    assert!(index_segments >= 8, "the index grew: {stats:?}");
    // Not over the budget (growths were charged less than they took, overflow tables nothing)
    // and not under it (each growth charged the whole index again, once segments had been
    // given up to earlier growths).
    assert!(
        stats.segments_used + index_segments <= stats.segments_total + 2,
        "{} segments hold items and the index takes {index_segments} of {}: {stats:?}",
        stats.segments_used,
        stats.segments_total
    );
    let memory_segments = stats.segments_used + stats.segments_free;
    assert!(
        memory_segments + index_segments + 2 >= stats.segments_total,
        "{memory_segments} segments serve memory and the index takes {index_segments} of {}: \
         {stats:?}",
        stats.segments_total
    );
    engine.check_integrity().unwrap();
}
