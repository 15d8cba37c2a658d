//! Reopening a file pool: items, flags, expiry and CAS survive; deleted keys stay deleted;
//! a foreign or damaged pool is refused.

use strata_engine::*;

struct TempPool(std::path::PathBuf);
impl Drop for TempPool {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        let _ = std::fs::remove_file(format!("{}.sidecar", self.0.display()));
    }
}

fn temp_pool(name: &str) -> TempPool {
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    };
    TempPool(
        std::path::PathBuf::from(dir)
            .join(format!("strata-engine-{}-{name}.pool", std::process::id())),
    )
}

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
