//! Redis 7.0's standard error replies, byte for byte (checked against redis-server 7.0.15).
//!
//! Fixed replies are complete wire constants, appended with `out.extend_from_slice(ERR_SYNTAX)`;
//! replies that name a command or argument are functions following Redis's `printf` formats,
//! including `%.128s` truncation, stopping at a NUL byte as C strings do, and replacing `\r` and
//! `\n` with spaces.

/// `SET k v XX NX` and other malformed option lists.
pub const ERR_SYNTAX: &[u8] = b"-ERR syntax error\r\n";
/// An argument that is not a `string2ll` integer (see [`crate::resp::parse_i64`]).
pub const ERR_NOT_INTEGER: &[u8] = b"-ERR value is not an integer or out of range\r\n";
/// An argument that is not a `string2d` double (see [`crate::resp::parse_f64`]).
pub const ERR_NOT_FLOAT: &[u8] = b"-ERR value is not a valid float\r\n";
/// `INCR` past `i64::MAX` or `DECR` past `i64::MIN`.
pub const ERR_OVERFLOW: &[u8] = b"-ERR increment or decrement would overflow\r\n";
/// `INCRBYFLOAT` whose result is NaN or infinite.
pub const ERR_NAN_OR_INFINITY: &[u8] = b"-ERR increment would produce NaN or Infinity\r\n";
/// A command on a key holding another type.
pub const ERR_WRONGTYPE: &[u8] =
    b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";
/// Any command but `AUTH`/`HELLO` before authenticating.
pub const ERR_NOAUTH: &[u8] = b"-NOAUTH Authentication required.\r\n";
/// `AUTH` with a wrong user or password.
pub const ERR_WRONGPASS: &[u8] =
    b"-WRONGPASS invalid username-password pair or user is disabled.\r\n";
/// `AUTH <password>` while the default user has no password.
pub const ERR_AUTH_NOT_CONFIGURED: &[u8] = b"-ERR AUTH <password> called without any password \
configured for the default user. Are you sure your configuration is correct?\r\n";
/// `HELLO` with a protocol version other than 2 or 3.
pub const ERR_NOPROTO: &[u8] = b"-NOPROTO unsupported protocol version\r\n";
/// `SELECT` of a database that does not exist.
pub const ERR_DB_INDEX: &[u8] = b"-ERR DB index is out of range\r\n";
/// `SETRANGE`/`GETRANGE` offsets out of range.
pub const ERR_OFFSET: &[u8] = b"-ERR offset is out of range\r\n";
/// `SETBIT`/`GETBIT` offsets that are not integers or out of range.
pub const ERR_BIT_OFFSET: &[u8] = b"-ERR bit offset is not an integer or out of range\r\n";
/// A value that would exceed `proto-max-bulk-len` (`APPEND`, `SETRANGE`).
pub const ERR_STRING_TOO_LONG: &[u8] =
    b"-ERR string exceeds maximum allowed size (proto-max-bulk-len)\r\n";
/// `LSET`/`RENAME` and others on a missing key.
pub const ERR_NO_SUCH_KEY: &[u8] = b"-ERR no such key\r\n";
/// What Redis 7.0 answers to `DEBUG` while `enable-debug-command` is `no` (its default).
pub const ERR_DEBUG_NOT_ALLOWED: &[u8] = b"-ERR DEBUG command not allowed. If the \
    enable-debug-command option is set to \"local\", you can run it from a local connection, \
    otherwise you need to set this option in the configuration file, and then restart the \
    server.\r\n";
/// A write refused because used memory is above `maxmemory`.
pub const ERR_OOM: &[u8] = b"-OOM command not allowed when used memory > 'maxmemory'.\r\n";

/// Longest command or argument text Redis copies into an error message (`%.128s`).
pub const ERROR_ARG_LEN_MAX: usize = 128;

/// Appends `bytes` up to the first NUL and at most `len_max` bytes, mapping `\r`/`\n` to spaces.
fn push_c_string(out: &mut Vec<u8>, bytes: &[u8], len_max: usize) {
    let end = bytes
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(bytes.len())
        .min(len_max);
    out.extend(
        bytes[..end]
            .iter()
            .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
}

/// Appends the pieces as one error line and returns the bytes written.
fn push_error(out: &mut Vec<u8>, write: impl FnOnce(&mut Vec<u8>)) -> usize {
    let start = out.len();
    out.push(b'-');
    write(out);
    out.extend_from_slice(b"\r\n");
    out.len() - start
}

/// `-ERR wrong number of arguments for '<command>' command`. Redis names the command as its
/// command table does (lower case, `config|get` for subcommands), not as the client typed it.
pub fn wrong_args(out: &mut Vec<u8>, command: &[u8]) -> usize {
    push_error(out, |out| {
        out.extend_from_slice(b"ERR wrong number of arguments for '");
        push_c_string(out, command, usize::MAX);
        out.extend_from_slice(b"' command");
    })
}

/// `-ERR unknown command '<name>', with args beginning with: '<arg>' '<arg>' ` as Redis 7.0's
/// `processCommand`: the name as typed, cut at 128 bytes; then quoted arguments while the quoted
/// list is shorter than 128 bytes, each cut so the list stays within 128.
pub fn unknown_command<'a>(
    out: &mut Vec<u8>,
    name: &[u8],
    args: impl IntoIterator<Item = &'a [u8]>,
) -> usize {
    push_error(out, |out| {
        out.extend_from_slice(b"ERR unknown command '");
        push_c_string(out, name, ERROR_ARG_LEN_MAX);
        out.extend_from_slice(b"', with args beginning with: ");
        let list_start = out.len();
        for arg in args {
            let list_len = out.len() - list_start;
            if list_len >= ERROR_ARG_LEN_MAX {
                break;
            }
            out.push(b'\'');
            push_c_string(out, arg, ERROR_ARG_LEN_MAX - list_len);
            out.extend_from_slice(b"' ");
        }
    })
}

/// `-ERR unknown subcommand '<sub>'. Try <CONTAINER> HELP.` for a container command such as
/// `CONFIG`; the container is upper-cased as Redis does.
pub fn unknown_subcommand(out: &mut Vec<u8>, container: &[u8], subcommand: &[u8]) -> usize {
    push_error(out, |out| {
        out.extend_from_slice(b"ERR unknown subcommand '");
        push_c_string(out, subcommand, ERROR_ARG_LEN_MAX);
        out.extend_from_slice(b"'. Try ");
        let start = out.len();
        push_c_string(out, container, usize::MAX);
        out[start..].make_ascii_uppercase();
        out.extend_from_slice(b" HELP.");
    })
}

/// `-ERR unknown subcommand or wrong number of arguments for '<sub>'. Try <CONTAINER> HELP.`,
/// Redis's `addReplySubcommandSyntaxError`, which `DEBUG` answers to a subcommand it does not
/// know.
pub fn subcommand_syntax(out: &mut Vec<u8>, container: &[u8], subcommand: &[u8]) -> usize {
    push_error(out, |out| {
        out.extend_from_slice(b"ERR unknown subcommand or wrong number of arguments for '");
        push_c_string(out, subcommand, ERROR_ARG_LEN_MAX);
        out.extend_from_slice(b"'. Try ");
        let start = out.len();
        push_c_string(out, container, usize::MAX);
        out[start..].make_ascii_uppercase();
        out.extend_from_slice(b" HELP.");
    })
}

/// `-ERR invalid expire time in '<command>' command`, e.g. `SET k v EX 0`.
pub fn invalid_expire_time(out: &mut Vec<u8>, command: &[u8]) -> usize {
    push_error(out, |out| {
        out.extend_from_slice(b"ERR invalid expire time in '");
        push_c_string(out, command, usize::MAX);
        out.extend_from_slice(b"' command");
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(write: impl FnOnce(&mut Vec<u8>) -> usize) -> Vec<u8> {
        let mut out = Vec::new();
        assert_eq!(write(&mut out), out.len());
        out
    }

    #[test]
    fn formatted_replies() {
        let long = [b'a'; 200];
        let mut long_reply = b"-ERR unknown command 'FOO', with args beginning with: '".to_vec();
        long_reply.extend_from_slice(&[b'a'; 128]);
        long_reply.extend_from_slice(b"' \r\n");
        let table: &[(Vec<u8>, &[u8])] = &[
            (
                written(|o| wrong_args(o, b"get")),
                b"-ERR wrong number of arguments for 'get' command\r\n",
            ),
            (
                written(|o| unknown_command(o, b"FOO", [&b"a"[..], b"b"])),
                b"-ERR unknown command 'FOO', with args beginning with: 'a' 'b' \r\n",
            ),
            (
                written(|o| unknown_command(o, b"FOO", [])),
                b"-ERR unknown command 'FOO', with args beginning with: \r\n",
            ),
            (
                written(|o| unknown_command(o, b"FOO", [&b"a\r"[..], b"b"])),
                b"-ERR unknown command 'FOO', with args beginning with: 'a ' 'b' \r\n",
            ),
            (
                written(|o| unknown_command(o, b"FOO", [&long[..], b"b"])),
                &long_reply,
            ),
            (
                written(|o| unknown_subcommand(o, b"config", b"FOO")),
                b"-ERR unknown subcommand 'FOO'. Try CONFIG HELP.\r\n",
            ),
            (
                written(|o| subcommand_syntax(o, b"debug", b"foo")),
                b"-ERR unknown subcommand or wrong number of arguments for 'foo'. \
                  Try DEBUG HELP.\r\n",
            ),
            (
                written(|o| invalid_expire_time(o, b"set")),
                b"-ERR invalid expire time in 'set' command\r\n",
            ),
        ];
        for (actual, expected) in table {
            assert_eq!(actual, expected, "{}", expected.escape_ascii());
        }
    }

    #[test]
    fn unknown_command_budget_is_shared() {
        // 100 bytes fill the list to 103 ('...' ), leaving 25 bytes for the next argument.
        let first = [b'x'; 100];
        let second = [b'y'; 50];
        let out = written(|o| unknown_command(o, b"F\0OO", [&first[..], &second, b"z"]));
        let mut expected = b"-ERR unknown command 'F', with args beginning with: '".to_vec();
        expected.extend_from_slice(&first);
        expected.extend_from_slice(b"' '");
        expected.extend_from_slice(&second[..25]);
        expected.extend_from_slice(b"' \r\n");
        assert_eq!(out, expected);
    }

    #[test]
    fn the_debug_refusal_is_redis_7_0_s() {
        // As redis-server 7.0.15 --enable-debug-command no answers `DEBUG SLEEP 0`.
        let redis = "-ERR DEBUG command not allowed. If the enable-debug-command option is set \
                     to \"local\", you can run it from a local connection, otherwise you need \
                     to set this option in the configuration file, and then restart the \
                     server.\r\n";
        assert_eq!(ERR_DEBUG_NOT_ALLOWED, redis.as_bytes());
    }

    #[test]
    fn constants_are_single_lines() {
        for reply in [
            ERR_SYNTAX,
            ERR_NOT_INTEGER,
            ERR_NOT_FLOAT,
            ERR_OVERFLOW,
            ERR_NAN_OR_INFINITY,
            ERR_WRONGTYPE,
            ERR_NOAUTH,
            ERR_WRONGPASS,
            ERR_AUTH_NOT_CONFIGURED,
            ERR_NOPROTO,
            ERR_DB_INDEX,
            ERR_OFFSET,
            ERR_BIT_OFFSET,
            ERR_STRING_TOO_LONG,
            ERR_DEBUG_NOT_ALLOWED,
            ERR_NO_SUCH_KEY,
            ERR_OOM,
        ] {
            assert_eq!(reply[0], b'-');
            assert!(reply.ends_with(b"\r\n"));
            assert!(!reply[..reply.len() - 2].contains(&b'\n'));
        }
    }
}
