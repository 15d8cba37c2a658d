//! `cargo fuzz run pool_open`: see `strata_fuzz::pool` for the input and the invariants checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| strata_fuzz::pool::check(data));
