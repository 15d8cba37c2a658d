//! Groups of writes a crash leaves all done or all undone (`Engine::atomically` and the
//! transaction log beside the pool). A crash in the middle of a group is a panic inside it
//! followed by dropping the engine unclosed (as `kill -9` leaves a pool: every store made,
//! no clean close); the reopen must find every key of the group as it was before it.
#![allow(
    clippy::too_many_lines,
    reason = "a test scenario reads best as one function"
)]

use strata_engine::*;

mod support;
use support::{crash_copy, temp_pool};

fn config(
    path: &std::path::Path,
    durability: Durability,
    placement: IndexPlacement,
) -> EngineConfig {
    EngineConfig {
        memory_bytes: 8 << 20,
        segment_size_bytes: 64 << 10,
        pool: PoolLocation::File(path.to_path_buf()),
        durability,
        group_commit: true,
        index_placement: placement,
        ..EngineConfig::default()
    }
}

/// The engine `config` opens on an empty pool.
fn open_fresh(config: EngineConfig) -> Engine {
    Engine::open(EngineConfig {
        fresh: true,
        ..config
    })
    .unwrap()
}

fn value(engine: &Engine, key: &[u8]) -> Option<(Vec<u8>, Kind, Option<u64>)> {
    engine.get(key, |item| {
        (item.value.to_vec(), item.kind, item.expires_at_ms)
    })
}

fn set_hash(engine: &Engine, key: &[u8], bytes: &[u8]) {
    engine
        .modify(key, |_, buffer| {
            buffer.extend_from_slice(bytes);
            Change::WriteKind {
                kind: Kind::Hash,
                expiry: Expiry::Never,
            }
        })
        .unwrap();
}

/// The group a crash interrupts: overwrites `a` (which had a TTL), creates `b`, deletes `c`,
/// writes the hash `h`, and then the crash: the pool is copied to `crashed` as it is now.
fn interrupted_group(engine: &Engine, pool: &std::path::Path, crashed: &std::path::Path) {
    let keys: [&[u8]; 4] = [b"a", b"b", b"c", b"h"];
    engine
        .atomically(&keys, || {
            engine.set(b"a", b"new-a", 0, Expiry::Never).unwrap();
            engine.set(b"b", b"new-b", 0, Expiry::Never).unwrap();
            engine.delete(b"c", None).unwrap();
            set_hash(engine, b"h", b"new-hash");
            crash_copy(pool, crashed);
        })
        .unwrap();
}

#[test]
fn a_crash_inside_a_group_undoes_every_write_of_it() {
    let far = 4_000_000_000_000;
    for durability in [Durability::None, Durability::Sync] {
        for placement in [IndexPlacement::Dram, IndexPlacement::Pool] {
            let original = temp_pool(&format!("undo-{durability:?}-{placement:?}"));
            let pool = temp_pool(&format!("undo-{durability:?}-{placement:?}-crashed"));
            {
                let engine = open_fresh(config(&original.0, durability, placement));
                engine.set(b"a", b"old-a", 7, Expiry::AtMs(far)).unwrap();
                engine.set(b"c", b"old-c", 0, Expiry::Never).unwrap();
                set_hash(&engine, b"h", b"old-hash");
                engine.commit().unwrap();
                interrupted_group(&engine, &original.0, &pool.0);
            }
            let config = config(&pool.0, durability, placement);
            let engine = Engine::open(config.clone()).unwrap();
            let label = format!("{durability:?} {placement:?}");
            assert_eq!(
                engine.recovery_report().transaction_keys_restored,
                4,
                "{label}"
            );
            assert_eq!(
                value(&engine, b"a"),
                Some((b"old-a".to_vec(), Kind::String, Some(far))),
                "{label}"
            );
            assert_eq!(
                engine.get(b"a", |item| item.client_flags),
                Some(7),
                "{label}"
            );
            assert_eq!(value(&engine, b"b"), None, "{label}");
            assert_eq!(
                value(&engine, b"c"),
                Some((b"old-c".to_vec(), Kind::String, None)),
                "{label}"
            );
            assert_eq!(
                value(&engine, b"h"),
                Some((b"old-hash".to_vec(), Kind::Hash, None)),
                "{label}"
            );
            // The undo is done once: a crash now leaves nothing more to undo.
            drop(engine);
            let engine = Engine::open(config.clone()).unwrap();
            assert_eq!(
                engine.recovery_report().transaction_keys_restored,
                0,
                "{label}"
            );
            assert_eq!(value(&engine, b"b"), None, "{label}");
            // A group that ended stays whole across a crash.
            engine
                .atomically(&[b"a", b"b"], || {
                    engine.set(b"a", b"done-a", 0, Expiry::Never).unwrap();
                    engine.set(b"b", b"done-b", 0, Expiry::Never).unwrap();
                })
                .unwrap();
            drop(engine);
            let engine = Engine::open(config).unwrap();
            assert_eq!(
                engine.recovery_report().transaction_keys_restored,
                0,
                "{label}"
            );
            assert_eq!(
                value(&engine, b"a").map(|v| v.0),
                Some(b"done-a".to_vec()),
                "{label}"
            );
            assert_eq!(
                value(&engine, b"b").map(|v| v.0),
                Some(b"done-b".to_vec()),
                "{label}"
            );
            engine.check_integrity().unwrap();
        }
    }
}

#[test]
fn a_log_torn_before_the_group_began_undoes_nothing() {
    let original = temp_pool("torn-original");
    let pool = temp_pool("torn");
    {
        let engine = open_fresh(config(&original.0, Durability::None, IndexPlacement::Dram));
        engine.set(b"a", b"kept", 0, Expiry::Never).unwrap();
        interrupted_group(&engine, &original.0, &pool.0);
    }
    let config = config(&pool.0, Durability::None, IndexPlacement::Dram);
    // The log cut short, as a crash in the middle of writing it leaves it.
    let log = format!("{}.txlog", pool.0.display());
    let bytes = std::fs::read(&log).unwrap();
    std::fs::write(&log, &bytes[..bytes.len() - 3]).unwrap();
    let engine = Engine::open(config).unwrap();
    assert_eq!(engine.recovery_report().transaction_keys_restored, 0);
    // No undo: the group's writes that reached the pool stay (the real log is never torn
    // after the group's first write; this only shows a torn log is not trusted).
    assert_eq!(value(&engine, b"a").map(|v| v.0), Some(b"new-a".to_vec()));
}

#[test]
fn a_panic_inside_a_group_undoes_its_writes_at_once() {
    let pool = temp_pool("panic");
    let config = config(&pool.0, Durability::None, IndexPlacement::Dram);
    let engine = open_fresh(config.clone());
    engine.set(b"a", b"old-a", 0, Expiry::Never).unwrap();
    let keys: [&[u8]; 2] = [b"a", b"b"];
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        engine
            .atomically(&keys, || {
                engine.set(b"a", b"new-a", 0, Expiry::Never).unwrap();
                engine.set(b"b", b"new-b", 0, Expiry::Never).unwrap();
                panic!("a bug in the middle of a transaction");
            })
            .unwrap();
    }));
    assert!(panicked.is_err());
    assert_eq!(value(&engine, b"a").map(|v| v.0), Some(b"old-a".to_vec()));
    assert_eq!(value(&engine, b"b"), None);
    drop(engine);
    let engine = Engine::open(config).unwrap();
    assert_eq!(
        engine.recovery_report().transaction_keys_restored,
        0,
        "undone already"
    );
    assert_eq!(value(&engine, b"a").map(|v| v.0), Some(b"old-a".to_vec()));
}

#[test]
fn without_a_pool_file_a_group_just_runs() {
    let engine = Engine::open(EngineConfig::default()).unwrap();
    let answer = engine
        .atomically(&[b"k"], || {
            engine.set(b"k", b"v", 0, Expiry::Never).unwrap()
        })
        .unwrap();
    assert!(answer > 0);
    assert_eq!(value(&engine, b"k").map(|v| v.0), Some(b"v".to_vec()));
}

/// A log that cannot be written (a full disk, or here a directory in its place) refuses the
/// group before any of its writes: the caller gets the error, nothing changed, and the engine
/// still takes other writes.
#[test]
fn a_log_that_cannot_be_written_refuses_the_group_and_changes_nothing() {
    let pool = temp_pool("unwritable");
    let config = config(&pool.0, Durability::None, IndexPlacement::Dram);
    let engine = open_fresh(config);
    engine.set(b"a", b"old-a", 0, Expiry::Never).unwrap();
    let log = format!("{}.txlog", pool.0.display());
    std::fs::create_dir_all(&log).unwrap();
    let mut ran = false;
    let refused = engine.atomically(&[b"a"], || {
        ran = true;
        engine.set(b"a", b"new-a", 0, Expiry::Never).unwrap();
    });
    assert!(
        matches!(refused, Err(WriteError::Persist(_))),
        "{refused:?}"
    );
    assert!(!ran, "the group never ran");
    assert_eq!(value(&engine, b"a").map(|v| v.0), Some(b"old-a".to_vec()));
    engine
        .set(b"b", b"still-writable", 0, Expiry::Never)
        .unwrap();
    std::fs::remove_dir_all(&log).unwrap();
}

/// The same group as [`interrupted_group`], run as a transaction holding its keys' shards.
fn interrupted_transaction(engine: &Engine, pool: &std::path::Path, crashed: &std::path::Path) {
    let keys: [&[u8]; 4] = [b"a", b"b", b"c", b"h"];
    let txn = engine.transaction(&keys, &keys).unwrap();
    txn.set(b"a", b"new-a", 0, Expiry::Never).unwrap();
    txn.set(b"b", b"new-b", 0, Expiry::Never).unwrap();
    txn.delete(b"c", None).unwrap();
    txn.modify(b"h", |_, buffer| {
        buffer.extend_from_slice(b"new-hash");
        Change::WriteKind {
            kind: Kind::Hash,
            expiry: Expiry::Never,
        }
    })
    .unwrap();
    crash_copy(pool, crashed);
    txn.finish().unwrap();
}

#[test]
fn a_crash_inside_a_transaction_undoes_every_write_of_it() {
    let far = 4_000_000_000_000;
    for durability in [Durability::None, Durability::Sync] {
        for placement in [IndexPlacement::Dram, IndexPlacement::Pool] {
            let original = temp_pool(&format!("txn-{durability:?}-{placement:?}"));
            let pool = temp_pool(&format!("txn-{durability:?}-{placement:?}-crashed"));
            {
                let engine = open_fresh(config(&original.0, durability, placement));
                engine.set(b"a", b"old-a", 7, Expiry::AtMs(far)).unwrap();
                engine.set(b"c", b"old-c", 0, Expiry::Never).unwrap();
                set_hash(&engine, b"h", b"old-hash");
                engine.commit().unwrap();
                interrupted_transaction(&engine, &original.0, &pool.0);
                // The original ended its transaction: every write of it is there.
                assert_eq!(value(&engine, b"b").map(|v| v.0), Some(b"new-b".to_vec()));
                assert_eq!(value(&engine, b"c"), None);
            }
            let label = format!("{durability:?} {placement:?}");
            let engine = Engine::open(config(&pool.0, durability, placement)).unwrap();
            assert_eq!(
                engine.recovery_report().transaction_keys_restored,
                4,
                "{label}"
            );
            assert_eq!(
                value(&engine, b"a"),
                Some((b"old-a".to_vec(), Kind::String, Some(far))),
                "{label}"
            );
            assert_eq!(value(&engine, b"b"), None, "{label}");
            assert_eq!(
                value(&engine, b"c"),
                Some((b"old-c".to_vec(), Kind::String, None)),
                "{label}"
            );
            assert_eq!(
                value(&engine, b"h"),
                Some((b"old-hash".to_vec(), Kind::Hash, None)),
                "{label}"
            );
            engine.check_integrity().unwrap();
            // And the original, reopened after its clean end, has nothing to undo.
            drop(engine);
            let engine = Engine::open(config(&original.0, durability, placement)).unwrap();
            assert_eq!(
                engine.recovery_report().transaction_keys_restored,
                0,
                "{label}"
            );
            assert_eq!(value(&engine, b"a").map(|v| v.0), Some(b"new-a".to_vec()));
        }
    }
}

/// A panic between a transaction's writes (a bug in a command, or `DEBUG PANIC` queued in an
/// EXEC) puts the before-images back at once and releases the shards: the engine serves on.
#[test]
fn a_panic_inside_a_transaction_undoes_its_writes_and_releases_its_keys() {
    let pool = temp_pool("txn-panic");
    let config = config(&pool.0, Durability::None, IndexPlacement::Pool);
    let engine = open_fresh(config.clone());
    engine.set(b"a", b"old-a", 0, Expiry::Never).unwrap();
    let keys: [&[u8]; 2] = [b"a", b"b"];
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let txn = engine.transaction(&keys, &keys).unwrap();
        txn.set(b"a", b"new-a", 0, Expiry::Never).unwrap();
        txn.set(b"b", b"new-b", 0, Expiry::Never).unwrap();
        panic!("a bug in the middle of a transaction");
    }));
    assert!(panicked.is_err());
    assert_eq!(value(&engine, b"a").map(|v| v.0), Some(b"old-a".to_vec()));
    assert_eq!(value(&engine, b"b"), None);
    engine.set(b"b", b"after", 0, Expiry::Never).unwrap();
    drop(engine);
    let engine = Engine::open(config).unwrap();
    assert_eq!(engine.recovery_report().transaction_keys_restored, 0);
    assert_eq!(value(&engine, b"a").map(|v| v.0), Some(b"old-a".to_vec()));
    assert_eq!(value(&engine, b"b").map(|v| v.0), Some(b"after".to_vec()));
    engine.check_integrity().unwrap();
}

/// A transaction's thread using the engine's single-key operations would wait for a shard it
/// holds: it panics instead, naming the mistake, and the transaction still ends cleanly.
#[test]
fn a_single_key_operation_inside_a_transaction_panics_instead_of_deadlocking() {
    let engine = Engine::open(EngineConfig::default()).unwrap();
    engine.set(b"a", b"1", 0, Expiry::Never).unwrap();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let txn = engine.transaction(&[b"a"], &[]).unwrap();
        txn.set(b"a", b"2", 0, Expiry::Never).unwrap();
        engine.get(b"a", |_| ());
    }));
    let message = panicked.unwrap_err();
    let message = message
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| message.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    assert!(message.contains("inside an open transaction"), "{message}");
    // Without a log there is nothing to undo: the write stays, and the key is free again.
    assert_eq!(value(&engine, b"a").map(|v| v.0), Some(b"2".to_vec()));
}

/// A key the transaction did not name is refused (a caller's bug), never read unlocked.
#[test]
#[should_panic(expected = "a key the transaction did not name")]
fn a_transaction_refuses_a_key_it_did_not_name() {
    let engine = Engine::open(EngineConfig {
        memory_bytes: 64 << 20,
        ..EngineConfig::default()
    })
    .unwrap();
    // Keys until one lands in another shard than "a".
    let txn = engine.transaction(&[b"a"], &[]).unwrap();
    for i in 0..1000 {
        let key = format!("other-{i}");
        txn.get(key.as_bytes(), |_| ());
    }
}

/// The same for a transaction: a log that cannot be written refuses it before it hands over
/// its keys, nothing changed, its shards are released and the engine still takes writes.
#[test]
fn a_log_that_cannot_be_written_refuses_the_transaction_and_releases_its_keys() {
    let pool = temp_pool("txn-unwritable");
    let config = config(&pool.0, Durability::Sync, IndexPlacement::Pool);
    let engine = open_fresh(config);
    engine.set(b"a", b"old-a", 0, Expiry::Never).unwrap();
    let log = format!("{}.txlog", pool.0.display());
    std::fs::create_dir_all(&log).unwrap();
    let refused = engine.transaction(&[b"a"], &[b"a", b"b"]);
    assert!(
        matches!(refused, Err(WriteError::Persist(_))),
        "{:?}",
        refused.as_ref().err()
    );
    drop(refused);
    assert_eq!(value(&engine, b"a").map(|v| v.0), Some(b"old-a".to_vec()));
    engine.set(b"a", b"new-a", 0, Expiry::Never).unwrap();
    engine
        .set(b"b", b"still-writable", 0, Expiry::Never)
        .unwrap();
    std::fs::remove_dir_all(&log).unwrap();
    engine.check_integrity().unwrap();
}

/// Logged transactions on different shards run together: each takes a log of its own, so one
/// that holds its keys (here, across a whole other transaction) does not keep another from
/// writing its log. A crash while both are open undoes both; a pool opened `fresh` over those
/// logs undoes neither (its keys are gone with it).
#[test]
fn logged_transactions_on_different_shards_run_together_and_a_crash_undoes_both() {
    let original = temp_pool("txn-lanes");
    let crashed = temp_pool("txn-lanes-crashed");
    let config = config(&original.0, Durability::Sync, IndexPlacement::Dram);
    let engine = open_fresh(config.clone());
    let a = b"a".to_vec();
    let b = (0..)
        .map(|i| format!("b{i}").into_bytes())
        .find(|key| engine.shard_index(key) != engine.shard_index(&a))
        .unwrap();
    engine.set(&a, b"old-a", 0, Expiry::Never).unwrap();
    engine.set(&b, b"old-b", 0, Expiry::Never).unwrap();
    engine.commit().unwrap();
    let first = engine.transaction(&[&a], &[&a]).unwrap();
    first.set(&a, b"new-a", 0, Expiry::Never).unwrap();
    let (wrote, written) = std::sync::mpsc::channel();
    let (go, going) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|scope| {
        let (engine, b) = (&engine, &b);
        scope.spawn(move || {
            let second = engine.transaction(&[b], &[b]).unwrap();
            second.set(b, b"new-b", 0, Expiry::Never).unwrap();
            wrote.send(()).unwrap();
            going.recv().unwrap();
            second.finish().unwrap();
        });
        // Not a timing threshold: a minute means the second transaction waits for the first.
        written
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("the second transaction waited for the first one's log");
        crash_copy(&original.0, &crashed.0);
        go.send(()).unwrap();
    });
    first.finish().unwrap();
    drop(engine);
    let crashed_config = config.clone();
    let reopened = Engine::open(EngineConfig {
        pool: PoolLocation::File(crashed.0.clone()),
        ..crashed_config.clone()
    })
    .unwrap();
    assert_eq!(reopened.recovery_report().transaction_keys_restored, 2);
    assert_eq!(value(&reopened, &a).map(|v| v.0), Some(b"old-a".to_vec()));
    assert_eq!(value(&reopened, &b).map(|v| v.0), Some(b"old-b".to_vec()));
    drop(reopened);
    let original = Engine::open(config).unwrap();
    assert_eq!(original.recovery_report().transaction_keys_restored, 0);
    assert_eq!(value(&original, &b).map(|v| v.0), Some(b"new-b".to_vec()));
    drop(original);
}

/// A pool opened `fresh` ends the logs a crash left active without undoing them: the keys they
/// name went with the pool's contents.
#[test]
fn a_fresh_pool_undoes_no_transaction_of_the_old_one() {
    let original = temp_pool("txn-fresh");
    let crashed = temp_pool("txn-fresh-crashed");
    let config = config(&original.0, Durability::None, IndexPlacement::Dram);
    let engine = open_fresh(config.clone());
    engine.set(b"a", b"old-a", 0, Expiry::Never).unwrap();
    let txn = engine.transaction(&[b"a"], &[b"a"]).unwrap();
    txn.set(b"a", b"new-a", 0, Expiry::Never).unwrap();
    crash_copy(&original.0, &crashed.0);
    txn.finish().unwrap();
    drop(engine);
    let fresh = Engine::open(EngineConfig {
        pool: PoolLocation::File(crashed.0.clone()),
        fresh: true,
        ..config
    })
    .unwrap();
    assert_eq!(fresh.recovery_report().transaction_keys_restored, 0);
    assert_eq!(
        value(&fresh, b"a"),
        None,
        "the old transaction's key stays gone"
    );
}
