//! The write-back cleaner: a thread per cached export that, every [`ROUND`], settles the pool
//! (so a write not yet flushed by its client is durable within a round or so, as `strata serve
//! --durability interval` promises) and writes back the least recently written dirty lines
//! that have been dirty longer than the staleness time, or, past [`DIRTY_HIGH_PERCENT`] of the
//! cache dirty, the oldest ones whatever their age, at most `lines_per_sec` a second (Open
//! CAS's ALRU policy, simplified).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::export::Export;

/// How often the cleaner wakes.
pub const ROUND: Duration = Duration::from_millis(100);
/// Dirty share of the cache past which age no longer matters.
pub const DIRTY_HIGH_PERCENT: usize = 75;

/// When and how fast dirty lines are written back.
#[derive(Clone, Copy, Debug)]
pub struct Policy {
    /// A line dirty this long is written back.
    pub staleness: Duration,
    /// Lines written back a second at most (0: no limit).
    pub lines_per_sec: u64,
}

/// A running cleaner.
pub struct Cleaner {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl Cleaner {
    /// Starts cleaning `export`.
    pub fn start(export: Arc<Export>, policy: Policy) -> std::io::Result<Cleaner> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("strata-block-cleaner".into())
            .spawn(move || {
                let mut failing = false;
                while !stopping.load(Ordering::Acquire) {
                    std::thread::sleep(ROUND);
                    match round(&export, policy) {
                        Ok(_) if failing => {
                            failing = false;
                            tracing::info!(export = export.name(), "write-back works again");
                        }
                        Ok(_) => {}
                        Err(err) if !failing => {
                            failing = true;
                            tracing::error!(
                                export = export.name(),
                                error = %err,
                                "write-back failed: dirty lines stay in the cache"
                            );
                        }
                        Err(_) => {}
                    }
                }
            })?;
        Ok(Cleaner { stop, thread })
    }

    /// Stops the thread (after its current round).
    pub fn stop(self) {
        self.stop.store(true, Ordering::Release);
        let _ = self.thread.join();
    }
}

/// One round: settle, then write back what the policy picks. The lines written back.
pub fn round(export: &Export, policy: Policy) -> Result<usize, String> {
    let Some(cache) = export.cache() else {
        return Ok(0);
    };
    cache.settle().map_err(|e| e.to_string())?;
    let dirty = cache.dirty_lines();
    if dirty == 0 {
        return Ok(0);
    }
    let budget = match policy.lines_per_sec {
        0 => usize::MAX,
        rate => (rate as u128 * ROUND.as_millis() / 1000).max(1) as usize,
    };
    let high = dirty * 100 >= cache.capacity_lines() * DIRTY_HIGH_PERCENT;
    let before = (!high)
        .then(|| Instant::now().checked_sub(policy.staleness))
        .flatten();
    if !high && before.is_none() && !policy.staleness.is_zero() {
        return Ok(0); // The process is younger than the staleness time.
    }
    export
        .clean_oldest(budget, before)
        .map_err(|e| e.0.to_string())
}
