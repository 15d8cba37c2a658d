//! A Bloom filter of the keys of one written flash region, built from the region's directory.
//!
//! The index keeps 24 bits of a key's hash per entry (and the shard adds a few), so with
//! millions of flash items a GET of a key held nowhere often finds another key's flash entry
//! with the same stored bits, and would read that record from the medium to learn it is not
//! the key. The filter answers "certainly not here" for most of those without I/O: about one
//! byte of DRAM per record, three probes, about 3% false positives. It never answers "not
//! here" for a key whose record is in the region (no false negatives).
//!
//! Blocked: a key's three bits lie in one 64-byte block (one cache line), chosen by the key, so
//! a check costs one cache miss, not three. A GET of a flash item checks its candidates'
//! filters more than once (when it decides to wait, when it plans the read), and the filters
//! of a large tier (megabytes) do not stay in the CPU's caches. Blocking raises the false
//! positives slightly (in theory 3.4% against 3.1% at 8 bits per record; 3.2% of the unit
//! test's 100,000 absent keys). Filters live in DRAM only (rebuilt from directories after a
//! restart), so their layout is free to change.

/// Filter bits per record.
const BITS_PER_RECORD: usize = 8;
/// Probes per key.
const PROBES: u32 = 3;
/// Bits per block (a cache line).
const BLOCK_BITS: usize = 512;

/// One cache line of filter bits.
#[derive(Clone, Copy, Debug, Default)]
#[repr(align(64))]
struct Block([u64; BLOCK_BITS / 64]);

/// The filter of one region's keys (their engine hashes).
#[derive(Debug)]
pub(crate) struct KeyFilter {
    blocks: Box<[Block]>,
}

impl KeyFilter {
    /// A filter holding every hash of `hashes` (`count` of them).
    pub(crate) fn new(count: usize, hashes: impl Iterator<Item = u64>) -> KeyFilter {
        let blocks = (count * BITS_PER_RECORD).div_ceil(BLOCK_BITS).max(1);
        let mut filter = KeyFilter {
            blocks: vec![Block::default(); blocks].into_boxed_slice(),
        };
        for hash in hashes {
            let (block, bits) = filter.probes(hash);
            let words = &mut filter.blocks[block].0;
            for bit in bits {
                words[bit / 64] |= 1 << (bit % 64);
            }
        }
        filter
    }

    /// Whether a record of the key with `hash` may be in the region (false: certainly not).
    pub(crate) fn may_hold(&self, hash: u64) -> bool {
        let (block, mut bits) = self.probes(hash);
        let words = &self.blocks[block].0;
        bits.all(|bit| words[bit / 64] & (1 << (bit % 64)) != 0)
    }

    /// Bytes of DRAM it holds.
    pub(crate) fn size_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.blocks)
    }

    /// The block of `hash` and its bits there: from a remix of the whole hash, so that the
    /// bits the index stores (the low 24) and the shard's (the high ones) do not decide them
    /// alone. The block comes from the high 32 bits (a multiply, not a division), each bit from
    /// 9 of the low 27.
    fn probes(&self, hash: u64) -> (usize, impl Iterator<Item = usize>) {
        let mixed = splitmix64(hash);
        let block = ((mixed >> 32) * self.blocks.len() as u64) >> 32;
        let bits = (0..PROBES).map(move |i| ((mixed >> (9 * i)) as usize) % BLOCK_BITS);
        (block as usize, bits)
    }
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_added_is_found_and_few_others_are() {
        // Hashes shaped like the engine's: the same low 24 bits for many keys (what makes the
        // index's stored bits collide) must not make the filter collide.
        let hashes: Vec<u64> = (0..20_000u64)
            .map(|i| splitmix64(i) & !0xFF_FFFF | 0xABCDEF)
            .collect();
        let filter = KeyFilter::new(hashes.len(), hashes.iter().copied());
        assert!(
            hashes.iter().all(|&h| filter.may_hold(h)),
            "no false negative"
        );
        let others = (1_000_000..1_100_000u64).map(|i| splitmix64(i) & !0xFF_FFFF | 0xABCDEF);
        let false_positives = others.filter(|&h| filter.may_hold(h)).count();
        assert!(
            false_positives < 6_000,
            "{false_positives} of 100000 absent keys pass"
        );
        // 160,000 bits in whole 512-bit blocks.
        assert_eq!(filter.size_bytes(), 20_032);
        // An empty region's filter holds nothing.
        let empty = KeyFilter::new(0, std::iter::empty());
        assert!(!empty.may_hold(42));
    }
}
