//! Hash commands: HSET HMSET HSETNX HGET HMGET HGETALL HKEYS HVALS HLEN HSTRLEN HEXISTS HDEL
//! HINCRBY HINCRBYFLOAT HRANDFIELD HSCAN (field expiry, HEXPIRE and friends: `hash_expiry.rs`).
//!
//! A hash is one engine record of kind `Kind::Hash` holding `strata_types::hash`'s encoding,
//! up to 8 KiB of it; past that it is a large hash, kept in chunks, and these commands run on
//! its chunks (`hash_chunks.rs`).
//! A read borrows the record and walks the encoding; a write runs under the key's lock
//! (`Engine::modify_as`), rebuilding the encoding into the engine's write buffer: the old
//! fields in order (updated in place, expired ones dropped), then the new ones. A hash left
//! with no field is deleted, as Redis deletes an empty hash. The key's own TTL lives in the
//! encoding's header (EXPIRE sets it, TTL reads it: `expire.rs`); the record expires at the
//! earlier of it and, when every field has an expiry, the last field's, so the key goes with
//! its last field as in Redis. A key of another kind answers `WRONGTYPE` and is left alone.
//!
//! Replies are Redis 7.0.15's, byte for byte, in RESP2 and RESP3 (the differential tests), with
//! one departure: HSCAN answers every matching field in one reply (cursor 0), for any size, as
//! Redis does for a hash small enough for a listpack; COUNT is accepted and ignored.

use strata_engine::{Change, Door, Expiry, Kind, WriteError};
use strata_protocol::resp::{encode, errors, glob_match, name_eq, parse_f64, parse_i64, Version};
use strata_types::hash::{record_expiry, same_name, Builder, Field, Hash};
use strata_types::hash_chunks::{is_chunked, CHUNKED_FROM_BYTES};

use super::counters::format_human;
use super::hash_rewrite::{remove_field, replace_found, rewrite_live, set_fields, Rewrite};
use super::{write_error, Call, State};

/// Reply for a stored hash whose encoding does not parse (damage the record checksum missed).
const ERR_DAMAGED: &[u8] = b"-ERR the stored hash is damaged (strata could not decode it)\r\n";

/// What reading a hash found.
pub(crate) enum Read<R> {
    /// The hash, through the reader's answer.
    Found(R),
    /// No such key, or a hash whose fields have all expired.
    Missing,
    /// The key holds another kind, or its hash does not decode: the reply is written.
    Refused,
}

/// How much of a hash's encoding a read checks before it runs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// Every entry ([`Hash::parse`]): for reads that walk the fields.
    Whole,
    /// The header only ([`Hash::open`]) where no field has an expiry (the hash is then never
    /// empty), else every entry: for reads by name, whose [`Hash::find`] checks the entries
    /// it walks, for reads of every field, whose [`Hash::try_stored`] checks them as it
    /// walks, and for HLEN, which answers the header's count. An HGET of a 10,000-field hash
    /// validated them all before its walk (60 µs), an HGETALL walked its fields twice.
    Header,
}

/// Runs `f` on the live hash at `key`, its encoding checked as `check` says. A key of another
/// kind or a damaged hash gets its error reply in `out` ([`Read::Refused`]).
pub(crate) fn read_hash<R>(
    call: &Call<'_>,
    key: &[u8],
    out: &mut Vec<u8>,
    check: Check,
    f: impl FnOnce(&Hash<'_>, u64, &mut Vec<u8>) -> R,
) -> Read<R> {
    let kind = call.kind();
    debug_assert_eq!(kind, Kind::Hash, "a hash command, by the table");
    let found = call.keys().get(key, |item| {
        if item.kind != kind {
            out.extend_from_slice(errors::ERR_WRONGTYPE);
            return Read::Refused;
        }
        if is_chunked(item.value) {
            call.want_held(); // A large hash: the command runs on its chunks.
            return Read::Refused;
        }
        let hash = match open_hash(item.value, check) {
            Ok(hash) => hash,
            Err(_) => {
                out.extend_from_slice(ERR_DAMAGED);
                return Read::Refused;
            }
        };
        // (Every reader uses the time for the fields' expiries alone.)
        let now_ms = fields_now_ms(call, &hash);
        if hash.is_empty(now_ms) {
            Read::Missing
        } else {
            Read::Found(f(&hash, now_ms, out))
        }
    });
    // A key of another type or a damaged hash was there: a hit, as Redis counts WRONGTYPE.
    call.looked_up(matches!(found, Some(Read::Found(_) | Read::Refused)));
    found.unwrap_or(Read::Missing)
}

/// The time `hash`'s field expiries are measured against: the engine clock's where a field has
/// an expiry, and 0 where none has, for which any time gives the same answers (reading the
/// clock cost 3% of a pipelined HGET's server CPU). Only for a caller that uses the time for
/// nothing but those expiries.
fn fields_now_ms(call: &Call<'_>, hash: &Hash<'_>) -> u64 {
    if hash.has_expiring() {
        call.engine().now_ms()
    } else {
        0
    }
}

/// `bytes` as a hash, checked as `check` says.
fn open_hash(bytes: &[u8], check: Check) -> Result<Hash<'_>, strata_types::Malformed> {
    match check {
        Check::Header => Hash::open(bytes).and_then(|hash| {
            if hash.has_expiring() {
                Hash::parse(bytes)
            } else {
                Ok(hash)
            }
        }),
        Check::Whole => Hash::parse(bytes),
    }
}

/// What a hash edit decides: the builder in the buffer holds the new fields when it writes.
pub(crate) enum Edit {
    /// Nothing changes.
    Keep,
    /// Write what the builder holds (or delete the key when it holds no field).
    Write,
    /// The edit's walk met a damaged entry of a hash opened unvalidated ([`Check::Header`]):
    /// nothing changes, and the reply is the damage error.
    Damaged,
}

/// Rewrites the hash at `key` under its lock: `f` gets the current live hash (`None` for a
/// missing key) and a builder writing into the engine's buffer, and says whether to write.
/// `Err(WriteError::WrongKind)` for a key of another kind; `Ok(false)` when the hash did not
/// decode (the damage reply is then the caller's, [`reply_edit_failed`]). With [`Check::Header`],
/// a hash with no expiring field reaches `f` with only its header checked: `f` walks it with
/// the checked walks and says [`Edit::Damaged`] when they fail.
pub(crate) fn edit_hash(
    call: &Call<'_>,
    key: &[u8],
    check: Check,
    f: impl FnOnce(Option<&Hash<'_>>, u64, &mut Builder<'_>) -> Edit,
) -> Result<bool, WriteError> {
    let mut decoded = true;
    let mut large = false;
    let mut outgrown: Option<(Vec<u8>, Option<u64>)> = None;
    debug_assert_eq!(call.kind(), Kind::Hash, "a hash command, by the table");
    let keys = call.keys();
    let families = keys.families().filter(|_| !call.in_chunk);
    let result = call.modify_typed(key, |current, buffer| {
        if current.as_ref().is_some_and(|item| is_chunked(item.value)) {
            large = true; // The command runs again, on the chunks.
            return Change::Keep;
        }
        let hash = match current.as_ref().map(|item| open_hash(item.value, check)) {
            None => None,
            Some(Ok(hash)) => Some(hash),
            Some(Err(_)) => {
                decoded = false;
                return Change::Keep;
            }
        };
        // The edits that check the header only (HSET, HINCRBY, HDEL of one field) use the time
        // for the fields' expiries alone; the others compare it with times they were given
        // (HEXPIREAT of a time past deletes the field).
        let now_ms = match &hash {
            Some(hash) if check == Check::Header => fields_now_ms(call, hash),
            _ => call.engine().now_ms(),
        };
        let hash = hash.filter(|hash| !hash.is_empty(now_ms));
        // A hash whose fields had all expired is gone: what is built now is a new key.
        let key_expiry = hash.as_ref().and_then(Hash::key_expiry_ms);
        let mut builder = Builder::new(buffer);
        match f(hash.as_ref(), now_ms, &mut builder) {
            Edit::Keep => return Change::Keep,
            Edit::Damaged => {
                decoded = false;
                return Change::Keep;
            }
            Edit::Write => {}
        }
        let fields_gone = builder.fields_gone_ms();
        if builder.finish(key_expiry) == 0 {
            return if current.is_some() {
                Change::Delete
            } else {
                Change::Keep
            };
        }
        if buffer.len() > CHUNKED_FROM_BYTES && !call.in_chunk {
            // Outgrown: made a large hash, by a holder of the key (rerun held if need be).
            if families.is_some() {
                outgrown = Some((std::mem::take(buffer), key_expiry));
            } else {
                large = true;
            }
            return Change::Keep;
        }
        // The key goes with its last field, or at its own TTL if that comes first.
        let expiry = record_expiry(key_expiry, fields_gone);
        Change::WriteKind {
            kind: Kind::Hash,
            expiry: expiry.map_or(Expiry::Never, Expiry::AtMs),
        }
    });
    if large {
        call.want_held();
        return Ok(true);
    }
    if let (Some((compact, key_expiry)), Some(families)) = (outgrown, families) {
        result?;
        super::hash_chunks::make_chunked(families, key, &compact, key_expiry)?;
        return Ok(decoded);
    }
    result.map(|_| decoded)
}

/// The reply to a write that would take one chunk of a hash (`hash_chunks`) past
/// `--max-value-size`: the fields that share a chunk share one record (Redis has no such
/// limit; a chunk holds one field past 4 KiB, so it takes fields near the limit to meet it).
const ERR_HASH_TOO_LARGE: &[u8] = b"-ERR hash exceeds maximum allowed size (max-value-size): \
    the fields that share one chunk of a hash are kept in one record of at most \
    --max-value-size\r\n";

/// Writes the reply for an [`edit_hash`] that failed: the engine's refusal, or the damage.
pub(crate) fn reply_edit_failed(out: &mut Vec<u8>, result: &Result<bool, WriteError>) {
    match result {
        Err(WriteError::TooLarge { .. }) => out.extend_from_slice(ERR_HASH_TOO_LARGE),
        Err(error) => write_error(out, error),
        Ok(false) => out.extend_from_slice(ERR_DAMAGED),
        Ok(true) => {}
    }
}

/// `HSET key field value [field value ...]`: how many fields were added.
pub(crate) fn hset(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    hset_generic(call, out, false);
}

/// `HMSET key field value [field value ...]`: `+OK`.
pub(crate) fn hmset(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    hset_generic(call, out, true);
}

fn hset_generic(call: &Call<'_>, out: &mut Vec<u8>, ok_reply: bool) {
    if !call.len().is_multiple_of(2) {
        errors::wrong_args(out, call.command.name.as_bytes());
        return;
    }
    // One pair (most HSETs) on the stack, more in a vector.
    let (one, many): ([&[u8]; 2], Vec<&[u8]>) = if call.len() == 4 {
        ([call.arg(2), call.arg(3)], Vec::new())
    } else {
        ([&[], &[]], call.args_from(2).collect())
    };
    let pairs: &[&[u8]] = if call.len() == 4 { &one } else { &many };
    let mut added = 0;
    let result = edit_hash(
        call,
        call.arg(1),
        Check::Header,
        |old, now_ms, builder| match set_fields(old, now_ms, pairs, builder) {
            Ok(count) => {
                added = count;
                Edit::Write
            }
            Err(_) => Edit::Damaged,
        },
    );
    match result {
        Ok(true) if ok_reply => {
            encode::ok(out);
        }
        Ok(true) => {
            encode::integer(out, i64::try_from(added).unwrap_or(i64::MAX));
        }
        failed => reply_edit_failed(out, &failed),
    }
}

/// `HSETNX key field value`: 1 when set, 0 when the field exists.
pub(crate) fn hsetnx(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let pairs = [call.arg(2), call.arg(3)];
    let mut set = false;
    let result = edit_hash(call, call.arg(1), Check::Whole, |old, now_ms, builder| {
        if old.is_some_and(|hash| hash.get(pairs[0], now_ms).is_some()) {
            return Edit::Keep;
        }
        match set_fields(old, now_ms, &pairs, builder) {
            Ok(added) => {
                set = added == 1;
                Edit::Write
            }
            Err(_) => Edit::Damaged,
        }
    });
    match result {
        Ok(true) => {
            encode::integer(out, i64::from(set));
        }
        failed => reply_edit_failed(out, &failed),
    }
}

/// `HGET key field`.
pub(crate) fn hget(state: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    reply_values(state, call, out, 2..3, false);
}

/// `HMGET key field [field ...]`: a value or nil per field.
pub(crate) fn hmget(state: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    reply_values(state, call, out, 2..call.len(), true);
}

/// Replies with the value, or nil, of each field the arguments at `names` name: one bulk
/// (HGET) or an array of them (HMGET). Each walk checks the entries it passes; damage met
/// replaces the whole reply with the damage error (no partial array).
fn reply_values(
    state: &State,
    call: &Call<'_>,
    out: &mut Vec<u8>,
    names: std::ops::Range<usize>,
    array: bool,
) {
    let mark = out.len();
    let fields = names.len();
    let found = read_hash(
        call,
        call.arg(1),
        out,
        Check::Header,
        |hash, now_ms, out| {
            if array {
                encode::array_len(out, fields);
            }
            for at in names.clone() {
                match hash.find(call.arg(at), now_ms) {
                    Ok(Some(field)) => encode::bulk(out, field.value),
                    Ok(None) => encode::null(out, state.version),
                    Err(_) => {
                        out.truncate(mark);
                        out.extend_from_slice(ERR_DAMAGED);
                        return;
                    }
                };
            }
        },
    );
    if let Read::Missing = found {
        out.truncate(mark);
        if array {
            encode::array_len(out, fields);
        }
        for _ in 0..fields {
            encode::null(out, state.version);
        }
    }
}

/// Which parts of each field HGETALL, HKEYS and HVALS list.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Parts {
    Both,
    Names,
    Values,
}

/// Lists the live fields in one walk: where no field has an expiry the header's count heads
/// the reply and the walk checks the entries, replacing what it wrote with the damage error
/// if one is damaged (with expiring fields the hash was validated, then counted, first).
fn list_fields(state: &State, call: &Call<'_>, out: &mut Vec<u8>, parts: Parts) {
    let version = state.version;
    let found = read_hash(
        call,
        call.arg(1),
        out,
        Check::Header,
        |hash, now_ms, out| {
            let mark = out.len();
            let len = hash.len(now_ms);
            if parts == Parts::Both {
                encode::map_len(out, version, len);
            } else {
                encode::array_len(out, len);
            }
            let walked = hash.try_stored(|field| {
                if !field.is_live(now_ms) {
                    return;
                }
                if parts != Parts::Values {
                    encode::bulk(out, field.name);
                }
                if parts != Parts::Names {
                    encode::bulk(out, field.value);
                }
            });
            if walked.is_err() {
                out.truncate(mark);
                out.extend_from_slice(ERR_DAMAGED);
            }
        },
    );
    if let Read::Missing = found {
        if parts == Parts::Both {
            encode::map_len(out, version, 0);
        } else {
            encode::array_len(out, 0);
        }
    }
}

/// `HGETALL key`: field, value, ... (a map in RESP3).
pub(crate) fn hgetall(state: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    list_fields(state, call, out, Parts::Both);
}

/// `HKEYS key`.
pub(crate) fn hkeys(state: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    list_fields(state, call, out, Parts::Names);
}

/// `HVALS key`.
pub(crate) fn hvals(state: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    list_fields(state, call, out, Parts::Values);
}

/// Replies with the integer `f` computes from the live field named by argument 2 (`None`
/// when absent), or 0 for a missing key; the hash is checked as far as the walk to the field.
fn field_integer(call: &Call<'_>, out: &mut Vec<u8>, f: impl FnOnce(Option<Field<'_>>) -> usize) {
    let found = read_hash(
        call,
        call.arg(1),
        out,
        Check::Header,
        |hash, now_ms, out| match hash.find(call.arg(2), now_ms) {
            Ok(field) => {
                encode::integer(out, i64::try_from(f(field)).unwrap_or(i64::MAX));
            }
            Err(_) => out.extend_from_slice(ERR_DAMAGED),
        },
    );
    if let Read::Missing = found {
        encode::integer(out, 0);
    }
}

/// `HLEN key`: the header's count where no field has an expiry (O(1), as in Redis), else a
/// count of the live fields of the validated hash.
pub(crate) fn hlen(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let found = read_hash(
        call,
        call.arg(1),
        out,
        Check::Header,
        |hash, now_ms, out| {
            encode::integer(out, i64::try_from(hash.len(now_ms)).unwrap_or(i64::MAX));
        },
    );
    if let Read::Missing = found {
        encode::integer(out, 0);
    }
}

/// `HSTRLEN key field`: the value's length, 0 for a missing field.
pub(crate) fn hstrlen(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    field_integer(call, out, |field| {
        field.map_or(0, |field| field.value.len())
    });
}

/// `HEXISTS key field`: 1 or 0.
pub(crate) fn hexists(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    field_integer(call, out, |field| usize::from(field.is_some()));
}

/// `HDEL key field [field ...]`: how many were removed; the key goes with its last field.
pub(crate) fn hdel(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let mut removed = 0usize;
    // One field: the walk goes only to it (see `remove_field`); several: every field checked.
    let one = call.len() == 3;
    let check = if one { Check::Header } else { Check::Whole };
    let result = edit_hash(call, call.arg(1), check, |old, now_ms, builder| {
        let Some(old) = old else {
            return Edit::Keep;
        };
        if one && !old.has_expiring() {
            return match remove_field(old, call.arg(2), builder) {
                Ok(false) => Edit::Keep,
                Ok(true) => {
                    removed = 1;
                    Edit::Write
                }
                Err(_) => Edit::Damaged,
            };
        }
        rewrite_live(old, now_ms, builder, |field| {
            if call.args_from(2).any(|name| name == field.name) {
                removed += 1;
                Rewrite::Drop
            } else {
                Rewrite::Keep
            }
        });
        if removed == 0 {
            Edit::Keep
        } else {
            Edit::Write
        }
    });
    match result {
        Ok(true) => {
            encode::integer(out, i64::try_from(removed).unwrap_or(i64::MAX));
        }
        failed => reply_edit_failed(out, &failed),
    }
}

/// Why HINCRBY or HINCRBYFLOAT changed nothing.
enum NumberRefused {
    NotInteger,
    NotFloat,
    Overflow,
    NanOrInfinity,
}

impl NumberRefused {
    fn reply(&self) -> &'static [u8] {
        match self {
            NumberRefused::NotInteger => b"-ERR hash value is not an integer\r\n",
            NumberRefused::NotFloat => b"-ERR hash value is not a float\r\n",
            NumberRefused::Overflow => errors::ERR_OVERFLOW,
            NumberRefused::NanOrInfinity => errors::ERR_NAN_OR_INFINITY,
        }
    }
}

/// Sets `name` to what `compute` makes of its current value (`None`: a missing field), keeping
/// the field's place and expiry; the reply is the caller's.
fn update_field(
    call: &Call<'_>,
    name: &[u8],
    mut compute: impl FnMut(Option<&[u8]>, &mut Vec<u8>) -> Result<(), NumberRefused>,
) -> Result<Result<Vec<u8>, NumberRefused>, Result<bool, WriteError>> {
    let mut outcome = Ok(Vec::new());
    let result = edit_hash(call, call.arg(1), Check::Header, |old, now_ms, builder| {
        let mut new_value = Vec::new();
        if let Some(hash) = old.filter(|hash| !hash.has_expiring()) {
            // Checked as far as the walk to the field; the rest copied as it is.
            let Ok(found) = hash.find_entry(name) else {
                return Edit::Damaged;
            };
            let current = found.as_ref().map(|(field, _, _)| field.value);
            if let Err(refused) = compute(current, &mut new_value) {
                outcome = Err(refused);
                return Edit::Keep;
            }
            if replace_found(hash, found, name, &new_value, builder).is_err() {
                return Edit::Damaged;
            }
            outcome = Ok(new_value);
            return Edit::Write;
        }
        let current = old.and_then(|hash| hash.get(name, now_ms));
        if let Err(refused) = compute(current.map(|field| field.value), &mut new_value) {
            outcome = Err(refused);
            return Edit::Keep;
        }
        if let Some(hash) = old {
            rewrite_live(hash, now_ms, builder, |field| {
                if same_name(field.name, name) {
                    Rewrite::Value(&new_value)
                } else {
                    Rewrite::Keep
                }
            });
        }
        if current.is_none() {
            builder.push(Field {
                name,
                value: &new_value,
                expires_at_ms: None,
            });
        }
        outcome = Ok(new_value);
        Edit::Write
    });
    match result {
        Ok(true) => Ok(outcome),
        failed => Err(failed),
    }
}

/// `HINCRBY key field increment`: the new value.
pub(crate) fn hincrby(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let Some(delta) = parse_i64(call.arg(3)) else {
        out.extend_from_slice(errors::ERR_NOT_INTEGER);
        return;
    };
    let mut new = 0i64;
    let result = update_field(call, call.arg(2), |current, value| {
        let old = match current {
            None => 0,
            Some(bytes) => parse_i64(bytes).ok_or(NumberRefused::NotInteger)?,
        };
        new = old.checked_add(delta).ok_or(NumberRefused::Overflow)?;
        value.extend_from_slice(new.to_string().as_bytes());
        Ok(())
    });
    match result {
        Ok(Ok(_)) => {
            encode::integer(out, new);
        }
        Ok(Err(refused)) => out.extend_from_slice(refused.reply()),
        Err(failed) => reply_edit_failed(out, &failed),
    }
}

/// `HINCRBYFLOAT key field increment`: the new value, as INCRBYFLOAT prints it.
pub(crate) fn hincrbyfloat(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let Some(delta) = parse_f64(call.arg(3)) else {
        out.extend_from_slice(errors::ERR_NOT_FLOAT);
        return;
    };
    if !delta.is_finite() {
        encode::error(out, b"ERR value is NaN or Infinity");
        return;
    }
    let result = update_field(call, call.arg(2), |current, value| {
        let old = match current {
            None => 0.0,
            Some(bytes) => parse_f64(bytes).ok_or(NumberRefused::NotFloat)?,
        };
        let new = old + delta;
        if !new.is_finite() {
            return Err(NumberRefused::NanOrInfinity);
        }
        format_human(new, value);
        Ok(())
    });
    match result {
        Ok(Ok(value)) => {
            encode::bulk(out, &value);
        }
        Ok(Err(refused)) => out.extend_from_slice(refused.reply()),
        Err(failed) => reply_edit_failed(out, &failed),
    }
}

/// The next number of the connection's generator (for the large hashes' HRANDFIELD).
pub(crate) fn random_u64(state: &mut State) -> u64 {
    next_random(state)
}

/// The next number of the connection's xorshift generator.
fn next_random(state: &mut State) -> u64 {
    let mut seed = state.random_state;
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    state.random_state = seed;
    seed
}

/// `HRANDFIELD key [count [WITHVALUES]]`: one field (or nil); with a count, that many distinct
/// fields (all, when the hash has fewer), or with a negative count, that many with repeats.
pub(crate) fn hrandfield(state: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    if call.len() == 2 {
        let pick = next_random(state);
        let found = read_hash(call, call.arg(1), out, Check::Whole, |hash, now_ms, out| {
            let len = hash.len(now_ms) as u64;
            let field = hash.live(now_ms).nth((pick % len) as usize);
            encode::bulk(out, field.map_or(&[][..], |field| field.name));
        });
        if let Read::Missing = found {
            encode::null(out, state.version);
        }
        return;
    }
    let Some(count) = parse_i64(call.arg(2)) else {
        out.extend_from_slice(errors::ERR_NOT_INTEGER);
        return;
    };
    let with_values = match call.len() {
        3 => false,
        4 if name_eq(call.arg(3), b"withvalues") => true,
        _ => {
            out.extend_from_slice(errors::ERR_SYNTAX);
            return;
        }
    };
    if count < -(i64::MAX / 2) && with_values {
        encode::error(out, b"ERR value is out of range");
        return;
    }
    let version = state.version;
    let found = {
        let mut picks = |len: u64| pick_indexes(state, count, len);
        read_hash(call, call.arg(1), out, Check::Whole, |hash, now_ms, out| {
            let fields: Vec<Field<'_>> = hash.live(now_ms).collect();
            let picked = picks(fields.len() as u64);
            write_random_fields(out, version, &fields, &picked, with_values);
        })
    };
    if let Read::Missing = found {
        encode::array_len(out, 0);
    }
}

/// Which of `len` fields a count picks: distinct ones in order for a positive count (all when
/// it reaches `len`), `|count|` random ones with repeats for a negative one.
fn pick_indexes(state: &mut State, count: i64, len: u64) -> Vec<usize> {
    if len == 0 {
        return Vec::new();
    }
    if count >= 0 {
        let count = count.unsigned_abs();
        if count >= len {
            return (0..len as usize).collect();
        }
        // Selection sampling (Knuth's algorithm S): each field in turn with the chance that
        // leaves exactly `count` chosen.
        let (mut picked, mut seen) = (Vec::with_capacity(count as usize), 0u64);
        while (picked.len() as u64) < count {
            let left = len - seen;
            let wanted = count - picked.len() as u64;
            if next_random(state) % left < wanted {
                picked.push(seen as usize);
            }
            seen += 1;
        }
        return picked;
    }
    (0..count.unsigned_abs())
        .map(|_| (next_random(state) % len) as usize)
        .collect()
}

fn write_random_fields(
    out: &mut Vec<u8>,
    version: Version,
    fields: &[Field<'_>],
    picked: &[usize],
    with_values: bool,
) {
    let resp3_pairs = with_values && version == Version::Resp3;
    let per_field = if with_values && !resp3_pairs { 2 } else { 1 };
    encode::array_len(out, picked.len() * per_field);
    for &index in picked {
        let field = fields[index];
        if resp3_pairs {
            encode::array_len(out, 2);
        }
        encode::bulk(out, field.name);
        if with_values {
            encode::bulk(out, field.value);
        }
    }
}

/// `HSCAN key cursor [MATCH pattern] [COUNT count] [NOVALUES]`: every matching field in one
/// reply, cursor 0 (see the module docs).
pub(crate) fn hscan(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    if super::keyspace::parse_cursor(call.arg(2)).is_none() {
        encode::error(out, b"ERR invalid cursor");
        return;
    }
    let Some((pattern, no_values)) = hscan_options(call, out) else {
        return;
    };
    let found = read_hash(call, call.arg(1), out, Check::Whole, |hash, now_ms, out| {
        let matching =
            |field: &Field<'_>| pattern.is_none_or(|glob| glob_match(glob, field.name, false));
        let count = hash.live(now_ms).filter(matching).count();
        encode::array_len(out, 2);
        encode::bulk(out, b"0");
        encode::array_len(out, if no_values { count } else { count * 2 });
        for field in hash.live(now_ms).filter(matching) {
            encode::bulk(out, field.name);
            if !no_values {
                encode::bulk(out, field.value);
            }
        }
    });
    if let Read::Missing = found {
        encode::array_len(out, 2);
        encode::bulk(out, b"0");
        encode::array_len(out, 0);
    }
}

/// HSCAN's MATCH pattern and NOVALUES; `None` when the options are refused (reply written).
fn hscan_options<'a>(call: &Call<'a>, out: &mut Vec<u8>) -> Option<(Option<&'a [u8]>, bool)> {
    let (mut pattern, mut no_values, mut index) = (None, false, 3);
    while index < call.len() {
        let option = call.arg(index);
        let has_value = index + 1 < call.len();
        if name_eq(option, b"novalues") {
            no_values = true;
            index += 1;
            continue;
        }
        if name_eq(option, b"count") && has_value {
            super::keyspace::scan_count(call.arg(index + 1), out)?;
        } else if name_eq(option, b"match") && has_value {
            let glob = call.arg(index + 1);
            pattern = (glob != b"*").then_some(glob);
        } else {
            out.extend_from_slice(errors::ERR_SYNTAX);
            return None;
        }
        index += 2;
    }
    Some((pattern, no_values))
}
