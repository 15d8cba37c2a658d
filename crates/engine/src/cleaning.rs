//! Cleaning ahead of need: a background thread (the server's maintenance thread) calls
//! [`Engine::clean_ahead`] so that writes find free segments and rarely run a cleaner pass
//! themselves (see `shard::clean`). Each step holds one shard for one victim's records at most,
//! and the shard's lock is released between steps.

use crate::error::WriteError;
use crate::{Engine, Inner};

/// Free segments, beyond the cleaner's reserve, that cleaning ahead keeps for writes.
pub const CLEAN_AHEAD_SEGMENTS: usize = 2;
/// Most steps one call of [`Engine::clean_ahead`] runs (each frees one segment).
const CLEAN_AHEAD_STEPS_MAX: usize = 64;

impl Inner {
    /// Segments a write can take now without touching the cleaner's reserve.
    fn spare_segments(&self) -> usize {
        let free = self.free.lock();
        let reserve = free.cleaner_reserve();
        free.list
            .len()
            .min(free.limit.saturating_sub(free.in_use))
            .saturating_sub(reserve)
    }
}

impl Engine {
    /// Cleans ahead of need: while fewer than [`CLEAN_AHEAD_SEGMENTS`] segments are free for
    /// writes, moves the live records of the best victim of one shard after another and frees
    /// it, as long as a victim is worth it. Call it often (the server does every 10 ms); returns
    /// the steps run.
    pub fn clean_ahead(&self) -> Result<usize, WriteError> {
        let inner = &self.inner;
        let shards = inner.shards.len();
        let mut steps = 0;
        let mut idle_shards = 0;
        let mut at = 0;
        while steps < CLEAN_AHEAD_STEPS_MAX
            && idle_shards < shards
            && inner.spare_segments() < CLEAN_AHEAD_SEGMENTS
        {
            let cleaned = inner.shards[at % shards].0.write().clean_one(inner)?;
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
}
