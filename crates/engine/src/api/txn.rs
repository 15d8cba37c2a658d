//! Transactions: the keys of one command (or of a whole `EXEC`) held together.
//!
//! [`Engine::transaction`] locks the shards of every key the caller names, in shard order (the
//! one global order every holder of several shards follows, so no two transactions ever wait
//! for each other in a cycle), and hands back a [`Txn`] whose typed reads and changes
//! ([`Door`]) act on those keys only: nothing else runs on them until it ends, and whatever
//! it changed becomes visible at once when it does. Keys it logs get their before-images in
//! the transaction log first (see `txlog`), and its end commits its shards' writes before the
//! log says done, all while the shards are still held: a crash leaves all of its writes or
//! none, and no other writer's change to its keys can come between its writes and that
//! promise (a restore would undo it).
//!
//! A transaction's own thread must not use the engine's single-key operations while it is
//! open (they would wait for a shard it holds): they assert that it does not.

use std::cell::{Cell, RefCell};

use parking_lot::{RwLockReadGuard, RwLockWriteGuard};

mod parts;

use super::*;
use crate::flash::tiering::OwnedFlashItem;
use crate::shard::ShardChange;
use crate::txlog::Lane;
use crate::Observed;

thread_local! {
    /// Whether this thread holds an open transaction.
    static IN_TRANSACTION: Cell<bool> = const { Cell::new(false) };
    /// A write of this thread's open transaction took a segment of the cleaner's reserve
    /// (`Inner::obtain_segment`): before its next write the transaction cleans the other
    /// shards it holds ([`Txn::make_room`]), which that write's pass could not.
    static RESERVE_TAKEN: Cell<bool> = const { Cell::new(false) };
}

/// Notes, inside a transaction, that a write took a segment of the cleaner's reserve.
pub(crate) fn note_reserve_taken() {
    if IN_TRANSACTION.with(Cell::get) {
        RESERVE_TAKEN.with(|taken| taken.set(true));
    }
}

/// Panics when this thread holds an open transaction: it is about to wait for a shard lock,
/// which could be one the transaction holds (a deadlock, turned into a panic that names it).
#[inline]
pub(crate) fn assert_no_transaction() {
    assert!(
        !IN_TRANSACTION.with(Cell::get),
        "a single-key engine operation inside an open transaction (use the Txn)"
    );
}

/// A shard a transaction holds.
enum Held<'e> {
    Read(RwLockReadGuard<'e, Shard>),
    Write(RwLockWriteGuard<'e, Shard>),
}

impl Held<'_> {
    fn shard(&self) -> &Shard {
        match self {
            Held::Read(shard) => shard,
            Held::Write(shard) => shard,
        }
    }

    fn shard_mut(&mut self) -> &mut Shard {
        match self {
            Held::Write(shard) => shard,
            Held::Read(_) => panic!("a change inside a read-only transaction"),
        }
    }
}

/// Several keys held together (see the module docs). Not `Send`: it holds lock guards.
pub struct Txn<'e> {
    engine: &'e Engine,
    /// The held shards, by shard index, ascending (the order they were locked in).
    shards: RefCell<Vec<(usize, Held<'e>)>>,
    /// The transaction log, held for the transaction's life when it logs before-images.
    log: RefCell<Option<Lane<'e>>>,
    /// The log holds this transaction's before-images and has not been ended.
    logged: bool,
    /// The parts whose before-images the log holds (appended as the transaction first
    /// writes each: `parts`).
    logged_parts: RefCell<std::collections::HashSet<Vec<u8>>>,
    /// The log is built but not written yet: it is written before the transaction's first
    /// write ([`Txn::begin_log`]), with the first part's before-image in its body when that
    /// write is a part's (one write of the log, not two), and not at all when the
    /// transaction writes nothing.
    log_pending: Cell<bool>,
    /// The family a read-only hold read on flash last (a large hash, which it cannot
    /// promote), by owner key: its parts are read from this copy ([`Txn::read_part`]). One
    /// only (a command reads one large hash's chunks at a time), so a read of many keys holds
    /// one region's worth of copies at most.
    flash_family: RefCell<Option<(Vec<u8>, OwnedFlashItem)>>,
    /// The owners of families that a read under a read-only hold found lacking a part their
    /// owner owns ([`Txn::read_part`]'s [`FamilyBroken`]; a write hold drops such a family at
    /// once). The transaction's later reads find them absent, as after a write hold's drop
    /// (a large hash's count is never shown without its fields, even inside the EXEC that met
    /// the damage), and it repairs the engine as it ends, its shards released, so each family
    /// is gone before its caller answers anyone.
    broken_families: RefCell<Vec<Vec<u8>>>,
}

impl Engine {
    /// Locks the shards of `keys` for writing, in shard order, and returns the transaction
    /// that reads and changes them (see the module docs). The before-images of `logged` (the
    /// keys it may write; they are locked too) go to the transaction log first, where the pool
    /// has one, so that a crash before [`Txn::finish`] returns undoes every write to them. A
    /// failure to write the log refuses the transaction (nothing has changed).
    pub fn transaction(&self, keys: &[&[u8]], logged: &[&[u8]]) -> Result<Txn<'_>, WriteError> {
        assert_no_transaction();
        self.maybe_flush();
        let log = match (&self.txlog, logged.is_empty()) {
            (Some(logs), false) => Some(logs.take()),
            _ => None,
        };
        self.inner.check_writable()?;
        let all = keys.iter().chain(logged);
        let shards = self.lock_shards(all, |lock| Held::Write(lock.write_for_transaction()));
        let mut txn = Txn::open(self, shards, log);
        if let Some(mut log) = txn.log.get_mut().take() {
            log.start();
            // An owner's parts are logged as the transaction first writes each (`parts`).
            super::atomic::push_before_images(&mut log, &txn, logged);
            // Written before the first write (`begin_log`); a log that cannot even be opened
            // refuses the transaction now.
            log.ready()
                .map_err(|error| super::atomic::log_error(log.path(), "write", &error))?;
            *txn.log.get_mut() = Some(log);
            txn.logged = true;
            txn.log_pending.set(true);
            for (_, held) in txn.shards.get_mut().iter_mut() {
                held.shard_mut().defer_part_drops = true;
            }
        }
        Ok(txn)
    }

    /// Locks the shards of `keys` for reading, in shard order: a read of several keys (MGET)
    /// that sees all or none of any transaction. Its reads do not promote flash items.
    pub fn read_together(&self, keys: &[&[u8]]) -> Txn<'_> {
        assert_no_transaction();
        self.maybe_flush();
        let shards = self.lock_shards(keys.iter(), |lock| Held::Read(lock.read_for_transaction()));
        Txn::open(self, shards, None)
    }

    /// The shards of `keys`, each locked once with `lock`, in ascending shard order: marked
    /// in a bit set on the stack and walked in order (no vector of indexes to sort and free).
    fn lock_shards<'e, 'k>(
        &'e self,
        keys: impl Iterator<Item = &'k &'k [u8]>,
        lock: impl Fn(&'e ShardLock) -> Held<'e>,
    ) -> Vec<(usize, Held<'e>)> {
        const WORD_BITS: usize = u64::BITS as usize;
        let mut marked = [0u64; crate::config::SHARD_COUNT_MAX / WORD_BITS];
        let mut count = 0;
        for key in keys {
            let index = self.inner.shard_of(self.inner.hash(key));
            let (word, bit) = (index / WORD_BITS, 1u64 << (index % WORD_BITS));
            count += usize::from(marked[word] & bit == 0);
            marked[word] |= bit;
        }
        let mut shards = Vec::with_capacity(count);
        let words = self.inner.shards.len().div_ceil(WORD_BITS);
        for (word, &bits) in marked[..words].iter().enumerate() {
            let mut rest = bits;
            while rest != 0 {
                let index = word * WORD_BITS + rest.trailing_zeros() as usize;
                shards.push((index, lock(&self.inner.shards[index].0)));
                rest &= rest - 1;
            }
        }
        debug_assert_eq!(shards.len(), count);
        shards
    }
}

impl<'e> Txn<'e> {
    fn open(engine: &'e Engine, shards: Vec<(usize, Held<'e>)>, log: Option<Lane<'e>>) -> Txn<'e> {
        debug_assert!(shards.windows(2).all(|pair| pair[0].0 < pair[1].0));
        IN_TRANSACTION.with(|open| open.set(true));
        Txn {
            engine,
            shards: RefCell::new(shards),
            log: RefCell::new(log),
            logged: false,
            logged_parts: RefCell::default(),
            log_pending: Cell::new(false),
            flash_family: RefCell::default(),
            broken_families: RefCell::new(Vec::new()),
        }
    }

    /// Ends the transaction: with logged keys, commits the held shards' writes and marks the
    /// log done (a failure to do either is returned, and the next open undoes the writes),
    /// then releases the shards.
    pub fn finish(mut self) -> Result<(), WriteError> {
        self.end(false)
    }

    /// For a pool opened with `simulation` watching it: what a power cut now, in the middle of
    /// this transaction, would leave (see [`Engine::crash_image`]); the shards the transaction
    /// does not hold are held meanwhile. Its own are between changes: each change begins and
    /// ends inside one call. For the power-failure tests' cuts mid-transaction, on an engine
    /// no other thread uses: it takes the other shards out of the global order (a thread
    /// holding them all, as a commit does, would wait for it while it waits for that one).
    pub fn crash_image(
        &self,
        simulation: &strata_pool::testing::SimulatedPersistence,
        keep_unpersisted_line: &mut dyn FnMut(usize) -> bool,
    ) -> Vec<u8> {
        let held = self.shards.borrow();
        let _others: Vec<_> = (self.engine.inner.shards.iter().enumerate())
            .filter(|(index, _)| held.binary_search_by_key(index, |&(h, _)| h).is_err())
            .map(|(_, lock)| lock.0.write_for_transaction())
            .collect();
        let live = self.engine.pool.lock().live_image();
        simulation.crash_image(&live, keep_unpersisted_line)
    }

    /// The key's hash and where its shard is among the held ones; panics for a key the
    /// transaction did not name (an invariant of every caller).
    fn position(&self, shards: &[(usize, Held<'e>)], key: &[u8]) -> (u64, usize) {
        let inner = &self.engine.inner;
        let hash = inner.hash(key);
        let index = inner.shard_of(hash);
        let position = shards
            .binary_search_by_key(&index, |&(held, _)| held)
            .expect("a key the transaction did not name");
        (hash, position)
    }

    /// Reads `key` (see [`Engine::read`]); a key found only on flash is read from there (a
    /// record read ahead by the plan is used without I/O) and stays there.
    pub fn read<R>(&self, key: &[u8], bump: bool, f: impl FnOnce(ItemRef<'_>) -> R) -> Option<R> {
        self.read_as(key, bump, false, |item, _| f(item))
    }

    /// Reads `key` with its value in pieces (see [`Engine::get_pieces`]).
    pub fn read_pieces<R>(
        &self,
        key: &[u8],
        bump: bool,
        f: impl FnOnce(ItemRef<'_>, &[&[u8]]) -> R,
    ) -> Option<R> {
        self.read_as(key, bump, true, f)
    }

    /// [`Txn::read`] and [`Txn::read_pieces`]: `unjoined` says whether a large string comes
    /// as its parts' values.
    fn read_as<R>(
        &self,
        key: &[u8],
        bump: bool,
        unjoined: bool,
        f: impl FnOnce(ItemRef<'_>, &[&[u8]]) -> R,
    ) -> Option<R> {
        let mut f = f;
        // A promotion whose own writes' eviction took part of the family leaves it on flash: a
        // few tries, then the family reads as absent (never as an owner without its parts).
        for look in 0..=PROMOTIONS_PER_READ_MAX {
            match self.read_once(key, bump, unjoined, look < PROMOTIONS_PER_READ_MAX, f) {
                Ok(found) => return found,
                Err((back, promote)) => {
                    self.promote_read(key, promote);
                    f = back;
                }
            }
        }
        None
    }

    /// One look for `key` ([`Txn::read_as`]); `Err` when its flash record is a family whose
    /// parts only memory serves and the shard is held for writing (`promote` allowed): the
    /// caller promotes it ([`Txn::promote_read`]) and looks again.
    #[allow(clippy::type_complexity)]
    fn read_once<R, F: FnOnce(ItemRef<'_>, &[&[u8]]) -> R>(
        &self,
        key: &[u8],
        bump: bool,
        unjoined: bool,
        promote: bool,
        f: F,
    ) -> Result<Option<R>, (F, (OwnedFlashItem, u64))> {
        let inner: &Inner = &self.engine.inner;
        let shards = self.shards.borrow();
        let (hash, position) = self.position(&shards, key);
        let shard = shards[position].1.shard();
        if self.found_broken(key) {
            shard.counters.misses.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        }
        if let Some(found) = shard.lookup_unexpired(inner, key, hash) {
            if bump {
                shard.index.bump_freq(found.slot);
            }
            shard.counters.hits.fetch_add(1, Ordering::Relaxed);
            let key = (key, hash);
            return Ok(if unjoined {
                large::with_pieces(inner, shard, key, &found, f)
            } else {
                large::with_item(inner, shard, key, &found, |item| f(item, &[item.value]))
            });
        }
        let families = match shards[position].1 {
            Held::Write(_) if promote => Families::Promote,
            Held::Write(_) => Families::Absent,
            Held::Read(_) => Families::AsOwners,
        };
        let found = if shard.lookup(inner, key, hash).is_none() {
            // One piece: a flash record's value, or a large string's bundle's parts, joined.
            let mut f = Some(f);
            let mut kept = None;
            let flash = (shard, &mut kept);
            let read = read_from_flash(inner, flash, (key, hash), bump, families, |item| {
                (f.take().expect("called once"))(item, &[item.value])
            });
            if let Some(family) = kept {
                *self.flash_family.borrow_mut() = Some((key.to_vec(), family));
            }
            match read {
                FromFlash::Found(found) => Some(found),
                FromFlash::Missing => None,
                FromFlash::NeedsMemory(item, location) => {
                    return Err((f.take().expect("not called"), (item, location)));
                }
            }
        } else {
            None
        };
        if found.is_none() {
            shard.counters.misses.fetch_add(1, Ordering::Relaxed);
        }
        Ok(found)
    }

    /// Promotes `item`, read from flash at `location` as `key`'s, into memory in the shard
    /// held for writing (best effort: a failed promotion leaves it on flash, read as absent).
    fn promote_read(&self, key: &[u8], (item, location): (OwnedFlashItem, u64)) {
        let inner: &Inner = &self.engine.inner;
        let mut shards = self.shards.borrow_mut();
        let (hash, position) = self.position(&shards, key);
        let shard = shards[position].1.shard_mut();
        let _ = shard.promote(inner, key, hash, location, &item.item());
    }

    /// The general read-modify-write (see [`Engine::modify`]) of a key the transaction holds.
    pub fn modify(
        &self,
        key: &[u8],
        f: impl FnOnce(Option<ItemRef<'_>>, &mut Vec<u8>) -> Change,
    ) -> Result<Option<u64>, WriteError> {
        check_key(key)?;
        self.before_write()?;
        let engine = self.engine;
        let mut shards = self.shards.borrow_mut();
        let (hash, position) = self.position(&shards, key);
        let mut shard = ShardChange::begin(shards[position].1.shard_mut());
        promote_held(&engine.inner, &mut shard, key, hash);
        let log = |shard: &Shard, part| self.log_part_in(shard, key, hash, part);
        match engine.modify_in(&mut shard, key, hash, f, Some(&log)) {
            Ok(result) => result,
            Err(panic) => {
                drop(shard);
                std::panic::resume_unwind(panic);
            }
        }
    }

    /// A plain set (see [`Engine::set`]): what the key held, in memory or on flash, is
    /// replaced without being read.
    pub fn set(
        &self,
        key: &[u8],
        value: &[u8],
        client_flags: u32,
        expiry: Expiry,
    ) -> Result<u64, WriteError> {
        self.before_write()?;
        let engine = self.engine;
        let Some(meta) = engine.set_meta(key, value, client_flags, expiry)? else {
            return super::write::unconditional_store(self, key, value, client_flags, expiry);
        };
        let mut shards = self.shards.borrow_mut();
        let (hash, position) = self.position(&shards, key);
        let mut shard = ShardChange::begin(shards[position].1.shard_mut());
        let log = |shard: &Shard, part| self.log_part_in(shard, key, hash, part);
        engine.set_in(&mut shard, (key, hash), value, meta, Some(&log))
    }

    /// Whether `key` is present and unexpired, counting no hit or miss.
    pub fn contains(&self, key: &[u8]) -> bool {
        if self.found_broken(key) {
            return false;
        }
        let inner: &Inner = &self.engine.inner;
        let shards = self.shards.borrow();
        let (hash, position) = self.position(&shards, key);
        let shard = shards[position].1.shard();
        match shard.lookup(inner, key, hash) {
            Some(found) => found
                .view
                .meta
                .expires_at_ms
                .is_none_or(|at| at > inner.now_ms()),
            None => {
                let now_ms = inner.now_ms();
                let candidates = shard.flash_candidates(inner, hash);
                candidates.as_slice().iter().any(|&location| {
                    matches!(
                        tiering::read_record(inner, key, location, now_ms, |_| ()),
                        tiering::FlashRead::Item(())
                    )
                })
            }
        }
    }

    /// Whether a read of this transaction found `key`'s family broken under a read-only hold
    /// (`Txn::broken_families`): it reads as absent until the transaction ends.
    fn found_broken(&self, key: &[u8]) -> bool {
        self.broken_families
            .borrow()
            .iter()
            .any(|owner| owner[..] == *key)
    }

    /// What a WATCH of `key` compares (see [`Engine::observe`]).
    pub fn observe(&self, key: &[u8]) -> Observed {
        let seen = {
            let shards = self.shards.borrow();
            let (hash, position) = self.position(&shards, key);
            super::read::observe_in(&self.engine.inner, shards[position].1.shard(), key, hash)
        };
        seen.unwrap_or_else(|removals| Observed {
            item: self.read(key, false, |item| (item.cas, item.expires_at_ms)),
            expired: None,
            removals,
        })
    }

    /// What `key`'s item costs in memory (see [`Engine::memory_usage`]).
    pub fn memory_usage(&self, key: &[u8]) -> Option<u64> {
        if self.found_broken(key) {
            return None;
        }
        let inner: &Inner = &self.engine.inner;
        {
            let shards = self.shards.borrow();
            let (hash, position) = self.position(&shards, key);
            let shard = shards[position].1.shard();
            if let Some(found) = shard.lookup_unexpired(inner, key, hash) {
                return Some(super::read::family_memory(inner, shard, key, hash, &found));
            }
            if shard.flash_candidates(inner, hash).is_empty() {
                return None;
            }
        }
        self.read(key, false, |item| item.memory_bytes())
    }

    /// Before each write of the transaction: room first where its last write took the
    /// cleaner's reserve, then the log ([`Txn::begin_log`]).
    pub(super) fn before_write(&self) -> Result<(), WriteError> {
        self.room_if_reserve_taken()?;
        self.begin_log()
    }

    /// [`Txn::make_room`] when a write since the last look took the cleaner's reserve.
    fn room_if_reserve_taken(&self) -> Result<(), WriteError> {
        if RESERVE_TAKEN.with(|taken| taken.replace(false)) {
            self.make_room()?;
        }
        Ok(())
    }

    /// Cleans the shards this transaction holds for writing, while fewer than
    /// [`crate::cleaning::CLEAN_AHEAD_SEGMENTS`] segments beyond the cleaner's reserve are
    /// free, after a write took the reserve (checked then only: a look at the free pool is a
    /// global lock, which each opening of a transaction would take). A write's own pass
    /// cleans only its shard and those no one holds, so without this, the dead space of the
    /// transaction's other shards was out of reach: its writes took the reserve, a later pass
    /// found no destination, and a write evicted live items (issue 18). One shard held: its
    /// writes' passes reach it.
    fn make_room(&self) -> Result<(), WriteError> {
        let inner: &Inner = &self.engine.inner;
        let mut shards = self.shards.borrow_mut();
        if shards.len() < 2 || !inner.free_is_low() {
            return Ok(());
        }
        for (_, held) in shards.iter_mut() {
            let Held::Write(_) = held else { continue };
            let mut shard = ShardChange::begin(held.shard_mut());
            while let crate::shard::CleanOutcome::Gained(_) = shard.clean(inner)? {
                if !inner.free_is_low() {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Writes the log built at the transaction's start, before its first write (see
    /// `log_pending`); nothing to do when it is written or the transaction logs nothing.
    pub(super) fn begin_log(&self) -> Result<(), WriteError> {
        if !self.log_pending.get() {
            return Ok(());
        }
        let mut log = self.log.borrow_mut();
        let log = log.as_mut().expect("a logged transaction holds the log");
        log.begin()
            .map_err(|error| super::atomic::log_error(log.path(), "write", &error))?;
        self.log_pending.set(false);
        Ok(())
    }

    /// Ends the transaction (see [`Txn::finish`]); on a panic, first puts the logged keys'
    /// before-images back, as a crash would at the next open.
    fn end(&mut self, panicking: bool) -> Result<(), WriteError> {
        if !std::mem::take(&mut self.logged) {
            return Ok(());
        }
        if self.log_pending.replace(false) {
            return Ok(()); // It wrote nothing: nothing to commit, and no log was written.
        }
        let inner: &Inner = &self.engine.inner;
        if panicking {
            let images = self
                .log
                .get_mut()
                .as_ref()
                .and_then(|log| log.running_images());
            if let Some(images) = images {
                if super::atomic::restore_into(self, &images).is_err() {
                    return Ok(()); // The log stays running: the next open restores them.
                }
            }
        }
        commit_held(inner, &mut self.shards.borrow_mut())?;
        let log = self
            .log
            .get_mut()
            .as_mut()
            .expect("a logged transaction holds the log");
        if let Err(error) = log.end() {
            let error = super::atomic::log_error(log.path(), "end", &error);
            if let WriteError::Persist(persist) = &error {
                let _ = inner.persisted(Err(persist.clone()));
            }
            return Err(error);
        }
        // Done: the parts its writes dropped can go (a crash now leaves orphans at most).
        for (_, held) in self.shards.get_mut().iter_mut() {
            ShardChange::begin(held.shard_mut()).drop_deferred_parts(inner)?;
        }
        Ok(())
    }
}

impl Drop for Txn<'_> {
    fn drop(&mut self) {
        // Not finished (an early return, or a panic unwinding): end it here.
        let _ = self.end(std::thread::panicking());
        for (_, held) in self.shards.get_mut().iter_mut() {
            if let Held::Write(shard) = held {
                shard.building.clear();
                shard.defer_part_drops = false;
            }
        }
        IN_TRANSACTION.with(|open| open.set(false));
        RESERVE_TAKEN.with(|taken| taken.set(false));
        if !self.broken_families.get_mut().is_empty() {
            drop(std::mem::take(self.shards.get_mut())); // Released: repair takes each lock.
            crate::scrub::repair(&self.engine.inner);
        }
    }
}

/// Promotions one read in a transaction tries (see [`Txn::read`]).
const PROMOTIONS_PER_READ_MAX: usize = 3;

/// How a read in a transaction takes a flash record that is a family whose parts only memory
/// serves (a large hash).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Families {
    /// Hands it back to be promoted: the shard is held for writing.
    Promote,
    /// Reads it as absent: promotions failed.
    Absent,
    /// Reads its owner's value, and keeps a copy whose parts [`Txn::read_part`] reads: the
    /// shard is held for reading (a read-only command's), whose reads do not promote.
    AsOwners,
}

/// What a read of a key memory does not hold found on flash.
enum FromFlash<R> {
    /// The key's item: `f`'s result.
    Found(R),
    /// No record of the key (or an expired one).
    Missing,
    /// The key's record, a family whose parts only memory serves (a large hash): a copy, and
    /// its location, for the caller to promote (`f` not called).
    NeedsMemory(OwnedFlashItem, u64),
}

/// The read of a key memory does not hold at all, in a shard held (so no entry moves while it
/// is read): each flash candidate until one is the key; `families` says how a family whose
/// parts only memory serves is taken (with [`Families::AsOwners`], its copy goes to `kept`).
fn read_from_flash<R>(
    inner: &Inner,
    (shard, kept): (&Shard, &mut Option<OwnedFlashItem>),
    (key, hash): (&[u8], u64),
    bump: bool,
    families: Families,
    f: impl FnOnce(ItemRef<'_>) -> R,
) -> FromFlash<R> {
    let Some(flash) = inner.flash.as_ref() else {
        return FromFlash::Missing;
    };
    let candidates = shard.flash_candidates(inner, hash);
    let h24 = crate::index::hash24(hash);
    let now_ms = inner.now_ms();
    let mut f = Some(f);
    for &location in candidates.as_slice() {
        let read = tiering::read_record(inner, key, location, now_ms, |item| {
            let (slot, entry) = shard.index.find(h24, |l| l == location)?;
            match families {
                _ if !item.needs_memory() => {}
                Families::Promote => {
                    return Some(FromFlash::NeedsMemory(item.to_owned(), location));
                }
                Families::Absent => return Some(FromFlash::Missing),
                Families::AsOwners => *kept = Some(item.to_owned()),
            }
            if bump {
                shard.index.bump_freq(slot);
            }
            shard.counters.hits.fetch_add(1, Ordering::Relaxed);
            flash.counters.hits.fetch_add(1, Ordering::Relaxed);
            let f = f.take().expect("called once");
            Some(FromFlash::Found(f(flash_item(key, &item, entry))))
        });
        match read {
            tiering::FlashRead::Item(found) => return found.unwrap_or(FromFlash::Missing),
            tiering::FlashRead::Expired => break,
            tiering::FlashRead::NotIt => {}
            tiering::FlashRead::Damaged => shard.queue_flash_damage(h24, location),
        }
    }
    flash.counters.misses.fetch_add(1, Ordering::Relaxed);
    FromFlash::Missing
}

/// Before a change of a key memory does not hold: moves its flash record (if a candidate is
/// it) into memory, in a shard held for the change. A failed promotion leaves the key on
/// flash and the change sees it as absent, as [`Engine::modify`] does after its tries.
fn promote_held(inner: &Inner, shard: &mut Shard, key: &[u8], hash: u64) {
    if inner.flash.is_none() || shard.lookup(inner, key, hash).is_some() {
        return;
    }
    let candidates = shard.flash_candidates(inner, hash);
    let h24 = crate::index::hash24(hash);
    let now_ms = inner.now_ms();
    for &location in candidates.as_slice() {
        let read = tiering::read_record(inner, key, location, now_ms, |item| {
            shard.promote(inner, key, hash, location, &item)
        });
        match read {
            tiering::FlashRead::Item(_) | tiering::FlashRead::Expired => return,
            tiering::FlashRead::NotIt => {}
            tiering::FlashRead::Damaged => shard.queue_flash_damage(h24, location),
        }
    }
}

/// Makes the held shards' writes durable, as [`Inner::commit`] does for every shard, without
/// taking any other lock: a commit holds the shards, and these already are.
fn commit_held(inner: &Inner, shards: &mut [(usize, Held<'_>)]) -> Result<(), WriteError> {
    if !inner.track_dirty {
        return inner.check_writable();
    }
    let mut held: Vec<&mut Shard> = shards.iter_mut().map(|(_, h)| h.shard_mut()).collect();
    if let Some(whole_pool) = inner.whole_pool.as_ref() {
        held.iter_mut()
            .for_each(|shard| shard.forget_dirty_ranges());
        inner.persisted(whole_pool.persist_all())?;
        for shard in &mut held {
            shard.write_pending_marks(inner);
            shard.marks_written();
        }
        return inner.check_writable();
    }
    for shard in &mut held {
        shard.persist_dirty(inner)?;
        shard.marks_written();
    }
    inner.check_writable()
}
