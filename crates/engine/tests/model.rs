//! Model-based test: random operation sequences against the engine and a `HashMap` model with
//! a controlled clock, on a pool so small that eviction and index growth happen constantly.
//!
//! Invariants checked:
//! - every value the engine returns is exactly the model's current value for that key (never a
//!   stale, deleted, expired or torn one); flags and expiry match too;
//! - the engine may drop an item at any time (eviction): the model then forgets it too, and
//!   the key must stay absent until written again; except in a *strict* run, whose live data
//!   fits the pool (the cleaner gives back what overwrites, deletes and expiry leave dead), where
//!   a missing live item is a failure and nothing may be evicted;
//! - conditional stores, CAS, incr/decr and append answer as the model says when the item is
//!   present in both;
//! - `ItemRef::fetched` is "read since written": false on the first read after a write, true
//!   after a read or a touch, through merge eviction carrying the item forward;
//! - `check_integrity` holds after every sequence;
//! - on a file pool with the index in the pool, a reopen after a crash (the engine dropped
//!   without closing) or a clean close maps the index files and finds exactly the items the
//!   model holds, with their values, flags, expiry and CAS (`the_index_in_the_pool_survives_...`).
//! - with a flash tier below the pool (a RAM disk of a dozen 16 KiB regions, keys sharing 6
//!   of the stored hash bits), the same: items move to flash and back, and a value read is
//!   never stale; a reopen after a clean close holds exactly the model's items, one after a
//!   crash holds a subset of them (what flash had not written is gone), never an older value.
#![allow(
    clippy::too_many_lines,
    reason = "a test scenario reads best as one function"
)]

use std::collections::HashMap;
use std::sync::Arc;

use proptest::prelude::*;
use strata_engine::*;

const START_MS: u64 = 1_800_000_000_000;

#[derive(Clone, Debug)]
enum Op {
    Set {
        key: u8,
        len: u16,
        ttl_secs: Option<u8>,
        flags: u32,
    },
    Add {
        key: u8,
        len: u16,
    },
    Replace {
        key: u8,
        len: u16,
    },
    CasLast {
        key: u8,
        len: u16,
    },
    Append {
        key: u8,
        len: u16,
    },
    Incr {
        key: u8,
        delta: u8,
    },
    Delete {
        key: u8,
    },
    Touch {
        key: u8,
        ttl_secs: Option<u8>,
    },
    Get {
        key: u8,
    },
    Advance {
        secs: u8,
    },
    Expire,
    /// Cleaning ahead, as the server's maintenance thread runs it, `calls` times in a row: the
    /// second and later find every shard quiet, so on DRAM they compact and give free
    /// segments' pages back, which later writes take as never written.
    CleanAhead {
        calls: u8,
    },
    Flush,
    /// A whole SCAN, `count` keys asked per call.
    Scan {
        count: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0u8..24;
    let len = prop_oneof![0u16..40, 0u16..1500, Just(3000u16)];
    prop_oneof![
        6 => (key.clone(), len.clone(), proptest::option::of(1u8..60), any::<u32>())
            .prop_map(|(key, len, ttl_secs, flags)| Op::Set { key, len, ttl_secs, flags }),
        1 => (key.clone(), len.clone()).prop_map(|(key, len)| Op::Add { key, len }),
        1 => (key.clone(), len.clone()).prop_map(|(key, len)| Op::Replace { key, len }),
        1 => (key.clone(), len.clone()).prop_map(|(key, len)| Op::CasLast { key, len }),
        1 => (key.clone(), 0u16..50).prop_map(|(key, len)| Op::Append { key, len }),
        1 => (key.clone(), any::<u8>()).prop_map(|(key, delta)| Op::Incr { key, delta }),
        2 => key.clone().prop_map(|key| Op::Delete { key }),
        1 => (key.clone(), proptest::option::of(1u8..60)).prop_map(|(key, ttl_secs)| Op::Touch { key, ttl_secs }),
        6 => key.prop_map(|key| Op::Get { key }),
        1 => (1u8..30).prop_map(|secs| Op::Advance { secs }),
        1 => Just(Op::Expire),
        1 => (1u8..4).prop_map(|calls| Op::CleanAhead { calls }),
        1 => Just(Op::Flush),
        1 => (1u8..40).prop_map(|count| Op::Scan { count }),
    ]
}

/// [`op`] over ten times as many keys with mostly large values, reads and writes only: more
/// data than the flash harness's memory, so items go down to flash and regions fill and are
/// written, then come back.
fn flash_op() -> impl Strategy<Value = Op> {
    let key = 0u8..=255;
    let len = prop_oneof![0u16..1500, 1000u16..3000];
    prop_oneof![
        8 => (key.clone(), len.clone(), proptest::option::of(1u8..60), any::<u32>())
            .prop_map(|(key, len, ttl_secs, flags)| Op::Set { key, len, ttl_secs, flags }),
        1 => (key.clone(), len).prop_map(|(key, len)| Op::Replace { key, len }),
        1 => (key.clone(), 0u16..50).prop_map(|(key, len)| Op::Append { key, len }),
        2 => key.clone().prop_map(|key| Op::Delete { key }),
        6 => key.prop_map(|key| Op::Get { key }),
        1 => (1u8..30).prop_map(|secs| Op::Advance { secs }),
        1 => (1u8..4).prop_map(|calls| Op::CleanAhead { calls }),
        1 => (1u8..40).prop_map(|count| Op::Scan { count }),
    ]
}

#[derive(Clone, Debug, PartialEq)]
struct Item {
    value: Vec<u8>,
    flags: u32,
    expires_at_ms: Option<u64>,
    cas: u64,
    /// Read since written (before the read that returned it, for an engine answer).
    fetched: bool,
}

struct Harness {
    engine: Engine,
    /// With a flash tier: a crash may lose what it had not written.
    flash: bool,
    clock: ManualClock,
    model: HashMap<Vec<u8>, Item>,
    counter: u64,
    config: EngineConfig,
    /// Live data fits: an item missing that the model holds is lost, not evicted.
    strict: bool,
}

fn key_name(key: u8) -> Vec<u8> {
    format!("key-{key:03}").into_bytes()
}

impl Harness {
    fn new(policy: EvictionPolicy) -> Self {
        Self::with_pool(policy, PoolLocation::Dram, IndexPlacement::Dram)
    }

    fn with_pool(policy: EvictionPolicy, pool: PoolLocation, placement: IndexPlacement) -> Self {
        Self::with_tiers(policy, pool, placement, None)
    }

    /// A flash tier of twelve 16 KiB regions on a RAM disk, keys sharing hash bits.
    fn with_flash(policy: EvictionPolicy, pool: PoolLocation, placement: IndexPlacement) -> Self {
        Self::with_flash_regions(policy, pool, placement, 12)
    }

    /// [`Harness::with_flash`] with `regions` regions.
    fn with_flash_regions(
        policy: EvictionPolicy,
        pool: PoolLocation,
        placement: IndexPlacement,
        regions: usize,
    ) -> Self {
        let medium: Arc<dyn strata_pool::Medium> = Arc::new(
            strata_pool::testing::MemoryMedium::new(4096 + regions * 16384, 4096),
        );
        Self::with_tiers(
            policy,
            pool,
            placement,
            Some(FlashConfig {
                medium: FlashMedium::Given(medium),
                region_size_bytes: 16384,
                admission: FlashAdmission::All,
                write_bytes_per_sec_max: 0,
                read_delay_for_tests: std::time::Duration::ZERO,
            }),
        )
    }

    fn with_tiers(
        policy: EvictionPolicy,
        pool: PoolLocation,
        placement: IndexPlacement,
        flash: Option<FlashConfig>,
    ) -> Self {
        let clock = ManualClock::new(START_MS);
        let with_flash = flash.is_some();
        let config = EngineConfig {
            // With flash, a memory tier smaller than the keys' data, so live items go down.
            memory_bytes: if with_flash { 14 * 4096 } else { 48 * 4096 },
            segment_size_bytes: 4096,
            shard_count: 2,
            eviction: policy,
            item_size_bytes_expected: 2048,
            clock: Arc::new(clock.clone()),
            pool,
            fresh: true,
            index_placement: placement,
            value_len_max: 3500,
            hash_collisions_for_tests: with_flash,
            flash,
            ..EngineConfig::default()
        };
        let engine = Engine::open(config.clone()).unwrap();
        Harness {
            engine,
            flash: with_flash,
            clock,
            model: HashMap::new(),
            counter: 0,
            config: EngineConfig {
                fresh: false,
                ..config
            },
            strict: false,
        }
    }

    /// A memory-only harness whose live data (24 keys of at most 3 KiB and some appends) fits
    /// the pool, so nothing may be evicted (see `Harness::strict`).
    fn strict(policy: EvictionPolicy) -> Self {
        Harness {
            strict: true,
            ..Self::new(policy)
        }
    }

    /// A memory-only harness with a pool of `memory_bytes`.
    fn with_memory(policy: EvictionPolicy, memory_bytes: u64) -> Self {
        let mut harness = Self::new(policy);
        let config = EngineConfig {
            memory_bytes,
            fresh: true,
            ..harness.config.clone()
        };
        harness.engine = Engine::open(config).unwrap();
        harness.config.memory_bytes = memory_bytes;
        harness
    }

    /// The engine no longer holds `key`, which the model does: allowed (and final) when
    /// evicted, a lost item in a strict run.
    /// Items the flash tier has dropped so far. Its reclaim runs on its own thread, so an item
    /// a read has just found on flash may be gone by the next operation.
    fn flash_evictions(&self) -> u64 {
        self.engine
            .stats()
            .flash
            .map_or(0, |flash| flash.evicted_items)
    }

    /// After a read found `key` and the next operation on it did not: allowed only when the
    /// flash tier dropped items in between (`evictions` was its count before the read), as a
    /// cache may; then the model forgets the key. A lost item fails here.
    fn left_meanwhile(&mut self, key: &[u8], evictions: u64) {
        assert!(
            self.flash_evictions() > evictions,
            "{key:?} was read, then missing, and nothing was evicted: {:?}",
            self.engine.stats()
        );
        self.forget_evicted(key);
    }

    fn forget_evicted(&mut self, key: &[u8]) {
        assert!(
            !self.strict,
            "{key:?} is missing though live data fits: {:?}",
            self.engine.stats()
        );
        self.model.remove(key);
    }

    /// Closes the engine cleanly or drops it (a crash), reopens it, and checks that it holds
    /// exactly the model's items. Returns the recovery report.
    fn reopen(&mut self, clean: bool) -> RecoveryReport {
        self.reopen_with_shards_changing(clean, 0)
    }

    /// [`Harness::reopen`]; after a crash with the index in the pool, the shards of the bits
    /// of `changing` are found as a crash in the middle of one of their changes leaves them:
    /// state 1 in their control lines (`docs/POOL_FORMAT.md`), so they are rebuilt from their
    /// segments and their flash entries read back from their tables.
    fn reopen_with_shards_changing(&mut self, clean: bool, changing: u8) -> RecoveryReport {
        // What the cache evicted before the stop (allowed, and final) leaves the model first.
        let keys: Vec<Vec<u8>> = self.model.keys().cloned().collect();
        for key in keys {
            if self.engine.peek(&key, item_of).is_none() && self.live(&key).is_some() {
                self.forget_evicted(&key);
            }
        }
        let items_before = self.engine.stats().items;
        if clean {
            self.engine.close().unwrap();
        }
        let placeholder = Engine::open(EngineConfig::default()).unwrap();
        drop(std::mem::replace(&mut self.engine, placeholder));
        if let (false, PoolLocation::File(pool), IndexPlacement::Pool) =
            (clean, &self.config.pool, self.config.index_placement)
        {
            let control = format!("{}.index/control", pool.display());
            let mut bytes = std::fs::read(&control).unwrap();
            for shard in (0..self.config.shard_count).filter(|s| changing & (1 << s) != 0) {
                let state = 64 * (1 + shard);
                if bytes[state..state + 8] == [0; 8] {
                    bytes[state] = 1;
                }
            }
            std::fs::write(&control, bytes).unwrap();
        }
        self.engine = Engine::open(self.config.clone()).unwrap();
        self.engine.check_integrity().unwrap();
        // Peeks first: a read could promote a flash item, and the write that makes in memory
        // drops unread the flash entries sharing its hash bits, other keys' only copies
        // among them (see the engine's `shard::flash`), a loss this check must not see.
        let keys: Vec<Vec<u8>> = self.model.keys().cloned().collect();
        for key in keys {
            let expected = self.live(&key);
            let got = self.engine.peek(&key, item_of);
            match (got, expected) {
                (Some(got), Some(expected)) => {
                    assert_eq!((&got.value, got.flags), (&expected.value, expected.flags));
                    assert_eq!(got.expires_at_ms, expected.expires_at_ms);
                    if expected.cas != 0 {
                        assert_eq!(got.cas, expected.cas, "CAS survives");
                    }
                }
                (None, None) => {}
                // What the flash tier had not written when the process died is gone.
                (None, Some(_)) if self.flash && !clean => {
                    self.model.remove(&key);
                }
                (got, expected) => panic!("{key:?}: after reopen {got:?}, model {expected:?}"),
            }
        }
        // A rebuilt index may have forgotten reads: one read of every key makes the model and
        // the engine agree again (what it evicts, as any read may, leaves the model).
        let keys: Vec<Vec<u8>> = self.model.keys().cloned().collect();
        for key in keys {
            match self.engine.get(&key, item_of) {
                Some(_) => self.model.get_mut(&key).expect("live").fetched = true,
                None => self.forget_evicted(&key),
            }
        }
        if !self.flash {
            assert_eq!(
                self.engine.stats().items,
                items_before,
                "the same items are indexed (expired ones included)"
            );
        }
        self.engine.recovery_report().clone()
    }

    fn now(&self) -> u64 {
        self.clock.now_ms()
    }

    fn value(&mut self, len: u16) -> Vec<u8> {
        self.counter += 1;
        let stamp = self.counter.to_string();
        let mut value = stamp.into_bytes();
        value.resize(len as usize, b'x');
        value
    }

    fn expiry(&self, ttl_secs: Option<u8>) -> Expiry {
        ttl_secs.map_or(Expiry::Never, |s| {
            Expiry::AtMs(self.now() + u64::from(s) * 1000)
        })
    }

    /// The model's view of `key` right now (dropping it if expired).
    fn live(&mut self, key: &[u8]) -> Option<Item> {
        let now = self.now();
        if self
            .model
            .get(key)
            .is_some_and(|i| i.expires_at_ms.is_some_and(|at| at <= now))
        {
            self.model.remove(key);
        }
        self.model.get(key).cloned()
    }

    /// Reads from the engine and reconciles: a present item must equal the model's. The read
    /// marks the item fetched in both.
    fn read(&mut self, key: &[u8]) -> Option<Item> {
        let got = self.engine.get(key, item_of);
        let expected = self.live(key);
        match (&got, &expected) {
            (Some(got), Some(expected)) => {
                assert_eq!(got.value, expected.value, "value of {key:?}");
                assert_eq!(got.flags, expected.flags, "flags of {key:?}");
                assert_eq!(
                    got.expires_at_ms, expected.expires_at_ms,
                    "expiry of {key:?}"
                );
                if expected.cas != 0 {
                    assert_eq!(got.cas, expected.cas, "cas of {key:?}");
                }
                assert_eq!(got.fetched, expected.fetched, "fetched of {key:?}");
                self.model.get_mut(key).expect("live").fetched = true;
            }
            (Some(got), None) => panic!("engine returned {key:?} = {got:?} which the model lacks"),
            (None, Some(_)) => self.forget_evicted(key),
            (None, None) => {}
        }
        got
    }

    fn run(&mut self, op: Op) {
        match op {
            Op::Set {
                key,
                len,
                ttl_secs,
                flags,
            } => {
                let (key, value, expiry) = (key_name(key), self.value(len), self.expiry(ttl_secs));
                let cas = self.engine.set(&key, &value, flags, expiry).unwrap();
                let expires_at_ms = match expiry {
                    Expiry::AtMs(at) => Some(at),
                    _ => None,
                };
                self.model.insert(
                    key,
                    Item {
                        value,
                        flags,
                        expires_at_ms,
                        cas,
                        fetched: false,
                    },
                );
            }
            Op::Add { key, len } | Op::Replace { key, len } | Op::CasLast { key, len } => {
                self.conditional(op_condition(&op), key_name(key), len);
            }
            Op::Append { key, len } => {
                let key = key_name(key);
                let data = self.value(len);
                let evictions = self.flash_evictions();
                let before = self.read(&key);
                let result = self.engine.concat(&key, &data, false).unwrap();
                match (before, result) {
                    (Some(mut item), Some(cas)) => {
                        item.value.extend_from_slice(&data);
                        item.cas = cas;
                        item.fetched = false;
                        self.model.insert(key, item);
                    }
                    (Some(_), None) => self.left_meanwhile(&key, evictions),
                    (None, None) => {}
                    (before, result) => panic!("append {before:?} → {result:?}"),
                }
            }
            Op::Incr { key, delta } => self.incr(key_name(key), u64::from(delta)),
            Op::Delete { key } => {
                let key = key_name(key);
                let evictions = self.flash_evictions();
                let before = self.read(&key);
                let outcome = self.engine.delete(&key, None).unwrap();
                if before.is_some() && outcome == DeleteOutcome::NotFound {
                    return self.left_meanwhile(&key, evictions);
                }
                let expected = if before.is_some() {
                    DeleteOutcome::Deleted
                } else {
                    DeleteOutcome::NotFound
                };
                assert_eq!(outcome, expected);
                self.model.remove(&key);
            }
            Op::Touch { key, ttl_secs } => {
                let key = key_name(key);
                let evictions = self.flash_evictions();
                let before = self.read(&key);
                let expiry = self.expiry(ttl_secs);
                let touched = self.engine.touch(&key, expiry).unwrap();
                if before.is_some() && !touched {
                    return self.left_meanwhile(&key, evictions);
                }
                assert_eq!(touched, before.is_some());
                if let Some(mut item) = before {
                    item.expires_at_ms = match expiry {
                        Expiry::AtMs(at) => Some(at),
                        _ => None,
                    };
                    // A touch is an access, and keeps the item's reads.
                    item.fetched = true;
                    self.model.insert(key, item);
                }
            }
            Op::Get { key } => {
                self.read(&key_name(key));
            }
            Op::Advance { secs } => self.clock.advance_ms(u64::from(secs) * 1000),
            Op::Expire => {
                self.engine.expire().unwrap();
            }
            Op::CleanAhead { calls } => {
                for _ in 0..calls {
                    self.engine.clean_ahead().unwrap();
                }
            }
            Op::Flush => {
                self.engine.flush_all(0).unwrap();
                self.model.clear();
            }
            Op::Scan { count } => self.scan(usize::from(count)),
        }
    }

    /// A whole SCAN with nothing changing meanwhile: every key it returns is live in the model
    /// (never a deleted, expired or stranger key, wherever its record was: memory or flash),
    /// and every key the engine holds is returned.
    fn scan(&mut self, count: usize) {
        let mut seen = std::collections::HashSet::new();
        let mut cursor = 0;
        loop {
            cursor = self.engine.scan(cursor, count, &mut |key| {
                seen.insert(key.to_vec());
            });
            if cursor == 0 {
                break;
            }
        }
        for key in &seen {
            assert!(
                self.live(key).is_some(),
                "SCAN returned {key:?}, which the model lacks"
            );
        }
        let held: Vec<Vec<u8>> = self.model.keys().cloned().collect();
        for key in held {
            if self.engine.contains(&key) {
                assert!(
                    seen.contains(&key),
                    "SCAN missed {key:?}, which the engine holds"
                );
            }
        }
    }

    fn conditional(&mut self, condition: fn(Option<&Item>) -> Condition, key: Vec<u8>, len: u16) {
        let before = self.read(&key);
        let value = self.value(len);
        let condition = condition(before.as_ref());
        let options = StoreOptions {
            client_flags: 1,
            expiry: Expiry::Never,
            condition,
            kind: strata_engine::Kind::String,
        };
        let outcome = self.engine.store(&key, &value, options).unwrap();
        let expected_store = match condition {
            Condition::Always => true,
            Condition::IfAbsent => before.is_none(),
            Condition::IfPresent => before.is_some(),
            Condition::IfCas(cas) => before.as_ref().is_some_and(|b| b.cas == cas),
        };
        match outcome {
            StoreOutcome::Stored(cas) => {
                assert!(expected_store, "{condition:?} stored over {before:?}");
                self.model.insert(
                    key,
                    Item {
                        value,
                        flags: 1,
                        expires_at_ms: None,
                        cas,
                        fetched: false,
                    },
                );
            }
            _ => assert!(
                !expected_store,
                "{condition:?} refused ({outcome:?}) with {before:?}"
            ),
        }
    }

    fn incr(&mut self, key: Vec<u8>, delta: u64) {
        let evictions = self.flash_evictions();
        let before = self.read(&key);
        let result = self.engine.arith(&key, delta, false).unwrap();
        match (before, result) {
            (None, Arith::NotFound) => {}
            (Some(_), Arith::NotFound) => self.left_meanwhile(&key, evictions),
            (Some(item), Arith::NotNumeric) => assert!(parse_u64(&item.value).is_none()),
            (Some(mut item), Arith::Value(value, cas)) => {
                let old = parse_u64(&item.value).expect("numeric");
                assert_eq!(value, old.wrapping_add(delta));
                item.value = value.to_string().into_bytes();
                item.cas = cas;
                item.fetched = false;
                self.model.insert(key, item);
            }
            (before, result) => panic!("incr {before:?} → {result:?}"),
        }
    }
}

/// Merge eviction carries a read item forward with its frequency reset, but it stays fetched
/// (read since written): `h` must not forget a read because the item moved. Only the hot item
/// is ever read, so it is the only one merge carries, and `merged_items` says when it was.
#[test]
fn merge_eviction_keeps_a_carried_item_fetched() {
    let engine = Harness::new(EvictionPolicy::Merge).engine;
    let fetched = |engine: &Engine| engine.peek(b"hot", |item| item.fetched);
    engine.set(b"hot", b"value", 0, Expiry::Never).unwrap();
    assert_eq!(engine.get(b"hot", |item| item.fetched), Some(false));
    assert_eq!(
        fetched(&engine),
        Some(true),
        "the get was a read, the peek was not"
    );
    let mut cold = 0u32;
    while engine.stats().merged_items == 0 {
        let key = format!("cold-{cold}");
        engine
            .set(key.as_bytes(), &[b'c'; 300], 0, Expiry::Never)
            .unwrap();
        cold += 1;
        assert!(cold < 100_000, "merge eviction never carried the hot item");
    }
    assert_eq!(
        fetched(&engine),
        Some(true),
        "carried forward, still fetched"
    );
    engine.set(b"hot", b"new value", 0, Expiry::Never).unwrap();
    assert_eq!(fetched(&engine), Some(false), "a write starts over");
    engine.check_integrity().unwrap();
}

fn item_of(item: ItemRef<'_>) -> Item {
    Item {
        value: item.value.to_vec(),
        flags: item.client_flags,
        expires_at_ms: item.expires_at_ms,
        cas: item.cas,
        fetched: item.fetched,
    }
}

fn op_condition(op: &Op) -> fn(Option<&Item>) -> Condition {
    match op {
        Op::Add { .. } => |_| Condition::IfAbsent,
        Op::Replace { .. } => |_| Condition::IfPresent,
        _ => |before| Condition::IfCas(before.map_or(12345, |b| b.cas)),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn engine_agrees_with_the_model_under_merge_eviction(ops in proptest::collection::vec(op(), 1..400)) {
        let mut harness = Harness::new(EvictionPolicy::Merge);
        for op in ops {
            harness.run(op);
        }
        harness.engine.check_integrity().unwrap();
    }

    /// Live data fits (a third of the pool at most): under every policy, `none` included, no
    /// write is refused, no live item goes missing and nothing is evicted, however much the
    /// overwrites, deletes, appends and expiry leave dead.
    #[test]
    fn no_live_item_is_lost_while_live_data_fits(ops in proptest::collection::vec(op(), 1..400), policy in 0..4u8) {
        let policy = [EvictionPolicy::Merge, EvictionPolicy::Fifo, EvictionPolicy::Random, EvictionPolicy::None][usize::from(policy)];
        let mut harness = Harness::strict(policy);
        for op in ops {
            harness.run(op);
        }
        harness.engine.check_integrity().unwrap();
        let stats = harness.engine.stats();
        prop_assert_eq!(stats.evicted_items, 0, "{:?}", stats);
    }

    #[test]
    fn engine_agrees_with_the_model_under_fifo_and_random(ops in proptest::collection::vec(op(), 1..300), fifo in any::<bool>()) {
        let policy = if fifo { EvictionPolicy::Fifo } else { EvictionPolicy::Random };
        let mut harness = Harness::new(policy);
        for op in ops {
            harness.run(op);
        }
        harness.engine.check_integrity().unwrap();
    }
}

fn pool_path(name: &str) -> std::path::PathBuf {
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    };
    std::path::PathBuf::from(dir).join(format!(
        "strata-model-{}-{name}-{:?}.pool",
        std::process::id(),
        std::thread::current().id()
    ))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// The index in the pool, through eviction, growth, expiry and flushes: each reopen, after a
    /// crash or a clean close, maps the files (every shard, nothing rebuilt) and holds exactly
    /// the model's items.
    #[test]
    fn the_index_in_the_pool_survives_crashes_and_clean_closes_exactly(
        chunks in proptest::collection::vec((proptest::collection::vec(op(), 1..120), any::<bool>()), 1..5)
    ) {
        let path = pool_path("index-in-pool");
        let mut harness = Harness::with_pool(
            EvictionPolicy::Merge,
            PoolLocation::File(path.clone()),
            IndexPlacement::Pool,
        );
        for (ops, clean) in chunks {
            for op in ops {
                harness.run(op);
            }
            let report = harness.reopen(clean);
            prop_assert_eq!(report.shards_from_index_files, 2, "{:?}", report);
        }
        drop(harness);
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_dir_all(format!("{}.index", path.display()));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Memory and flash together: items go down to flash when evicted, come back when read
    /// twice or changed, and no read ever returns anything but the model's current value.
    #[test]
    fn engine_with_flash_agrees_with_the_model(ops in proptest::collection::vec(op(), 1..400), fifo in any::<bool>()) {
        let policy = if fifo { EvictionPolicy::Fifo } else { EvictionPolicy::Merge };
        let mut harness = Harness::with_flash(policy, PoolLocation::Dram, IndexPlacement::Dram);
        for op in ops {
            harness.run(op);
        }
        harness.engine.check_integrity().unwrap();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// A file pool with its index in the pool, and a flash tier: a clean close keeps exactly
    /// the model's items (flash's included); a crash keeps a subset, never an older value,
    /// also when it catches shards changing (their flash entries then read back from their
    /// tables).
    #[test]
    fn flash_survives_crashes_and_clean_closes_without_a_stale_value(
        chunks in proptest::collection::vec(
            (proptest::collection::vec(flash_op(), 1..400), any::<bool>(), 0u8..4),
            1..5,
        ),
        index_in_pool in any::<bool>(),
    ) {
        let path = pool_path("flash");
        let placement = if index_in_pool { IndexPlacement::Pool } else { IndexPlacement::Dram };
        // Flash room for every write of the run: a full tier would evict at a clean close too,
        // as it makes room for the regions the close writes.
        let mut harness = Harness::with_flash_regions(
            EvictionPolicy::Merge,
            PoolLocation::File(path.clone()),
            placement,
            256,
        );
        for (ops, clean, changing) in chunks {
            for op in ops {
                harness.run(op);
            }
            harness.reopen_with_shards_changing(clean, changing);
        }
        drop(harness);
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_dir_all(format!("{}.index", path.display()));
    }
}

/// 37 keys whose live data fits: the cleaner keeps every one of them (a missing one fails
/// the run), through 20,000 overwrites, appends, counters and expiries.
#[test]
fn a_long_run_with_counters_and_numbers_keeps_integrity() {
    let mut harness = Harness::strict(EvictionPolicy::Merge);
    long_run(&mut harness, 37);
    let stats = harness.engine.stats();
    assert_eq!(stats.evicted_items, 0, "{stats:?}");
    assert!(stats.cleaner_segments_freed > 0, "{stats:?}");
}

/// 251 keys, more live data (about 120 KB) than the pool (80 KiB) holds: eviction runs beside
/// the cleaner.
#[test]
fn a_long_run_over_more_than_memory_keeps_integrity() {
    let mut harness = Harness::with_memory(EvictionPolicy::Merge, 20 * 4096);
    long_run(&mut harness, 251);
    let stats = harness.engine.stats();
    assert!(stats.evicted_segments > 0, "{stats:?}");
}

/// The long run with a flash tier: items go to flash and come back (both counted), and every
/// read agrees with the model.
#[test]
fn a_long_run_with_flash_moves_items_both_ways() {
    // FIFO: merge would carry these few, always-read items forward instead of evicting them.
    let mut harness = Harness::with_flash(
        EvictionPolicy::Fifo,
        PoolLocation::Dram,
        IndexPlacement::Dram,
    );
    long_run(&mut harness, 251);
    let flash = harness.engine.stats().flash.expect("a flash tier");
    assert!(
        flash.appended_items > 0,
        "{flash:?} {:?}",
        harness.engine.stats()
    );
    assert!(flash.hits > 0, "{flash:?}");
    assert!(flash.promoted_items > 0, "{flash:?}");
}

fn long_run(harness: &mut Harness, keys: u32) {
    for i in 0..20_000u32 {
        let key = (i % keys) as u8;
        let op = match i % 7 {
            0 => Op::Set {
                key,
                len: (i % 900) as u16,
                ttl_secs: (i % 3 == 0).then_some(5),
                flags: i,
            },
            1 => Op::Incr { key, delta: 3 },
            2 => Op::Get { key },
            3 => Op::Append { key, len: 5 },
            4 => Op::Touch {
                key,
                ttl_secs: None,
            },
            5 if i % 500 == 5 => Op::Advance { secs: 3 },
            _ => Op::Get {
                key: key.wrapping_add(1),
            },
        };
        harness.run(op);
    }
    harness.engine.check_integrity().unwrap();
}

/// Found by a 3,000-case run of `flash_survives_crashes_and_clean_closes_without_a_stale_value`:
/// 36 SETs (many with a 1-second expiry), a crash with the index in DRAM, then three SETs; the
/// last, of a 2,806-byte value, was refused with `OutOfMemory` where a cache must evict (the
/// cause: see `merge_eviction_never_refuses_a_value_over_half_a_segment`).
#[test]
fn a_set_after_a_crash_with_flash_is_not_refused_for_memory() {
    let path = pool_path("flash-oom");
    let mut harness = Harness::with_flash_regions(
        EvictionPolicy::Merge,
        PoolLocation::File(path.clone()),
        IndexPlacement::Dram,
        256,
    );
    // Each chunk: its SETs (key, value length, TTL), then a reopen (clean?, shards changing).
    type Chunk<'a> = (&'a [(u8, u16, Option<u8>)], bool, u8);
    let chunks: [Chunk; 2] = [
        (
            &[
                (88, 1054, Some(1)),
                (21, 1198, Some(1)),
                (4, 1750, Some(1)),
                (118, 798, Some(1)),
                (195, 806, Some(1)),
                (28, 1446, Some(1)),
                (0, 0, None),
                (183, 1102, None),
                (201, 1462, Some(1)),
                (29, 1238, Some(1)),
                (0, 1286, Some(1)),
                (0, 1014, None),
                (4, 502, Some(1)),
                (0, 870, None),
                (0, 1070, Some(1)),
                (97, 174, Some(1)),
                (29, 566, None),
                (0, 1246, Some(1)),
                (184, 630, None),
                (0, 0, None),
                (4, 1414, Some(1)),
                (111, 1382, None),
                (211, 0, Some(1)),
                (21, 310, None),
                (2, 774, Some(1)),
                (181, 798, Some(1)),
                (66, 1462, Some(1)),
                (77, 38, None),
                (153, 518, Some(1)),
                (118, 2718, None),
                (2, 1334, None),
                (158, 1166, None),
                (40, 1326, None),
                (127, 798, Some(1)),
                (162, 590, None),
                (11, 1278, None),
            ],
            false,
            0,
        ),
        (
            &[(40, 0, None), (88, 1214, Some(1)), (21, 2806, Some(1))],
            false,
            0,
        ),
    ];
    for (sets, clean, changing) in chunks {
        for &(key, len, ttl_secs) in sets {
            harness.run(Op::Set {
                key,
                len,
                ttl_secs,
                flags: 1,
            });
        }
        harness.reopen_with_shards_changing(clean, changing);
    }
    drop(harness);
    let _ = std::fs::remove_file(&path);
}

/// Merge eviction carries an evicted segment's hot items (up to half a segment) into the
/// segment it frees, ahead of the write that asked for it. A value over half a segment then
/// found no room in segment after segment, and after eight the store was refused with
/// `OutOfMemory`, where a cache must evict. Memory tier only: a full cache of small items, all
/// read (hot), then values of 70% of a segment.
#[test]
fn merge_eviction_never_refuses_a_value_over_half_a_segment() {
    let mut harness = Harness::new(EvictionPolicy::Merge);
    for key in 0..=255u8 {
        harness.run(Op::Set {
            key,
            len: 600,
            ttl_secs: None,
            flags: 1,
        });
        harness.run(Op::Get { key });
    }
    for key in 0..=255u8 {
        harness.run(Op::Get { key });
        harness.run(Op::Set {
            key,
            len: 2870,
            ttl_secs: None,
            flags: 2,
        });
    }
}
