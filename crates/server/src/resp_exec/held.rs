//! How a command holds its keys (the engine's door, `strata_engine::Door`).
//!
//! A command with one key takes it as it goes: each engine operation locks the key's shard
//! for its own length (`Keys::one`). A command with several keys (MSET, DEL k1 k2, RENAME,
//! MGET, EXISTS k1 k2, WATCH k1 k2) and a whole `EXEC` hold all of theirs together
//! (`Keys::held_by`): the engine locks their shards in shard order (`Engine::transaction`, or
//! `Engine::read_together` for a command that only reads), the command runs, and whatever it
//! changed becomes visible at once when it ends; nobody sees part of it, nothing runs between
//! its commands on its keys, and the other keys' commands run on meanwhile, on every worker.
//! A transaction that writes logs its keys' before-images first (`Engine::transaction`), so a
//! crash leaves all of it or none.
//!
//! Only an `EXEC` queuing a command that acts on the whole keyspace (FLUSHALL, SCAN, KEYS,
//! DBSIZE, RANDOMKEY, INFO...) still runs alone, while every other worker waits
//! (`crate::exclusive`, [`super::alone_and_atomic`]).

use std::cell::Cell;

use strata_engine::{Change, Door, DynDoor, Engine, Expiry, ItemRef, Observed, WriteError};

use super::{table, write_error, Call};

thread_local! {
    /// The command running on this thread met a write only a transaction makes (a string of
    /// several records, `WriteError::NeedsTransaction`): the driver runs it again with its
    /// keys held ([`asked_to_hold`]).
    static HOLD_ASKED: Cell<bool> = const { Cell::new(false) };
}

/// Notes that the running command must run again with its keys held (see [`HOLD_ASKED`]).
pub(crate) fn ask_to_hold() {
    HOLD_ASKED.with(|asked| asked.set(true));
}

/// Whether the command that just ran asked to run again held; clears the request.
pub(crate) fn asked_to_hold() -> bool {
    HOLD_ASKED.with(|asked| asked.replace(false))
}

/// How a command reaches its keys (see the module docs), and whether its reads count as
/// accesses (`CLIENT NO-TOUCH` turns that off for a client's commands, TOUCH aside).
#[derive(Clone, Copy)]
pub(crate) struct Keys<'a> {
    reach: Reach<'a>,
    touch: bool,
}

/// Where a command's key operations go.
#[derive(Clone, Copy)]
enum Reach<'a> {
    /// One operation at a time, each locking its key's shard.
    One(&'a Engine),
    /// Held together by a transaction for the whole command (or `EXEC`).
    Held(&'a dyn DynDoor),
}

impl<'a> Keys<'a> {
    /// Keys reached one at a time; reads are accesses when `touch`.
    pub(crate) fn one(engine: &'a Engine, touch: bool) -> Keys<'a> {
        Keys {
            reach: Reach::One(engine),
            touch,
        }
    }

    /// The same keys, held by `txn`.
    pub(crate) fn held_by<'b>(&self, txn: &'b dyn DynDoor) -> Keys<'b> {
        Keys {
            reach: Reach::Held(txn),
            touch: self.touch,
        }
    }

    /// Whether the keys are held by a transaction (a command run inside one runs as it is).
    pub(crate) fn held(&self) -> bool {
        matches!(self.reach, Reach::Held(_))
    }

    /// These keys with reads that count as accesses whatever the client asked (TOUCH).
    pub(crate) fn touching(self) -> Keys<'a> {
        Keys {
            touch: true,
            ..self
        }
    }
}

impl Door for Keys<'_> {
    fn read<R>(&self, key: &[u8], bump: bool, f: impl FnOnce(ItemRef<'_>) -> R) -> Option<R> {
        let bump = bump && self.touch;
        match self.reach {
            Reach::One(engine) => Door::read(engine, key, bump, f),
            Reach::Held(txn) => Door::read(txn, key, bump, f),
        }
    }

    fn read_pieces<R>(
        &self,
        key: &[u8],
        bump: bool,
        f: impl FnOnce(ItemRef<'_>, &[&[u8]]) -> R,
    ) -> Option<R> {
        let bump = bump && self.touch;
        match self.reach {
            Reach::One(engine) => Door::read_pieces(engine, key, bump, f),
            Reach::Held(txn) => Door::read_pieces(txn, key, bump, f),
        }
    }

    fn modify(
        &self,
        key: &[u8],
        f: impl FnOnce(Option<ItemRef<'_>>, &mut Vec<u8>) -> Change,
    ) -> Result<Option<u64>, WriteError> {
        match self.reach {
            Reach::One(engine) => Door::modify(engine, key, f),
            Reach::Held(txn) => Door::modify(txn, key, f),
        }
    }

    fn set(
        &self,
        key: &[u8],
        value: &[u8],
        client_flags: u32,
        expiry: Expiry,
    ) -> Result<u64, WriteError> {
        match self.reach {
            Reach::One(engine) => engine.set(key, value, client_flags, expiry),
            Reach::Held(txn) => txn.set_dyn(key, value, client_flags, expiry),
        }
    }

    fn contains(&self, key: &[u8]) -> bool {
        match self.reach {
            Reach::One(engine) => engine.contains(key),
            Reach::Held(txn) => txn.contains_dyn(key),
        }
    }

    fn observe(&self, key: &[u8]) -> Observed {
        match self.reach {
            Reach::One(engine) => engine.observe(key),
            Reach::Held(txn) => txn.observe_dyn(key),
        }
    }

    fn memory_usage(&self, key: &[u8]) -> Option<u64> {
        match self.reach {
            Reach::One(engine) => engine.memory_usage(key),
            Reach::Held(txn) => txn.memory_usage_dyn(key),
        }
    }

    fn families(&self) -> Option<&dyn strata_engine::Families> {
        match self.reach {
            Reach::One(_) => None,
            Reach::Held(txn) => txn.families_dyn(),
        }
    }
}

/// How [`run_held`] holds its keys.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hold {
    /// Read together, no write.
    Read,
    /// A transaction that logs every key's before-image first (where the pool has a log).
    Logged,
    /// A transaction that logs nothing: a write of a large hash inside an atomic group,
    /// whose log holds the hash already (`hash_chunks`).
    Unlogged,
}

impl Hold {
    /// A command's hold: logged when it writes, else a read.
    pub(crate) fn for_writes(writes: bool) -> Hold {
        if writes {
            Hold::Logged
        } else {
            Hold::Read
        }
    }
}

/// Runs `run` (which appends one reply to `out`) with `keys` held together as `hold` says.
/// When the engine refuses the transaction, or fails to end it, its error replaces whatever
/// `run` wrote.
pub(crate) fn run_held(
    call: &Call<'_>,
    keys: &[&[u8]],
    hold: Hold,
    out: &mut Vec<u8>,
    run: impl FnOnce(&Call<'_>, &mut Vec<u8>),
) {
    let engine = &call.ctx.engine;
    let mark = out.len();
    let txn = match hold {
        Hold::Read => {
            let together = engine.read_together(keys);
            run(&call.with_keys(call.keys().held_by(&together)), out);
            return;
        }
        Hold::Logged => engine.transaction(&[], keys),
        Hold::Unlogged => engine.transaction(keys, &[]),
    };
    let txn = match txn {
        Ok(txn) => txn,
        Err(error) => return write_error(out, &error),
    };
    run(&call.with_keys(call.keys().held_by(&txn)), out);
    if let Err(error) = txn.finish() {
        out.truncate(mark);
        write_error(out, &error);
    }
}

/// Whether a command queued in `EXEC` may run while the transaction holds only its keys: it
/// names its keys (by its key spec), or touches no key at all (the connection's commands).
/// Any other (FLUSHALL, SCAN, KEYS, DBSIZE, RANDOMKEY, INFO, DEBUG...) acts on the whole
/// keyspace, and its `EXEC` runs alone.
pub(crate) fn runs_on_its_keys(command: &table::Command) -> bool {
    command.keys != (0, 0, 0) || matches!(command.group, "connection" | "transaction")
}
