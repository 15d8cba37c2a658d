//! `cargo fuzz run resp_parse`: see `strata_fuzz::resp` for the input and the invariants checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| strata_fuzz::resp::check(data));
