//! The flash scenario's arithmetic, apart from any I/O so that tests can check it by hand.
//!
//! ```text
//!  sizes:   memory, flash and offered MiB × --size-scale; keys = offered bytes / (key + value)
//!  kept:    GET every stride-th key once; kept ≈ hits / keys sampled × keys offered
//!  DRAM per flash-resident item
//!           = (RSS growth with flash − DRAM the memory tier costs alone)
//!             / (items kept with flash − items the memory tier alone keeps)
//!  index + filter bytes per flash item (strata, from its own stats)
//!           = index bytes / items  +  key filter bytes / flash items
//!  bytes written to flash per byte of values demoted
//!           = bytes the server wrote to the disk / (values demoted × value bytes)
//! ```
//!
//! "DRAM the memory tier costs alone" and "items the memory tier alone keeps" come from a run
//! of the same server with the same budget and no flash tier, filled past its budget; without
//! that run, the budget itself stands in for the first and `budget / (key + value)` for the
//! second. The formula charges a flash tier only for DRAM outside what the memory tier uses: a
//! server that keeps each flash item's header inside its memory budget (memcached does) pays
//! for it with fewer memory-resident items, which lowers "items kept", not this figure.

use serde::{Deserialize, Serialize};

/// Bytes in a MiB.
pub const MIB: u64 = 1 << 20;
/// The memory-only run offers this many times the budget, so LRU or FIFO eviction has
/// certainly started and what it keeps is the memory tier's capacity.
pub const MEMORY_ONLY_OFFER_FACTOR: u64 = 2;
/// DRAM per flash item is only computed when the flash tier adds at least this fraction of the
/// memory-only item count: below it, the difference is within sampling noise and the ratio
/// would be noise divided by noise.
pub const BEYOND_MEMORY_FRACTION_MIN: f64 = 0.05;

/// A flash scenario's sizes after `--size-scale`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FlashSizes {
    /// The memory tier's budget, MiB.
    pub memory_mib: u64,
    /// The flash file's size, MiB.
    pub flash_mib: u64,
    /// Key and value bytes the fill offers.
    pub offered_bytes: u64,
    /// Distinct keys the fill writes once each.
    pub keys: u64,
    /// Mean key plus value length, bytes.
    pub item_bytes: f64,
}

impl FlashSizes {
    /// Scales the scenario's MiB figures by `scale` and derives the key count.
    #[must_use]
    pub fn new(memory_mib: u64, flash_mib: u64, offered_mib: u64, scale: f64, item: f64) -> Self {
        let offered_bytes = scaled_mib(offered_mib, scale) * MIB;
        FlashSizes {
            memory_mib: scaled_mib(memory_mib, scale),
            flash_mib: scaled_mib(flash_mib, scale),
            offered_bytes,
            keys: keys_for_bytes(offered_bytes, item),
            item_bytes: item,
        }
    }

    /// Keys the memory-only run writes: [`MEMORY_ONLY_OFFER_FACTOR`] × the budget's worth of
    /// items, at most the scenario's key count.
    #[must_use]
    pub fn memory_only_keys(&self) -> u64 {
        let bytes = self.memory_mib * MIB * MEMORY_ONLY_OFFER_FACTOR;
        keys_for_bytes(bytes, self.item_bytes).min(self.keys)
    }

    /// Items a memory tier with no per-item overhead would hold: the stand-in for the
    /// memory-only item count when no memory-only run was made.
    #[must_use]
    pub fn budget_items(&self) -> f64 {
        to_f64(self.memory_mib * MIB) / self.item_bytes
    }
}

/// `mib × scale`, rounded, at least 1.
#[must_use]
pub fn scaled_mib(mib: u64, scale: f64) -> u64 {
    let scaled = (to_f64(mib) * scale).round();
    if scaled >= 1.0 {
        // A MiB count well below 2^53: the cast is exact.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let mib = scaled as u64;
        mib
    } else {
        1
    }
}

/// How many items of `item_bytes` fit in `bytes`, at least 1.
#[must_use]
pub fn keys_for_bytes(bytes: u64, item_bytes: f64) -> u64 {
    let keys = (to_f64(bytes) / item_bytes.max(1.0)).floor();
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let keys = keys as u64;
    keys.max(1)
}

/// The stride that reads at most `sample_max` of `keys` keys, evenly spread (1: every key).
#[must_use]
pub fn check_stride(keys: u64, sample_max: u64) -> u64 {
    keys.div_ceil(sample_max.max(1)).max(1)
}

/// How many keys a read-back with `stride` visits: keys 0, stride, 2 × stride, … below `keys`.
#[must_use]
pub fn keys_sampled(keys: u64, stride: u64) -> u64 {
    keys.div_ceil(stride.max(1))
}

/// The items kept, estimated from `hits` among the keys a read-back with `stride` sampled.
#[must_use]
pub fn items_kept(hits: u64, keys: u64, stride: u64) -> f64 {
    let sampled = keys_sampled(keys, stride);
    if sampled == 0 {
        return 0.0;
    }
    to_f64(hits) / to_f64(sampled) * to_f64(keys)
}

/// DRAM bytes per item the flash tier holds beyond what the memory tier alone keeps (see the
/// module header), or `None` when the flash tier adds fewer than
/// [`BEYOND_MEMORY_FRACTION_MIN`] × `memory_only_kept` items.
#[must_use]
pub fn dram_per_flash_item(
    rss_growth_bytes: u64,
    memory_tier_bytes: u64,
    items_kept: f64,
    memory_only_kept: f64,
) -> Option<f64> {
    let beyond = items_kept - memory_only_kept;
    if beyond <= 0.0 || beyond < BEYOND_MEMORY_FRACTION_MIN * memory_only_kept {
        return None;
    }
    Some((to_f64(rss_growth_bytes) - to_f64(memory_tier_bytes)) / beyond)
}

/// The DRAM a server's own stats say each flash item costs for its lookup: its share of the
/// hash index (every item, in memory or on flash, has one slot: `index_bytes / items`) plus
/// the key filters kept for flash regions, spread over the flash items. Unlike
/// [`dram_per_flash_item`] it counts DRAM inside the memory budget (where strata's index slots
/// are) and leaves out fixed costs (region buffers). `None` without flash items.
#[must_use]
pub fn index_bytes_per_flash_item(
    index_bytes: u64,
    items: u64,
    filter_bytes: u64,
    flash_items: u64,
) -> Option<f64> {
    (items > 0 && flash_items > 0)
        .then(|| to_f64(index_bytes) / to_f64(items) + to_f64(filter_bytes) / to_f64(flash_items))
}

/// Bytes written to flash per byte of values demoted, or `None` when nothing was demoted.
#[must_use]
pub fn write_amplification(
    bytes_written: u64,
    values_demoted: f64,
    value_bytes: f64,
) -> Option<f64> {
    let demoted_bytes = values_demoted * value_bytes;
    (demoted_bytes > 0.0).then(|| to_f64(bytes_written) / demoted_bytes)
}

/// `value` as `f64` (exact below 2^53, which every count and size here is).
#[allow(clippy::cast_precision_loss)]
fn to_f64(value: u64) -> f64 {
    value as f64
}
