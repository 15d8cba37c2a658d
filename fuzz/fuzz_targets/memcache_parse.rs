//! `cargo fuzz run memcache_parse`: input and invariants are in `strata_fuzz::memcache`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| strata_fuzz::memcache::check(data));
