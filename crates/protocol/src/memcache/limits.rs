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

/// Most keys in one `get`/`gets`/`gat`/`gats` line.
///
/// memcached has no such bound; 1024 keys of 250 bytes keep a multiget line near 256 KiB, far
/// above what clients batch in practice.
pub const KEYS_PER_GET_MAX_DEFAULT: usize = 1024;

/// Longest command line (bytes before the `\n`) of anything but a multiget.
///
/// memcached closes the connection once 2048 bytes have arrived without a newline unless the
/// line starts with `get ` or `gets ` (`try_read_command_ascii`, tested by `t/getset.t`).
pub const LINE_LEN_MAX_DEFAULT: usize = 2048;

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
    /// Most keys in one multiget line.
    pub keys_per_get_max: usize,
    /// Longest non-multiget command line in bytes (before the `\n`).
    pub line_len_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            key_len_max: KEY_LEN_MAX_DEFAULT,
            value_len_max: VALUE_LEN_MAX_DEFAULT,
            keys_per_get_max: KEYS_PER_GET_MAX_DEFAULT,
            line_len_max: LINE_LEN_MAX_DEFAULT,
        }
    }
}

impl Limits {
    /// Longest multiget line (bytes before the `\n`) the parser waits for: `gets `, then
    /// `keys_per_get_max` keys of `key_len_max` bytes each preceded by a space, plus the
    /// leading-space allowance and a `\r`. Longer lines close the connection.
    pub fn get_line_len_max(&self) -> usize {
        let keys_len_max = self
            .keys_per_get_max
            .saturating_mul(self.key_len_max.saturating_add(1));
        let fixed = LEADING_SPACES_MAX + "gats ".len() + "-2147483648 ".len() + 1;
        self.line_len_max.max(keys_len_max.saturating_add(fixed))
    }

    /// Most bytes one complete request can occupy in the read buffer: the longest line, its
    /// `\n`, the largest value and the value's `\r\n`.
    pub fn request_len_max(&self) -> usize {
        let line = self.get_line_len_max() + 1;
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
        assert_eq!(limits.line_len_max, 2048);
        assert!(limits.get_line_len_max() >= 1024 * 251);
        assert!(limits.request_len_max() > limits.value_len_max + limits.get_line_len_max());
    }

    #[test]
    fn get_line_never_shorter_than_plain_line() {
        let limits = Limits {
            keys_per_get_max: 1,
            key_len_max: 1,
            ..Limits::default()
        };
        assert_eq!(limits.get_line_len_max(), limits.line_len_max);
    }
}
