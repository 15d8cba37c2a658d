//! Limits enforced while parsing, sized once at startup.
//!
//! Every bound the parser applies is a field here with a named default, so a server can size its
//! read buffer from the same numbers: a complete request never needs more than
//! [`Limits::request_len_max`] bytes in the buffer.

/// Longest key in bytes; memcached's `KEY_MAX_LENGTH` is 250.
pub const KEY_LEN_MAX_DEFAULT: usize = 250;

/// Largest value (data block, without its trailing `\r\n`) in bytes: 1 MiB, memcached's default
/// item size (`-I 1m`).
///
/// memcached compares the whole item (header + key + value) against `-I`, so a 1 MiB value is
/// already refused there; strata compares the value alone, which is simpler to state.
pub const VALUE_LEN_MAX_DEFAULT: usize = 1024 * 1024;

/// memcached 1.6.18's `READ_BUFFER_SIZE`: each read of a connection takes up to this many
/// bytes, into a buffer of this size (a multiget line longer than it gets a larger one).
pub const MEMCACHED_READ_BUFFER_BYTES: usize = 16384;

/// Longest command line (bytes before the `\n`, a `\r` included) of anything but a multiget:
/// one byte less than memcached's read buffer, so that the line and its `\n` fill it.
///
/// memcached (`try_read_command_ascii`) processes any line whose `\n` is in its buffer,
/// whatever its length or content; only when more than 2048 bytes are buffered without a `\n`
/// does it close the connection, unless up to 100 spaces and then `get ` or `gets ` begin the
/// line. So a line that arrives whole is processed up to 16,383 bytes (checked against 1.6.18:
/// 16,375 spaces and `version\r\n` answer `VERSION`, one more space closes), while one of
/// 2,049 to 16,383 bytes is closed if a read ends inside it after byte 2,048.
pub const LINE_LEN_MAX_DEFAULT: usize = MEMCACHED_READ_BUFFER_BYTES - 1;

/// Default [`Limits::get_line_len_max`]: 1 MiB, some 4,000 keys of 250 bytes or 100,000 of ten.
/// memcached has no bound; the server's request limit applies as well.
pub const GET_LINE_LEN_MAX_DEFAULT: usize = 1 << 20;

/// Longest run of spaces before a multiget's `get `/`gets ` that still counts as a multiget, as
/// in memcached's `try_read_command_ascii`.
pub const LEADING_SPACES_MAX: usize = 100;

/// Parser bounds. Build with [`Limits::default`] and adjust fields as configured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest key in bytes (base64 keys of the meta `b` flag are measured encoded, as memcached
    /// does).
    pub key_len_max: usize,
    /// Largest value in bytes; a larger store is refused with
    /// `SERVER_ERROR object too large for cache` and its data block is swallowed.
    pub value_len_max: usize,
    /// Longest multiget line in bytes (before the `\n`); a longer one closes the connection.
    /// A multiget takes any number of keys, as in memcached.
    pub get_line_len_max: usize,
    /// Longest non-multiget command line in bytes (before the `\n`).
    pub line_len_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            key_len_max: KEY_LEN_MAX_DEFAULT,
            value_len_max: VALUE_LEN_MAX_DEFAULT,
            get_line_len_max: GET_LINE_LEN_MAX_DEFAULT,
            line_len_max: LINE_LEN_MAX_DEFAULT,
        }
    }
}

impl Limits {
    /// Longest line (bytes before the `\n`) the parser waits for: a multiget's, or any other
    /// line's if that is longer.
    pub fn line_len_waited_max(&self) -> usize {
        self.line_len_max.max(self.get_line_len_max)
    }

    /// Most bytes one complete request can occupy in the read buffer: the longest line, its
    /// `\n`, the largest value and the value's `\r\n`.
    pub fn request_len_max(&self) -> usize {
        let line = self.line_len_waited_max() + 1;
        line.saturating_add(self.value_len_max).saturating_add(2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_memcached() {
        let limits = Limits::default();
        assert_eq!(limits.key_len_max, 250);
        assert_eq!(limits.value_len_max, 1 << 20);
        assert_eq!(
            limits.line_len_max + 1,
            16384,
            "memcached's READ_BUFFER_SIZE"
        );
        assert!(
            limits.get_line_len_max >= 1024 * 251,
            "1024 keys of 250 bytes"
        );
        assert!(limits.request_len_max() > limits.value_len_max + limits.get_line_len_max);
    }

    #[test]
    fn the_parser_waits_for_the_longer_of_the_two_lines() {
        let limits = Limits {
            get_line_len_max: 10,
            ..Limits::default()
        };
        assert_eq!(limits.line_len_waited_max(), limits.line_len_max);
    }
}
