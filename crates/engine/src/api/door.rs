//! The door: what a command does with its keys, the same whether it takes them one at a time
//! ([`Engine`], each operation locking its key's shard) or holds them together ([`Txn`], its
//! keys' shards locked in one order for as long as it runs).
//!
//! A type implements the few operations that depend on how its shards are held; the rest
//! (conditional stores, typed changes, deletes, hits and misses) are written once, here.

use super::*;
use crate::record::Kind;
use crate::{DeleteOutcome, FamilyBroken, Observed, Txn};

/// Typed reads and changes of single keys (see the module docs).
pub trait Door {
    /// Reads `key`, calling `f` with the item (copy what you need). `bump`: the read counts as
    /// an access (see [`Engine::get`] and [`Engine::peek`]).
    fn read<R>(&self, key: &[u8], bump: bool, f: impl FnOnce(ItemRef<'_>) -> R) -> Option<R>;

    /// Reads `key` like [`Door::read`] with its value in pieces (see [`Engine::get_pieces`]:
    /// a large string's parts unjoined, the item's `value` then empty). By default the value
    /// joined, as one piece.
    fn read_pieces<R>(
        &self,
        key: &[u8],
        bump: bool,
        f: impl FnOnce(ItemRef<'_>, &[&[u8]]) -> R,
    ) -> Option<R> {
        self.read(key, bump, |item| f(item, &[item.value]))
    }

    /// The general read-modify-write (see [`Engine::modify`]).
    fn modify(
        &self,
        key: &[u8],
        f: impl FnOnce(Option<ItemRef<'_>>, &mut Vec<u8>) -> Change,
    ) -> Result<Option<u64>, WriteError>;

    /// An unconditional string write (see [`Engine::set`]); returns the new CAS.
    fn set(
        &self,
        key: &[u8],
        value: &[u8],
        client_flags: u32,
        expiry: Expiry,
    ) -> Result<u64, WriteError>;

    /// Whether `key` is present and unexpired, counting no hit or miss.
    fn contains(&self, key: &[u8]) -> bool;

    /// What a WATCH of `key` compares (see [`Engine::observe`]).
    fn observe(&self, key: &[u8]) -> Observed;

    /// What `key`'s item costs in memory (see [`Engine::memory_usage`]).
    fn memory_usage(&self, key: &[u8]) -> Option<u64>;

    /// The items of several records of the keys this door holds ([`Families`]): a
    /// transaction's; `None` for keys taken one operation at a time, which cannot hold an
    /// owner and its parts still between records.
    fn families(&self) -> Option<&dyn Families> {
        None
    }

    /// Reads `key` as an access (see [`Engine::get`]).
    fn get<R>(&self, key: &[u8], f: impl FnOnce(ItemRef<'_>) -> R) -> Option<R> {
        self.read(key, true, f)
    }

    /// Reads `key` as an access with its value in pieces (see [`Door::read_pieces`]).
    fn get_pieces<R>(&self, key: &[u8], f: impl FnOnce(ItemRef<'_>, &[&[u8]]) -> R) -> Option<R> {
        self.read_pieces(key, true, f)
    }

    /// Reads `key` without counting an access (see [`Engine::peek`]).
    fn peek<R>(&self, key: &[u8], f: impl FnOnce(ItemRef<'_>) -> R) -> Option<R> {
        self.read(key, false, f)
    }

    /// Stores `value` under `key` subject to `options.condition`.
    fn store(
        &self,
        key: &[u8],
        value: &[u8],
        options: StoreOptions,
    ) -> Result<StoreOutcome, WriteError> {
        let condition = options.condition;
        let mut outcome = StoreOutcome::NotStored;
        self.modify(key, |current, buffer| {
            let decision = match (condition, &current) {
                (Condition::IfAbsent, Some(_)) | (Condition::IfPresent, None) => {
                    Err(StoreOutcome::NotStored)
                }
                (Condition::IfCas(_), None) => Err(StoreOutcome::NotFound),
                (Condition::IfCas(cas), Some(item)) if item.cas != cas => Err(StoreOutcome::Exists),
                _ => Ok(()),
            };
            if let Err(refused) = decision {
                outcome = refused;
                return Change::Keep;
            }
            outcome = StoreOutcome::Stored(0);
            buffer.extend_from_slice(value);
            match options.kind {
                Kind::String => Change::Write {
                    client_flags: options.client_flags,
                    expiry: options.expiry,
                    keep_cas: false,
                },
                kind => Change::WriteKind {
                    kind,
                    expiry: options.expiry,
                },
            }
        })
        .map(|cas| match (outcome, cas) {
            (StoreOutcome::Stored(_), Some(cas)) => StoreOutcome::Stored(cas),
            (StoreOutcome::Stored(_), None) => StoreOutcome::Stored(0),
            (other, _) => other,
        })
    }

    /// [`Door::modify`] for an operation on values of `kind`: when the key holds another
    /// kind, `f` is not called, nothing changes and the answer is [`WriteError::WrongKind`]
    /// (Redis's WRONGTYPE). `f` sees the item only when it is of `kind`.
    fn modify_as(
        &self,
        key: &[u8],
        kind: Kind,
        f: impl FnOnce(Option<ItemRef<'_>>, &mut Vec<u8>) -> Change,
    ) -> Result<Option<u64>, WriteError> {
        let mut wrong = false;
        let result = self.modify(key, |current, buffer| match current {
            Some(item) if item.kind != kind => {
                wrong = true;
                Change::Keep
            }
            current => f(current, buffer),
        });
        if wrong {
            return Err(WriteError::WrongKind);
        }
        result
    }

    /// Deletes `key`; with `cas`, only if the item's CAS matches.
    fn delete(&self, key: &[u8], cas: Option<u64>) -> Result<DeleteOutcome, WriteError> {
        let mut outcome = DeleteOutcome::NotFound;
        self.modify(key, |current, _| match (current, cas) {
            (None, _) => Change::Keep,
            (Some(item), Some(cas)) if item.cas != cas => {
                outcome = DeleteOutcome::Exists;
                Change::Keep
            }
            (Some(_), _) => {
                outcome = DeleteOutcome::Deleted;
                Change::Delete
            }
        })?;
        Ok(outcome)
    }
}

impl Door for Engine {
    fn read<R>(&self, key: &[u8], bump: bool, f: impl FnOnce(ItemRef<'_>) -> R) -> Option<R> {
        Engine::read(self, key, bump, f)
    }

    fn read_pieces<R>(
        &self,
        key: &[u8],
        bump: bool,
        f: impl FnOnce(ItemRef<'_>, &[&[u8]]) -> R,
    ) -> Option<R> {
        Engine::get_pieces(self, key, bump, f)
    }

    fn modify(
        &self,
        key: &[u8],
        f: impl FnOnce(Option<ItemRef<'_>>, &mut Vec<u8>) -> Change,
    ) -> Result<Option<u64>, WriteError> {
        Engine::modify(self, key, f)
    }

    fn set(
        &self,
        key: &[u8],
        value: &[u8],
        client_flags: u32,
        expiry: Expiry,
    ) -> Result<u64, WriteError> {
        Engine::set(self, key, value, client_flags, expiry)
    }

    fn contains(&self, key: &[u8]) -> bool {
        Engine::contains(self, key)
    }

    fn observe(&self, key: &[u8]) -> Observed {
        Engine::observe(self, key)
    }

    fn memory_usage(&self, key: &[u8]) -> Option<u64> {
        Engine::memory_usage(self, key)
    }
}

impl Door for Txn<'_> {
    fn read<R>(&self, key: &[u8], bump: bool, f: impl FnOnce(ItemRef<'_>) -> R) -> Option<R> {
        Txn::read(self, key, bump, f)
    }

    fn read_pieces<R>(
        &self,
        key: &[u8],
        bump: bool,
        f: impl FnOnce(ItemRef<'_>, &[&[u8]]) -> R,
    ) -> Option<R> {
        Txn::read_pieces(self, key, bump, f)
    }

    fn modify(
        &self,
        key: &[u8],
        f: impl FnOnce(Option<ItemRef<'_>>, &mut Vec<u8>) -> Change,
    ) -> Result<Option<u64>, WriteError> {
        Txn::modify(self, key, f)
    }

    fn set(
        &self,
        key: &[u8],
        value: &[u8],
        client_flags: u32,
        expiry: Expiry,
    ) -> Result<u64, WriteError> {
        Txn::set(self, key, value, client_flags, expiry)
    }

    fn contains(&self, key: &[u8]) -> bool {
        Txn::contains(self, key)
    }

    fn observe(&self, key: &[u8]) -> Observed {
        Txn::observe(self, key)
    }

    fn memory_usage(&self, key: &[u8]) -> Option<u64> {
        Txn::memory_usage(self, key)
    }

    fn families(&self) -> Option<&dyn Families> {
        Some(self)
    }
}

/// An owner and its parts (an item of several records: `Txn`'s parts), reached through a
/// transaction that holds the owner's key, as a trait object.
pub trait Families {
    /// [`Txn::read_part`]: `f` is called with the part's value when the index holds it;
    /// returns whether it was, or [`FamilyBroken`] for an owner that owns a part the index
    /// lacks.
    fn read_part_dyn(
        &self,
        owner: &[u8],
        part: u32,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<bool, FamilyBroken>;

    /// [`Txn::write_part`].
    fn write_part(&self, owner: &[u8], part: u32, value: &[u8]) -> Result<(), WriteError>;

    /// [`Txn::write_owner`].
    fn write_owner(
        &self,
        owner: &[u8],
        value: &[u8],
        kind: Kind,
        expiry: Expiry,
        parts: u32,
    ) -> Result<Option<u64>, WriteError>;

    /// [`Txn::make_durable`].
    fn make_durable(&self, owner: &[u8]) -> Result<(), WriteError>;
}

impl Families for Txn<'_> {
    fn read_part_dyn(
        &self,
        owner: &[u8],
        part: u32,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<bool, FamilyBroken> {
        self.read_part(owner, part, f).map(|read| read.is_some())
    }

    fn write_part(&self, owner: &[u8], part: u32, value: &[u8]) -> Result<(), WriteError> {
        Txn::write_part(self, owner, part, value)
    }

    fn write_owner(
        &self,
        owner: &[u8],
        value: &[u8],
        kind: Kind,
        expiry: Expiry,
        parts: u32,
    ) -> Result<Option<u64>, WriteError> {
        Txn::write_owner(self, owner, value, kind, expiry, parts)
    }

    fn make_durable(&self, owner: &[u8]) -> Result<(), WriteError> {
        Txn::make_durable(self, owner)
    }
}

/// [`Door`] as a trait object, its closures taken as `&mut dyn FnMut`: for a caller that
/// lends a transaction for less time than it borrows the engine (a [`Txn`] holds lock guards,
/// so its lifetime cannot shrink to the lend's; a `&dyn DynDoor` can).
pub trait DynDoor {
    /// [`Door::read`]: `f` is called at most once; returns whether it was.
    fn read_dyn(&self, key: &[u8], bump: bool, f: &mut dyn FnMut(ItemRef<'_>)) -> bool;

    /// [`Door::read_pieces`]: `f` is called at most once; returns whether it was.
    fn read_pieces_dyn(
        &self,
        key: &[u8],
        bump: bool,
        f: &mut dyn FnMut(ItemRef<'_>, &[&[u8]]),
    ) -> bool;

    /// [`Door::modify`]: `f` is called at most once.
    fn modify_dyn(
        &self,
        key: &[u8],
        f: &mut dyn FnMut(Option<ItemRef<'_>>, &mut Vec<u8>) -> Change,
    ) -> Result<Option<u64>, WriteError>;

    /// [`Door::set`].
    fn set_dyn(
        &self,
        key: &[u8],
        value: &[u8],
        client_flags: u32,
        expiry: Expiry,
    ) -> Result<u64, WriteError>;

    /// [`Door::contains`].
    fn contains_dyn(&self, key: &[u8]) -> bool;

    /// [`Door::observe`].
    fn observe_dyn(&self, key: &[u8]) -> Observed;

    /// [`Door::memory_usage`].
    fn memory_usage_dyn(&self, key: &[u8]) -> Option<u64>;

    /// [`Door::families`].
    fn families_dyn(&self) -> Option<&dyn Families>;
}

impl<T: Door> DynDoor for T {
    fn read_dyn(&self, key: &[u8], bump: bool, f: &mut dyn FnMut(ItemRef<'_>)) -> bool {
        self.read(key, bump, f).is_some()
    }

    fn read_pieces_dyn(
        &self,
        key: &[u8],
        bump: bool,
        f: &mut dyn FnMut(ItemRef<'_>, &[&[u8]]),
    ) -> bool {
        self.read_pieces(key, bump, f).is_some()
    }

    fn modify_dyn(
        &self,
        key: &[u8],
        f: &mut dyn FnMut(Option<ItemRef<'_>>, &mut Vec<u8>) -> Change,
    ) -> Result<Option<u64>, WriteError> {
        self.modify(key, f)
    }

    fn set_dyn(
        &self,
        key: &[u8],
        value: &[u8],
        client_flags: u32,
        expiry: Expiry,
    ) -> Result<u64, WriteError> {
        self.set(key, value, client_flags, expiry)
    }

    fn contains_dyn(&self, key: &[u8]) -> bool {
        self.contains(key)
    }

    fn observe_dyn(&self, key: &[u8]) -> Observed {
        self.observe(key)
    }

    fn memory_usage_dyn(&self, key: &[u8]) -> Option<u64> {
        self.memory_usage(key)
    }

    fn families_dyn(&self) -> Option<&dyn Families> {
        self.families()
    }
}

impl Door for dyn DynDoor + '_ {
    fn read<R>(&self, key: &[u8], bump: bool, f: impl FnOnce(ItemRef<'_>) -> R) -> Option<R> {
        let (mut f, mut answer) = (Some(f), None);
        self.read_dyn(key, bump, &mut |item| {
            answer = f.take().map(|f| f(item));
        });
        answer
    }

    fn read_pieces<R>(
        &self,
        key: &[u8],
        bump: bool,
        f: impl FnOnce(ItemRef<'_>, &[&[u8]]) -> R,
    ) -> Option<R> {
        let (mut f, mut answer) = (Some(f), None);
        self.read_pieces_dyn(key, bump, &mut |item, pieces| {
            answer = f.take().map(|f| f(item, pieces));
        });
        answer
    }

    fn modify(
        &self,
        key: &[u8],
        f: impl FnOnce(Option<ItemRef<'_>>, &mut Vec<u8>) -> Change,
    ) -> Result<Option<u64>, WriteError> {
        let mut f = Some(f);
        self.modify_dyn(key, &mut |current, buffer| {
            let f = f.take().expect("a change decides once");
            f(current, buffer)
        })
    }

    fn set(
        &self,
        key: &[u8],
        value: &[u8],
        client_flags: u32,
        expiry: Expiry,
    ) -> Result<u64, WriteError> {
        self.set_dyn(key, value, client_flags, expiry)
    }

    fn contains(&self, key: &[u8]) -> bool {
        self.contains_dyn(key)
    }

    fn observe(&self, key: &[u8]) -> Observed {
        self.observe_dyn(key)
    }

    fn memory_usage(&self, key: &[u8]) -> Option<u64> {
        self.memory_usage_dyn(key)
    }

    fn families(&self) -> Option<&dyn Families> {
        self.families_dyn()
    }
}
