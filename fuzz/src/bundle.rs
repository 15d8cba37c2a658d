//! The `flash_bundle` target: the value of a flash record that owns parts (an item of several
//! records demoted whole: docs/FLASH_FORMAT.md, "Items of several records"), decoded as the
//! flash tier's reads decode it.
//!
//! The input's first byte is the part count the record's header would say, the rest the
//! value. Invariants checked, on any bytes (`strata_engine::fuzzing::check_flash_bundle`):
//! parsing never panics or reads past the bytes; an accepted bundle has exactly that many
//! parts, which tile the bytes after the owner's value, join to what a large string's read
//! serves, and encode back to the same bytes; and the input cut into an owner's value and
//! parts (each piece `len u8, bytes`) encodes to a bundle that parses back to them.

/// Runs every invariant on `data` (see the module docs); panics when one fails.
pub fn check(data: &[u8]) {
    strata_engine::fuzzing::check_flash_bundle(data);
}
