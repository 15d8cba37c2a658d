//! `cargo fuzz run pool_open`: the input and the invariants checked are in `strata_fuzz::pool`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| strata_fuzz::pool::check(data));
