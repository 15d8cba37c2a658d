//! `OBJECT ENCODING|REFCOUNT|FREQ|IDLETIME|HELP`.
//!
//! ENCODING answers the name Redis 7.0 would give the same value (strata has one encoding per
//! kind: strings are bytes, hashes `strata_types::hash`'s compact form): `int`, `embstr` or
//! `raw` for a string, `listpack` or `hashtable` for a hash, by Redis's default thresholds.
//! REFCOUNT is always 1 (nothing is shared). FREQ answers the index slot's read count: reads
//! since the item was written or merge eviction last carried it forward, 0..=6 (Redis's LFU
//! counter is a logarithmic 0..=255 that starts at 5; both say which keys are hot, so
//! `redis-cli --hotkeys` works). Like Redis under an LFU policy, strata keeps no access time:
//! IDLETIME gets the error Redis gives then, whatever the policy.

use strata_engine::{Door, ItemRef, Kind};
use strata_protocol::resp::{encode, errors, name_eq, parse_i64};
use strata_types::hash::Hash;

use super::{Call, State};

/// Redis's reply to OBJECT IDLETIME under an LFU policy: strata keeps reads, not times.
const IDLE_TIME_NOT_TRACKED: &[u8] = b"ERR An LFU maxmemory policy is selected, idle time not \
    tracked. Please note that when switching between policies at runtime LRU and LFU data will \
    take some time to adjust.";

/// `OBJECT <subcommand> [key]`.
pub(crate) fn object(state: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let sub = call.arg(1);
    if name_eq(sub, b"help") && call.len() == 2 {
        help(out);
        return;
    }
    let known = [&b"encoding"[..], b"refcount", b"freq", b"idletime"]
        .iter()
        .any(|name| name_eq(sub, name));
    if !known || call.len() != 3 {
        errors::unknown_subcommand(out, b"object", sub);
        return;
    }
    let now_ms = call.engine().now_ms();
    let found = call.keys().peek(call.arg(2), |item| {
        if name_eq(sub, b"encoding") {
            encode::bulk(out, encoding(&item, now_ms));
        } else if name_eq(sub, b"refcount") {
            encode::integer(out, 1);
        } else if name_eq(sub, b"freq") {
            encode::integer(out, i64::from(item.reads));
        } else {
            encode::error(out, IDLE_TIME_NOT_TRACKED);
        }
    });
    call.looked_up(found.is_some());
    if found.is_none() {
        encode::null(out, state.version);
    }
}

fn help(out: &mut Vec<u8>) {
    let lines: [&[u8]; 10] = [
        b"OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        b"ENCODING <key>",
        b"    Return the kind of internal representation used in order to store the value",
        b"    associated with a <key> (strata: the name Redis would use).",
        b"FREQ <key>",
        b"    Return the access frequency of the <key> (strata: reads since it was written, 0-6).",
        b"IDLETIME <key>",
        b"    Not tracked: strata keeps reads, not access times (Redis's reply under LFU).",
        b"REFCOUNT <key>",
        b"    Return the number of references of the value associated with the specified <key> (1).",
    ];
    super::write_help(out, &lines);
}

/// The name OBJECT ENCODING gives the item (Redis's names, by Redis's rules).
pub(crate) fn encoding(item: &ItemRef<'_>, now_ms: u64) -> &'static [u8] {
    match item.kind {
        Kind::Hash => Hash::parse(item.value).map_or(&b"hashtable"[..], |hash| {
            hash.redis_encoding(now_ms).as_bytes()
        }),
        // The engine never hands out a part (one record of a larger item) as a key's item.
        Kind::String | Kind::Part => string_encoding(item.value),
    }
}

/// Redis's encoding of a string: `int` for a canonical integer of at most 20 characters,
/// `embstr` up to 44 bytes, `raw` past that.
fn string_encoding(value: &[u8]) -> &'static [u8] {
    let canonical = value.len() <= 20
        && parse_i64(value).is_some_and(|number| number.to_string().as_bytes() == value);
    if canonical {
        b"int"
    } else if value.len() <= 44 {
        b"embstr"
    } else {
        b"raw"
    }
}
