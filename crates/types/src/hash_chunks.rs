//! A large Redis hash: its fields spread over chunks, each a part of the hash's record (the
//! engine's owner and parts), so that a field's write rewrites one chunk of a few KiB, never
//! the whole hash.
//!
//! The owner record holds the chunked encoding's header, version 3 (all integers
//! little-endian):
//!
//! ```text
//!  0         1        2             6                    14            22          26
//!  +---------+--------+-------------+--------------------+-------------+-----------+
//!  | version | level  | split (u32) | key_expiry (u64)   | seed (u64)  | count u32 |
//!  | = 3     | u8     |             | Unix ms, 0: none   |             |           |
//!  +---------+--------+-------------+--------------------+-------------+-----------+
//!  26                30                         38
//!  | expiring (u32)  | fields_expire_by (u64)   |
//! ```
//!
//! `count` is the entries the chunks store (expired ones included) and `expiring` how many of
//! them carry an expiry: HLEN of a hash with no expiring field is `count`, as Redis answers it
//! without a walk. `fields_expire_by` is a bound, Unix ms, that no stored field's expiry
//! passes: 0 when no field has one, `u64::MAX` when it is not known. A write that gives a field
//! an expiry raises it to that expiry; one that removes or persists fields leaves it (a bound
//! still, later than needed) until no field has an expiry. When every stored field has an
//! expiry, the hash is gone by the bound, and its owner's record expires at the earlier of it
//! and the key's own expiry ([`Chunked::fields_gone_ms`]): the key goes with its fields, as
//! in Redis (at the latest expiry any of them had since; Redis, at its last field's). Every
//! write of a chunk writes the owner with the counts and bound it leaves, in one logged
//! transaction (so a crash leaves both or neither).
//!
//! Version 2 is the same without `fields_expire_by` (30 bytes): it reads as version 3 with
//! the bound not known while a field has an expiry (the key then stays until its own expiry,
//! or until no field has one), and is written as version 3 at the owner's next write.
//!
//! The chunks are the owner's parts `0..2^level + split`, each in the compact encoding
//! (`hash`'s version 1), whose key-expiry field holds instead one more than the hash bits
//! the chunk was last written under (see [`Chunked::bits_of`]). A field's chunk is linear
//! hashing's: `h = xxh3_64(name, seed)`, chunk `h mod 2^level`, or `h mod 2^(level+1)` when
//! that is below `split`; so the chunks are numbered densely, with no directory, and a split
//! (of chunk `split`, into it and chunk `split + 2^level`) moves about half of one chunk's
//! fields. The seed is drawn when the hash becomes chunked, so nobody can choose names that
//! all land in one chunk.
//!
//! A split writes the new chunk, then the owner with the new state, then the split chunk
//! without the fields that left it, each durable before the next; a crash between the second
//! and third leaves those fields in both chunks. A chunk whose recorded bits are fewer than
//! its chunk's bits now may so hold fields that are no longer its own, and every read of it
//! skips the fields that route elsewhere ([`Chunked::stale`]); its next write drops them.
//!

use crate::Malformed;

/// The first byte of this encoding.
pub const VERSION: u8 = 3;
/// Bytes of the owner's encoding.
pub const OWNER_BYTES: usize = 38;
/// The first byte of the encoding version 2, still read: 30 bytes, no `fields_expire_by`.
pub const VERSION_2: u8 = 2;
/// Bytes of a version 2 owner.
pub const OWNER_BYTES_V2: usize = 30;
/// `fields_expire_by` when the bound is not known (module docs).
const EXPIRE_BY_UNKNOWN: u64 = u64::MAX;
/// A compact hash whose encoding would pass this many bytes is made chunked instead.
pub const CHUNKED_FROM_BYTES: usize = 8 << 10;
/// A chunk a write leaves larger than this splits the chunk at the split pointer.
pub const CHUNK_SPLIT_BYTES: usize = 2 << 10;
/// The chunk size a hash made chunked starts with, on average (its chunks are a power of
/// two in number).
pub const CHUNK_START_BYTES: usize = 1 << 10;
/// Most hash bits a level may use (2^31 chunks: never reached; a bound for the checks).
const LEVEL_MAX: u8 = 31;

/// Whether a hash's encoding is this one (else it is the compact one).
pub fn is_chunked(bytes: &[u8]) -> bool {
    matches!(bytes.first(), Some(&(VERSION | VERSION_2)))
}

/// A chunked hash's owner: where its fields are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunked {
    level: u8,
    split: u32,
    key_expiry_ms: Option<u64>,
    seed: u64,
    count: u32,
    expiring: u32,
    /// No stored field's expiry passes this, Unix ms: 0 when none has one,
    /// [`EXPIRE_BY_UNKNOWN`] when not known (module docs).
    fields_expire_by_ms: u64,
}

impl Chunked {
    /// The state of a hash made chunked with about `bytes` of fields: a power of two of
    /// chunks of about [`CHUNK_START_BYTES`] each, at least two.
    pub fn for_bytes(bytes: usize, key_expiry_ms: Option<u64>, seed: u64) -> Chunked {
        let chunks = bytes.div_ceil(CHUNK_START_BYTES).max(2);
        let level = chunks.next_power_of_two().trailing_zeros() as u8;
        Chunked {
            level: level.min(LEVEL_MAX),
            split: 0,
            key_expiry_ms,
            seed,
            count: 0,
            expiring: 0,
            fields_expire_by_ms: 0,
        }
    }

    /// The owner's encoding, validated.
    pub fn parse(bytes: &[u8]) -> Result<Chunked, Malformed> {
        let v2 = bytes.len() == OWNER_BYTES_V2 && bytes[0] == VERSION_2;
        if !v2 && (bytes.len() != OWNER_BYTES || bytes[0] != VERSION) {
            return Err(Malformed);
        }
        let level = bytes[1];
        let split = u32::from_le_bytes(bytes[2..6].try_into().expect("4"));
        let expiry = u64::from_le_bytes(bytes[6..14].try_into().expect("8"));
        let seed = u64::from_le_bytes(bytes[14..22].try_into().expect("8"));
        let count = u32::from_le_bytes(bytes[22..26].try_into().expect("4"));
        let expiring = u32::from_le_bytes(bytes[26..30].try_into().expect("4"));
        let fields_expire_by_ms = if !v2 {
            u64::from_le_bytes(bytes[30..38].try_into().expect("8"))
        } else if expiring > 0 {
            EXPIRE_BY_UNKNOWN
        } else {
            0
        };
        if level > LEVEL_MAX
            || u64::from(split) >= 1u64 << level
            || expiring > count
            || (expiring == 0) != (fields_expire_by_ms == 0)
        {
            return Err(Malformed);
        }
        Ok(Chunked {
            level,
            split,
            key_expiry_ms: (expiry != 0).then_some(expiry),
            seed,
            count,
            expiring,
            fields_expire_by_ms,
        })
    }

    /// Appends the owner's encoding.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.reserve(OWNER_BYTES);
        out.push(VERSION);
        out.push(self.level);
        out.extend_from_slice(&self.split.to_le_bytes());
        out.extend_from_slice(&self.key_expiry_ms.unwrap_or(0).to_le_bytes());
        out.extend_from_slice(&self.seed.to_le_bytes());
        out.extend_from_slice(&self.count.to_le_bytes());
        out.extend_from_slice(&self.expiring.to_le_bytes());
        out.extend_from_slice(&self.fields_expire_by_ms.to_le_bytes());
    }

    /// Entries the chunks store, expired ones included.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Entries stored that carry an expiry.
    pub fn expiring(&self) -> u32 {
        self.expiring
    }

    /// This state with the counts a write changed by `count_delta` and `expiring_delta`
    /// (saturating: damage found since never makes them wrap), and the bound on its fields'
    /// expiries raised to `latest_expiry_ms`, the latest expiry the write left in the chunk it
    /// wrote (`None`: no field of that chunk expires). The bound is 0 exactly when no field
    /// expires, and not known when fields expire whose expiries no write gave.
    pub fn counted(
        self,
        count_delta: i64,
        expiring_delta: i64,
        latest_expiry_ms: Option<u64>,
    ) -> Chunked {
        let apply = |value: u32, delta: i64| {
            u32::try_from((i64::from(value) + delta).max(0)).unwrap_or(u32::MAX)
        };
        let count = apply(self.count, count_delta);
        let expiring = apply(self.expiring, expiring_delta).min(count);
        // With no expiring field before, the bound so far is none.
        let before = if self.expiring == 0 {
            0
        } else {
            self.fields_expire_by_ms
        };
        let fields_expire_by_ms = match latest_expiry_ms {
            _ if expiring == 0 => 0,
            Some(at) => before.max(at.max(1)),
            None if before == 0 => EXPIRE_BY_UNKNOWN,
            None => before,
        };
        Chunked {
            count,
            expiring,
            fields_expire_by_ms,
            ..self
        }
    }

    /// When the hash is gone with its fields, Unix ms: the bound on their expiries, when
    /// every stored field has one and the bound is known; `None` otherwise. (Its key's own
    /// expiry may come first: the owner's record expires at the earlier.)
    pub fn fields_gone_ms(&self) -> Option<u64> {
        (self.count > 0
            && self.expiring == self.count
            && self.fields_expire_by_ms != EXPIRE_BY_UNKNOWN)
            .then_some(self.fields_expire_by_ms)
    }

    /// When the owner's record expires, Unix ms: at the key's own expiry, or with its fields
    /// if every one expires first ([`Chunked::fields_gone_ms`]).
    pub fn record_expiry_ms(&self) -> Option<u64> {
        crate::hash::record_expiry(self.key_expiry_ms, self.fields_gone_ms())
    }

    /// How many chunks there are (the owner's part count).
    pub fn chunks(&self) -> u32 {
        (1u32 << self.level) + self.split
    }

    /// The key's own expiry (EXPIRE), Unix ms.
    pub fn key_expiry_ms(&self) -> Option<u64> {
        self.key_expiry_ms
    }

    /// This state with the key's expiry set to `key_expiry_ms`.
    pub fn with_key_expiry(self, key_expiry_ms: Option<u64>) -> Chunked {
        Chunked {
            key_expiry_ms,
            ..self
        }
    }

    fn field_hash(&self, name: &[u8]) -> u64 {
        xxhash_rust::xxh3::xxh3_64_with_seed(name, self.seed)
    }

    /// The chunk a field named `name` lives in.
    pub fn chunk_of(&self, name: &[u8]) -> u32 {
        let hash = self.field_hash(name);
        let low = (hash & ((1u64 << self.level) - 1)) as u32;
        if low < self.split {
            (hash & ((1u64 << (self.level + 1)) - 1)) as u32
        } else {
            low
        }
    }

    /// The hash bits that route to `chunk`: `level + 1` for a chunk split this round (or
    /// made by a split), `level` for one still to split.
    pub fn bits_of(&self, chunk: u32) -> u8 {
        if chunk < self.split || chunk >= 1 << self.level {
            self.level + 1
        } else {
            self.level
        }
    }

    /// Whether `chunk`, last written under `written_bits` hash bits (its header), may hold
    /// fields that route elsewhere now (a split a crash cut short: module docs), so that its
    /// reads must skip them ([`Chunked::owns`]).
    pub fn stale(&self, chunk: u32, written_bits: Option<u8>) -> bool {
        written_bits != Some(self.bits_of(chunk))
    }

    /// Whether the field `name` belongs in `chunk`.
    pub fn owns(&self, chunk: u32, name: &[u8]) -> bool {
        self.chunk_of(name) == chunk
    }

    /// The next split: the chunk it splits, the chunk it makes, and the state after it.
    pub fn split_next(&self) -> (u32, u32, Chunked) {
        let from = self.split;
        let to = from + (1 << self.level);
        let mut next = *self;
        next.split += 1;
        if next.split == 1 << self.level {
            next.level += 1;
            next.split = 0;
        }
        (from, to, next)
    }

    /// Whether another split fits the level bound.
    pub fn can_split(&self) -> bool {
        self.level < LEVEL_MAX
    }
}

/// The key-expiry field a chunk written under `bits` hash bits holds (module docs).
pub fn chunk_tag(bits: u8) -> Option<u64> {
    Some(u64::from(bits) + 1)
}

/// The hash bits a chunk's key-expiry field says it was written under (module docs).
pub fn chunk_bits(tag: Option<u64>) -> Option<u8> {
    tag.and_then(|tag| u8::try_from(tag.checked_sub(1)?).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owner_round_trips_and_damage_is_refused() {
        let owner = Chunked::for_bytes(9000, Some(1_800_000_000_000), 42).counted(
            300,
            2,
            Some(1_900_000_000_000),
        );
        assert_eq!(
            owner.chunks(),
            16,
            "9000 B / 1 KiB, rounded up to a power of two"
        );
        let mut bytes = Vec::new();
        owner.encode(&mut bytes);
        assert_eq!(bytes.len(), OWNER_BYTES);
        assert!(is_chunked(&bytes));
        assert_eq!(Chunked::parse(&bytes), Ok(owner));
        for cut in 0..bytes.len() {
            assert_eq!(Chunked::parse(&bytes[..cut]), Err(Malformed));
        }
        let mut bad = bytes.clone();
        bad[1] = 40;
        assert_eq!(Chunked::parse(&bad), Err(Malformed), "level past the bound");
        let mut bad = bytes.clone();
        bad[2] = 16;
        assert_eq!(Chunked::parse(&bad), Err(Malformed), "split past the level");
        let mut bad = bytes.clone();
        bad[29] = 0xff;
        assert_eq!(
            Chunked::parse(&bad),
            Err(Malformed),
            "more expiring than stored"
        );
        let mut bad = bytes.clone();
        bad[30..38].copy_from_slice(&0u64.to_le_bytes());
        assert_eq!(
            Chunked::parse(&bad),
            Err(Malformed),
            "expiring fields with no bound"
        );
        assert_eq!((owner.count(), owner.expiring()), (300, 2));
        assert_eq!(owner.counted(-301, -3, None).count(), 0, "saturates");
    }

    /// The bound on the fields' expiries: raised by writes, kept (later than needed) by
    /// removals, none again once no field expires; the hash is gone by it only when every
    /// field expires. Not known after expiring fields came without their expiry, or from a
    /// version 2 owner: then the key does not go with its fields.
    #[test]
    fn the_hash_is_gone_by_the_bound_only_when_every_field_expires() {
        let owner = Chunked::for_bytes(9000, None, 1).counted(3, 0, None);
        assert_eq!(owner.fields_gone_ms(), None, "no field expires");
        let one = owner.counted(0, 1, Some(5_000));
        assert_eq!(one.fields_gone_ms(), None, "two fields do not expire");
        let all = one.counted(0, 2, Some(4_000));
        assert_eq!(all.fields_gone_ms(), Some(5_000), "the latest expiry given");
        let fewer = all.counted(-1, -1, None);
        assert_eq!(fewer.fields_gone_ms(), Some(5_000), "a bound, kept");
        let persisted = fewer.counted(0, -2, None);
        assert_eq!(persisted.fields_gone_ms(), None);
        let again = persisted.counted(0, 2, Some(3_000));
        assert_eq!(again.fields_gone_ms(), Some(3_000), "known again from none");
        let mut bytes = Vec::new();
        again.encode(&mut bytes);
        assert_eq!(
            Chunked::parse(&bytes).unwrap().fields_gone_ms(),
            Some(3_000)
        );

        bytes.clear();
        owner.counted(0, 3, None).encode(&mut bytes); // Expiring, with no expiry given.
        let unknown = Chunked::parse(&bytes).unwrap();
        assert_eq!(unknown.fields_gone_ms(), None, "not known");
        assert_eq!(
            unknown.counted(0, 0, Some(9_000)).fields_gone_ms(),
            None,
            "a write does not make an unknown bound known"
        );
        assert_eq!(
            unknown
                .counted(0, -3, None)
                .counted(0, 3, Some(9_000))
                .fields_gone_ms(),
            Some(9_000)
        );

        // A version 2 owner: the first 30 bytes, version 2.
        let mut v2 = Vec::new();
        all.encode(&mut v2);
        v2.truncate(OWNER_BYTES_V2);
        v2[0] = VERSION_2;
        assert!(is_chunked(&v2));
        let old = Chunked::parse(&v2).unwrap();
        assert_eq!(
            (old.count(), old.expiring(), old.chunks()),
            (3, 3, all.chunks())
        );
        assert_eq!(old.fields_gone_ms(), None, "a version 2 bound is not known");
        v2[26..30].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(Chunked::parse(&v2).unwrap().fields_gone_ms(), None);
        let mut rewritten = Vec::new();
        Chunked::parse(&v2).unwrap().encode(&mut rewritten);
        assert_eq!((rewritten.len(), rewritten[0]), (OWNER_BYTES, VERSION));
    }

    /// Linear hashing: each split moves only fields of the split chunk, and only into the
    /// chunk it makes; every field stays findable; chunk numbers stay dense.
    #[test]
    fn splits_move_only_the_split_chunks_fields_into_the_new_one() {
        let names: Vec<Vec<u8>> = (0..5000)
            .map(|i| format!("field:{i}").into_bytes())
            .collect();
        let mut owner = Chunked::for_bytes(CHUNKED_FROM_BYTES, None, 7);
        let mut counts = vec![0u32; owner.chunks() as usize];
        for name in &names {
            counts[owner.chunk_of(name) as usize] += 1;
        }
        for _ in 0..100 {
            let before: Vec<u32> = names.iter().map(|n| owner.chunk_of(n)).collect();
            let (from, to, next) = owner.split_next();
            assert_eq!(to, owner.chunks(), "the new chunk is the next number");
            assert_eq!(next.chunks(), owner.chunks() + 1);
            for (name, was) in names.iter().zip(&before) {
                let now = next.chunk_of(name);
                assert!(now < next.chunks());
                if *was != from {
                    assert_eq!(now, *was, "only the split chunk's fields move");
                } else {
                    assert!(now == from || now == to);
                }
            }
            assert_eq!(next.bits_of(from), next.bits_of(to));
            owner = next;
        }
        let mut counts = vec![0u32; owner.chunks() as usize];
        for name in &names {
            counts[owner.chunk_of(name) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| c > 0),
            "the fields spread over every chunk"
        );
    }

    #[test]
    fn a_chunk_written_under_other_bits_is_stale() {
        let owner = Chunked::for_bytes(CHUNKED_FROM_BYTES, None, 1);
        let bits = owner.bits_of(0);
        assert!(!owner.stale(0, chunk_bits(chunk_tag(bits))));
        let (_, _, next) = owner.split_next();
        assert!(
            next.stale(0, chunk_bits(chunk_tag(bits))),
            "split since its write"
        );
        assert!(next.stale(0, chunk_bits(None)));
    }
}
