//! Human sizes for the configuration (`256MiB`, `4GiB`, `64mb`): [`strata_pool::ByteSize`], kept
//! under this path for the server's modules. One parser for every command, so a size means the
//! same to `strata serve` and `strata block`.

pub use strata_pool::ByteSize;
