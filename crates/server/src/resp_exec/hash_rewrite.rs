//! How a write rebuilds a hash's encoding (the hash commands of `hashes.rs` say what to
//! change; this says how the new encoding is laid down): the entries kept as they are go over
//! in runs, one byte copy each, rather than field by field. A write of one field on a hash with
//! no expiring field walks only to it and copies the entries before and after it
//! ([`replace_field`], [`remove_field`]); a write of several walks the whole hash once, checked
//! where the hash came unvalidated ([`set_in_place`]); a hash with expiring fields, validated
//! first, is rewritten live field by live field, dropping the expired ones ([`rewrite_live`]).

use std::ops::Range;

use strata_types::hash::{same_name, Builder, Field, Hash};
use strata_types::Malformed;

/// Where HSET finds a field among its pairs (field, value, field, value...): the index of the
/// pair that first names it and the value its last one gives it (Redis applies them in turn).
/// A few pairs are searched in place; many go in a map, so a large HMSET costs no more than a
/// pass over them.
enum Pairs<'p> {
    Few(&'p [&'p [u8]]),
    Many(std::collections::HashMap<&'p [u8], (usize, &'p [u8])>),
}

/// Pairs from which [`Pairs`] builds a map.
const PAIRS_SEARCHED_MAX: usize = 16;

impl<'p> Pairs<'p> {
    fn new(pairs: &'p [&'p [u8]]) -> Pairs<'p> {
        if pairs.len() / 2 <= PAIRS_SEARCHED_MAX {
            return Pairs::Few(pairs);
        }
        let mut map = std::collections::HashMap::with_capacity(pairs.len() / 2);
        for (at, pair) in pairs.chunks_exact(2).enumerate() {
            map.entry(pair[0])
                .and_modify(|found: &mut (usize, &[u8])| found.1 = pair[1])
                .or_insert((at, pair[1]));
        }
        Pairs::Many(map)
    }

    fn find(&self, name: &[u8]) -> Option<(usize, &'p [u8])> {
        match self {
            Pairs::Many(map) => map.get(name).copied(),
            Pairs::Few(pairs) => {
                let mut found = None;
                for (at, pair) in pairs.chunks_exact(2).enumerate() {
                    if same_name(pair[0], name) {
                        let first = found.map_or(at, |(first, _)| first);
                        found = Some((first, pair[1]));
                    }
                }
                found
            }
        }
    }
}

/// Copies `old`'s live fields with the values `pairs` set (their expiry cleared, as a write of
/// a field clears it), then appends the fields `pairs` adds, in the order first named; returns
/// how many it added. One walk of the hash; the entries it keeps as they are go over in runs,
/// a copy of bytes each, not field by field. A hash with no expiring field may come unvalidated
/// (`Check::Header`): its walk checks each entry, and `Err` says it met damage.
pub(super) fn set_fields(
    old: Option<&Hash<'_>>,
    now_ms: u64,
    pairs: &[&[u8]],
    out: &mut Builder<'_>,
) -> Result<usize, Malformed> {
    if let (Some(hash), [name, value]) = (old, pairs) {
        if !hash.has_expiring() {
            let found = replace_field(hash, name, value, out)?;
            return Ok(usize::from(!found));
        }
    }
    let lookup = Pairs::new(pairs);
    let mut present = vec![false; pairs.len() / 2];
    match old {
        Some(hash) if !hash.has_expiring() => {
            set_in_place(hash, &lookup, &mut present, out)?;
        }
        Some(hash) => rewrite_live(hash, now_ms, out, |field| match lookup.find(field.name) {
            Some((first, value)) => {
                present[first] = true;
                Rewrite::Set(value)
            }
            None => Rewrite::Keep,
        }),
        None => {}
    }
    let mut added = 0;
    for (at, pair) in pairs.chunks_exact(2).enumerate() {
        let Some((first, value)) = lookup.find(pair[0]).filter(|_| !present[at]) else {
            continue;
        };
        if first == at {
            out.push(Field {
                name: pair[0],
                value,
                expires_at_ms: None,
            });
            added += 1;
        }
    }
    Ok(added)
}

/// Writes `hash`, none of whose fields expires, with the field `name` set to `value` in its
/// place, or added last when it is not there (returns whether it was): the entries around it
/// are copied as they are, in two runs, and the walk stops at the field (the entries after it
/// are counted by the header, which the copy keeps).
fn replace_field(
    hash: &Hash<'_>,
    name: &[u8],
    value: &[u8],
    out: &mut Builder<'_>,
) -> Result<bool, Malformed> {
    let found = hash.find_entry(name)?;
    replace_found(hash, found, name, value, out)
}

/// Writes `hash`, none of whose fields expires, without the field `name`, if it is there
/// (returns whether it was): the entries around it are copied as they are, in two runs, as
/// [`replace_field`] copies them.
pub(super) fn remove_field(
    hash: &Hash<'_>,
    name: &[u8],
    out: &mut Builder<'_>,
) -> Result<bool, Malformed> {
    debug_assert!(!hash.has_expiring());
    let Some((_, span, before)) = hash.find_entry(name)? else {
        return Ok(false);
    };
    copy_around(hash, span, before, None, out)?;
    Ok(true)
}

/// [`replace_field`] once the walk found the field's entry (`found`, from
/// [`Hash::find_entry`]) or not.
pub(super) fn replace_found(
    hash: &Hash<'_>,
    found: Option<(Field<'_>, Range<usize>, u32)>,
    name: &[u8],
    value: &[u8],
    out: &mut Builder<'_>,
) -> Result<bool, Malformed> {
    debug_assert!(!hash.has_expiring());
    let Some((field, span, before)) = found else {
        let count = u32::try_from(hash.stored_len()).map_err(|_| Malformed)?;
        out.push_encoded(hash.entries(), count, 0, 0);
        out.push(Field {
            name,
            value,
            expires_at_ms: None,
        });
        return Ok(false);
    };
    copy_around(hash, span, before, Some(Field { value, ..field }), out)?;
    Ok(true)
}

/// Copies the entries of `hash` (none of whose fields expires) before and after the entry at
/// `span`, the `before`-th, as two runs, with `middle` between them (`None`: the entry goes).
/// The entries after it are counted by the header, not walked.
fn copy_around(
    hash: &Hash<'_>,
    span: Range<usize>,
    before: u32,
    middle: Option<Field<'_>>,
    out: &mut Builder<'_>,
) -> Result<(), Malformed> {
    let count = u32::try_from(hash.stored_len()).map_err(|_| Malformed)?;
    let after = count.checked_sub(before + 1).ok_or(Malformed)?;
    let entries = hash.entries();
    out.push_encoded(&entries[..span.start], before, 0, 0);
    if let Some(field) = middle {
        out.push(field);
    }
    out.push_encoded(&entries[span.end..], after, 0, 0);
    Ok(())
}

/// [`set_fields`]' walk of a hash none of whose fields expires (so none is dropped and none has
/// an expiry to clear): the entries between those `lookup` names go over as runs, in one
/// checked walk ([`Hash::try_stored_spans`]); `present` marks the pairs whose field was there.
fn set_in_place(
    hash: &Hash<'_>,
    lookup: &Pairs<'_>,
    present: &mut [bool],
    out: &mut Builder<'_>,
) -> Result<(), Malformed> {
    debug_assert!(!hash.has_expiring());
    let entries = hash.entries();
    let (mut copied_to, mut run_fields) = (0, 0u32);
    hash.try_stored_spans(|field, span| {
        let Some((first, value)) = lookup.find(field.name) else {
            run_fields += 1;
            return;
        };
        out.push_encoded(&entries[copied_to..span.start], run_fields, 0, 0);
        out.push(Field { value, ..field });
        present[first] = true;
        (copied_to, run_fields) = (span.end, 0);
    })?;
    out.push_encoded(&entries[copied_to..], run_fields, 0, 0);
    Ok(())
}

/// What a rewrite does with one live field of the old hash.
pub(super) enum Rewrite<'v> {
    /// It stays as it is (copied with its neighbours, as bytes).
    Keep,
    /// It goes.
    Drop,
    /// It stays in its place with this value, its expiry kept (HINCRBY).
    Value(&'v [u8]),
    /// It stays in its place with this value and no expiry (HSET: a write clears it).
    Set(&'v [u8]),
}

/// Writes `hash`'s live fields into `out` as `decide` says, in order; expired fields are
/// dropped. The fields kept as they are go over in runs, one byte copy each.
pub(super) fn rewrite_live<'v>(
    hash: &Hash<'_>,
    now_ms: u64,
    out: &mut Builder<'_>,
    mut decide: impl FnMut(&Field<'_>) -> Rewrite<'v>,
) {
    let mut run = Run::default();
    for (field, span) in hash.stored_spans() {
        let action = if field.is_live(now_ms) {
            decide(&field)
        } else {
            Rewrite::Drop
        };
        match action {
            Rewrite::Keep => run.extend(hash, &field, span, out),
            Rewrite::Drop => run.flush(hash, out),
            Rewrite::Value(value) => {
                run.flush(hash, out);
                out.push(Field { value, ..field });
            }
            Rewrite::Set(value) => {
                run.flush(hash, out);
                let expires_at_ms = None;
                out.push(Field {
                    value,
                    expires_at_ms,
                    ..field
                });
            }
        }
    }
    run.flush(hash, out);
}

/// Entries of a hash kept as they are, next to each other in its encoding: copied in one go.
#[derive(Default)]
struct Run {
    span: Range<usize>,
    fields: u32,
    expiring: u32,
    latest_expiry_ms: u64,
}

impl Run {
    /// Adds the entry at `span` (`field`), copying the run so far first when it does not
    /// continue it.
    fn extend(
        &mut self,
        hash: &Hash<'_>,
        field: &Field<'_>,
        span: Range<usize>,
        out: &mut Builder<'_>,
    ) {
        if self.fields > 0 && self.span.end != span.start {
            self.flush(hash, out);
        }
        if self.fields == 0 {
            self.span = span.start..span.start;
        }
        self.span.end = span.end;
        self.fields += 1;
        if let Some(at) = field.expires_at_ms {
            self.expiring += 1;
            self.latest_expiry_ms = self.latest_expiry_ms.max(at);
        }
    }

    /// Copies the run into `out` and starts over.
    fn flush(&mut self, hash: &Hash<'_>, out: &mut Builder<'_>) {
        if self.fields > 0 {
            let run = std::mem::take(self);
            let encoded = &hash.entries()[run.span];
            out.push_encoded(encoded, run.fields, run.expiring, run.latest_expiry_ms);
        }
    }
}
