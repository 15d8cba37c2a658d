//! Records read ahead for one waiting request, owned by that request's connection and lent to
//! the reads its requests make when they run.
//!
//! ```text
//!  server: a request's keys are on flash ─▶ reads planned (Engine::plan_flash_reads_at)
//!          ─▶ done off the worker's path (its ring, or an I/O thread)
//!          ─▶ Engine::finish_flash_read(read, bytes, &mut ReadAhead): the record joins the
//!             request's own ReadAhead, which travels back with the "done" to its connection
//!  worker: Engine::with_read_ahead(&mut records, || the connection's requests run):
//!          a flash read of a location lent here takes the record, no I/O and no lock
//! ```
//!
//! Nothing is shared between connections (there is no tier-wide staging area to bound, to
//! lock, or for one request to take another's record from). Lending is per thread: the records
//! are moved into this thread's slot for the closure's run and moved back after it (also if
//! it unwinds), so only the requests of the connection that owns them, running on its
//! worker, can take them.
//!
//! A record is used only if its region is still the generation it was read from (the caller
//! of [`take_lent`] checks `seq`) and the index still points at it (the read got there through
//! the index), so a write, delete or reclaim while the request waited wins.

use std::cell::RefCell;

/// Records read ahead, by flash location (the medium's units), for the requests of one
/// connection. Small (a request's keys and the few pipelined behind it): a list.
#[derive(Debug, Default)]
pub struct ReadAhead {
    records: Vec<AheadRecord>,
    bytes: usize,
}

/// One record read ahead: where, of which region generation, and its bytes (stamp excluded).
#[derive(Debug)]
struct AheadRecord {
    location: u64,
    seq: u64,
    bytes: Vec<u8>,
}

impl ReadAhead {
    /// Records held.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether it holds no record.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Bytes the records hold.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether a record for `location` is held.
    pub fn contains(&self, location: u64) -> bool {
        self.records.iter().any(|r| r.location == location)
    }

    /// Adds the record read at `location` (of region generation `seq`); one already held there
    /// is replaced (the newer read wins).
    pub(crate) fn insert(&mut self, location: u64, seq: u64, bytes: Vec<u8>) {
        self.remove(location);
        self.bytes += bytes.len();
        self.records.push(AheadRecord {
            location,
            seq,
            bytes,
        });
        debug_assert_eq!(self.bytes, self.records.iter().map(|r| r.bytes.len()).sum());
    }

    fn remove(&mut self, location: u64) -> Option<AheadRecord> {
        let at = self.records.iter().position(|r| r.location == location)?;
        let record = self.records.remove(at); // Keeps arrival order (see `absorb`).
        self.bytes -= record.bytes.len();
        Some(record)
    }

    /// Moves the record at `location`, if held, to `other` (an I/O thread's batch read for
    /// several requests hands each its own).
    pub fn move_to(&mut self, location: u64, other: &mut ReadAhead) {
        if let Some(record) = self.remove(location) {
            other.insert(record.location, record.seq, record.bytes);
        }
    }

    /// Copies the record at `location`, if held, to `other` (two requests waiting for one
    /// record each get it).
    pub fn copy_to(&self, location: u64, other: &mut ReadAhead) {
        if let Some(record) = self.records.iter().find(|r| r.location == location) {
            other.insert(record.location, record.seq, record.bytes.clone());
        }
    }

    /// Moves `newer`'s records in, replacing any held at the same locations, and returns the
    /// oldest of those held before, past the `older_max` newest of them or past
    /// `older_bytes_max` bytes of them. Records a connection keeps across waits (for requests
    /// pipelined behind one that waits again) stay bounded this way; the caller discards what
    /// is returned.
    pub fn absorb(
        &mut self,
        newer: ReadAhead,
        older_max: usize,
        older_bytes_max: usize,
    ) -> ReadAhead {
        let newer_locations: Vec<u64> = newer.records.iter().map(|r| r.location).collect();
        self.records
            .retain(|r| !newer_locations.contains(&r.location));
        let mut over = self.records.len().saturating_sub(older_max);
        let mut older_bytes: usize = self.records[over..].iter().map(|r| r.bytes.len()).sum();
        while older_bytes > older_bytes_max {
            older_bytes -= self.records[over].bytes.len();
            over += 1;
        }
        // Records are kept in arrival order: the front is the oldest.
        let dropped: Vec<AheadRecord> = self.records.drain(..over).collect();
        self.records.extend(newer.records);
        self.bytes = self.records.iter().map(|r| r.bytes.len()).sum();
        let bytes = dropped.iter().map(|r| r.bytes.len()).sum();
        ReadAhead {
            records: dropped,
            bytes,
        }
    }

    /// Drops every record; returns how many there were.
    pub fn clear(&mut self) -> usize {
        let held = self.records.len();
        self.records.clear();
        self.bytes = 0;
        held
    }

    /// The record at `location` if it is of generation `seq`; taken either way (a record of
    /// another generation is worthless: its region was reclaimed and written again).
    fn take(&mut self, location: u64, seq: u64) -> Option<Vec<u8>> {
        let record = self.remove(location)?;
        (record.seq == seq).then_some(record.bytes)
    }
}

thread_local! {
    /// The records lent to this thread's reads ([`lend`]).
    static LENT: RefCell<ReadAhead> = RefCell::new(ReadAhead::default());
}

/// Moves the records back to their owner when the lending ends, also by unwinding.
struct Lending<'a> {
    owner: &'a mut ReadAhead,
}

impl Drop for Lending<'_> {
    fn drop(&mut self) {
        LENT.with(|lent| std::mem::swap(&mut *lent.borrow_mut(), self.owner));
    }
}

/// Runs `f` with `records` lent to this thread's flash reads; what `f`'s reads did not take is
/// back in `records` afterwards. Lending again inside `f` lends the inner records for the
/// inner run only.
pub(crate) fn lend<R>(records: &mut ReadAhead, f: impl FnOnce() -> R) -> R {
    LENT.with(|lent| std::mem::swap(&mut *lent.borrow_mut(), records));
    let _lending = Lending { owner: records };
    f()
}

/// Takes the lent record at `location` if it is of generation `seq`.
pub(crate) fn take_lent(location: u64, seq: u64) -> Option<Vec<u8>> {
    LENT.with(|lent| {
        let mut lent = lent.try_borrow_mut().ok()?;
        if lent.is_empty() {
            return None;
        }
        lent.take(location, seq)
    })
}

/// Whether a record for `location` is lent to this thread's reads.
pub(crate) fn is_lent(location: u64) -> bool {
    LENT.with(|lent| lent.try_borrow().is_ok_and(|lent| lent.contains(location)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lent_records_are_taken_once_and_the_rest_come_back() {
        let mut records = ReadAhead::default();
        records.insert(8, 1, vec![1; 10]);
        records.insert(16, 2, vec![2; 20]);
        records.insert(24, 3, vec![3; 30]);
        assert_eq!(records.bytes(), 60);
        assert!(!is_lent(8), "nothing lent outside a lending");
        let taken = lend(&mut records, || {
            assert!(is_lent(8) && is_lent(16) && !is_lent(32));
            let first = take_lent(8, 1);
            assert_eq!(take_lent(8, 1), None, "taken once");
            // Another generation: worthless, and gone.
            assert_eq!(take_lent(16, 9), None);
            assert!(!is_lent(16));
            // A lending inside lends only its own records.
            let mut inner = ReadAhead::default();
            inner.insert(40, 4, vec![4; 4]);
            lend(&mut inner, || assert!(is_lent(40) && !is_lent(24)));
            assert!(inner.is_empty() || inner.contains(40));
            assert!(is_lent(24) && !is_lent(40));
            first
        });
        assert_eq!(taken, Some(vec![1; 10]));
        assert!(!is_lent(24), "back with the owner");
        assert_eq!(records.len(), 1);
        assert!(records.contains(24));
        assert_eq!(records.bytes(), 30);
    }

    #[test]
    fn a_lending_ends_when_its_run_unwinds() {
        let mut records = ReadAhead::default();
        records.insert(8, 1, vec![1; 10]);
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            lend(&mut records, || panic!("a request's run failed"));
        }));
        assert!(unwound.is_err());
        assert!(!is_lent(8));
        assert!(records.contains(8), "the owner has its records back");
    }

    #[test]
    fn absorbing_newer_records_replaces_and_bounds_the_older() {
        let mut held = ReadAhead::default();
        for location in 0..10 {
            held.insert(location, 1, vec![0; 10]);
        }
        let mut newer = ReadAhead::default();
        newer.insert(9, 2, vec![0; 5]); // Replaces the older record at 9.
        newer.insert(100, 2, vec![0; 5]);
        let dropped = held.absorb(newer, 4, usize::MAX);
        assert_eq!(dropped.len(), 5, "nine older, four kept");
        assert!((0..5).all(|location| dropped.contains(location)));
        assert_eq!(dropped.bytes(), 50);
        assert_eq!(held.len(), 6);
        assert!((5..9).all(|location| held.contains(location)));
        assert!((0..5).all(|location| !held.contains(location)));
        assert!(held.contains(9) && held.contains(100));
        assert_eq!(held.bytes(), 4 * 10 + 2 * 5);
        // Past a bound in bytes too: of the six held (5..=8 of 10 bytes, 9 and 100 of 5), the
        // newest that fit in 25 bytes stay.
        let mut newer = ReadAhead::default();
        newer.insert(200, 3, vec![0; 1]);
        let dropped = held.absorb(newer, 100, 25);
        assert_eq!(dropped.len(), 3);
        assert!((5..8).all(|location| dropped.contains(location)));
        assert!(held.contains(8) && held.contains(9) && held.contains(100) && held.contains(200));
        assert_eq!(held.bytes(), 10 + 5 + 5 + 1);
        assert_eq!(held.clear(), 4);
        assert_eq!(held.bytes(), 0);
    }
}
