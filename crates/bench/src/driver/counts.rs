//! Request and reply counters of one phase, summable across connections and threads.

use serde::{Deserialize, Serialize};

use crate::histogram::Latencies;
use crate::protocol::Reply;
use crate::workload::OpKind;

/// What was sent and what came back, for requests sent inside the measured window.
///
/// Invariants once a phase has drained: `requests_completed == requests_sent`,
/// `hits + misses == get_keys_sent` (error replies count their keys as misses), and
/// `sets_stored + sets_not_stored == sets_sent`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Requests written (one multi-get is one request).
    pub requests_sent: u64,
    /// Requests whose reply arrived.
    pub requests_completed: u64,
    /// GET requests sent.
    pub gets_sent: u64,
    /// Keys asked for by those GETs.
    pub get_keys_sent: u64,
    /// Keys found.
    pub hits: u64,
    /// Keys not found (including keys of GETs answered with an error).
    pub misses: u64,
    /// SET requests sent.
    pub sets_sent: u64,
    /// SETs the server acknowledged as stored.
    pub sets_stored: u64,
    /// SETs answered otherwise (not stored, or an error).
    pub sets_not_stored: u64,
    /// Replies that were server errors (`ERROR`, `CLIENT_ERROR`, `SERVER_ERROR`, `-ERR`).
    pub errors: u64,
    /// Open loop: arrivals dropped because the client backlog was full.
    pub dropped: u64,
}

impl Counts {
    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &Counts) {
        self.requests_sent += other.requests_sent;
        self.requests_completed += other.requests_completed;
        self.gets_sent += other.gets_sent;
        self.get_keys_sent += other.get_keys_sent;
        self.hits += other.hits;
        self.misses += other.misses;
        self.sets_sent += other.sets_sent;
        self.sets_stored += other.sets_stored;
        self.sets_not_stored += other.sets_not_stored;
        self.errors += other.errors;
        self.dropped += other.dropped;
    }

    /// Hits over keys asked for, or `None` when no key was read.
    #[must_use]
    pub fn hit_ratio(&self) -> Option<f64> {
        #[allow(clippy::cast_precision_loss)]
        let ratio = (self.get_keys_sent > 0).then(|| self.hits as f64 / self.get_keys_sent as f64);
        ratio
    }

    /// True when every sent request was answered and the per-verb tallies add up.
    #[must_use]
    pub fn is_consistent(&self) -> bool {
        self.requests_completed == self.requests_sent
            && self.gets_sent + self.sets_sent == self.requests_sent
            && self.hits + self.misses == self.get_keys_sent
            && self.sets_stored + self.sets_not_stored == self.sets_sent
    }
}

/// One thread's counters and latency histograms.
///
/// Each reply is recorded once, in its verb's histogram; the latency of all requests is their
/// sum ([`Tally::all`]), built once for the report rather than recorded per reply.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    /// Request and reply counters.
    pub counts: Counts,
    /// Latency of GETs only.
    pub get: Latencies,
    /// Latency of SETs only.
    pub set: Latencies,
    /// When the last measured reply arrived, ns since the phase's origin.
    pub last_reply_ns: u64,
}

impl Tally {
    /// Counts a measured request as sent.
    pub fn sent(&mut self, op: OpKind, keys: u32) {
        self.counts.requests_sent += 1;
        match op {
            OpKind::Get => {
                self.counts.gets_sent += 1;
                self.counts.get_keys_sent += u64::from(keys);
            }
            OpKind::Set => self.counts.sets_sent += 1,
        }
    }

    /// Counts a measured request's reply, which took `latency_ns`.
    pub fn replied(&mut self, op: OpKind, keys: u32, reply: &Reply, latency_ns: u64) {
        debug_assert!(reply.hits <= keys);
        self.counts.requests_completed += 1;
        self.counts.errors += u64::from(reply.error);
        match op {
            OpKind::Get => {
                self.counts.hits += u64::from(reply.hits);
                self.counts.misses += u64::from(keys - reply.hits);
                self.get.record_ns(latency_ns);
            }
            OpKind::Set => {
                if reply.stored {
                    self.counts.sets_stored += 1;
                } else {
                    self.counts.sets_not_stored += 1;
                }
                self.set.record_ns(latency_ns);
            }
        }
    }

    /// Latency of every measured request: the GET and SET histograms added together. They share
    /// their bounds, so the counts add exactly, as if every reply had been recorded in one.
    #[must_use]
    pub fn all(&self) -> Latencies {
        let mut all = self.get.clone();
        all.merge(&self.set);
        all
    }

    /// Adds another thread's tally into this one.
    pub fn merge(&mut self, other: &Tally) {
        self.counts.add(&other.counts);
        self.get.merge(&other.get);
        self.set.merge(&other.set);
        self.last_reply_ns = self.last_reply_ns.max(other.last_reply_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_and_check() {
        let one = Counts {
            requests_sent: 3,
            requests_completed: 3,
            gets_sent: 2,
            get_keys_sent: 20,
            hits: 15,
            misses: 5,
            sets_sent: 1,
            sets_stored: 1,
            ..Counts::default()
        };
        assert!(one.is_consistent());
        let mut total = Counts::default();
        total.add(&one);
        total.add(&one);
        assert!(total.is_consistent());
        assert_eq!(total.get_keys_sent, 40);
        assert_eq!(total.hit_ratio(), Some(0.75));
        total.requests_sent += 1;
        assert!(!total.is_consistent());
        assert_eq!(Counts::default().hit_ratio(), None);
    }

    #[test]
    fn tally_counts_replies() {
        let mut tally = Tally::default();
        tally.sent(OpKind::Get, 10);
        tally.sent(OpKind::Set, 1);
        let reply = Reply {
            consumed: 1,
            hits: 7,
            ..Reply::default()
        };
        tally.replied(OpKind::Get, 10, &reply, 5_000);
        let stored = Reply {
            consumed: 1,
            stored: true,
            ..Reply::default()
        };
        tally.replied(OpKind::Set, 1, &stored, 9_000);
        assert!(tally.counts.is_consistent());
        assert_eq!((tally.counts.hits, tally.counts.misses), (7, 3));
        let mut total = Tally::default();
        total.merge(&tally);
        assert_eq!(total.all().count(), 2);
        assert_eq!((total.get.count(), total.set.count()), (1, 1));
    }
}
