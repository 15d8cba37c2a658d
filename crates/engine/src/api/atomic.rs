//! Groups of writes that a crash leaves all done or all undone (see `txlog`).

use super::*;
use crate::record::Kind;
use crate::txlog::{Image, ItemFields, TxLog};
use crate::{Door, Txn};

impl Engine {
    /// Runs `f`, whose writes touch only `keys`, so that a crash leaves all of them or none:
    /// the keys' before-images go to the pool's transaction log first, and are put back by
    /// the next open if the crash comes before `f` returns and its writes are committed (under
    /// `interval` and `sync`, this commits them, so an answered group is durable under both).
    /// Writes to keys not in `keys` are not covered. Without a pool file (DRAM) nothing
    /// survives a crash, and `f` simply runs.
    ///
    /// The caller keeps other writers of `keys` out while `f` runs (the server runs groups
    /// alone); each group takes a log of its own (`txlog::TxLogs`). A failure to write the log refuses the group (`f`
    /// does not run); a failure to end it latches writes off, as a failed persist does,
    /// because a restart would undo what `f` did. A panic in `f` undoes its writes before it
    /// goes on unwinding, as a crash would at the next open. With no keys there is nothing to
    /// undo, and no log is written.
    pub fn atomically<R>(&self, keys: &[&[u8]], f: impl FnOnce() -> R) -> Result<R, WriteError> {
        let Some(logs) = self.txlog.as_ref().filter(|_| !keys.is_empty()) else {
            return Ok(f());
        };
        let mut log = logs.take();
        self.inner.check_writable()?;
        // The group's writes go through single-key operations, which no log follows: a large
        // item's parts are logged whole, up front.
        log.start();
        for (key, parts) in push_before_images(&mut log, self, keys) {
            for part in 0..parts {
                let mut name = Vec::new();
                let value = self.read_part_value(key, part, &mut name);
                let fields = value.as_deref().map(ItemFields::part);
                log.push(&name, true, fields);
            }
        }
        log.begin()
            .map_err(|error| log_error(log.path(), "write", &error))?;
        let result = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
            Ok(result) => result,
            Err(panic) => {
                if let Some(images) = log.running_images() {
                    if self.restore_images(&images).is_ok() {
                        let _ = log.end();
                    }
                }
                std::panic::resume_unwind(panic);
            }
        };
        self.commit()?;
        if let Err(error) = log.end() {
            let error = log_error(log.path(), "end", &error);
            if let WriteError::Persist(persist) = &error {
                let _ = self.inner.persisted(Err(persist.clone()));
            }
            return Err(error);
        }
        Ok(result)
    }

    /// Puts back the before-images of a group a crash interrupted, and commits them; an owner
    /// put back whose parts are not all there again is dropped whole, never served half.
    /// Returns how many keys it restored.
    pub(crate) fn restore_images(&self, images: &[Image]) -> Result<u64, WriteError> {
        let owners: Vec<&[u8]> = images.iter().map(Image::item_key).collect();
        let txn = self.transaction(&owners, &[])?;
        restore_into(&txn, images)?;
        let restored_owners = images
            .iter()
            .filter(|image| !image.part && image.item.as_ref().is_some_and(|item| item.parts > 0));
        for image in restored_owners {
            txn.drop_family_if_broken(&image.key);
        }
        txn.finish()?;
        self.commit()?;
        Ok(images.len() as u64)
    }

    /// The value of part `part` of `owner`, its name left in `name` (an atomic group's log).
    fn read_part_value(&self, owner: &[u8], part: u32, name: &mut Vec<u8>) -> Option<Vec<u8>> {
        let inner = &self.inner;
        let owner_hash = inner.hash(owner);
        let hash = inner.part_name(owner, owner_hash, part, name);
        let shard = inner.shards[inner.shard_of(owner_hash)].0.read();
        let found = shard.lookup(inner, name, hash)?;
        Some(found.view.value.to_vec())
    }
}

impl Image {
    /// The key of the item this image is of: its own, or a part's owner's.
    pub(crate) fn item_key(&self) -> &[u8] {
        if self.part {
            crate::record::split_part_key(&self.key).0
        } else {
            &self.key
        }
    }
}

impl<'a> ItemFields<'a> {
    /// A part's fields (it has no flags, expiry or parts of its own).
    pub(crate) fn part(value: &'a [u8]) -> ItemFields<'a> {
        ItemFields {
            value,
            kind: Kind::Part,
            client_flags: 0,
            expires_at_ms: None,
            parts: 0,
        }
    }
}

/// Puts `images` back through `txn`, which holds every key they name (a part's through its
/// owner's), last first: a part as it was, an owner with the part count it had (dropping the
/// parts past it), any other item as it was; then, once those are durable, drops the parts the
/// group made. A part's drop marks it dead at once, so it must wait: its owner's new record
/// (which no longer owns it) durable first, or a power cut could keep the mark and the old
/// owner, which still owns the part, and the family would be broken.
pub(super) fn restore_into(txn: &Txn<'_>, images: &[Image]) -> Result<(), WriteError> {
    let made_parts = |image: &&Image| image.part && image.item.is_none();
    for image in images.iter().rev().filter(|image| !made_parts(image)) {
        restore_one(txn, image)?;
    }
    let mut owners: Vec<&[u8]> = images
        .iter()
        .filter(made_parts)
        .map(Image::item_key)
        .collect();
    owners.sort_unstable();
    owners.dedup();
    for owner in &owners {
        txn.make_durable(owner)?;
    }
    for image in images.iter().rev().filter(made_parts) {
        let (owner, part) = crate::record::split_part_key(&image.key);
        txn.delete_part(owner, part)?;
    }
    Ok(())
}

/// Puts one image back (see [`restore_into`]): a part as it was, an item as it was or gone.
fn restore_one(txn: &Txn<'_>, image: &Image) -> Result<(), WriteError> {
    match (&image.item, image.part) {
        (None, false) => {
            Door::delete(txn, &image.key, None)?;
        }
        (None, true) => unreachable!("a part the group made goes after the rest"),
        (Some(item), true) => {
            let (owner, part) = crate::record::split_part_key(&image.key);
            txn.write_part(owner, part, &item.value)?;
        }
        (Some(item), false) => {
            let expiry = item.expires_at_ms.map_or(Expiry::Never, Expiry::AtMs);
            if item.parts > 0 {
                txn.write_owner(&image.key, &item.value, item.kind, expiry, item.parts)?;
                return Ok(());
            }
            let options = StoreOptions {
                client_flags: item.client_flags,
                expiry,
                condition: Condition::Always,
                kind: item.kind,
            };
            Door::store(txn, &image.key, &item.value, options)?;
        }
    }
    Ok(())
}

/// Adds the before-images of `keys`, as `door` reads them, to the log's group being built;
/// returns the keys that own parts, with their part counts.
pub(super) fn push_before_images<'k>(
    log: &mut TxLog,
    door: &impl Door,
    keys: &[&'k [u8]],
) -> Vec<(&'k [u8], u32)> {
    let mut owners = Vec::new();
    for &key in keys {
        let pushed = door.peek(key, |item| {
            let fields = ItemFields {
                value: item.record_value, // A large string's owner: its parts follow.

                kind: item.kind,
                client_flags: item.client_flags,
                expires_at_ms: item.expires_at_ms,
                parts: item.parts,
            };
            log.push(key, false, Some(fields));
            item.parts
        });
        match pushed {
            None => log.push(key, false, None),
            Some(0) => {}
            Some(parts) => owners.push((key, parts)),
        }
    }
    owners
}

pub(super) fn log_error(path: &std::path::Path, op: &str, error: &std::io::Error) -> WriteError {
    tracing::error!(path = %path.display(), op, %error, "the transaction log failed");
    WriteError::Persist(strata_pool::PersistError {
        offset: 0,
        len_bytes: 0,
        message: format!("transaction log {}: {op}: {error}", path.display()),
    })
}
