//! Command names without allocation. Redis looks commands up case-insensitively (its command
//! table is a dict with a case-insensitive hash), so `get`, `GET` and `gEt` are one command.
//!
//! Two shapes: [`name_eq`] compares one argument with one known name, and [`lowercase_name`]
//! lowers a name into a stack buffer so a server can `match` on byte-string literals:
//! ```
//! use strata_protocol::resp::{lowercase_name, COMMAND_NAME_LEN_MAX};
//! let mut buf = [0u8; COMMAND_NAME_LEN_MAX];
//! let kind = match lowercase_name(b"GeT", &mut buf) {
//!     Some(b"get") => "read",
//!     Some(b"set") => "write",
//!     _ => "unknown",
//! };
//! assert_eq!(kind, "read");
//! ```

/// Longest command name [`lowercase_name`] handles, in bytes. Redis 7.0's longest is
/// `georadiusbymember_ro` (20 bytes); anything longer is an unknown command.
pub const COMMAND_NAME_LEN_MAX: usize = 32;

/// True when `arg` equals `lower_name` ignoring ASCII case. `lower_name` must be lower case.
#[must_use]
pub fn name_eq(arg: &[u8], lower_name: &[u8]) -> bool {
    debug_assert!(
        !lower_name.iter().any(u8::is_ascii_uppercase),
        "names are lower case"
    );
    arg.eq_ignore_ascii_case(lower_name)
}

/// Copies `arg` lower-cased into `buf` and returns it, or `None` when it is longer than
/// [`COMMAND_NAME_LEN_MAX`] (no known command is).
pub fn lowercase_name<'a>(arg: &[u8], buf: &'a mut [u8; COMMAND_NAME_LEN_MAX]) -> Option<&'a [u8]> {
    let target = buf.get_mut(..arg.len())?;
    target.copy_from_slice(arg);
    target.make_ascii_lowercase();
    Some(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_name_is_not_case_sensitive() {
        let accepted: &[(&[u8], &[u8])] = &[(b"get", b"get"), (b"GET", b"get"), (b"gEt", b"get")];
        for &(arg, name) in accepted {
            assert!(name_eq(arg, name));
        }
        let rejected: &[(&[u8], &[u8])] = &[
            (b"ge", b"get"),
            (b"gets", b"get"),
            (b"g\xc9t", b"get"),
            (b"", b"get"),
        ];
        for &(arg, name) in rejected {
            assert!(!name_eq(arg, name));
        }
    }

    #[test]
    fn lowercase_into_stack_buffer() {
        let mut buf = [0u8; COMMAND_NAME_LEN_MAX];
        assert_eq!(
            lowercase_name(b"ZRangeByScore", &mut buf),
            Some(&b"zrangebyscore"[..])
        );
        assert_eq!(lowercase_name(b"\xc9X", &mut buf), Some(&b"\xc9x"[..]));
        assert_eq!(
            lowercase_name(&[b'A'; COMMAND_NAME_LEN_MAX], &mut buf).map(<[u8]>::len),
            Some(32)
        );
        assert_eq!(
            lowercase_name(&[b'A'; COMMAND_NAME_LEN_MAX + 1], &mut buf),
            None
        );
    }
}
