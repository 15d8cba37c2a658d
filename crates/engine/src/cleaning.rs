//! Cleaning ahead of need: a background thread (the server's maintenance thread) calls
//! [`Engine::clean_ahead`] so that writes find free segments and rarely run a cleaner pass
//! themselves (see `shard::clean`). Each step holds one shard for one victim's records at most,
//! and the shard's lock is released between steps.

use crate::error::WriteError;
use crate::shard::Ahead;
use crate::{Engine, Inner};

/// Free segments, beyond the cleaner's reserve, that cleaning ahead keeps for writes.
pub const CLEAN_AHEAD_SEGMENTS: usize = 2;
/// Free segments written before that cleaning ahead keeps for writes on DRAM while others were
/// never written (see [`Engine::clean_ahead`]), at least: a few more than a 10 ms tick of
/// writes fills at 200 MB/s, so bursts between ticks reuse memory too. Faster writes get more
/// ([`Inner::recycle_target`]).
const RECYCLE_AHEAD_SEGMENTS: usize = 8;
/// Most steps one call of [`Engine::clean_ahead`] runs (each frees one segment).
const CLEAN_AHEAD_STEPS_MAX: usize = 64;
/// Most victims one call of [`Engine::clean_ahead`] compacts in quiet shards (each moves up
/// to seven eighths of a segment: a few milliseconds of the maintenance thread per tick).
const COMPACT_STEPS_PER_TICK_MAX: usize = 2;
/// How long after a shard last evicted a segment (or demoted one to flash) cleaning ahead
/// leaves it uncompacted, engine clock milliseconds (`Shard::quiet_since_last_look`).
pub(crate) const COMPACT_AFTER_EVICTION_MS: u64 = 1_000;
/// Most free segments whose pages one call of [`Engine::clean_ahead`] gives back to the OS
/// (an madvise of one segment each, the free list's lock held for one at a time).
const RELEASED_SEGMENTS_PER_TICK_MAX: usize = 16;

impl Inner {
    /// What cleaning ahead should do now: [`Ahead::Need`] while fewer than
    /// [`CLEAN_AHEAD_SEGMENTS`] segments are free for writes beyond the cleaner's reserve,
    /// [`Ahead::Recycle`] (only victims cheap to move) while fewer than `recycle_target`
    /// ([`Inner::recycle_target`]) free ones were written before and some were never written
    /// (DRAM), `None` when neither.
    fn clean_ahead_need(&self, recycle_target: usize) -> Option<Ahead> {
        let free = self.free.lock();
        let (_, spare_touched) = free.spare(free.cleaner_reserve());
        if free.below_clean_ahead_target() {
            Some(Ahead::Need)
        } else if free.untouched > 0 && spare_touched < recycle_target {
            Some(Ahead::Recycle)
        } else {
            None
        }
    }

    /// How many free segments written before cleaning ahead keeps for writes until its next
    /// call: [`RECYCLE_AHEAD_SEGMENTS`], or twice the segments taken since its last call when
    /// that is more, at most an eighth of the segments in service. Writes of large values take
    /// a segment or more per request: SETs of 1 MiB at 1 GB/s took ten between two ticks, past
    /// the eight kept, and the rest from segments never written, so the memory the process
    /// held grew to 640 MiB for 20 MiB of live data while dead segments waited for the next
    /// tick. Called once per call of [`Engine::clean_ahead`].
    fn recycle_target(&self) -> usize {
        let mut free = self.free.lock();
        let since = free.taken_total - free.taken_at_last_look;
        free.taken_at_last_look = free.taken_total;
        let most = (free.limit / 8).max(RECYCLE_AHEAD_SEGMENTS);
        usize::try_from(since.saturating_mul(2))
            .unwrap_or(usize::MAX)
            .clamp(RECYCLE_AHEAD_SEGMENTS, most)
    }

    /// Gives back to the OS the pages of free segments written before, beyond as many as the
    /// cleaner's reserve (the ones freed last), at most [`RELEASED_SEGMENTS_PER_TICK_MAX`];
    /// each then counts as never written. Called only while no shard is being written: the
    /// first segments a later burst of writes takes fault their pages in again (about 2 ms
    /// of page faults per MiB on this VM, once). DRAM only (`FreePool::release_oldest_touched`
    /// refuses other media), counted in `released_segments`.
    fn release_spare_pages(&self) {
        for _ in 0..RELEASED_SEGMENTS_PER_TICK_MAX {
            let mut free = self.free.lock();
            let keep = free.cleaner_reserve();
            if !free.release_oldest_touched(keep) {
                break;
            }
            drop(free);
            self.released_segments
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

impl Engine {
    /// Cleans ahead of need: while fewer than [`CLEAN_AHEAD_SEGMENTS`] segments are free for
    /// writes, moves the live records of the best victim of one shard after another and frees
    /// it, as long as a victim is worth it. On DRAM, also while fewer than
    /// [`RECYCLE_AHEAD_SEGMENTS`] free segments were written before and others never were:
    /// then only victims cheap to move
    /// (`RECYCLE_MOVED_PER_GAINED`), so that writes reuse memory already backed instead of
    /// faulting in new pages. When neither is needed, on DRAM, compacts the shards requests
    /// left quiet since the last call (`Ahead::Compact`) and, once every shard is quiet, gives
    /// the pages of the free segments beyond what the next burst needs back to the OS: the
    /// process's memory comes back to what its live data holds after a load of overwrites.
    /// Call it often (the server does every 10 ms); returns the steps run.
    pub fn clean_ahead(&self) -> Result<usize, WriteError> {
        let steps = self.clean_ahead_of_need()?;
        if steps > 0 || !self.inner.dram {
            return Ok(steps);
        }
        self.compact_quiet_shards()
    }

    /// The steps of [`Engine::clean_ahead`] that free segments for writes.
    fn clean_ahead_of_need(&self) -> Result<usize, WriteError> {
        let inner = &self.inner;
        let shards = inner.shards.len();
        let mut steps = 0;
        let mut idle_shards = 0;
        let mut at = 0;
        let recycle_target = inner.recycle_target();
        while steps < CLEAN_AHEAD_STEPS_MAX && idle_shards < shards {
            let Some(ahead) = inner.clean_ahead_need(recycle_target) else {
                break;
            };
            let cleaned = inner.shards[at % shards]
                .0
                .write()
                .clean_one(inner, ahead)?;
            if cleaned {
                steps += 1;
                idle_shards = 0;
            } else {
                idle_shards += 1;
            }
            at += 1;
        }
        Ok(steps)
    }

    /// Compaction of the shards requests left quiet since the last call, up to
    /// [`COMPACT_STEPS_PER_TICK_MAX`] victims, then, when every shard was quiet, the pages of
    /// spare free segments given back. A shard whose lock is held now is taken as busy.
    fn compact_quiet_shards(&self) -> Result<usize, WriteError> {
        let inner = &self.inner;
        let mut steps = 0;
        let mut every_shard_quiet = true;
        for shard in inner.shards.iter() {
            let Some(mut shard) = shard.0.try_write() else {
                every_shard_quiet = false;
                continue;
            };
            if !shard.quiet_since_last_look(inner) {
                every_shard_quiet = false;
                continue;
            }
            while steps < COMPACT_STEPS_PER_TICK_MAX && shard.clean_one(inner, Ahead::Compact)? {
                steps += 1;
            }
        }
        if every_shard_quiet {
            inner.release_spare_pages();
        }
        Ok(steps)
    }
}
