//! The keyspace: DEL, UNLINK, EXISTS, TYPE, RENAME, RENAMENX, SCAN, KEYS, RANDOMKEY, DBSIZE,
//! FLUSHDB, FLUSHALL.
//!
//! strata stores only strings in one database, so TYPE answers `string` or `none`, and SCAN's
//! TYPE filter keeps keys only for `string`. SCAN cursors are the engine's (`Engine::scan`:
//! shard in the high 32 bits, bucket position in the low), printed in decimal. DBSIZE counts
//! indexed items, including expired ones not yet reclaimed, as Redis counts keys not yet
//! expired by its active cycle.
//!
//! SCAN and KEYS write their keys straight into `out` and put the array header in front once
//! the count is known, checking the output limit as they go (`strings::output_limit_passed`):
//! `KEYS *` over millions of keys or `SCAN 0 COUNT 10000000` stops at the hard limit and the
//! connection is closed, instead of building the whole reply, and a copy of it, first. With
//! items on flash, KEYS walks on the flash walk thread instead of the worker (`keys_walk`).
//!
//! RENAME and RENAMENX copy the value to the new key and then delete the old one, and DEL and
//! UNLINK of several keys delete one at a time: each holds all its keys together while it runs
//! (`held`: their shards locked in one order), so no client sees both keys of a RENAME, or part
//! of a DEL.

use std::sync::{Arc, Mutex};

use strata_engine::{DeleteOutcome, Door, Expiry, Kind, StoreOptions, WriteError};
use strata_protocol::resp::{encode, errors, glob_match, name_eq, parse_i64};
use strata_protocol::{format_u64, U64_LEN_MAX};

use super::strings::output_limit_passed;
use super::{write_error, Call, State};

/// Keys visited per engine call while KEYS walks the whole keyspace.
const KEYS_SCAN_COUNT: usize = 1024;

/// SCAN's default COUNT, as in Redis.
const SCAN_COUNT_DEFAULT: usize = 10;

/// Most engine scan steps one SCAN takes while it has found fewer than COUNT keys. The engine's
/// index is sized for the configured memory, not for the keys present, so a sparse cache would
/// otherwise need one round trip per few empty buckets; this bounds the work of one call.
const SCAN_STEPS_MAX: usize = 1024;

/// `DEL key [key ...]` and `UNLINK key [key ...]`: how many existed.
pub(crate) fn del(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let mut deleted = 0;
    for key in call.args_from(1) {
        match call.keys().delete(key, None) {
            Ok(DeleteOutcome::Deleted) => deleted += 1,
            Ok(_) => {}
            Err(error) => {
                write_error(out, &error);
                return;
            }
        }
    }
    encode::integer(out, deleted);
}

/// `EXISTS key [key ...]`: how many of the arguments exist, counting repeats.
pub(crate) fn exists(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let count = call
        .args_from(1)
        .filter(|key| call.keys().contains(key))
        .count();
    call.looked_up_keys(call.len() as u64 - 1, count as u64);
    encode::integer(out, i64::try_from(count).unwrap_or(i64::MAX));
}

/// `TOUCH key [key ...]`: how many of the keys exist; each existing one is read as an access
/// (EXISTS's count without its `NOTOUCH`), even for a client with `CLIENT NO-TOUCH ON`.
pub(crate) fn touch(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let keys = call.keys().touching();
    let count = call
        .args_from(1)
        .filter(|key| keys.get(key, |_| ()).is_some())
        .count();
    call.looked_up_keys(call.len() as u64 - 1, count as u64);
    encode::integer(out, i64::try_from(count).unwrap_or(i64::MAX));
}

/// `COPY source destination [DB 0] [REPLACE]`: 1 when the destination now holds a copy of
/// the source's value, client flags and expiry; 0 when the source is missing or the
/// destination exists without REPLACE. One database: `DB` other than 0 is out of range.
pub(crate) fn copy(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let (source, destination) = (call.arg(1), call.arg(2));
    let Some(replace) = copy_options(call, out) else {
        return;
    };
    if source == destination {
        encode::error(out, b"ERR source and destination objects are the same");
        return;
    }
    let keys = call.keys();
    let Some(copied) = copy_out(call, source) else {
        encode::integer(out, 0);
        return;
    };
    if copied.parts > 0 {
        if !replace && keys.contains(destination) {
            encode::integer(out, 0);
            return;
        }
        match copy_family(call, source, destination, &copied) {
            Ok(()) => {
                encode::integer(out, 1);
            }
            Err(error) => move_error(out, &error),
        }
        return;
    }
    let options = StoreOptions {
        client_flags: copied.client_flags,
        expiry: copied.expiry,
        condition: if replace {
            strata_engine::Condition::Always
        } else {
            strata_engine::Condition::IfAbsent
        },
        kind: copied.kind,
    };
    match keys.store(destination, &copied.value, options) {
        Ok(strata_engine::StoreOutcome::Stored(_)) => {
            encode::integer(out, 1);
        }
        Ok(_) => {
            encode::integer(out, 0);
        }
        Err(error) => write_error(out, &error),
    }
}

/// COPY's options after its keys: whether REPLACE was given; `None` with the error written
/// for a bad option (only `DB 0` is a database there is).
fn copy_options(call: &Call<'_>, out: &mut Vec<u8>) -> Option<bool> {
    let mut replace = false;
    let mut at = 3;
    while at < call.len() {
        let option = call.arg(at);
        if name_eq(option, b"replace") {
            replace = true;
            at += 1;
        } else if name_eq(option, b"db") && at + 1 < call.len() {
            match parse_i64(call.arg(at + 1)) {
                None => {
                    out.extend_from_slice(errors::ERR_NOT_INTEGER);
                    return None;
                }
                Some(0) => {}
                Some(_) => {
                    out.extend_from_slice(errors::ERR_DB_INDEX);
                    return None;
                }
            }
            at += 2;
        } else {
            out.extend_from_slice(errors::ERR_SYNTAX);
            return None;
        }
    }
    Some(replace)
}

/// `TYPE key`: `+string`, `+hash` or `+none`.
pub(crate) fn type_(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let kind = call.keys().peek(call.arg(1), |item| item.kind);
    call.looked_up(kind.is_some_and(|kind| kind != Kind::Part));
    let name: &[u8] = match kind {
        // The engine never hands out a part (one record of a larger item) as a key's item.
        None | Some(Kind::Part) => b"none",
        Some(Kind::String) => b"string",
        Some(Kind::Hash) => b"hash",
    };
    encode::simple(out, name);
}

/// The value, flags, expiry and kind of a key, copied out of the engine.
struct Copied {
    value: Vec<u8>,
    client_flags: u32,
    expiry: Expiry,
    kind: Kind,
    parts: u32,
}

fn copy_out(call: &Call<'_>, key: &[u8]) -> Option<Copied> {
    call.keys().get(key, |item| Copied {
        // An item of several records is copied record by record (`copy_family`).
        value: item.record_value.to_vec(),
        client_flags: item.client_flags,
        expiry: item.expires_at_ms.map_or(Expiry::Never, Expiry::AtMs),
        kind: item.kind,
        parts: item.parts,
    })
}

/// The reply to a COPY, RENAME or RENAMENX of an item of several records (a large hash or
/// string) one of whose parts is missing (damage found since it was read): nothing moved.
const ERR_LARGE_ITEM: &[u8] = b"-ERR strata could not COPY or RENAME an item kept in several \
    records: one of them is damaged\r\n";

/// Why a COPY, RENAME or RENAMENX moved nothing.
enum MoveError {
    /// The engine refused a write.
    Engine(WriteError),
    /// A large item whose parts it cannot copy: a part is missing (damage found since).
    LargeItem,
}

impl From<WriteError> for MoveError {
    fn from(error: WriteError) -> Self {
        MoveError::Engine(error)
    }
}

/// Copies the item of several records `copied` at `source` to `target`, parts first, then
/// the owner (replacing what `target` held, its extra parts dropped), with both keys held by
/// the call's transaction. A source that lacks a part (damage found: `FamilyBroken`) moves
/// nothing, the target left as it was; a copy that fails once it has written a part (out of
/// memory, or its own writes evicted a part of the source) drops the target whole, as an
/// eviction would, rather than leave its owner beside another item's parts.
fn copy_family(
    call: &Call<'_>,
    source: &[u8],
    target: &[u8],
    copied: &Copied,
) -> Result<(), MoveError> {
    let keys = call.keys();
    // Not held by a transaction (inside an EXEC that runs alone): the driver runs the command
    // again with its keys held, the group's log holding them already.
    let families = keys.families().ok_or(WriteError::NeedsTransaction)?;
    for part in 0..copied.parts {
        if families.read_part_dyn(source, part, &mut |_| {}) != Ok(true) {
            return Err(MoveError::LargeItem);
        }
    }
    let copy = || -> Result<(), MoveError> {
        let mut value = Vec::new();
        for part in 0..copied.parts {
            value.clear();
            let read =
                families.read_part_dyn(source, part, &mut |bytes| value.extend_from_slice(bytes));
            if read != Ok(true) {
                return Err(MoveError::LargeItem);
            }
            families.write_part(target, part, &value)?;
        }
        families.write_owner(
            target,
            &copied.value,
            copied.kind,
            copied.expiry,
            copied.parts,
        )?;
        Ok(())
    };
    copy().inspect_err(|_| {
        // A failed persist latches the engine; what this leaves, recovery drops whole.
        let _ = keys.delete(target, None);
    })
}

/// Moves `source` to `target` (keeping its expiry); `Ok(false)` when `source` is missing.
fn move_key(call: &Call<'_>, source: &[u8], target: &[u8]) -> Result<bool, MoveError> {
    let Some(copied) = copy_out(call, source) else {
        return Ok(false);
    };
    if source == target {
        return Ok(true);
    }
    if copied.parts > 0 {
        copy_family(call, source, target, &copied)?;
        call.keys().delete(source, None)?;
        return Ok(true);
    }
    let options = StoreOptions {
        client_flags: copied.client_flags,
        expiry: copied.expiry,
        kind: copied.kind,
        ..StoreOptions::default()
    };
    call.keys().store(target, &copied.value, options)?;
    call.keys().delete(source, None)?;
    Ok(true)
}

/// `RENAME key newkey`.
pub(crate) fn rename(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    match move_key(call, call.arg(1), call.arg(2)) {
        Ok(true) => {
            encode::ok(out);
        }
        Ok(false) => out.extend_from_slice(errors::ERR_NO_SUCH_KEY),
        Err(error) => move_error(out, &error),
    }
}

/// The reply to a refused move.
fn move_error(out: &mut Vec<u8>, error: &MoveError) {
    match error {
        MoveError::LargeItem => out.extend_from_slice(ERR_LARGE_ITEM),
        MoveError::Engine(error) => write_error(out, error),
    }
}

/// `RENAMENX key newkey`: 1 when renamed, 0 when `newkey` exists.
pub(crate) fn renamenx(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let (source, target) = (call.arg(1), call.arg(2));
    if !call.keys().contains(source) {
        out.extend_from_slice(errors::ERR_NO_SUCH_KEY);
        return;
    }
    if call.keys().contains(target) {
        encode::integer(out, 0);
        return;
    }
    match move_key(call, source, target) {
        Ok(true) => {
            encode::integer(out, 1);
        }
        Ok(false) => out.extend_from_slice(errors::ERR_NO_SUCH_KEY),
        Err(error) => move_error(out, &error),
    }
}

/// Parses a SCAN cursor as Redis's `strtoul` does: optional sign, decimal digits, wrapping
/// negation; `None` (`-ERR invalid cursor`) on other bytes or overflow.
/// A SCAN-family COUNT: a positive integer, else Redis's reply for it (`None`, reply written).
pub(crate) fn scan_count(text: &[u8], out: &mut Vec<u8>) -> Option<usize> {
    match parse_i64(text) {
        None => {
            out.extend_from_slice(errors::ERR_NOT_INTEGER);
            None
        }
        Some(count) if count < 1 => {
            out.extend_from_slice(errors::ERR_SYNTAX);
            None
        }
        Some(count) => Some(usize::try_from(count).unwrap_or(usize::MAX)),
    }
}

pub(crate) fn parse_cursor(text: &[u8]) -> Option<u64> {
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, text),
    };
    let mut value: u64 = 0;
    for &byte in digits {
        if !byte.is_ascii_digit() {
            return None;
        }
        value = value.checked_mul(10)?.checked_add(u64::from(byte - b'0'))?;
    }
    Some(if negative {
        value.wrapping_neg()
    } else {
        value
    })
}

/// SCAN's options.
struct ScanOptions<'a> {
    count: usize,
    pattern: Option<&'a [u8]>,
    /// TYPE: `Some(None)` for a type name no key has (lists, sets...): nothing matches.
    kind: Option<Option<Kind>>,
}

/// The kind a SCAN TYPE name stands for (Redis's type names, any case).
fn kind_named(name: &[u8]) -> Option<Kind> {
    if name_eq(name, b"string") {
        Some(Kind::String)
    } else if name_eq(name, b"hash") {
        Some(Kind::Hash)
    } else {
        None
    }
}

fn parse_scan_options<'a>(call: &Call<'a>, out: &mut Vec<u8>) -> Option<ScanOptions<'a>> {
    let mut options = ScanOptions {
        count: SCAN_COUNT_DEFAULT,
        pattern: None,
        kind: None,
    };
    let mut index = 2;
    while index < call.len() {
        let option = call.arg(index);
        let has_value = index + 1 < call.len();
        if name_eq(option, b"count") && has_value {
            options.count = scan_count(call.arg(index + 1), out)?;
        } else if name_eq(option, b"match") && has_value {
            let pattern = call.arg(index + 1);
            options.pattern = (pattern != b"*").then_some(pattern);
        } else if name_eq(option, b"type") && has_value {
            options.kind = Some(kind_named(call.arg(index + 1)));
        } else {
            out.extend_from_slice(errors::ERR_SYNTAX);
            return None;
        }
        index += 2;
    }
    Some(options)
}

/// `SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]`.
pub(crate) fn scan(state: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let Some(cursor) = parse_cursor(call.arg(1)) else {
        encode::error(out, b"ERR invalid cursor");
        return;
    };
    let Some(options) = parse_scan_options(call, out) else {
        return;
    };
    let keys_start = out.len();
    let (mut found, mut visited) = (0usize, 0usize);
    let mut next = cursor;
    // With TYPE, matching keys wait here for their kind to be looked up after the step (not
    // inside it, which holds the shard).
    let mut typed: Vec<Vec<u8>> = Vec::new();
    for _ in 0..SCAN_STEPS_MAX {
        let step = call.engine().scan_step(next, options.count, &mut |key| {
            visited += 1;
            let matches = match options.pattern {
                None => true,
                Some(pattern) => glob_match(pattern, key, false),
            };
            if !matches || options.kind == Some(None) {
                return;
            }
            if options.kind.is_some() {
                typed.push(key.to_vec());
            } else if !state.close && !output_limit_passed(state, call, out) {
                encode::bulk(out, key);
                found += 1;
            }
        });
        for key in typed.drain(..) {
            let kind = call.engine().peek(&key, |item| item.kind);
            if kind.is_some()
                && kind == options.kind.flatten()
                && !output_limit_passed(state, call, out)
            {
                encode::bulk(out, &key);
                found += 1;
            }
        }
        next = step.next;
        // A call that read many keys from flash ends the command (with fewer keys than COUNT,
        // as SCAN allows): the worker does not wait on the disk for a whole large COUNT.
        if next == 0 || visited >= options.count || state.close || step.flash_bound {
            break;
        }
    }
    if state.close || output_limit_passed(state, call, out) {
        return;
    }
    let mut digits = [0u8; U64_LEN_MAX];
    insert_header(out, keys_start, |out| {
        encode::array_len(out, 2);
        encode::bulk(out, format_u64(next, &mut digits));
        encode::array_len(out, found);
    });
}

/// Puts the header `write_header` appends to `out` in front of the elements written from
/// `start` on: the reply of SCAN and KEYS, whose count is known only once they are written.
/// One move of the elements costs less than building them elsewhere first, and needs no second
/// copy of a large reply.
fn insert_header(out: &mut Vec<u8>, start: usize, write_header: impl FnOnce(&mut Vec<u8>)) {
    debug_assert!(start <= out.len());
    let header_start = out.len();
    write_header(out);
    let header_len = out.len() - header_start;
    out[start..].rotate_right(header_len);
}

/// Where a KEYS that runs on the walk thread leaves what it found (see [`keys_walk`]).
#[derive(Debug, Default)]
pub(crate) struct KeysWalk {
    found: Mutex<Option<WalkedKeys>>,
}

/// The keys a walk found, encoded as the reply's elements.
#[derive(Debug, Default)]
struct WalkedKeys {
    bulks: Vec<u8>,
    count: usize,
    /// The elements passed the output hard limit: the walk stopped there, and the
    /// connection is closed, as it is when KEYS on the worker passes it.
    past_limit: bool,
}

/// The walk for the command `args` (parsed from `command`) if it is a `KEYS` over a store
/// holding items on flash: each of those costs a disk read to learn its key, which on the
/// worker would hold up every other connection of it for as long as the whole walk (10 s for
/// 550K flash items on the test VM's disk). The walk runs on the flash walk thread
/// (`flash_io::FlashIo::walk`) and leaves its keys in `state.keys_walk` for [`keys`], which
/// runs when the request does again. `None`: the command runs on the worker as usual.
pub(crate) fn keys_walk(
    state: &mut State,
    ctx: &crate::context::ServerContext,
    args: &strata_protocol::resp::Args,
    command: &[u8],
) -> Option<crate::flash_io::Walk> {
    if args.len() != 2 || !name_eq(args.get(command, 0)?, b"keys") {
        return None;
    }
    if ctx.engine.flash_items() == 0 {
        return None;
    }
    let pattern = args.get(command, 1)?.to_vec();
    let limit_bytes = ctx.live.output().buffered_bytes_hard;
    let slot = Arc::new(KeysWalk::default());
    state.keys_walk = Some(Arc::clone(&slot));
    Some(Box::new(move |engine: &strata_engine::Engine| {
        walk_keys(engine, &pattern, limit_bytes, &slot);
    }))
}

/// Walks the whole keyspace on the walk thread for the keys matching `pattern`, and leaves
/// them in `slot`; stops early if its connection closed meanwhile (no one else holds `slot`).
fn walk_keys(
    engine: &strata_engine::Engine,
    pattern: &[u8],
    limit_bytes: usize,
    slot: &Arc<KeysWalk>,
) {
    let everything = pattern == b"*";
    let mut walked = WalkedKeys::default();
    let mut cursor = 0;
    loop {
        if Arc::strong_count(slot) == 1 {
            return;
        }
        cursor = engine.scan(cursor, KEYS_SCAN_COUNT, &mut |key| {
            if !walked.past_limit && (everything || glob_match(pattern, key, false)) {
                encode::bulk(&mut walked.bulks, key);
                walked.count += 1;
                walked.past_limit = walked.bulks.len() > limit_bytes;
            }
        });
        if cursor == 0 || walked.past_limit {
            break;
        }
    }
    *slot
        .found
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(walked);
}

/// `KEYS pattern`: every key matching, in engine order.
pub(crate) fn keys(state: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    if let Some(slot) = state.keys_walk.take() {
        let walked = slot
            .found
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        // None: the walk never ran (no walk thread); the keys are walked here instead.
        if let Some(walked) = walked {
            if walked.past_limit {
                state.close = true;
                return;
            }
            encode::array_len(out, walked.count);
            out.extend_from_slice(&walked.bulks);
            output_limit_passed(state, call, out);
            return;
        }
    }
    let pattern = call.arg(1);
    let everything = pattern == b"*";
    let keys_start = out.len();
    let mut found = 0usize;
    let mut cursor = 0;
    loop {
        cursor = call.engine().scan(cursor, KEYS_SCAN_COUNT, &mut |key| {
            if (everything || glob_match(pattern, key, false))
                && !state.close
                && !output_limit_passed(state, call, out)
            {
                encode::bulk(out, key);
                found += 1;
            }
        });
        if cursor == 0 || state.close {
            break;
        }
    }
    if state.close || output_limit_passed(state, call, out) {
        return;
    }
    insert_header(out, keys_start, |out| {
        encode::array_len(out, found);
    });
}

/// `RANDOMKEY`: a key, or null when the cache is empty.
pub(crate) fn randomkey(state: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    // xorshift64: cheap, and different per connection and per call.
    let mut seed = state.random_state;
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    state.random_state = seed;
    // `Engine::random_key` probes a few random stretches of the index and can miss the only
    // keys of a sparse cache; a walk from the start then finds one if any exists.
    match call.engine().random_key(seed).or_else(|| first_key(call)) {
        Some(key) => encode::bulk(out, &key),
        None => encode::null(out, state.version),
    };
}

/// The first live key in engine order, or `None` when the cache is empty.
fn first_key(call: &Call<'_>) -> Option<Vec<u8>> {
    let mut found = None;
    let mut cursor = 0;
    loop {
        cursor = call.engine().scan(cursor, KEYS_SCAN_COUNT, &mut |key| {
            if found.is_none() {
                found = Some(key.to_vec());
            }
        });
        if found.is_some() || cursor == 0 {
            return found;
        }
    }
}

/// `DBSIZE`.
pub(crate) fn dbsize(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    encode::integer(out, i64::try_from(call.engine().len()).unwrap_or(i64::MAX));
}

/// `FLUSHDB [ASYNC|SYNC]` and `FLUSHALL [ASYNC|SYNC]`: both empty the one database, at once
/// (ASYNC is accepted and done synchronously: segments are freed in bulk, not key by key).
pub(crate) fn flush(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let mode_ok = match call.len() {
        1 => true,
        2 => name_eq(call.arg(1), b"async") || name_eq(call.arg(1), b"sync"),
        _ => false,
    };
    if !mode_ok {
        out.extend_from_slice(errors::ERR_SYNTAX);
        return;
    }
    if !call.ctx.settings.flush_enabled {
        encode::error(
            out,
            b"ERR flushing is disabled on this server (enable it in strata's configuration)",
        );
        return;
    }
    match call.engine().flush_all(0) {
        Ok(()) => {
            encode::ok(out);
        }
        Err(error) => write_error(out, &error),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_cursor;

    #[test]
    fn cursors_parse_as_strtoul() {
        let table: &[(&[u8], Option<u64>)] = &[
            (b"0", Some(0)),
            (b"", Some(0)),
            (b"007", Some(7)),
            (b"+5", Some(5)),
            (b"-1", Some(u64::MAX)),
            (b"18446744073709551615", Some(u64::MAX)),
            (b"18446744073709551616", None),
            (b"x", None),
            (b" 1", None),
            (b"1 ", None),
        ];
        for &(text, expected) in table {
            assert_eq!(parse_cursor(text), expected, "{}", text.escape_ascii());
        }
    }
}

#[cfg(test)]
mod limit_tests {
    use crate::context::{Processed, Session};
    use crate::resp_exec::strings::tests::{command, context, VALUE_BYTES};
    use crate::resp_exec::RespSession;

    /// Stores `count` keys `key:<i>` with one-byte values.
    fn fill(ctx: &crate::context::ServerContext, count: usize) {
        let mut input = Vec::new();
        for i in 0..count {
            input.extend(command(&["SET", &format!("key:{i:06}"), "1"]));
        }
        let mut out = Vec::new();
        let processed = RespSession::new(9).process(&input, ctx, &mut out);
        assert_eq!(processed.consumed, input.len());
    }

    /// The keys of a KEYS reply, or of the array inside a SCAN reply.
    fn keys_of(reply: &[u8]) -> Vec<String> {
        let text = String::from_utf8_lossy(reply);
        text.split("\r\n")
            .filter(|line| line.starts_with("key:") || *line == "v")
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn keys_and_scan_under_the_limit_answer_every_key_with_the_right_header() {
        let ctx = context(1 << 20);
        fill(&ctx, 100);
        let mut session = RespSession::new(2);
        let mut out = b"+earlier\r\n".to_vec();
        let input = command(&["KEYS", "key:*"]);
        assert!(!session.process(&input, &ctx, &mut out).close);
        assert!(
            out.starts_with(b"+earlier\r\n*100\r\n$10\r\nkey:"),
            "{}",
            out.escape_ascii()
        );
        assert_eq!(keys_of(&out).len(), 100);
        let mut out = Vec::new();
        let input = command(&["SCAN", "0", "COUNT", "1000000"]);
        assert!(!session.process(&input, &ctx, &mut out).close);
        assert!(
            out.starts_with(b"*2\r\n$1\r\n0\r\n*101\r\n$"),
            "{}",
            out.escape_ascii()
        );
        assert_eq!(keys_of(&out).len(), 101);
    }

    #[test]
    fn keys_and_scan_stop_past_the_hard_limit_and_end_the_batch() {
        const HARD: usize = 16 << 10;
        // 5,000 keys of 10 bytes: about 80 KiB of reply, five times the limit.
        for request in [
            command(&["KEYS", "*"]),
            command(&["SCAN", "0", "COUNT", "10000000"]),
        ] {
            let ctx = context(HARD);
            fill(&ctx, 5_000);
            let mut input = request.clone();
            input.extend(command(&["SET", "after", "1"]));
            let mut out = Vec::new();
            let processed = RespSession::new(2).process(&input, &ctx, &mut out);
            assert_eq!(
                processed,
                Processed {
                    consumed: request.len(),
                    close: true,
                    ..Processed::default()
                }
            );
            assert!(ctx.live.output().past_hard(&out));
            assert!(out.len() <= HARD + VALUE_BYTES, "{} bytes", out.len());
            assert!(ctx.engine.get(b"after", |_| ()).is_none());
            assert_eq!(ctx.engine.len(), 5_001, "the keys are all still there");
        }
    }
}
