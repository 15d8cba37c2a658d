//! Opening and closing the engine: pool, root area, shards, budget.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use strata_pool::testing::SimulatedPersistence;
use strata_pool::{
    Backend, Geometry, IndexFiles, Location, OpenMode, Opened, Pool, PoolOptions, TableObserver,
};

use crate::config::{
    Durability, EngineConfig, FlashAdmission, FlashMedium, IndexPlacement, PoolLocation,
};
use crate::error::OpenError;
use crate::flash::tiering::{self, FlashWorker};
use crate::flash::{FlashError, FlashTier};
use crate::index::{Index, TableHome, INDEX_BYTES_PER_ITEM};
use crate::index_files::{self, Anchor};
use crate::record::KEY_LEN_MAX;
use crate::recovery::{self, RecoveryPlan, RecoveryReport};
use crate::shard::{Shard, ShardLock};
use crate::{record, root, snapshot, Engine, FreePool, Inner, Padded, SeqState};

/// What recovery does with a reopened pool, from how it was left.
fn recovery_plan(opened: Opened, previous: Option<Durability>) -> RecoveryPlan {
    if opened.stores_kept() {
        return RecoveryPlan::Recover;
    }
    // A reboot or power loss after an unclean stop: only what was persisted survived, and
    // only `interval` and `sync` persisted in an order recovery can trust.
    match previous {
        Some(Durability::Interval { .. } | Durability::Sync) => RecoveryPlan::Recover,
        Some(Durability::None) | None => RecoveryPlan::DiscardAll,
    }
}

/// A shard keeps at most its share of segments divided by this open at once.
const OPEN_SHARE_DIVISOR: usize = 4;
/// Most open segments (TTL buckets being written) per shard.
const OPEN_SEGMENTS_PER_SHARD_MAX: usize = 32;
/// A shard keeps at most its share of segments divided by this as cleaner segments (one per
/// TTL bucket the cleaner moves records of, up to this): with one per bucket and no cap, a
/// pool of 20 segments per shard and five TTL buckets held five cleaner segments per shard
/// next to five open ones, half the pool partly filled, and a crash test's writes evicted.
const CLEAN_SHARE_DIVISOR: usize = 16;
/// Most cleaner segments per shard.
const CLEAN_SEGMENTS_PER_SHARD_MAX: usize = 8;

/// Without a flash tier, a new shard's index starts with room for this fraction of the items
/// its share of the budget would hold at the expected item size, and grows to what its items
/// need (see `Shard::index_items_expected`): 1 KiB values need a sixteenth of what 56-byte
/// items do.
const INDEX_START_DIVISOR: u64 = 16;
/// Share of the memory budget, in percent, that the index entries of flash items may take:
/// every flash item costs an index slot in DRAM, so without a bound a flash tier of small
/// items would grow the index past `--memory` and squeeze the memory tier to nothing.
const FLASH_INDEX_SHARE_PERCENT: u64 = 50;

/// Most flash items a shard indexes (see [`FLASH_INDEX_SHARE_PERCENT`]).
fn flash_items_per_shard_max(memory_bytes: u64, shard_count: usize) -> u64 {
    memory_bytes * FLASH_INDEX_SHARE_PERCENT / 100 / INDEX_BYTES_PER_ITEM / shard_count as u64
}

impl Engine {
    /// Opens the engine: creates the pool, or reopens it and recovers its items.
    pub fn open(config: EngineConfig) -> Result<Engine, OpenError> {
        config.validate().map_err(OpenError::Config)?;
        let geometry = Geometry {
            segment_size_bytes: config.segment_size_bytes,
            segment_count: config.segment_count(),
        };
        let location = match &config.pool {
            PoolLocation::Dram => Location::Dram,
            PoolLocation::File(path) => Location::File(path.clone()),
            PoolLocation::Simulated(simulation) => Location::Simulated(simulation.clone()),
        };
        let mode = if config.fresh {
            OpenMode::Fresh
        } else {
            OpenMode::OpenOrCreate
        };
        let pool = Pool::open(PoolOptions {
            location,
            geometry,
            mode,
        })?;
        let mut engine = Self::from_pool(pool, &config)?;
        if let PoolLocation::File(path) = &config.pool {
            let durable = config.durability != Durability::None;
            engine.open_txlog(path, durable, config.fresh)?;
        }
        Ok(engine)
    }

    /// Opens the transaction logs kept beside `pool` (as `Engine::open` does for a pool file)
    /// for an engine opened on an already open pool ([`Engine::from_pool`]: a simulated pool,
    /// or a crash image of one), and undoes each group they hold active. The power-failure
    /// tests run transactions on a simulated pool, logged this way, and cut them at any point.
    pub fn open_transaction_logs(&mut self, pool: &std::path::Path) -> Result<(), OpenError> {
        assert!(
            self.txlog.is_none(),
            "the transaction logs are open already"
        );
        let durable = self.inner.durability != Durability::None;
        self.open_txlog(pool, durable, false)
    }

    /// Opens the pool's transaction logs and undoes each group a crash interrupted (none when
    /// the pool was made `fresh`: their keys are gone with it).
    fn open_txlog(
        &mut self,
        pool: &std::path::Path,
        durable: bool,
        fresh: bool,
    ) -> Result<(), OpenError> {
        let failed = |error: std::io::Error| {
            let path = crate::txlog::path_for(pool);
            OpenError::Txlog(format!("{}: {error}", path.display()))
        };
        let (logs, pending) = crate::txlog::TxLogs::open(pool, durable, fresh).map_err(failed)?;
        if !pending.is_empty() {
            let mut restored = 0;
            for images in &pending {
                restored += self
                    .restore_images(images)
                    .map_err(|error| OpenError::Txlog(format!("undoing a transaction: {error}")))?;
            }
            logs.end_all()
                .map_err(|error| OpenError::Txlog(format!("ending it: {error}")))?;
            tracing::warn!(
                keys = restored,
                transactions = pending.len(),
                "transactions a crash interrupted were undone: their keys are as they were \
                 before them"
            );
            self.recovery.transaction_keys_restored = restored;
        }
        self.txlog = Some(logs);
        Ok(())
    }

    /// Opens the engine on an already open pool (tests reopen crash images this way): the root
    /// area, the index (files or DRAM), the shards, the flash tier, then recovery.
    pub fn from_pool(mut pool: Pool, config: &EngineConfig) -> Result<Engine, OpenError> {
        log_cut_short(&pool);
        let root = open_root(&mut pool, config)?;
        let segments = pool.take_segments();
        let geometry = pool.geometry();
        let memory_bytes = geometry.segment_count * geometry.segment_size_bytes;
        // Flash entries per shard carried over a switch of index placement after a clean close.
        let mut placement_switch_flash: Vec<Vec<crate::index::Entry>> = Vec::new();
        let files = open_index_files(
            config,
            &pool,
            root.shard_count,
            segments.len(),
            root.plan,
            &mut placement_switch_flash,
        )?;
        let built = build_shards(config, &pool, &root, &files, &segments);
        // A string past what one segment holds is kept in several records (`api::large`).
        let value_len_max = config.value_len_max;
        let (flash, flash_opened) = open_flash(config, &pool, root.plan, value_len_max)?;
        let inner = new_inner(InnerParts {
            config,
            pool: &pool,
            shards: built.shards,
            segment_count: segments.len(),
            shard_count: root.shard_count,
            seq_reserved: root.seq_reserved,
            root_area: root.area,
            value_len_max,
            flash,
            memory_bytes,
        });
        give_salvaged_flash(&inner, placement_switch_flash, &built.trusted);
        let snapshot = usable_snapshot(
            &inner,
            &mut pool,
            root.plan,
            files.is_some(),
            &built.trusted,
            segments.len(),
        );
        // Only a crash can leave a torn write at the end of a log; after a clean close every
        // invalid record is damage.
        let left = recovery::Left::of(pool.opened());
        let mut recovery = run_recovery(
            &inner,
            &pool,
            segments,
            snapshot,
            (root.plan, &built.trusted, left),
            config,
        )?;
        // Only a mapped index leaves the records untouched at open (a scan touched them all).
        // After a snapshot load the warmer is not worth it: on a server pinned to one core it
        // delayed the first hit by ~40 ms of the ~110 ms (docs/BENCHMARKS.md).
        let warmer = (recovery.shards_from_index_files > 0)
            .then(|| pool.populator().map(Warmer::spawn))
            .flatten();
        // A clean close settled every suspect before it saved the index; only a crash loses them.
        keep_flash_entries(&inner, &mut recovery, left.torn_possible);
        recovery.flash = flash_opened;
        if let Some(opened) = &recovery.flash {
            log_flash_open(opened, &recovery);
        }
        let inner = Arc::new(inner);
        let flash_worker = spawn_flash_worker(&inner)?;
        Ok(Engine {
            flash_worker: Mutex::new(flash_worker),
            inner,
            files,
            _warmer: warmer,
            pool: Mutex::new(pool),
            recovery,
            closed: AtomicBool::new(false),
            txlog: None,
        })
    }

    /// Where the index lives.
    pub fn index_placement(&self) -> IndexPlacement {
        if self.files.is_some() {
            IndexPlacement::Pool
        } else {
            IndexPlacement::Dram
        }
    }

    /// The durability level the engine runs with.
    pub fn durability(&self) -> Durability {
        self.inner.durability
    }

    /// What recovery found when the pool was opened.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.recovery
    }

    /// The pool's backend.
    pub fn backend(&self) -> Backend {
        self.pool.lock().backend()
    }

    /// What survives what.
    pub fn persistence_domain(&self) -> strata_pool::PersistenceDomain {
        self.pool.lock().domain()
    }

    /// The pool's path, or `(anonymous)`.
    pub fn pool_path(&self) -> std::path::PathBuf {
        self.pool.lock().path()
    }

    /// Largest string value accepted: the configured limit (a string longer than one record
    /// holds is kept in several, `api::large`).
    pub fn value_len_max(&self) -> usize {
        self.inner.value_len_max
    }

    /// Largest string value accepted for a key of `key_len` bytes: [`Engine::value_len_max`]
    /// whatever the key (a key's length only moves where a string starts taking several
    /// records, [`Engine::record_value_len_max`]).
    pub fn value_len_max_for_key(&self, _key_len: usize) -> usize {
        self.inner.value_len_max
    }

    /// Largest value one record holds for a key of `key_len` bytes (one segment's worth): a
    /// string past it is kept in several (`api::large`), other values are refused.
    pub fn record_value_len_max(&self, key_len: usize) -> usize {
        record::value_len_fitting(self.inner.segment_size_bytes, key_len)
    }

    /// Persists everything and marks the pool cleanly closed, so the next open knows nothing
    /// was lost. Writes after this are refused.
    pub fn close(&self) -> Result<(), strata_pool::PoolError> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // The flash thread stops first (it takes shard locks to reclaim); then every open
        // region is written, so the entries the index keeps point at records on the medium.
        drop(self.flash_worker.lock().take());
        if let Some(flash) = &self.inner.flash {
            // No suspect outlives the close: a restart would not know the keys it shadows.
            while tiering::settle_suspects(&self.inner, usize::MAX) > 0 {}
            flash_write_all(flash).map_err(|e| strata_pool::PoolError::Io {
                op: "write the flash tier",
                path: self.pool.lock().path(),
                message: e.to_string(),
            })?;
        }
        let mut locks: Vec<_> = self.inner.shards.iter().map(|s| s.0.write()).collect();
        for shard in &mut locks {
            // Deferred dead marks are applied too, so the pool and the snapshot agree.
            shard
                .persist_dirty(&self.inner)
                .map_err(|e| strata_pool::PoolError::Io {
                    op: "persist",
                    path: self.pool.lock().path(),
                    message: e.to_string(),
                })?;
        }
        let mut pool = self.pool.lock();
        if let Some(files) = &self.files {
            // The tables and control lines reach the medium before the pool says clean; the
            // control header then names the clean state the next open will find.
            for shard in &mut locks {
                shard.record_change();
                shard.index.persist()?;
            }
            files.bind(pool.info().pool_id, pool.state_seq() + 1);
            files.persist_control()?;
            return pool.close_clean(None);
        }
        // A pool in anonymous memory is gone with the process: no snapshot to save (its export
        // walked every slot of an index sized for the budget at every stop).
        if !pool.keeps_sidecar() {
            return pool.close_clean(None);
        }
        let shards: Vec<&Shard> = locks.iter().map(|guard| &**guard).collect();
        let payload = snapshot::save(&shards);
        pool.close_clean(Some(&payload))
    }

    /// For a pool opened with `simulation` watching it: what a power cut now would leave (see
    /// `SimulatedPersistence::crash_image`). Takes every shard's lock so no write is half-way
    /// through a copy.
    pub fn crash_image(
        &self,
        simulation: &SimulatedPersistence,
        keep_unpersisted_line: &mut dyn FnMut(usize) -> bool,
    ) -> Vec<u8> {
        let _locks: Vec<_> = self.inner.shards.iter().map(|s| s.0.hold()).collect();
        let live = self.pool.lock().live_image();
        simulation.crash_image(&live, keep_unpersisted_line)
    }

    /// For a simulated pool with its index in (simulated) files: what a power cut now would
    /// leave of both, at the same instant: the pool image, and the index directory's written to
    /// `index_target` (see `SimulatedPersistence::index_crash_image`).
    pub fn crash_images(
        &self,
        simulation: &SimulatedPersistence,
        index_target: &std::path::Path,
        keep_unpersisted_line: &mut dyn FnMut(usize) -> bool,
    ) -> Result<Vec<u8>, strata_pool::PoolError> {
        let _locks: Vec<_> = self.inner.shards.iter().map(|s| s.0.hold()).collect();
        if let Some(files) = &self.files {
            simulation.index_crash_image(files.dir(), index_target, keep_unpersisted_line)?;
        }
        let live = self.pool.lock().live_image();
        Ok(simulation.crash_image(&live, keep_unpersisted_line))
    }

    /// Checks every shard's invariants (costly; tests and `strata pool verify`).
    pub fn check_integrity(&self) -> Result<(), String> {
        for shard in self.inner.shards.iter() {
            shard.0.read().check_integrity(&self.inner)?;
        }
        Ok(())
    }
}

/// A background thread that faults a reopened pool's pages in, a chunk at a time, so reads soon
/// after a restart stop paying a page fault per first touch. Stopped and joined when the engine
/// is dropped (it briefly holds the pool, and so its file lock, while populating a chunk).
pub(crate) struct Warmer {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Warmer {
    fn spawn(populator: strata_pool::Populator) -> Warmer {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("strata-warm".into())
            .spawn(move || populator.run(&flag))
            .ok();
        Warmer { stop, thread }
    }
}

impl Drop for Warmer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Says that the pool file was found shorter than its geometry (and extended back).
fn log_cut_short(pool: &Pool) {
    if let Some(found_bytes) = pool.cut_at() {
        tracing::error!(
            pool = %pool.path().display(),
            found_bytes,
            expected_bytes = pool.geometry().pool_size_bytes(),
            "the pool file was cut short; it was extended back to its length, and the records \
             that lay past the cut are lost (the rest is served)"
        );
    }
}

/// The root area as `from_pool` leaves it: read (a reopened pool) and written back with this
/// session's durability, and what it says.
struct RootRead {
    area: strata_pool::RootArea,
    shard_count: u16,
    seq_reserved: u64,
    plan: RecoveryPlan,
}

/// Reads the pool's root area (a reopened pool), decides the recovery plan from how the pool
/// was left, and writes the root back with this session's durability, persisted.
fn open_root(pool: &mut Pool, config: &EngineConfig) -> Result<RootRead, OpenError> {
    let mut area = pool.take_root();
    let (shard_count, seq_reserved, previous_durability) = match pool.opened() {
        Opened::Created => (config.shard_count as u16, 1, None),
        Opened::Reopened { .. } => {
            let root = root::read(area.bytes()).map_err(OpenError::Root)?;
            let previous = Durability::from_code(root.durability.0, root.durability.1);
            (root.shard_count, root.seq_reserved, previous)
        }
    };
    let plan = recovery_plan(pool.opened(), previous_durability);
    root::write(
        area.bytes_mut(),
        root::Root {
            shard_count,
            seq_reserved,
            durability: config.durability.code(),
        },
    );
    area.persist()?;
    Ok(RootRead {
        area,
        shard_count,
        seq_reserved,
        plan,
    })
}

/// The pool's index files, with the index placed in the pool; `None` with it in DRAM (after
/// a switch from the pool placement following a clean close, the flash entries of the files
/// it leaves go to `placement_switch_flash` first: no segment names them).
fn open_index_files(
    config: &EngineConfig,
    pool: &Pool,
    shard_count: u16,
    segment_count: usize,
    plan: RecoveryPlan,
    placement_switch_flash: &mut Vec<Vec<crate::index::Entry>>,
) -> Result<Option<Arc<IndexFiles>>, OpenError> {
    let shards = usize::from(shard_count);
    Ok(match (&config.pool, config.index_placement) {
        (PoolLocation::File(path), IndexPlacement::Pool) => {
            Some(Arc::new(IndexFiles::open(path, shards, segment_count)?))
        }
        (PoolLocation::Simulated(simulation), IndexPlacement::Pool) => {
            let dir = config
                .simulated_index_dir
                .clone()
                .expect("checked by validate");
            let observer: Arc<dyn TableObserver> = simulation.clone();
            Some(Arc::new(IndexFiles::open_dir(
                dir,
                shards,
                segment_count,
                Some(observer),
            )?))
        }
        (PoolLocation::File(path), IndexPlacement::Dram) => {
            if config.flash.is_some() && plan == RecoveryPlan::Recover {
                *placement_switch_flash =
                    flash_entries_of_files(path, shard_count, segment_count, pool);
            }
            IndexFiles::remove(path);
            None
        }
        _ => None,
    })
}

/// The shards `build_shards` made, and which of them mapped their index from its files.
struct BuiltShards {
    shards: Box<[Padded<ShardLock>]>,
    trusted: Vec<bool>,
}

/// Makes the shards: each maps its index from the pool's files when they are current and its
/// books sane (trusted), else starts an empty index for recovery to rebuild (in files or DRAM)
/// with, from current files, the flash entries recovery indexes again.
fn build_shards(
    config: &EngineConfig,
    pool: &Pool,
    root: &RootRead,
    files: &Option<Arc<IndexFiles>>,
    segments: &[strata_pool::Segment],
) -> BuiltShards {
    let geometry = pool.geometry();
    let shard_count = root.shard_count;
    let per_shard = index_capacity_per_shard(config, geometry, shard_count);
    let mut trusted = vec![false; usize::from(shard_count)];
    let files_match = files.as_ref().is_some_and(|files| {
        root.plan == RecoveryPlan::Recover
            && index_files::files_match_pool(files, pool.info().pool_id, pool.opened())
    });
    let reusable = match files {
        Some(files) if files_match => index_files::shards_with_sane_books(
            files,
            segments,
            usize::from(shard_count),
            geometry.segment_size_bytes as usize,
        ),
        _ => vec![false; usize::from(shard_count)],
    };
    // A shard rebuilt from its segments (a process crash caught it changing, or its books
    // are damaged) keeps its flash items, which no segment names, when the tables it was
    // using are current: they are read back from them (see `index_files`).
    let salvage_flash = files_match && config.flash.is_some();
    let shards: Box<[_]> = (0..shard_count)
        .map(|id| {
            let Some(files) = files else {
                let index = Index::with_capacity(per_shard);
                return Padded(ShardLock::new(Shard::new(
                    id,
                    segments.len(),
                    index,
                    None,
                    false,
                )));
            };
            let shard = shard_on_files(
                files,
                id,
                per_shard,
                reusable[usize::from(id)],
                salvage_flash,
                segments.len(),
            );
            trusted[usize::from(id)] = !shard.rebuilding;
            Padded(ShardLock::new(shard))
        })
        .collect();
    if let Some(files) = files {
        // Every shard to be rebuilt is marked changing: the files may now name this session.
        files.bind(pool.info().pool_id, pool.state_seq());
    }
    BuiltShards { shards, trusted }
}

/// Shard `id` with its index in `files`: mapped as it is when `reusable` (trusted), else
/// empty and rebuilding, with the flash entries of its current tables when `salvage_flash`.
fn shard_on_files(
    files: &Arc<IndexFiles>,
    id: u16,
    per_shard: usize,
    reusable: bool,
    salvage_flash: bool,
    segment_count: usize,
) -> Shard {
    let anchor = Anchor::new(Arc::clone(files), usize::from(id));
    let mut salvaged = Vec::new();
    let reopened = reusable
        .then(|| anchor.open_tables(anchor.consistent_desc()))
        .flatten();
    let rebuilding = reopened.is_none();
    let index = match reopened {
        Some(index) => index,
        // Rebuilt by recovery: untrusted until the rebuild ends.
        None => {
            if salvage_flash {
                salvaged = anchor
                    .open_tables(anchor.current_desc())
                    .map(|tables| flash_entries(&tables))
                    .unwrap_or_default();
            }
            anchor.untrust();
            let home = TableHome::Files {
                files: Arc::clone(files),
                shard: id,
            };
            Index::with_capacity_in(home, per_shard, 0)
        }
    };
    anchor.remove_other_tables(index.desc());
    let mut shard = Shard::new(id, segment_count, index, Some(anchor), rebuilding);
    shard.salvaged_flash = salvaged;
    // A mapped index was not checked by anyone since it was last written: reads
    // validate until the scrub has checked its entries.
    shard.index_verified = rebuilding;
    shard
}

/// The slots a new shard index starts with: a sixteenth of what the shard's share of the
/// budget holds in items of the expected size; all of it with a flash tier, whose items
/// outnumber the memory tier's many times over (it does not grow through many steps, each a
/// rehash under the shard's lock, while the tier fills).
fn index_capacity_per_shard(config: &EngineConfig, geometry: Geometry, shard_count: u16) -> usize {
    let memory_bytes = geometry.segment_count * geometry.segment_size_bytes;
    let items_expected = memory_bytes / (config.item_size_bytes_expected + INDEX_BYTES_PER_ITEM);
    let start_divisor = if config.flash.is_some() {
        1
    } else {
        INDEX_START_DIVISOR
    };
    (items_expected / u64::from(shard_count) / start_divisor).max(16) as usize
}

/// Opens the flash tier, when configured, on its medium: it keeps its items only when the
/// pool kept its own (items on flash are found through the index, and a new pool's is empty).
fn open_flash(
    config: &EngineConfig,
    pool: &Pool,
    plan: RecoveryPlan,
    value_len_max: usize,
) -> Result<(Option<FlashTier>, Option<crate::FlashOpened>), OpenError> {
    let Some(flash) = &config.flash else {
        return Ok((None, None));
    };
    let keep = plan == RecoveryPlan::Recover && matches!(pool.opened(), Opened::Reopened { .. });
    // Every record lives in one segment, so no demoted record is larger.
    let record_bytes_max =
        record::record_size_max(KEY_LEN_MAX, value_len_max).min(config.segment_size_bytes as usize);
    let medium: Arc<dyn strata_pool::Medium> = match &flash.medium {
        FlashMedium::File { path, size_bytes } => {
            Arc::new(strata_pool::DirectFile::open(path, *size_bytes)?)
        }
        FlashMedium::Given(medium) => Arc::clone(medium),
    };
    let (mut tier, opened) = FlashTier::open(
        medium,
        pool.info().pool_id,
        flash.region_size_bytes,
        record_bytes_max,
        keep,
    )?;
    tier.read_delay_for_tests = flash.read_delay_for_tests;
    Ok((Some(tier), Some(opened)))
}

/// What `new_inner` builds the engine's shared state from.
struct InnerParts<'a> {
    config: &'a EngineConfig,
    pool: &'a Pool,
    shards: Box<[Padded<ShardLock>]>,
    segment_count: usize,
    shard_count: u16,
    seq_reserved: u64,
    root_area: strata_pool::RootArea,
    value_len_max: usize,
    flash: Option<FlashTier>,
    memory_bytes: u64,
}

/// The engine's shared state, its free pool empty until recovery lists the segments.
fn new_inner(parts: InnerParts<'_>) -> Inner {
    let InnerParts {
        config,
        pool,
        shards,
        segment_count,
        shard_count,
        seq_reserved,
        root_area,
        value_len_max,
        flash,
        memory_bytes,
    } = parts;
    let geometry = pool.geometry();
    let index_bytes: usize = shards.iter().map(|s| s.0.read().index.size_bytes()).sum();
    let per_shard_share = |divisor: usize| segment_count / (usize::from(shard_count) * divisor);
    let flash_config = config.flash.as_ref();
    Inner {
        shards,
        segment_size_bytes: geometry.segment_size_bytes as usize,
        units_per_segment: geometry.segment_size_bytes / record::RECORD_ALIGN_BYTES as u64,
        sync_inline: config.durability == Durability::Sync && !config.group_commit,
        // A quarter of a shard's share of segments may be open (partly filled) at once.
        open_segments_per_shard_max: per_shard_share(OPEN_SHARE_DIVISOR)
            .clamp(1, OPEN_SEGMENTS_PER_SHARD_MAX),
        clean_segments_per_shard_max: per_shard_share(CLEAN_SHARE_DIVISOR)
            .clamp(1, CLEAN_SEGMENTS_PER_SHARD_MAX),
        durability: config.durability,
        track_dirty: matches!(config.durability, Durability::Interval { .. })
            || (config.durability == Durability::Sync && config.group_commit),
        dirty_any: AtomicBool::new(false),
        commit_lock: Mutex::new(()),
        released_segments: AtomicU64::new(0),
        whole_pool: (pool.backend() == Backend::SharedFile).then(|| pool.persister()),
        dram: pool.backend() == Backend::Dram,
        clock: config.clock.clone(),
        policy: std::sync::atomic::AtomicU8::new(crate::policy_code(config.eviction)),
        free: Mutex::new(FreePool {
            list: Vec::new(),
            untouched: 0,
            in_use: 0,
            // Set by `recovery::settle`, once the segments are listed, before any write.
            limit: 0,
            retired: Vec::new(),
            index_bytes,
            cap: usize::MAX,
            taken_total: 0,
            taken_at_last_look: 0,
        }),
        seq: Mutex::new(SeqState {
            next: seq_reserved,
            reserved_until: seq_reserved,
            root: root_area,
        }),
        failed: AtomicBool::new(false),
        failure: Mutex::new(None),
        flush_at_ms: AtomicU64::new(0),
        value_len_max,
        scrub: Mutex::new(crate::scrub::ScrubState::default()),
        validate_every_read: config.validate_every_read,
        // A key's hash never has the part bit (`Inner::part_hash`).
        hash_mask: !crate::PART_BIT
            & if config.hash_collisions_for_tests {
                !(((1u64 << crate::index::HASH_BITS) - 1) & !0x3f)
            } else {
                u64::MAX
            },
        flash,
        flash_admission: flash_config.map_or(FlashAdmission::All, |f| f.admission),
        flash_write_bytes_per_sec_max: flash_config.map_or(0, |f| f.write_bytes_per_sec_max),
        item_size_bytes_expected: config.item_size_bytes_expected,
        shard_memory_bytes: memory_bytes / u64::from(shard_count),
        flash_items_per_shard_max: flash_items_per_shard_max(memory_bytes, config.shard_count),
    }
}

/// The clean-close snapshot to load, if recovery may use it: with the index in DRAM. With it
/// in the pool's files after a switch of placement, the shards are rebuilt from their segments
/// instead, and the snapshot gives only their flash entries, which no segment names.
fn usable_snapshot(
    inner: &Inner,
    pool: &mut Pool,
    plan: RecoveryPlan,
    index_in_files: bool,
    trusted: &[bool],
    segment_count: usize,
) -> Option<Vec<u8>> {
    match (plan, pool.take_sidecar()) {
        (RecoveryPlan::Recover, Ok(payload)) if !index_in_files => Some(payload),
        (RecoveryPlan::Recover, Ok(payload)) => {
            if inner.flash.is_some() {
                let saved = snapshot::flash_entries(
                    &payload,
                    inner.shards.len(),
                    inner.segment_size_bytes,
                    segment_count * inner.segment_size_bytes,
                );
                if saved.is_none() {
                    tracing::warn!(
                        "the clean-close snapshot does not parse; the flash tier starts empty"
                    );
                }
                give_salvaged_flash(inner, saved.unwrap_or_default(), trusted);
            }
            None
        }
        (_, Err(Some(why))) => {
            tracing::warn!(
                pool = %pool.path().display(),
                "the clean-close sidecar was not used ({why}); every segment is scanned instead"
            );
            None
        }
        _ => None,
    }
}

/// Indexes the segments: from the clean-close snapshot when there is one that matches the
/// pool, else by recovery's scan (`plan`, the shards `trusted` mapped from their files, how
/// the pool was `left`).
fn run_recovery(
    inner: &Inner,
    pool: &Pool,
    segments: Vec<strata_pool::Segment>,
    snapshot: Option<Vec<u8>>,
    (plan, trusted, left): (RecoveryPlan, &[bool], recovery::Left),
    config: &EngineConfig,
) -> Result<RecoveryReport, OpenError> {
    let observer = config.recovery_observer.as_ref();
    let recover = |segments| recovery::recover(inner, segments, plan, trusted, left, observer);
    Ok(match snapshot {
        Some(payload) => match snapshot::restore(inner, segments, &payload) {
            Ok(report) => report,
            Err(segments) => {
                tracing::warn!(
                    pool = %pool.path().display(),
                    "the clean-close snapshot does not match the pool; every segment is \
                     scanned instead"
                );
                recover(segments)?
            }
        },
        None => recover(segments)?,
    })
}

/// Starts the flash thread, when there is a flash tier.
fn spawn_flash_worker(inner: &Arc<Inner>) -> Result<Option<FlashWorker>, OpenError> {
    if inner.flash.is_none() {
        return Ok(None);
    }
    FlashWorker::spawn(Arc::clone(inner))
        .map(Some)
        .map_err(|e| {
            OpenError::Flash(FlashError::Medium(strata_pool::MediumError::Io {
                op: "spawn the flash thread",
                path: "(flash)".into(),
                message: e.to_string(),
                os_error: e.raw_os_error(),
            }))
        })
}

/// Writes every region the flash tier holds in DRAM and persists the medium (a clean close).
/// The flash thread is stopped, so nothing else writes.
fn flash_write_all(flash: &FlashTier) -> Result<(), String> {
    flash.seal_all();
    while let Some(job) = flash.next_write() {
        flash.write(job).map_err(|e| e.to_string())?;
    }
    flash.persist().map_err(|e| e.to_string())
}

/// After a switch of index placement: gives each shard to be rebuilt (not `trusted`) that has
/// no flash entries to salvage yet the flash entries `by_shard` holds for it (from the
/// clean-close snapshot, or from the index files being removed); recovery indexes them again
/// once the shard's segments are in (`Shard::restore_salvaged_flash`).
fn give_salvaged_flash(inner: &Inner, by_shard: Vec<Vec<crate::index::Entry>>, trusted: &[bool]) {
    for ((lock, entries), &trusted) in inner.shards.iter().zip(by_shard).zip(trusted) {
        let mut shard = lock.0.write();
        if !trusted && shard.salvaged_flash.is_empty() {
            shard.salvaged_flash = entries;
        }
    }
}

/// The flash entries, per shard, of the index files beside the pool at `path`, if the pool
/// closed cleanly and the files describe it as it closed (every shard consistent); else none.
fn flash_entries_of_files(
    path: &std::path::Path,
    shard_count: u16,
    segment_count: usize,
    pool: &Pool,
) -> Vec<Vec<crate::index::Entry>> {
    let clean = matches!(pool.opened(), Opened::Reopened { previous, .. } if previous.clean);
    if !clean || !IndexFiles::exist(path) {
        return Vec::new();
    }
    let Ok(files) = IndexFiles::open(path, usize::from(shard_count), segment_count) else {
        return Vec::new();
    };
    let files = Arc::new(files);
    if !index_files::files_match_pool(&files, pool.info().pool_id, pool.opened()) {
        return Vec::new();
    }
    let mut by_shard = Vec::with_capacity(usize::from(shard_count));
    for id in 0..shard_count {
        let anchor = Anchor::new(Arc::clone(&files), usize::from(id));
        let Some(tables) = anchor.open_tables(anchor.consistent_desc()) else {
            return Vec::new();
        };
        by_shard.push(flash_entries(&tables));
    }
    by_shard
}

/// The flash entries of `tables` (those of a shard to be rebuilt, read back at open).
pub(crate) fn flash_entries(tables: &Index) -> Vec<crate::index::Entry> {
    let mut entries = Vec::new();
    tables.all_entries(|entry| {
        if crate::index::is_flash(entry.location) {
            entries.push(entry);
        }
        true
    });
    entries
}

/// After recovery: drops the index entries of the flash tier whose region the medium does not
/// hold as written (never written before a crash, reclaimed, or a formatted medium), counts
/// what is kept, and after a crash (`crashed`) lists the suspects again.
fn keep_flash_entries(inner: &Inner, report: &mut RecoveryReport, crashed: bool) {
    for lock in inner.shards.iter() {
        let mut shard = lock.0.write();
        if shard.index.len() == 0 {
            // Nothing to keep or drop (a fresh pool): a walk of an empty table sized for the
            // budget took most of an empty server's start (90 ms at 16 GiB).
            continue;
        }
        let dropped = shard.drop_flash_entries(|location| {
            inner
                .flash
                .as_ref()
                .is_some_and(|flash| flash.holds(location))
        });
        report.flash_items_dropped += dropped;
        // A crash loses the list of suspects: any flash entry beside a memory entry with its
        // hash bits is one again, until the flash thread has read it. After a clean close
        // there were none left, and listing them again only set the flash thread reading
        // other keys' copies (and changing every shard while it settled them).
        if crashed {
            shard.suspect_flash_beside_memory();
        }
        report.flash_items_kept += shard.flash_items();
        report.items_recovered = report.items_recovered.saturating_sub(dropped);
    }
}

fn log_flash_open(opened: &crate::FlashOpened, report: &RecoveryReport) {
    match opened.formatted_because {
        Some(why) => tracing::info!(
            why,
            items_dropped = report.flash_items_dropped,
            "flash tier formatted: it starts empty"
        ),
        None => tracing::info!(
            regions = opened.regions_kept,
            items_kept = report.flash_items_kept,
            items_salvaged = report.flash_items_salvaged,
            items_dropped = report.flash_items_dropped,
            "flash tier reopened"
        ),
    }
}
