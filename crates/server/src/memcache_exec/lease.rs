//! The meta protocol's stale-while-revalidate state: which items are stale (`X`) and which
//! have had their recache token handed out (`W` to the winner, `Z` to everyone after).
//!
//! memcached keeps these as two bits in each item. The engine's records have no room for
//! protocol state (it knows no protocol), so strata keeps them here, in one bounded table per
//! server ([`ServerContext::leases`]), keyed by the key and tied to the item's CAS: an entry
//! applies only while the item still has the CAS it was recorded with, so any later write
//! (which gets a new CAS) voids it without a lookup here; a write with a CAS the client chose
//! (meta `E`), which could repeat the recorded one, drops the entry instead (`forget`). Entries
//! are added only by `mg N`/`mg R` wins, `md I` and `ms I`, so plain get/set traffic never takes
//! the lock: a reader checks the entry count first. An entry found with an old CAS is dropped;
//! entries of items that are never read again stay until the table fills up and is cleared.
//!
//! Invariants: at most [`LEASES_MAX`] entries; `Leases::count` equals the table's length
//! whenever the lock is released. When the table is full, new leases evict it wholesale: the
//! worst outcome is a second client winning a recache, which memcached also allows after its
//! token expires.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::context::ServerContext;

/// Most items with stale or win-token state remembered at once.
pub const LEASES_MAX: usize = 4096;

/// One item's state, valid while the item's CAS is `cas`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Lease {
    cas: u64,
    stale: bool,
    win_sent: bool,
}

/// The table of one server (its [`ServerContext`], so of one engine), per key.
#[derive(Debug, Default)]
pub(crate) struct Leases {
    table: Mutex<HashMap<Box<[u8]>, Lease>>,
    /// Entries in `table`, readable without the lock.
    count: AtomicUsize,
}

impl Leases {
    fn lock(&self) -> MutexGuard<'_, HashMap<Box<[u8]>, Lease>> {
        self.table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn insert(&self, table: &mut HashMap<Box<[u8]>, Lease>, key: &[u8], lease: Lease) {
        if table.len() >= LEASES_MAX {
            table.clear();
        }
        table.insert(key.into(), lease);
        self.count.store(table.len(), Ordering::Release);
    }
}

/// What a reader of an item learns, and whether it wins the recache token.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Flags {
    /// `Z`: the token went to another client.
    pub win_sent: bool,
    /// `X`: the item is stale.
    pub stale: bool,
    /// `W`: this client wins the token.
    pub won: bool,
}

/// The flags of a read of `key` whose item has `cas`. `want_win` says the reader asks for the
/// token (an `R` threshold was crossed); a stale item hands it out anyway, once.
pub(super) fn read(ctx: &ServerContext, key: &[u8], cas: u64, want_win: bool) -> Flags {
    let leases = &ctx.leases;
    if leases.count.load(Ordering::Acquire) == 0 && !want_win {
        return Flags::default();
    }
    let mut table = leases.lock();
    let recorded = table.get(key).copied();
    let lease = recorded.filter(|lease| lease.cas == cas);
    if recorded.is_some() && lease.is_none() {
        table.remove(key);
        leases.count.store(table.len(), Ordering::Release);
    }
    let flags = match lease {
        Some(lease) if lease.win_sent => Flags {
            win_sent: true,
            stale: lease.stale,
            won: false,
        },
        Some(lease) => Flags {
            win_sent: false,
            stale: lease.stale,
            won: true,
        },
        None if want_win => Flags {
            won: true,
            ..Flags::default()
        },
        None => Flags::default(),
    };
    if flags.won {
        let stale = lease.is_some_and(|lease| lease.stale);
        let lease = Lease {
            cas,
            stale,
            win_sent: true,
        };
        leases.insert(&mut table, key, lease);
    }
    flags
}

/// Forgets `key`'s entry, if any: for a write with a CAS the client chose (meta `E`), which
/// may equal the CAS the entry was recorded with and so would not void it.
pub(super) fn forget(ctx: &ServerContext, key: &[u8]) {
    let leases = &ctx.leases;
    if leases.count.load(Ordering::Acquire) == 0 {
        return;
    }
    let mut table = leases.lock();
    if table.remove(key).is_some() {
        leases.count.store(table.len(), Ordering::Release);
    }
}

/// Records that the item under `key` now has `cas`, is stale or not, and whether its token was
/// already handed out.
pub(super) fn record(ctx: &ServerContext, key: &[u8], cas: u64, stale: bool, win_sent: bool) {
    let leases = &ctx.leases;
    let lease = Lease {
        cas,
        stale,
        win_sent,
    };
    leases.insert(&mut leases.lock(), key, lease);
}
