//! `set`, `add`, `replace`, `append`, `prepend`, `cas`, and stores refused as too large.
//!
//! Replies as memcached 1.6.18: `STORED`; `NOT_STORED` when the condition fails (`add` of a
//! present key, `replace`/`append`/`prepend` of an absent one); `EXISTS` / `NOT_FOUND` for a
//! `cas` that lost or found nothing. `append`/`prepend` keep the item's flags and expiry and
//! ignore the ones sent. A negative or past expiry stores nothing and still answers `STORED`.
//! A too-large `set` (or `ms`) removes the item it meant to replace, as memcached does, so a
//! reader never sees the value the client tried to overwrite.

use strata_engine::{Condition, StoreOptions, StoreOutcome, WriteError};
use strata_protocol::memcache::{decode_key, encode, Store, StoreCommand, TooLarge};

use super::{expiry, now_ms, reply, write_failed, KEY_LEN_MAX};
use crate::context::ServerContext;
use crate::stats::{command_index, PendingCounts};

/// Runs a storage command.
pub(super) fn execute(
    store: Store<'_>,
    ctx: &ServerContext,
    out: &mut Vec<u8>,
    pending: &mut PendingCounts,
) {
    let command = match store.command {
        StoreCommand::Set => const { command_index("set") },
        StoreCommand::Add => const { command_index("add") },
        StoreCommand::Replace => const { command_index("replace") },
        StoreCommand::Append => const { command_index("append") },
        StoreCommand::Prepend => const { command_index("prepend") },
        StoreCommand::Cas => const { command_index("cas") },
    };
    if !pending.count_command(command) {
        ctx.stats.count_command(command);
    }
    let engine = &ctx.engine;
    let expiry = expiry(store.exptime, || now_ms(ctx));
    let result = match store.command {
        StoreCommand::Set => engine
            .set(store.key, store.data, store.flags, expiry)
            .map(StoreOutcome::Stored),
        StoreCommand::Append | StoreCommand::Prepend => {
            let prepend = store.command == StoreCommand::Prepend;
            engine
                .concat(store.key, store.data, prepend)
                .map(|cas| cas.map_or(StoreOutcome::NotStored, StoreOutcome::Stored))
        }
        StoreCommand::Add | StoreCommand::Replace | StoreCommand::Cas => {
            let condition = match (store.command, store.cas_unique) {
                (StoreCommand::Add, _) => Condition::IfAbsent,
                (StoreCommand::Cas, Some(cas)) => Condition::IfCas(cas),
                _ => Condition::IfPresent,
            };
            let options = StoreOptions {
                client_flags: store.flags,
                expiry,
                condition,
                kind: strata_engine::Kind::String,
            };
            engine.store(store.key, store.data, options)
        }
    };
    match result {
        Ok(outcome) => {
            if store.command == StoreCommand::Cas {
                ctx.stats.count_outcome(match outcome {
                    StoreOutcome::Stored(_) => "cas_hits",
                    StoreOutcome::Exists => "cas_badval",
                    StoreOutcome::NotFound | StoreOutcome::NotStored => "cas_misses",
                });
            }
            reply(out, outcome_reply(outcome), store.noreply);
        }
        Err(error) => {
            if matches!(error, WriteError::TooLarge { .. }) && store.command == StoreCommand::Set {
                remove_existing(store.key, ctx);
            }
            write_failed(&error, ctx, out, store.noreply);
        }
    }
}

/// The classic reply to a store's outcome.
fn outcome_reply(outcome: StoreOutcome) -> &'static [u8] {
    match outcome {
        StoreOutcome::Stored(_) => encode::STORED,
        StoreOutcome::NotStored => encode::NOT_STORED,
        StoreOutcome::Exists => encode::EXISTS,
        StoreOutcome::NotFound => encode::NOT_FOUND,
    }
}

/// A store whose value exceeds the limit: reply, and remove the old item when memcached would.
/// The caller discards the data block.
pub(super) fn too_large(
    too_large: TooLarge<'_>,
    key_scratch: &mut [u8; KEY_LEN_MAX],
    ctx: &ServerContext,
    out: &mut Vec<u8>,
) {
    let name = if too_large.key_base64 { "meta" } else { "set" };
    ctx.stats.count_command(command_index(name));
    if too_large.remove_existing {
        if !too_large.key_base64 {
            remove_existing(too_large.key, ctx);
        } else if let Some(len) = decode_key(too_large.key, key_scratch) {
            remove_existing(&key_scratch[..len], ctx);
        }
    }
    out.extend_from_slice(too_large.reply);
}

/// Deletes `key` after a refused `set`; a failure here is logged, not answered (the client
/// already gets the refusal).
fn remove_existing(key: &[u8], ctx: &ServerContext) {
    if let Err(error) = ctx.engine.delete(key, None) {
        tracing::warn!(%error, "could not remove the item a refused store meant to replace");
    }
}
