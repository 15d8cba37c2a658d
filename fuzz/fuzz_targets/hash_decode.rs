//! `cargo fuzz run hash_decode`: the input and the invariants checked are in `strata_fuzz::hash`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| strata_fuzz::hash::check(data));
