//! The engine's public operations, by family:
//!
//! | file          | operations                                                           |
//! |---------------|----------------------------------------------------------------------|
//! | `read.rs`     | get, peek, contains, prefetch, get_many; flash read planning         |
//! | `write.rs`    | store, set, modify, delete, touch, arith, concat                     |
//! | `keyspace.rs` | flush, expire, scan, random key, len, commit, scrub                  |
//! | `large.rs`    | strings longer than one record: kept in parts, read joined           |
//! | `atomic.rs`   | atomically: groups of writes a crash leaves all done or all undone   |
//! | `door.rs`     | the typed single-key operations, through the engine or a transaction |
//! | `txn.rs`      | transactions: several keys' shards locked together, in one order     |
//!
//! Here: what they share (the key's shard, key and value checks, a due flush).

mod atomic;
mod door;
mod keyspace;
mod large;
mod read;
mod txn;
mod write;

pub use door::{Door, DynDoor, Families};
pub use keyspace::*;
pub use read::*;
pub use txn::Txn;
pub use write::*;

pub(crate) use txn::{assert_no_transaction, note_reserve_taken};

use std::sync::atomic::Ordering;

use crate::flash::{tiering, FlashRead, ReadFor, ReadOutcome};
use crate::index::{Entry, SlotRef};
use crate::record::{self, RecordMeta, KEY_LEN_MAX};
use crate::shard::{FlashCandidates, Found, Lookup, Shard, ShardLock, ShardWrite};
use crate::{
    Arith, Change, Condition, Engine, Expiry, Inner, ItemRef, StoreOptions, StoreOutcome,
    WriteError,
};

fn item<'a>(found: &Found<'a>) -> ItemRef<'a> {
    ItemRef {
        key: found.view.key,
        value: found.view.value,
        record_value: found.view.value,
        client_flags: found.view.meta.client_flags,
        cas: found.cas,
        expires_at_ms: found.view.meta.expires_at_ms,
        kind: found.view.meta.kind,
        parts: found.view.meta.parts,
        fetched: found.entry.fetched(),
        reads: found.entry.freq(),
        on_flash: false,
    }
}

/// The item a flash record read for `key` holds, as reads hand it over (`entry`: its index
/// slot, whose reads it reports).
fn flash_item<'a>(key: &'a [u8], item: &tiering::FlashItem<'a>, entry: Entry) -> ItemRef<'a> {
    ItemRef {
        key,
        value: item.value,
        record_value: item.value,
        client_flags: item.meta.client_flags,
        cas: item.cas,
        expires_at_ms: item.meta.expires_at_ms,
        kind: item.meta.kind,
        parts: item.meta.parts,
        fetched: entry.fetched(),
        reads: entry.freq(),
        on_flash: true,
    }
}

fn check_key(key: &[u8]) -> Result<(), WriteError> {
    if key.is_empty() {
        return Err(WriteError::KeyEmpty);
    }
    if key.len() > KEY_LEN_MAX {
        return Err(WriteError::KeyTooLong {
            len: key.len(),
            max: KEY_LEN_MAX,
        });
    }
    Ok(())
}

impl Engine {
    fn shard_for(&self, key: &[u8]) -> (u64, &ShardLock) {
        let hash = self.inner.hash(key);
        (hash, &self.inner.shards[self.inner.shard_of(hash)].0)
    }

    fn check_value(
        &self,
        key: &[u8],
        value_len: usize,
        meta: &RecordMeta,
    ) -> Result<(), WriteError> {
        check_key(key)?;
        let max = self.inner.value_len_max;
        let size = record::record_size(key.len(), value_len, meta);
        if value_len > max || size > self.inner.segment_size_bytes {
            return Err(self.too_large(key, value_len));
        }
        Ok(())
    }

    /// [`Engine::check_value`] for a value of `meta.kind`: a string past one record is
    /// checked against the item limit alone, and answers `true` (it takes parts,
    /// `api::large`).
    fn check_value_of(
        &self,
        key: &[u8],
        value_len: usize,
        meta: &RecordMeta,
    ) -> Result<bool, WriteError> {
        if meta.kind != crate::Kind::String || !self.takes_parts(key, value_len) {
            self.check_value(key, value_len, meta)?;
            return Ok(false);
        }
        if value_len > self.inner.value_len_max {
            return Err(self.too_large(key, value_len));
        }
        Ok(true)
    }

    /// The refusal of a value of `value_len` bytes for `key`.
    fn too_large(&self, key: &[u8], value_len: usize) -> WriteError {
        WriteError::TooLarge {
            len: value_len,
            max: self.value_len_max_for_key(key.len()),
        }
    }

    fn maybe_flush(&self) {
        let flush_at_ms = self.inner.flush_at_ms.load(Ordering::Acquire);
        if flush_at_ms != 0 && self.inner.now_ms() >= flush_at_ms {
            let claimed = self.inner.flush_at_ms.compare_exchange(
                flush_at_ms,
                0,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            if claimed.is_ok() {
                let _ = self.flush_now();
            }
        }
    }
}
