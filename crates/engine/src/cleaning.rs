//! Cleaning ahead of need: a background thread (the server's maintenance thread) calls
//! [`Engine::clean_ahead`] so that writes find free segments and rarely run a cleaner pass
//! themselves (see `shard::clean`). Each step holds one shard for one victim's records at most,
//! and the shard's lock is released between steps.

use crate::error::WriteError;
use crate::{Engine, Inner};

/// Free segments, beyond the cleaner's reserve, that cleaning ahead keeps for writes.
pub const CLEAN_AHEAD_SEGMENTS: usize = 2;
/// Free segments written before that cleaning ahead keeps for writes on DRAM while others were
/// never written (see [`Engine::clean_ahead`]): a few more than a 10 ms tick of writes fills at
/// 200 MB/s, so bursts between ticks reuse memory too.
const RECYCLE_AHEAD_SEGMENTS: usize = 8;
/// Most steps one call of [`Engine::clean_ahead`] runs (each frees one segment).
const CLEAN_AHEAD_STEPS_MAX: usize = 64;

impl Inner {
    /// What cleaning ahead should do now: `Some(false)` while fewer than
    /// [`CLEAN_AHEAD_SEGMENTS`] segments are free for writes beyond the cleaner's reserve,
    /// `Some(true)` (recycle: only victims cheap to move) while fewer than
    /// [`RECYCLE_AHEAD_SEGMENTS`] free ones were written before and some were never written
    /// (DRAM), `None` when neither.
    fn clean_ahead_need(&self) -> Option<bool> {
        let free = self.free.lock();
        let (spare, spare_touched) = free.spare(free.cleaner_reserve());
        if spare < CLEAN_AHEAD_SEGMENTS {
            Some(false)
        } else if free.untouched > 0 && spare_touched < RECYCLE_AHEAD_SEGMENTS {
            Some(true)
        } else {
            None
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
    /// faulting in new pages. Call it often (the server does every 10 ms); returns the steps
    /// run.
    pub fn clean_ahead(&self) -> Result<usize, WriteError> {
        let inner = &self.inner;
        let shards = inner.shards.len();
        let mut steps = 0;
        let mut idle_shards = 0;
        let mut at = 0;
        while steps < CLEAN_AHEAD_STEPS_MAX && idle_shards < shards {
            let Some(recycle) = inner.clean_ahead_need() else {
                break;
            };
            let cleaned = inner.shards[at % shards]
                .0
                .write()
                .clean_one(inner, recycle)?;
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
