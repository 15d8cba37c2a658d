//! `cargo fuzz run flash_bundle`: a family's bundle on the flash tier (`strata_engine`'s
//! `flash::bundle`); the input and the invariants are in `strata_fuzz::bundle`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| strata_fuzz::bundle::check(data));
