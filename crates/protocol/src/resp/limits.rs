//! Request limits, enforced while parsing so a declared length never drives an allocation.
//!
//! Defaults are Redis 7.0's: the multibulk count is capped at `INT_MAX` (`networking.c`,
//! `processMultibulkBuffer`), bulk lengths at `proto-max-bulk-len` (512 MiB), and any line whose
//! end has not been seen at `PROTO_INLINE_MAX_SIZE` (64 KiB). Before a client authenticates,
//! Redis also caps the count at 10 and each bulk at 16 KiB; [`Limits::auth_pending`] turns that on.

/// Default [`Limits::args_max`]: Redis 7.0 accepts a multibulk count up to `INT_MAX`.
pub const ARGS_MAX_DEFAULT: usize = i32::MAX as usize;

/// Default [`Limits::bulk_len_max`] in bytes: Redis's `proto-max-bulk-len` default, 512 MiB.
pub const BULK_LEN_MAX_DEFAULT: usize = 512 * 1024 * 1024;

/// Default [`Limits::inline_len_max`] in bytes: Redis's `PROTO_INLINE_MAX_SIZE`, 64 KiB.
pub const INLINE_LEN_MAX_DEFAULT: usize = 64 * 1024;

/// Multibulk count allowed while [`Limits::auth_pending`] is set (Redis: `ll > 10`).
pub const UNAUTHENTICATED_ARGS_MAX: usize = 10;

/// Bulk length in bytes allowed while [`Limits::auth_pending`] is set (Redis: `ll > 16384`).
pub const UNAUTHENTICATED_BULK_LEN_MAX: usize = 16384;

// A count line ("*2147483647\r\n") and a bulk line must fit in an inline-sized window, and a
// bulk length must be representable as the `i64` Redis parses it into.
const _: () = assert!(INLINE_LEN_MAX_DEFAULT >= 32);
const _: () = assert!(ARGS_MAX_DEFAULT <= i32::MAX as usize);
const _: () = assert!(BULK_LEN_MAX_DEFAULT as u64 <= i64::MAX as u64);
const _: () = assert!(UNAUTHENTICATED_ARGS_MAX <= ARGS_MAX_DEFAULT);
const _: () = assert!(UNAUTHENTICATED_BULK_LEN_MAX <= BULK_LEN_MAX_DEFAULT);

/// Bounds on one request, checked during [`crate::resp::parse_command`].
///
/// `Limits` is `Copy`: a server keeps one configured value and passes
/// `Limits { auth_pending: true, ..configured }` for connections that still have to `AUTH`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest multibulk count accepted (`*<count>`); larger counts are
    /// `-ERR Protocol error: invalid multibulk length`.
    pub args_max: usize,
    /// Largest bulk length in bytes (`$<len>`) parsed as an argument. A longer one, up to
    /// [`Limits::bulk_len_discard_max`], is [`crate::resp::ParseError::TooLong`]: the caller
    /// reads and discards the command's remaining bytes and refuses it. The server sets this to
    /// its value limit plus a margin.
    pub bulk_len_max: usize,
    /// Largest bulk length in bytes accepted at all (Redis's `proto-max-bulk-len`); longer ones
    /// are `-ERR Protocol error: invalid bulk length`, after which the stream cannot be followed.
    /// At most `bulk_len_max` means no bulk is ever discarded.
    pub bulk_len_discard_max: usize,
    /// Longest inline request, and longest `*`/`$` count line, in bytes before its terminator.
    pub inline_len_max: usize,
    /// Set while the connection must still authenticate: counts above
    /// [`UNAUTHENTICATED_ARGS_MAX`] and bulks above [`UNAUTHENTICATED_BULK_LEN_MAX`] are protocol
    /// errors, as in Redis.
    pub auth_pending: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            args_max: ARGS_MAX_DEFAULT,
            bulk_len_max: BULK_LEN_MAX_DEFAULT,
            bulk_len_discard_max: BULK_LEN_MAX_DEFAULT,
            inline_len_max: INLINE_LEN_MAX_DEFAULT,
            auth_pending: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_redis_7_0() {
        let limits = Limits::default();
        assert_eq!(limits.args_max, 2_147_483_647);
        assert_eq!(limits.bulk_len_max, 536_870_912);
        assert_eq!(limits.bulk_len_discard_max, 536_870_912);
        assert_eq!(limits.inline_len_max, 65_536);
        assert!(!limits.auth_pending);
    }
}
