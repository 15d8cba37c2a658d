//! The checks behind strata's fuzz targets, as plain functions over bytes.
//!
//! Each `fuzz_targets/<name>.rs` is one line that hands libFuzzer's input to a `check` function
//! here, so the same checks also run under `cargo test` (tests/replay.rs replays the committed
//! seeds and every saved regression through them, on stable Rust, without libFuzzer). A check
//! returns normally when every invariant held and panics otherwise; libFuzzer reports a panic as
//! a crash and saves the input.
//!
//! | module       | target           | what it drives                                       |
//! |--------------|------------------|------------------------------------------------------|
//! | [`memcache`] | `memcache_parse` | `strata_protocol::memcache::parse`                   |
//! | [`resp`]     | `resp_parse`     | `strata_protocol::resp::parse_command`               |
//! | [`pool`]     | `pool_open`      | `strata_engine::Engine::open` and `check_pool_file`  |
//! | [`session`]  | `resp_session`   | a Redis session over an engine: every command        |
//! | [`hash`]     | `hash_decode`    | `strata_types::hash`: a stored hash's encoding       |
//! | [`bundle`]   | `flash_bundle`   | a family's bundle on the flash tier (`strata_engine`) |
//! | [`flash`]    | `flash_verify`   | `strata_engine::check_flash_file` on a flash medium   |
//!
//! Every check is deterministic: whatever it derives from the input (how to split a stream into
//! reads, which options to open a pool with) comes from the input's bytes, so a saved input
//! replays the same way.

#![forbid(unsafe_code)]

pub mod bundle;
pub mod flash;
pub mod hash;
pub mod memcache;
pub mod pool;
pub mod resp;
pub mod session;

/// Most reads one chunked replay splits a stream into; bounds a check's cost on long inputs.
const CHUNKS_MAX: usize = 4096;

/// Inputs up to this long are also replayed one byte per read, the harshest split.
const BYTEWISE_LEN_MAX: usize = 512;

/// How to split `data` into reads: sizes that add up to `data.len()`, chosen from the input's
/// own hash so a replay splits it the same way. Sizes run from 1 to 64 bytes, with the last
/// read taking what is left once [`CHUNKS_MAX`] reads have been made.
pub fn chunk_plan(data: &[u8]) -> Vec<usize> {
    let mut state = fnv1a(data) | 1;
    let mut plan = Vec::new();
    let mut left = data.len();
    while left > 0 {
        // xorshift64: cheap, deterministic, good enough to vary read sizes.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let size = if plan.len() + 1 == CHUNKS_MAX {
            left
        } else {
            (1 + (state % 64) as usize).min(left)
        };
        plan.push(size);
        left -= size;
    }
    debug_assert_eq!(plan.iter().sum::<usize>(), data.len());
    plan
}

/// One read per byte, for inputs short enough that the quadratic cost does not matter.
pub fn bytewise_plan(data: &[u8]) -> Option<Vec<usize>> {
    (data.len() <= BYTEWISE_LEN_MAX).then(|| vec![1; data.len()])
}

/// FNV-1a, 64-bit: a stable hash of the input (std's hashers are randomly seeded).
fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Offset of the first `needle` in `haystack`.
pub(crate) fn find(haystack: &[u8], needle: u8) -> Option<usize> {
    haystack.iter().position(|&b| b == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_cover_the_input_exactly() {
        for len in [0usize, 1, 2, 63, 64, 65, 1000, 300_000] {
            let data: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            let plan = chunk_plan(&data);
            assert_eq!(plan.iter().sum::<usize>(), len);
            assert!(plan.len() <= CHUNKS_MAX);
            assert!(plan.iter().all(|&size| size > 0));
            assert_eq!(
                plan,
                chunk_plan(&data),
                "the same input splits the same way"
            );
        }
        assert_eq!(bytewise_plan(b"abc"), Some(vec![1, 1, 1]));
        assert_eq!(bytewise_plan(&[0; BYTEWISE_LEN_MAX + 1]), None);
    }
}
