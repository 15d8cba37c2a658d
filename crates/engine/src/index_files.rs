//! The index placed in the pool (`IndexPlacement::Pool`): each shard's index tables live in
//! files of the pool's index directory (see `strata_pool::IndexFiles`), and a control line per
//! shard plus a book per segment let a restart map them and serve at once, after a clean stop
//! or a process crash, instead of rebuilding the index from the records.
//!
//! Shard control line (eight u64 words):
//!
//! ```text
//!  0 state         0: the line, the shard's tables and its segments' books agree with the
//!                  pool; 1: a change is in progress, and before it they agreed; 2: the
//!                  files cannot describe the shard (rebuilding, or tables that could not
//!                  stay in files); 3: they agree but for records marked superseded, whose
//!                  dead marks wait for a commit (or a change begun so is in progress)
//!  1 items         2 primary generation   3 primary buckets
//!  4 overflow generation (0: none)        5 overflow capacity   6 overflow buckets used
//!  7 zero
//! ```
//!
//! Segment book (four u64 words): write offset, live items, live bytes, latest expiry in ms
//! (`u64::MAX`: never). Only meaningful for a segment whose pool header is in use by a shard
//! whose state is 0.
//!
//! The rule: every change to a shard happens under its write lock, between `begin` (state 0
//! becomes 1) and `end` (tables, books and counts written, then state := 0, or 2 when the
//! files do not describe the shard), with release fences so the stores reach memory in that
//! order. A `kill -9` stops the process between two instructions but keeps every store it made
//! (page cache or DAX media), so a shard whose state is 0 is exactly described by its files. A shard caught
//! at 1 or 2 is rebuilt from its segments, as with the DRAM placement. A power loss or reboot
//! keeps an unknown subset of these stores, so after one the files are trusted only if the pool
//! was closed cleanly (which persists them first).
//!
//! Under deferred durability (`interval`, `sync` with group commit) an overwritten record's dead
//! mark waits for a commit; meanwhile the record is marked *superseded* (`record`) and the
//! shard ends its changes at 3. A commit writes the dead marks and sets 3 back to 0, holding
//! the shards without marking them changing (it changes neither tables nor books). A shard
//! caught at 3 is rebuilt, its tables read back for their flash entries as at 1: recovery after
//! a process crash counts its superseded records as dead and marks them so, which the first
//! commit of the new session makes durable. Mapping such a shard as it is would keep them
//! superseded for good, and after a later power loss, which revives superseded records (their
//! replacement may be lost), one whose replacement had been deleted since would come back.
//!
//! A shard caught at 1 by a process crash had its tables right up to the one change the crash
//! interrupted (which no client saw acknowledged): its segments rebuild its memory entries,
//! and its flash entries, which no segment records, are read back from those tables (see
//! [`Anchor::current_desc`]), as they are for a shard at 0 rebuilt because a book is damaged.

use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

use strata_pool::{IndexFiles, Opened};

use crate::index::TablesDesc;
use crate::segment::{self, Book, HeaderRead, OwnedSegment};

const STATE: usize = 0;
const STATE_CONSISTENT: u64 = 0;
const STATE_CHANGING: u64 = 1;
const STATE_UNTRUSTED: u64 = 2;
const STATE_MARKS_WAITING: u64 = 3;

/// How a shard's files agree with the pool at the end of a change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Agreement {
    /// Exactly (state 0).
    Exact,
    /// But for superseded records whose dead marks wait for a commit (state 3).
    MarksWaiting,
    /// Not at all (state 2).
    None,
}

/// A shard's handle on its control line and its segments' books.
#[derive(Debug)]
pub(crate) struct Anchor {
    files: Arc<IndexFiles>,
    shard: usize,
}

impl Anchor {
    pub(crate) fn new(files: Arc<IndexFiles>, shard: usize) -> Anchor {
        Anchor { files, shard }
    }

    fn word(&self, i: usize) -> &std::sync::atomic::AtomicU64 {
        &self.files.shard_line(self.shard).0[i]
    }

    /// The tables the control line describes, if it says they agree with the pool.
    pub(crate) fn consistent_desc(&self) -> Option<TablesDesc> {
        (self.word(STATE).load(Ordering::Relaxed) == STATE_CONSISTENT).then(|| self.recorded_desc())
    }

    /// The tables the control line names, when they were right up to the last change begun
    /// (state 0; 1: a change a process crash interrupted; 3: superseded records waiting for
    /// their dead marks), so that their flash entries may be read back for a shard rebuilt
    /// from its segments.
    pub(crate) fn current_desc(&self) -> Option<TablesDesc> {
        let state = self.word(STATE).load(Ordering::Relaxed);
        matches!(
            state,
            STATE_CONSISTENT | STATE_CHANGING | STATE_MARKS_WAITING
        )
        .then(|| self.recorded_desc())
    }

    /// This shard's tables as `desc` describes them, opened from its files; `None` when
    /// `desc` is `None` or its tables do not open.
    pub(crate) fn open_tables(&self, desc: Option<TablesDesc>) -> Option<crate::index::Index> {
        let shard = u16::try_from(self.shard).ok()?;
        crate::index::Index::open_in(Arc::clone(&self.files), shard, desc?)
    }

    fn recorded_desc(&self) -> TablesDesc {
        let w = |i: usize| self.word(i).load(Ordering::Relaxed);
        TablesDesc {
            items: w(1),
            primary_generation: w(2),
            primary_count: w(3),
            overflow_generation: w(4),
            overflow_capacity: w(5),
            overflow_len: w(6),
        }
    }

    /// Marks a consistent shard as changing (an untrusted one stays untrusted); every store
    /// after this reaches memory after the mark.
    pub(crate) fn begin(&self) {
        if self.word(STATE).load(Ordering::Relaxed) == STATE_CONSISTENT {
            self.word(STATE).store(STATE_CHANGING, Ordering::Relaxed);
        }
        fence(Ordering::Release);
    }

    /// Marks the shard's files as not describing it (a rebuild begins) until a change ends
    /// consistent; every store after this reaches memory after the mark.
    pub(crate) fn untrust(&self) {
        self.word(STATE).store(STATE_UNTRUSTED, Ordering::Relaxed);
        fence(Ordering::Release);
    }

    /// Records the shard's tables and the books of `touched` segments, then its state as
    /// `agreement` says, after those stores.
    pub(crate) fn end<'a>(
        &self,
        desc: TablesDesc,
        touched: impl Iterator<Item = &'a OwnedSegment>,
        agreement: Agreement,
    ) {
        for owned in touched {
            self.write_book(owned);
        }
        let words = [
            desc.items,
            desc.primary_generation,
            desc.primary_count,
            desc.overflow_generation,
            desc.overflow_capacity,
            desc.overflow_len,
        ];
        for (i, value) in words.into_iter().enumerate() {
            self.word(1 + i).store(value, Ordering::Relaxed);
        }
        let state = match agreement {
            Agreement::Exact => STATE_CONSISTENT,
            Agreement::MarksWaiting => STATE_MARKS_WAITING,
            Agreement::None => STATE_UNTRUSTED,
        };
        fence(Ordering::Release);
        self.word(STATE).store(state, Ordering::Relaxed);
    }

    /// A commit wrote the dead marks of a shard whose state was 3 (marks waiting): its files
    /// agree with the pool again. Called only under a lock held without a change begun, so a
    /// shard at 1 is never set to 0 here.
    pub(crate) fn marks_written(&self) {
        if self.word(STATE).load(Ordering::Relaxed) == STATE_MARKS_WAITING {
            fence(Ordering::Release);
            self.word(STATE).store(STATE_CONSISTENT, Ordering::Relaxed);
        }
    }

    fn write_book(&self, owned: &OwnedSegment) {
        let book = self.files.segment_book(owned.segment.id());
        let words = [
            owned.write_offset as u64,
            u64::from(owned.live_items),
            owned.live_bytes,
            owned.expires_at_ms.unwrap_or(u64::MAX),
        ];
        for (word, value) in book.iter().zip(words) {
            word.store(value, Ordering::Relaxed);
        }
    }

    /// The book of segment `id` (see [`read_book`]).
    pub(crate) fn book(&self, id: u32, segment_size_bytes: usize) -> Option<Book> {
        read_book(&self.files, id, segment_size_bytes)
    }

    /// Deletes this shard's table files other than those of `desc`.
    pub(crate) fn remove_other_tables(&self, desc: TablesDesc) {
        self.files.remove_other_tables(
            self.shard as u16,
            &[desc.primary_generation, desc.overflow_generation],
        );
    }
}

/// The book of segment `id`, if its numbers fit a segment of `segment_size_bytes`.
pub(crate) fn read_book(files: &IndexFiles, id: u32, segment_size_bytes: usize) -> Option<Book> {
    let words = files.segment_book(id);
    let word = |i: usize| words[i].load(Ordering::Relaxed);
    let book = Book {
        write_offset: usize::try_from(word(0)).ok()?,
        live_items: u32::try_from(word(1)).ok()?,
        live_bytes: word(2),
        expires_at_ms: (word(3) != u64::MAX).then_some(word(3)),
    };
    book.is_plausible(segment_size_bytes).then_some(book)
}

/// Per shard, whether every in-use segment it owns has a plausible book; all false when a
/// segment header is damaged (it could have belonged to any shard). One pass over the headers.
pub(crate) fn shards_with_sane_books(
    files: &IndexFiles,
    segments: &[strata_pool::Segment],
    shard_count: usize,
    segment_size_bytes: usize,
) -> Vec<bool> {
    let mut sane = vec![true; shard_count];
    for segment in segments {
        match segment::read_header(segment.header()) {
            HeaderRead::Free => {}
            HeaderRead::Corrupt => return vec![false; shard_count],
            HeaderRead::InUse(fields) => {
                if let Some(shard) = sane.get_mut(usize::from(fields.shard)) {
                    *shard &= read_book(files, segment.id(), segment_size_bytes).is_some();
                }
            }
        }
    }
    sane
}

/// Whether the index files may describe the pool as it was reopened: they name this pool and
/// the exact state it was left in, and that state kept every store (a clean close persisted
/// them; a process crash on the same boot lost none). A process crash inside a clean close,
/// after the files were bound to the clean state and before the pool header said so, leaves
/// files one state ahead of the pool: they describe it exactly (nothing changes in between).
pub(crate) fn files_match_pool(files: &IndexFiles, pool_id: u64, opened: Opened) -> bool {
    files
        .found()
        .is_some_and(|found| header_matches_pool(found, pool_id, opened))
}

fn header_matches_pool(found: strata_pool::ControlHeader, pool_id: u64, opened: Opened) -> bool {
    match opened {
        Opened::Created => false,
        Opened::Reopened {
            previous,
            same_boot,
        } => {
            let same_state = found.session_state_seq == previous.state_seq && opened.stores_kept();
            let inside_clean_close =
                found.session_state_seq == previous.state_seq + 1 && !previous.clean && same_boot;
            found.pool_id == pool_id && (same_state || inside_clean_close)
        }
    }
}

#[cfg(test)]
mod tests {
    use strata_pool::{ControlHeader, HeaderState, Opened};

    use super::header_matches_pool;

    fn reopened(state_seq: u64, clean: bool, same_boot: bool) -> Opened {
        Opened::Reopened {
            previous: HeaderState {
                state_seq,
                clean,
                boot_id: [0; 16],
            },
            same_boot,
        }
    }

    fn header(pool_id: u64, session_state_seq: u64) -> ControlHeader {
        ControlHeader {
            pool_id,
            session_state_seq,
            shard_count: 2,
            segment_count: 8,
        }
    }

    #[test]
    fn index_files_describe_the_pool_only_in_the_states_that_kept_them_exact() {
        // (files' pool, files' state, pool's previous state, clean, same boot, trusted)
        let cases = [
            // The state they were bound to: after a clean close, or a crash on the same boot.
            (7, 10, 10, true, false, true),
            (7, 10, 10, false, true, true),
            // Another pool, or a power loss that left the pool unclean.
            (8, 10, 10, true, true, false),
            (7, 10, 10, false, false, false),
            // Bound to the clean state of a close a process crash cut short on the same boot.
            (7, 11, 10, false, true, true),
            // ... but not after a power loss, nor when the pool did close cleanly at 10 (the
            // files of a later session that never bound), nor two states ahead.
            (7, 11, 10, false, false, false),
            (7, 11, 10, true, true, false),
            (7, 12, 10, false, true, false),
        ];
        for (files_pool, files_seq, pool_seq, clean, same_boot, trusted) in cases {
            let opened = reopened(pool_seq, clean, same_boot);
            assert_eq!(
                header_matches_pool(header(files_pool, files_seq), 7, opened),
                trusted,
                "files of pool {files_pool} at {files_seq}, pool at {pool_seq}, clean {clean}, \
                 same boot {same_boot}"
            );
        }
        assert!(!header_matches_pool(header(7, 10), 7, Opened::Created));
    }
}
