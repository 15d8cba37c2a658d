//! Items of several records inside a transaction: an owner and its parts (`record`'s module
//! docs, `shard::parts`). An owner and its parts share its shard, so a transaction that holds
//! the owner's key holds them all.
//!
//! A family is written part by part, then the owner last ([`Txn::write_owner`], with its new
//! part count): until then readers of the transaction's keys wait for the shard, so nobody
//! sees it half written. A write that must make room may evict a segment, and with it a
//! family the transaction is building (the family goes whole, but the parts written after it
//! went would stay, and the owner written last would then own parts that are gone): so when a
//! held shard freed any segment since the family's first write, the owner's write checks that
//! its family is whole, and if it is not, drops it — the item was evicted right after its
//! write, as a cache may. A power cut in the middle of a family's writes (or under deferred
//! durability, before the commit after them) may keep some of them and not others: parts
//! rewritten in place beside an old owner, or a new owner without a new part (which recovery
//! drops, with its family: `shard::parts`). In a logged transaction the log keeps each part's
//! before-image (appended the first time the transaction writes it, durably before the
//! write) and each owner's part count, and the parts its writes drop stay until the log says
//! done: a crash before then puts the old family back whole.

use super::*;
use crate::record::RecordMeta;
use crate::txlog::ItemFields;
use crate::{FamilyBroken, Kind};

impl Txn<'_> {
    /// In a logged transaction, appends the before-image of part `part` of `owner` to the
    /// log the first time the transaction writes it, durably before the write (`txlog`).
    fn log_part(&self, owner: &[u8], part: u32) -> Result<(), WriteError> {
        if !self.logged {
            return Ok(());
        }
        let shards = self.shards.borrow();
        let (owner_hash, position) = self.position(&shards, owner);
        self.log_part_in(shards[position].1.shard(), owner, owner_hash, part)
    }

    /// [`Txn::log_part`] in `shard`, the held shard of `owner` (hash `owner_hash`): for a
    /// change that holds it already (a large string's write, `api::large`).
    pub(in crate::api) fn log_part_in(
        &self,
        shard: &Shard,
        owner: &[u8],
        owner_hash: u64,
        part: u32,
    ) -> Result<(), WriteError> {
        if !self.logged {
            return Ok(());
        }
        let inner: &Inner = &self.engine.inner;
        let (name, hash) = inner.part_key(owner, owner_hash, part);
        let name = name.as_bytes();
        if self.logged_parts.borrow().contains(name) {
            return Ok(());
        }
        let found = shard.lookup(inner, name, hash);
        let fields = found
            .as_ref()
            .map(|found| ItemFields::part(found.view.value));
        {
            let mut log = self.log.borrow_mut();
            let log = log.as_mut().expect("a logged transaction holds the log");
            if self.log_pending.get() {
                // Not written yet: the image joins its body, and one write makes it all.
                log.push(name, true, fields);
            } else {
                log.append(name, true, fields)
                    .map_err(|error| super::atomic::log_error(log.path(), "append", &error))?;
            }
        }
        self.begin_log()?;
        self.logged_parts.borrow_mut().insert(name.to_vec());
        Ok(())
    }

    /// Makes the writes so far of the shard holding `owner` (a key the transaction holds)
    /// durable now, as a delete's dead mark is, where the pool defers persistence: for a
    /// family write whose records must reach the pool in an order (a part before the owner
    /// that owns it). Nothing to do on a DRAM pool.
    pub fn make_durable(&self, owner: &[u8]) -> Result<(), WriteError> {
        let inner: &Inner = &self.engine.inner;
        if !inner.track_dirty {
            return Ok(());
        }
        let mut shards = self.shards.borrow_mut();
        let (_, position) = self.position(&shards, owner);
        let mut shard = ShardChange::begin(shards[position].1.shard_mut());
        shard.persist_dirty(inner)
    }

    /// Drops `owner` (a key the transaction holds) with its parts when the index lacks one of
    /// them, counted as a damaged item: a restore that put back an owner whose parts the
    /// crash did not keep (recovery dropped them as orphans while no owner was live).
    pub(crate) fn drop_family_if_broken(&self, owner: &[u8]) {
        let inner: &Inner = &self.engine.inner;
        let mut shards = self.shards.borrow_mut();
        let (_, position) = self.position(&shards, owner);
        let mut shard = ShardChange::begin(shards[position].1.shard_mut());
        shard.drop_owners_lacking_parts(inner, &[owner.to_vec()]);
    }

    /// Drops part `part` of `owner` (a key the transaction holds) now: a restore's undo of a
    /// part its group made. The owner must not own it by the time the transaction ends.
    pub(crate) fn delete_part(&self, owner: &[u8], part: u32) -> Result<(), WriteError> {
        self.before_write()?;
        let inner: &Inner = &self.engine.inner;
        let mut shards = self.shards.borrow_mut();
        let (owner_hash, position) = self.position(&shards, owner);
        let mut shard = ShardChange::begin(shards[position].1.shard_mut());
        shard.kill_part(inner, owner, owner_hash, part)
    }

    /// Reads part `part` of the owner `owner` (a key the transaction holds): `f` gets its
    /// value. `Ok(None)` when the index holds no such part and the owner does not own it.
    /// Of the family this transaction read on flash last without promoting it (a read-only
    /// hold), the part is its copy's. [`FamilyBroken`] when memory's owner owns the part and
    /// the index lacks it (a part's record found damaged): the caller answers it as damaged,
    /// never as the item without the part, and the item is dropped whole
    /// ([`Txn::drop_broken_family`]).
    pub fn read_part<R>(
        &self,
        owner: &[u8],
        part: u32,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>, FamilyBroken> {
        let inner: &Inner = &self.engine.inner;
        let broken = {
            let shards = self.shards.borrow();
            let (owner_hash, position) = self.position(&shards, owner);
            let shard = shards[position].1.shard();
            let (name, hash) = inner.part_key(owner, owner_hash, part);
            if let Some(found) = shard.lookup(inner, name.as_bytes(), hash) {
                return Ok(Some(f(found.view.value)));
            }
            // Memory's owner lacks it: never a flash copy's part beside it.
            match shard.lookup(inner, owner, owner_hash) {
                Some(found) if part < found.view.meta.parts => true,
                Some(_) => return Ok(None),
                None => false,
            }
        };
        if broken {
            self.drop_broken_family(owner);
            return Err(FamilyBroken);
        }
        let family = self.flash_family.borrow();
        let Some((_, family)) = family.as_ref().filter(|(key, _)| key[..] == *owner) else {
            return Ok(None);
        };
        let item = family.item();
        let value = item
            .bundle
            .and_then(|bundle| bundle.parts().nth(part as usize));
        Ok(value.map(f))
    }

    /// Drops `owner`'s family, which lacks a part its owner owns, whole: now, where the
    /// transaction holds its shard for writing (its later commands, inside an EXEC, find the
    /// key absent); else (a read-only hold) by the repair the transaction runs as it ends, its
    /// shards released, so the family is gone before its caller answers anyone; until then
    /// the transaction's own reads find the key absent (`Txn::found_broken`).
    fn drop_broken_family(&self, owner: &[u8]) {
        let write_held = {
            let shards = self.shards.borrow();
            let (_, position) = self.position(&shards, owner);
            matches!(shards[position].1, Held::Write(_))
        };
        if write_held {
            self.drop_family_if_broken(owner);
            return;
        }
        let shards = self.shards.borrow();
        let (_, position) = self.position(&shards, owner);
        shards[position].1.shard().note_broken_family_read();
        if !self.found_broken(owner) {
            self.broken_families.borrow_mut().push(owner.to_vec());
        }
    }

    /// Writes part `part` of the owner `owner` (a key the transaction holds), replacing the
    /// part's earlier value. The owner must own it by the time the transaction ends
    /// ([`Txn::write_owner`]); a part it does not own is an orphan (module docs).
    pub fn write_part(&self, owner: &[u8], part: u32, value: &[u8]) -> Result<(), WriteError> {
        self.room_if_reserve_taken()?;
        self.log_part(owner, part)?;
        let engine = self.engine;
        let meta = RecordMeta {
            kind: Kind::Part,
            ..RecordMeta::default()
        };
        check_key(owner)?;
        let mut shards = self.shards.borrow_mut();
        let (owner_hash, position) = self.position(&shards, owner);
        let (key, hash) = engine.inner.part_key(owner, owner_hash, part);
        let key = key.as_bytes();
        engine.check_value(key, value.len(), &meta)?;
        let mut shard = ShardChange::begin(shards[position].1.shard_mut());
        shard.begin_building(owner);
        shard.write(&engine.inner, key, hash, value, meta, false)?;
        Ok(())
    }

    /// Writes the owner `owner` (a key the transaction holds) as an item of `kind` owning
    /// parts `0..parts` (written already, or kept from its last write), replacing whatever the
    /// key held; parts past `parts` that the key's last record owned are dropped. Returns the
    /// new CAS, or `None` when a segment this transaction's writes freed took part of the
    /// family (then the whole family is dropped: module docs).
    pub fn write_owner(
        &self,
        owner: &[u8],
        value: &[u8],
        kind: Kind,
        expiry: Expiry,
        parts: u32,
    ) -> Result<Option<u64>, WriteError> {
        assert!(kind != Kind::Part, "an owner is an item");
        self.before_write()?;
        let engine = self.engine;
        let mut shards = self.shards.borrow_mut();
        let (hash, position) = self.position(&shards, owner);
        let mut shard = ShardChange::begin(shards[position].1.shard_mut());
        let freed_before = shard.freed_when_building_began(owner);
        let current = shard
            .lookup(&engine.inner, owner, hash)
            .map(|found| found.view.meta.expires_at_ms);
        let meta = RecordMeta {
            expires_at_ms: engine.expiry_ms(expiry, current),
            kind,
            parts,
            ..RecordMeta::default()
        };
        engine.check_value(owner, value.len(), &meta)?;
        let cas = shard.write(&engine.inner, owner, hash, value, meta, false)?;
        if shard.segments_freed() != freed_before && !shard.family_is_whole(&engine.inner, owner) {
            shard.evict_family(&engine.inner, owner)?;
            return Ok(None);
        }
        Ok(Some(cas))
    }
}
