//! `cargo fuzz run flash_verify`: `strata flash verify` on a flash medium's bytes; the input
//! and the invariants are in `strata_fuzz::flash`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| strata_fuzz::flash::check(data));
