//! The engine's figures (`Engine::stats`): summed over the shards, each read once under its
//! read lock, and the free pool's counts.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::{Engine, EngineStats};

impl Engine {
    /// Figures for stats.
    pub fn stats(&self) -> EngineStats {
        let mut stats = EngineStats::default();
        let (mut flash_items, mut flash_suspects) = (0, 0);
        for shard in self.inner.shards.iter() {
            let shard = shard.0.read();
            let c = &shard.counters;
            let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
            // A suspect is a flash entry beside a newer memory copy of (nearly always) the same
            // key: one item until the flash thread settles which key it holds.
            let suspects = shard.flash_suspect_count();
            flash_suspects += suspects;
            flash_items += shard.flash_items();
            // Parts are not items: their owner is (see `record`).
            stats.items += (shard.index.len() as u64)
                .saturating_sub(suspects)
                .saturating_sub(shard.part_items());
            stats.live_bytes = stats.live_bytes.saturating_add(shard.live_bytes);
            stats.hits += load(&c.hits);
            stats.misses += load(&c.misses);
            stats.writes += load(&c.writes);
            stats.evicted_items += load(&c.evicted_items);
            stats.expired_items += load(&c.expired_items);
            stats.evicted_segments += load(&c.evicted_segments);
            stats.expired_segments += load(&c.expired_segments);
            stats.merged_items += load(&c.merged_items);
            stats.written_bytes += load(&c.written_bytes);
            stats.dead_bytes += shard.dead_bytes();
            stats.cleaner_passes += load(&c.clean_passes);
            stats.cleaner_steps_ahead += load(&c.clean_steps_ahead);
            stats.cleaner_segments_freed += load(&c.cleaned_segments);
            stats.cleaner_items_moved += load(&c.cleaned_items);
            stats.cleaner_bytes_moved += load(&c.cleaned_bytes);
            stats.cleaner_time_ns += load(&c.clean_ns);
            stats.cleaner_pass_max_ns = stats.cleaner_pass_max_ns.max(load(&c.clean_pass_max_ns));
            stats.segments_used += shard.segment_count() as u64;
            stats.index_bytes += shard.index.size_bytes() as u64;
            stats.index_buckets += shard.index.bucket_count() as u64;
            stats.index_overflow_buckets += shard.index.overflow_bucket_count() as u64;
            for (total, counter) in stats.records_damaged.iter_mut().zip(&c.damaged_records) {
                *total += load(counter);
            }
            stats.damaged_items_dropped += load(&c.damaged_items_dropped);
            stats.segments_unverified += shard.unverified_segments().len() as u64;
        }
        stats.flash = self.inner.flash.as_ref().map(|f| {
            let mut flash = f.stats(flash_items);
            flash.suspects = flash_suspects;
            flash
        });
        self.free_pool_stats(&mut stats);
        stats
    }

    /// The free pool's figures, and the segment and memory sizes, into `stats`.
    fn free_pool_stats(&self, stats: &mut EngineStats) {
        let free = self.inner.free.lock();
        stats.segments_free = free.list.len() as u64;
        stats.segments_untouched = free.untouched as u64;
        stats.segments_released = self.inner.released_segments.load(Ordering::Relaxed);
        stats.segments_retired = free.retired.len() as u64;
        stats.segments_total = (free.list.len() + free.in_use + free.retired.len()) as u64;
        stats.segment_size_bytes = self.inner.segment_size_bytes as u64;
        stats.memory_bytes = stats.segments_total * stats.segment_size_bytes;
        stats.memory_limit_bytes =
            (free.cap as u64).min(stats.segments_total) * stats.segment_size_bytes;
        stats.shards = self.inner.shards.len() as u64;
    }
}
