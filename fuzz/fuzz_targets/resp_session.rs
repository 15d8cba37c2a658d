//! `cargo fuzz run resp_session`: the input and the invariants checked are in
//! `strata_fuzz::session`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| strata_fuzz::session::check(data));
