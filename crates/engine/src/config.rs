//! Engine configuration: named defaults, validated once at open.

use std::path::PathBuf;
use std::sync::Arc;

use strata_pool::testing::SimulatedPersistence;

use crate::clock::{Clock, SystemClock};

/// Default memory budget (pool + index): 64 MiB.
pub const MEMORY_BYTES_DEFAULT: u64 = 64 << 20;
/// Default segment size: the smallest that holds the largest item at the default value limit
/// ([`segment_size_bytes_for`]), 1 MiB + 4 KiB, so that a value of exactly 1 MiB is accepted
/// (Segcache's segments are 1 MiB; an item never spans two).
pub const SEGMENT_SIZE_BYTES_DEFAULT: u64 = segment_size_bytes_for(VALUE_LEN_MAX_DEFAULT);
/// Largest segment: CAS values carry the record offset in 20 bits of 8-byte units.
pub const SEGMENT_SIZE_BYTES_MAX: u64 = 8 << 20;
/// Default largest value: 1 MiB (an item must also fit in one segment with its header).
pub const VALUE_LEN_MAX_DEFAULT: usize = 1 << 20;
/// Keys up to this long (memcached's limit; nearly every Redis key) may have values of exactly
/// the value limit; a longer key (RESP allows up to [`crate::KEY_LEN_MAX`]) shortens the largest
/// value by its extra length, since key and value share one segment.
pub const KEY_LEN_FOR_VALUE_LIMIT: usize = 250;

/// The smallest segment size (a multiple of 4 KiB) that holds a record with every optional
/// field, a key of [`KEY_LEN_FOR_VALUE_LIMIT`] bytes and a value of `value_len_max` bytes.
pub const fn segment_size_bytes_for(value_len_max: usize) -> u64 {
    let record = crate::record::record_size_max(KEY_LEN_FOR_VALUE_LIMIT, value_len_max);
    (record as u64).next_multiple_of(4096)
}

/// Default number of shards (each with its own lock, index and open segments).
pub const SHARD_COUNT_DEFAULT: usize = 8;
/// Most shards.
pub const SHARD_COUNT_MAX: usize = 1024;
/// Fewest segments a shard should own: the cleaner frees a segment by packing the live records
/// of several of one shard's segments into fewer, and with a handful per shard (one of them
/// open, one the cleaner's) it can do so only while they are mostly dead.
pub const SEGMENTS_PER_SHARD_MIN: u64 = 16;

/// The shards for a pool of `memory_bytes` in segments of `segment_size_bytes`: the default,
/// or fewer so that each owns at least [`SEGMENTS_PER_SHARD_MIN`] segments (a 64 MiB pool of
/// 1 MiB segments: 3 shards).
pub const fn shard_count_for(memory_bytes: u64, segment_size_bytes: u64) -> usize {
    let by_segments = memory_bytes / segment_size_bytes / SEGMENTS_PER_SHARD_MIN;
    if by_segments == 0 {
        1
    } else if by_segments < SHARD_COUNT_DEFAULT as u64 {
        by_segments as usize
    } else {
        SHARD_COUNT_DEFAULT
    }
}
/// Smallest average record size an index grows for at once: 56 bytes is a 16-byte key with a
/// 32-byte value and the 8-byte record header, a typical small cache item. A shard's index
/// starts at a sixteenth of what its share of the budget would hold in such items, and when it
/// fills grows to what the share holds at the larger of this and the shard's average record
/// size (about 9 bytes per item); smaller items make it grow on in 1.25× steps. With a flash
/// tier the index starts at that full size (it indexes the flash items too).
pub const ITEM_SIZE_BYTES_EXPECTED_DEFAULT: u64 = 56;
/// Largest data area an index slot can address (a 35-bit location in 8-byte units).
pub const DATA_BYTES_MAX: u64 = 256 << 30;

/// Where the engine's pool lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PoolLocation {
    /// Anonymous DRAM (nothing survives a restart).
    Dram,
    /// A file (DAX when the filesystem supports it, else shared file or tmpfs).
    File(PathBuf),
    /// DRAM watched by a test's power-failure simulator, which can also fail persists on
    /// purpose (`SimulatedPersistence::failing_from`): power-failure and I/O-error tests.
    Simulated(Arc<SimulatedPersistence>),
}

impl PoolLocation {
    /// A simulated pool whose persists all succeed.
    pub fn simulated() -> PoolLocation {
        PoolLocation::Simulated(SimulatedPersistence::new())
    }

    /// Whether this is a simulated pool.
    pub fn is_simulated(&self) -> bool {
        matches!(self, PoolLocation::Simulated { .. })
    }
}

/// Where the hash index lives (Feed-Cube's two configurations).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IndexPlacement {
    /// Anonymous DRAM: the fastest lookups; a clean stop saves it beside the pool and a crash
    /// rebuilds it from the records.
    #[default]
    Dram,
    /// Files in the pool's index directory (`<pool>.index/`, on the pool's medium): a restart
    /// after a clean stop or a process crash maps it and serves with nothing to rebuild. Needs a
    /// file pool.
    Pool,
}

impl IndexPlacement {
    /// Parses `dram` or `pool`.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "dram" => Some(IndexPlacement::Dram),
            "pool" => Some(IndexPlacement::Pool),
            _ => None,
        }
    }

    /// The name `parse` accepts.
    pub fn name(self) -> &'static str {
        match self {
            IndexPlacement::Dram => "dram",
            IndexPlacement::Pool => "pool",
        }
    }
}

/// Which segment to give up when the pool is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvictionPolicy {
    /// Refuse writes that need space (`OutOfMemory`).
    None,
    /// The shard's oldest segment.
    Fifo,
    /// A random segment of the shard.
    Random,
    /// Segcache-style merge: take the oldest segment but carry its items that were read since
    /// they were written or last carried (up to half a segment) to the head, resetting their
    /// frequency (they stay marked fetched).
    Merge,
}

impl EvictionPolicy {
    /// Parses `none`, `fifo`, `random` or `merge`.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "none" => Some(EvictionPolicy::None),
            "fifo" => Some(EvictionPolicy::Fifo),
            "random" => Some(EvictionPolicy::Random),
            "merge" => Some(EvictionPolicy::Merge),
            _ => None,
        }
    }

    /// The name `parse` accepts.
    pub fn name(self) -> &'static str {
        match self {
            EvictionPolicy::None => "none",
            EvictionPolicy::Fifo => "fifo",
            EvictionPolicy::Random => "random",
            EvictionPolicy::Merge => "merge",
        }
    }
}

/// What an acknowledged write survives beyond a process crash (see docs/DURABILITY.md). On a
/// file or tmpfs pool every level survives a process crash: written bytes are in the page cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// Nothing is flushed for writes. After a power loss or reboot that followed an unclean stop
    /// the pool is discarded at the next start (it may hold any mix of old and new bytes).
    None,
    /// Writes are flushed in the background every `ms` milliseconds (`Engine::commit`, called
    /// by the server's maintenance thread). After a power loss, every write acknowledged before
    /// the last completed flush survives; later ones may or may not.
    Interval {
        /// Milliseconds between background flushes.
        ms: u32,
    },
    /// Every write is persisted before it is acknowledged: inline in the write call, or, with
    /// `group_commit`, by the caller's `Engine::commit` before it replies.
    Sync,
}

impl Durability {
    /// `none`, `interval=MS` or `sync`.
    pub fn name(self) -> String {
        match self {
            Durability::None => "none".to_string(),
            Durability::Interval { ms } => format!("interval={ms}"),
            Durability::Sync => "sync".to_string(),
        }
    }

    /// Parses what `name` prints.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "none" => Some(Durability::None),
            "sync" => Some(Durability::Sync),
            _ => {
                let ms: u32 = text.strip_prefix("interval=")?.parse().ok()?;
                (ms > 0).then_some(Durability::Interval { ms })
            }
        }
    }

    pub(crate) fn code(self) -> (u8, u32) {
        match self {
            Durability::None => (0, 0),
            Durability::Interval { ms } => (1, ms),
            Durability::Sync => (2, 0),
        }
    }

    pub(crate) fn from_code(code: u8, ms: u32) -> Option<Self> {
        match code {
            0 => Some(Durability::None),
            1 => Some(Durability::Interval { ms }),
            2 => Some(Durability::Sync),
            _ => None,
        }
    }
}

/// Everything the engine needs to open.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// The whole budget: pool segments plus index, in bytes.
    pub memory_bytes: u64,
    /// Bytes per segment.
    pub segment_size_bytes: u64,
    /// Where the pool lives.
    pub pool: PoolLocation,
    /// Discard an existing pool file instead of reopening it.
    pub fresh: bool,
    /// Eviction policy.
    pub eviction: EvictionPolicy,
    /// Shards; fixed when a pool is created (a reopened pool keeps its own).
    pub shard_count: usize,
    /// Largest value accepted.
    pub value_len_max: usize,
    /// Smallest average record size the index grows for at once (see
    /// [`ITEM_SIZE_BYTES_EXPECTED_DEFAULT`]).
    pub item_size_bytes_expected: u64,
    /// What acknowledged writes survive.
    pub durability: Durability,
    /// Where the index lives.
    pub index_placement: IndexPlacement,
    /// With `Durability::Sync`: writes only record what to persist, and the caller persists a
    /// whole batch with `Engine::commit` before acknowledging it (group commit; the server does
    /// this once per connection batch). Without it, each write persists before it returns.
    pub group_commit: bool,
    /// Wall clock for expiry.
    pub clock: Arc<dyn Clock>,
    /// Told how a recovery at open progresses (the server logs it; tests stop an open at a
    /// chosen point to leave the pool as a crash there would).
    pub recovery_observer: Option<RecoveryObserver>,
    /// With a simulated pool (power-failure tests) and the index in the pool: the directory of
    /// its index files, which then records persists instead of making them (see
    /// `Engine::crash_images`). File pools keep theirs in `<pool>.index`.
    pub simulated_index_dir: Option<PathBuf>,
    /// A flash tier below the memory tier (`None`: none).
    pub flash: Option<FlashConfig>,
    /// Validate every record a read touches (checksum), not only those no walk has checked
    /// since the open (the default; see the `scrub` module). Costs a CRC32C of the record per
    /// read; for pools whose memory is not trusted to keep what was written.
    pub validate_every_read: bool,
    /// Tests only: keep 6 of the 24 hash bits the index stores, so that distinct keys share
    /// them (and their buckets) all the time, as they rarely do with millions of items. The
    /// pool is then readable only with the same setting.
    #[doc(hidden)]
    pub hash_collisions_for_tests: bool,
}

/// Default bytes per flash region: large sequential writes, reclaimed whole.
pub const FLASH_REGION_SIZE_BYTES_DEFAULT: u64 = 4 << 20;

/// Where the flash tier keeps its bytes.
#[derive(Clone, Debug)]
pub enum FlashMedium {
    /// A file (created and sized to `size_bytes`, every block reserved) or a block device of at
    /// least that size, used with direct I/O where its file system allows it.
    File {
        /// The file or device.
        path: PathBuf,
        /// Bytes to use.
        size_bytes: u64,
    },
    /// A medium the caller made (tests: a simulated one).
    Given(Arc<dyn strata_pool::Medium>),
}

/// Which evicted items the flash tier takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlashAdmission {
    /// Every item evicted from memory that has not expired (memcached's extstore).
    All,
    /// Only items read at least once since they were written: one-hit wonders never wear the
    /// flash.
    Fetched,
}

impl FlashAdmission {
    /// Parses `all` or `fetched`.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "all" => Some(FlashAdmission::All),
            "fetched" => Some(FlashAdmission::Fetched),
            _ => None,
        }
    }

    /// The name `parse` reads.
    pub fn name(self) -> &'static str {
        match self {
            FlashAdmission::All => "all",
            FlashAdmission::Fetched => "fetched",
        }
    }
}

/// The flash tier's settings.
#[derive(Clone, Debug)]
pub struct FlashConfig {
    /// Where its bytes live.
    pub medium: FlashMedium,
    /// Bytes per region (a multiple of 4 KiB that holds the largest item).
    pub region_size_bytes: u64,
    /// Which evicted items it takes.
    pub admission: FlashAdmission,
    /// Most bytes written to flash per second (0: as fast as the medium goes). Items evicted
    /// while the tier is at its rate are dropped, as when it is behind.
    pub write_bytes_per_sec_max: u64,
    /// Tests only: every read of the medium takes this much longer (a slow device).
    pub read_delay_for_tests: std::time::Duration,
}

impl FlashConfig {
    /// A flash tier on the file or device at `path`, `size_bytes` large, with the defaults.
    pub fn file(path: PathBuf, size_bytes: u64) -> FlashConfig {
        FlashConfig {
            medium: FlashMedium::File { path, size_bytes },
            region_size_bytes: FLASH_REGION_SIZE_BYTES_DEFAULT,
            admission: FlashAdmission::All,
            write_bytes_per_sec_max: 0,
            read_delay_for_tests: std::time::Duration::ZERO,
        }
    }
}

/// A step of the recovery that `Engine::open` runs on a reopened pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecoveryProgress {
    /// Every in-use segment has been handed to its shard; `shards_to_rebuild` shards will now
    /// index their records.
    SegmentsAdopted {
        /// Segments holding data.
        segments: u64,
        /// Shards whose index is rebuilt from their segments.
        shards_to_rebuild: u64,
    },
    /// One shard's index is rebuilt from its records.
    ShardRebuilt {
        /// The shard.
        shard: u16,
        /// Items it indexed.
        items: u64,
    },
}

/// A callback told of [`RecoveryProgress`], from whichever thread recovers. It runs outside
/// every engine lock.
#[derive(Clone)]
pub struct RecoveryObserver(pub Arc<dyn Fn(RecoveryProgress) + Send + Sync>);

impl std::fmt::Debug for RecoveryObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RecoveryObserver")
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            memory_bytes: MEMORY_BYTES_DEFAULT,
            segment_size_bytes: SEGMENT_SIZE_BYTES_DEFAULT,
            pool: PoolLocation::Dram,
            fresh: false,
            eviction: EvictionPolicy::Merge,
            shard_count: SHARD_COUNT_DEFAULT,
            value_len_max: VALUE_LEN_MAX_DEFAULT,
            item_size_bytes_expected: ITEM_SIZE_BYTES_EXPECTED_DEFAULT,
            durability: Durability::None,
            index_placement: IndexPlacement::Dram,
            group_commit: false,
            clock: Arc::new(SystemClock),
            recovery_observer: None,
            simulated_index_dir: None,
            validate_every_read: false,
            hash_collisions_for_tests: false,
            flash: None,
        }
    }
}

impl EngineConfig {
    /// Number of segments in the pool: the whole budget, in segments. The index's share is
    /// taken out of service at run time (see `Engine`), so the file geometry does not depend on
    /// how large the index has grown.
    pub fn segment_count(&self) -> u64 {
        self.memory_bytes / self.segment_size_bytes
    }

    /// Checks ranges and relations between settings.
    pub fn validate(&self) -> Result<(), &'static str> {
        if self.segment_size_bytes > SEGMENT_SIZE_BYTES_MAX {
            return Err("segment size must be at most 8 MiB");
        }
        if self.segment_size_bytes < 4096 || !self.segment_size_bytes.is_multiple_of(4096) {
            return Err("segment size must be a multiple of 4 KiB");
        }
        if self.segment_count() < 2 {
            return Err("memory must hold at least two segments");
        }
        if self.segment_count() * self.segment_size_bytes > DATA_BYTES_MAX {
            return Err("memory must be at most 256 GiB (the index addresses 256 GiB of segments)");
        }
        if self.shard_count == 0 || self.shard_count > SHARD_COUNT_MAX {
            return Err("shard count must be 1..=1024");
        }
        let simulated_files = self.pool.is_simulated() && self.simulated_index_dir.is_some();
        if self.index_placement == IndexPlacement::Pool
            && !matches!(self.pool, PoolLocation::File(_))
            && !simulated_files
        {
            return Err("index placement `pool` needs a file pool");
        }
        if self.item_size_bytes_expected < 16 {
            return Err("expected item size must be at least 16 bytes");
        }
        Ok(())
    }
}
