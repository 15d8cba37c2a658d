//! CLIENT PAUSE / UNPAUSE: holding clients' commands for a while, as Redis does before a
//! failover.
//!
//! A pause holds, until it ends, every command (`ALL`) or the commands that write (`WRITE`: a
//! write command, or an EXEC whose queue holds one) of every Redis client: the command and
//! what follows it stay unread in the connection's buffer (`Processed::held`), the worker keeps
//! the connection aside and runs it again once the pause is over (its poll wakes then, and
//! `CLIENT UNPAUSE` wakes every worker). Nothing is refused; memcached clients are not paused.
//! Departure: CLIENT commands themselves are never held, so `CLIENT UNPAUSE` always gets
//! through (in Redis an `ALL` pause holds them too).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The server's pause, if any.
#[derive(Debug)]
pub struct ClientPause {
    started: Instant,
    /// Milliseconds since `started` at which the pause ends; 0: no pause.
    until_ms: AtomicU64,
    /// Only writes are held (`WRITE`), else every command (`ALL`).
    writes_only: AtomicBool,
}

/// What a pause holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Held {
    /// Every command.
    All,
    /// Commands that write.
    Writes,
}

impl Default for ClientPause {
    fn default() -> Self {
        ClientPause {
            started: Instant::now(),
            until_ms: AtomicU64::new(0),
            writes_only: AtomicBool::new(false),
        }
    }
}

impl ClientPause {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Pauses for `ms` milliseconds from now. A pause already on keeps its later end, and
    /// holds everything if either pause does (as Redis combines them).
    pub fn pause(&self, ms: u64, held: Held) {
        if ms == 0 {
            return; // Over as soon as it began.
        }
        let until = self.now_ms().saturating_add(ms).max(1);
        let previous = self.until_ms.fetch_max(until, Ordering::AcqRel);
        let on = previous > self.now_ms();
        let writes_only = held == Held::Writes && (!on || self.writes_only.load(Ordering::Acquire));
        self.writes_only.store(writes_only, Ordering::Release);
    }

    /// Ends the pause.
    pub fn unpause(&self) {
        self.until_ms.store(0, Ordering::Release);
    }

    /// What the pause holds now, or `None` when there is none.
    pub fn holds(&self) -> Option<Held> {
        let until = self.until_ms.load(Ordering::Acquire);
        if until == 0 || until <= self.now_ms() {
            return None;
        }
        Some(if self.writes_only.load(Ordering::Acquire) {
            Held::Writes
        } else {
            Held::All
        })
    }

    /// How long the pause has left, or `None` when there is none.
    pub fn left(&self) -> Option<Duration> {
        self.holds()?;
        let until = self.until_ms.load(Ordering::Acquire);
        Some(Duration::from_millis(until.saturating_sub(self.now_ms())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_combine_as_redis_combines_them_and_end() {
        let pause = ClientPause::default();
        assert_eq!(pause.holds(), None);
        pause.pause(60_000, Held::Writes);
        assert_eq!(pause.holds(), Some(Held::Writes));
        pause.pause(1, Held::All);
        assert_eq!(pause.holds(), Some(Held::All), "ALL wins");
        assert!(
            pause.left().unwrap() > Duration::from_secs(50),
            "the later end stays"
        );
        pause.unpause();
        assert_eq!(pause.holds(), None);
        assert_eq!(pause.left(), None);
        pause.pause(0, Held::All);
        assert_eq!(pause.holds(), None, "a pause of 0 ms holds nothing");
    }
}
