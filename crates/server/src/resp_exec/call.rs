//! One command being executed (`Call`: its arguments, the server context, its table row and
//! how it reaches its keys) and what every handler shares: typed access to its keys, the
//! reply to a refused write, the HELP layout, a rewrite's record fields, and running a group
//! alone.

use strata_engine::{Change, Door, Engine, Expiry, ItemRef, Kind, WriteError};
use strata_protocol::resp::{encode, errors, Args};

use super::{table, Keys, ERR_VALUE_TOO_LARGE};
use crate::context::ServerContext;

/// One command being executed: its arguments (positions into `input`), the server context and
/// the table entry it matched.
pub(crate) struct Call<'a> {
    /// Engine, settings and counters.
    pub ctx: &'a ServerContext,
    pub(super) input: &'a [u8],
    pub(super) args: &'a Args,
    /// The table entry.
    pub command: &'static table::Command,
    /// How it reaches its keys: one at a time, or held together (`held`).
    pub(super) keys: Keys<'a>,
    /// It runs on one chunk of a large hash (`hash_chunks`), shown as the key's hash.
    pub(super) in_chunk: bool,
    /// It met an item it can only reach with its key held (a large hash): the driver runs
    /// it again so ([`Call::want_held`]).
    pub(super) wants_held: std::cell::Cell<bool>,
    /// The keys a read command looked up and how many were there (`None`: none looked up
    /// yet), for `keyspace_hits`/`keyspace_misses`, which the driver counts once the command
    /// ran ([`Call::looked_up`]). Shared by the calls the command runs as (held, on chunks).
    pub(super) key_found: &'a std::cell::Cell<Option<(u64, u64)>>,
}

impl<'a> Call<'a> {
    /// Arguments, command name included.
    pub fn len(&self) -> usize {
        self.args.len()
    }

    /// Argument `index` (0 is the command name). The caller has checked the arity.
    pub fn arg(&self, index: usize) -> &'a [u8] {
        self.args.arg(self.input, index)
    }

    /// Arguments from `start` on.
    pub fn args_from(&self, start: usize) -> impl ExactSizeIterator<Item = &'a [u8]> + 'a {
        let (input, args) = (self.input, self.args);
        args.as_slice()[start.min(args.len())..]
            .iter()
            .map(move |&arg| args.resolve(input, arg))
    }

    /// The store, for what is not one key's (counters, the clock, the whole keyspace).
    pub fn engine(&self) -> &'a Engine {
        &self.ctx.engine
    }

    /// The command's keys: typed reads and changes of any of them (`held::Keys`).
    pub fn keys(&self) -> Keys<'a> {
        self.keys
    }

    /// This call with its keys reached through `keys` (held together by a transaction).
    pub fn with_keys<'b>(&'b self, keys: Keys<'b>) -> Call<'b> {
        Call {
            ctx: self.ctx,
            input: self.input,
            args: self.args,
            command: self.command,
            keys,
            in_chunk: self.in_chunk,
            wants_held: std::cell::Cell::new(false),
            key_found: self.key_found,
        }
    }

    /// Notes that a read command looked its key up and whether it was there (of any type), as
    /// Redis counts a read's lookup in `keyspace_hits` or `keyspace_misses`; the command's
    /// last look counts, once. Not on one chunk of a large hash: its owner's look counts. Read
    /// commands only (the table's `readonly`): a write's looks count nothing, as Redis's
    /// write lookups do, and the writes that return the old value (GETSET, GETDEL, GETEX,
    /// SET … GET) count their read themselves.
    pub fn looked_up(&self, found: bool) {
        self.looked_up_keys(1, u64::from(found));
    }

    /// [`Call::looked_up`] for a read command of several keys: it looked up `keys` of which
    /// `hits` were there (EXISTS, TOUCH, MGET...).
    pub fn looked_up_keys(&self, keys: u64, hits: u64) {
        debug_assert!(hits <= keys);
        if self.command.readonly && !self.in_chunk {
            self.key_found.set(Some((keys, hits)));
        }
    }

    /// Asks the driver to run this command again with its key held by a transaction, its
    /// reply so far dropped: it met a large hash (`hash_chunks`), whose chunks only a holder
    /// of the key reaches.
    pub fn want_held(&self) {
        self.wants_held.set(true);
    }

    /// The data type this command's keys must hold (the table's `Command::kind`); panics for
    /// a command that takes keys of any type (a handler's bug, found by any test of it).
    pub fn kind(&self) -> Kind {
        self.command
            .kind
            .expect("typed access by a command the table gives a data type")
    }

    /// A typed command's read-modify-write (`Door::modify_as` with [`Call::kind`]): a key
    /// holding another type is left alone and answers `WriteError::WrongKind`, which
    /// [`write_error`] turns into Redis's WRONGTYPE.
    pub fn modify_typed(
        &self,
        key: &[u8],
        f: impl FnOnce(Option<ItemRef<'_>>, &mut Vec<u8>) -> Change,
    ) -> Result<Option<u64>, WriteError> {
        self.keys().modify_as(key, self.kind(), f)
    }

    /// A typed command's read: `f`'s answer for a key of [`Call::kind`], `Ok(None)` for a
    /// missing key, and `Err(WriteError::WrongKind)` for a key holding another type.
    pub fn get_typed<R>(
        &self,
        key: &[u8],
        f: impl FnOnce(ItemRef<'_>) -> R,
    ) -> Result<Option<R>, WriteError> {
        let kind = self.kind();
        let found = self.keys().get(key, |item| {
            if item.kind == kind {
                Ok(f(item))
            } else {
                Err(WriteError::WrongKind)
            }
        });
        // A key of another type was there: a hit, as Redis counts WRONGTYPE.
        self.looked_up(found.is_some());
        found.transpose()
    }

    /// The largest value a write of `key` may leave: the server's value limit, exact for keys
    /// of up to 250 bytes, shortened by a longer key's extra length (key and value share one
    /// segment).
    pub fn value_len_max(&self, key: &[u8]) -> usize {
        self.ctx
            .settings
            .value_len_max
            .min(self.engine().value_len_max_for_key(key.len()))
    }
}

/// Runs `f` (which appends one reply to `out`) while no other worker runs a command
/// (`crate::exclusive`) and as one group of writes that a crash leaves all done or all undone
/// (`Engine::atomically` over `keys`, every key it may write): EXEC, and the multi-key writes
/// (MSET, MSETNX, DEL, RENAME, COPY...). Inside another such group (a multi-key write queued
/// in EXEC) it just runs `f`: the outer group names its keys. When the engine refuses the
/// group, its error replaces whatever `f` wrote.
pub(crate) fn alone_and_atomic(
    ctx: &ServerContext,
    keys: &[&[u8]],
    out: &mut Vec<u8>,
    f: impl FnOnce(&mut Vec<u8>),
) {
    if ctx.exclusive.is_alone() {
        f(out);
        return;
    }
    let mark = out.len();
    ctx.exclusive.alone(|| {
        let engine = &ctx.engine;
        if let Err(error) = engine.atomically(keys, || f(out)) {
            out.truncate(mark);
            write_error(out, &error);
        }
    });
}

/// A `HELP` reply as Redis's `addReplyHelp` lays it out: the lines, then `HELP` and its line.
pub(crate) fn write_help(out: &mut Vec<u8>, lines: &[&[u8]]) {
    encode::array_len(out, lines.len() + 2);
    for line in lines {
        encode::simple(out, line);
    }
    encode::simple(out, b"HELP");
    encode::simple(out, b"    Prints this help.");
}

/// The write of a command that replaces a string with one it built from it (APPEND, SETRANGE,
/// INCR and friends): an existing key keeps its client flags and expiry, as in Redis; a key the
/// command creates has neither.
pub(crate) fn rewrite(current: Option<&ItemRef<'_>>) -> Change {
    let (client_flags, expiry) =
        current.map_or((0, Expiry::Never), |item| (item.client_flags, Expiry::Keep));
    Change::Write {
        client_flags,
        expiry,
        keep_cas: false,
    }
}

/// Replies to a refused engine write. Empty keys, over-long keys and values, a full cache and a
/// failed persist each get a message saying what happened.
pub(crate) fn write_error(out: &mut Vec<u8>, error: &WriteError) {
    match error {
        WriteError::KeyEmpty => {
            encode::error(out, b"ERR empty keys are not supported by strata");
        }
        WriteError::KeyTooLong { max, .. } => {
            let message = format!("ERR key is longer than strata's limit of {max} bytes");
            encode::error(out, message.as_bytes());
        }
        WriteError::TooLarge { .. } => out.extend_from_slice(ERR_VALUE_TOO_LARGE),
        WriteError::OutOfMemory => out.extend_from_slice(errors::ERR_OOM),
        WriteError::WrongKind => out.extend_from_slice(errors::ERR_WRONGTYPE),
        WriteError::NeedsTransaction => {
            // Nothing changed: the driver runs the command again, held (`held`), and this
            // reply is dropped.
            super::held::ask_to_hold();
            encode::error(out, b"ERR strata: a large string is written held");
        }
        WriteError::Persist(persist) => {
            let message = format!(
                "MISCONF strata could not persist a write to its pool and refuses writes until \
                 it is restarted: {persist}"
            );
            encode::error(out, message.as_bytes());
        }
        other => {
            let message = format!("ERR {other}");
            encode::error(out, message.as_bytes());
        }
    }
}
