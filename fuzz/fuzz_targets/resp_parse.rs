//! `cargo fuzz run resp_parse`: the input and the invariants checked are in `strata_fuzz::resp`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| strata_fuzz::resp::check(data));
