//! `cargo fuzz run memcache_parse`: see `strata_fuzz::memcache` for the input and the invariants checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| strata_fuzz::memcache::check(data));
