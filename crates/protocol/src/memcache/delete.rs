//! `delete <key> [0] [noreply]`.
//!
//! memcached 1.6 still accepts the legacy hold time `0` (`t/issue_108.t`): `delete a 0`,
//! `delete a 0 noreply` and `delete a noreply` are fine (`delete noreply` deletes the key
//! `noreply`, with a reply); any other second argument is
//! `CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]` (two spaces, as sent),
//! and more than three arguments are `ERROR`. `noreply` suppresses the error replies.

use super::encode::{CLIENT_ERROR_BAD_FORMAT, CLIENT_ERROR_DELETE_USAGE, ERROR};
use super::token::key_is_valid;
use super::{noreply_last, split_args, Limits, Line, ParseError, Parsed, Request};

/// A `delete` request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delete<'a> {
    /// The key, valid by [`super::key_is_valid`].
    pub key: &'a [u8],
    /// Whether to suppress the reply.
    pub noreply: bool,
}

pub(crate) fn parse<'a>(line: Line<'a>, limits: &Limits) -> Result<Parsed<'a>, ParseError> {
    let (args, count) = split_args::<3>(line.args);
    if !(1..=3).contains(&count) {
        return Err(line.refuse(ERROR, false));
    }
    // memcached looks for `noreply` only after a second argument (`process_delete_command`
    // calls `set_noreply_maybe` only then): `delete noreply` deletes the key `noreply` and
    // replies.
    let noreply = count > 1 && noreply_last(&args, count);
    if count > 1 {
        let hold_is_zero = args[1] == b"0";
        let valid = (count == 2 && (hold_is_zero || noreply)) || (hold_is_zero && noreply);
        if !valid {
            return Err(line.refuse(CLIENT_ERROR_DELETE_USAGE, noreply));
        }
    }
    let key = args[0];
    if !key_is_valid(key, limits.key_len_max) {
        return Err(line.refuse(CLIENT_ERROR_BAD_FORMAT, noreply));
    }
    let request = Request::Delete(Delete { key, noreply });
    line.parsed(request)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memcache::parse;
    use crate::memcache::tests::assert_refused;

    #[test]
    fn accepted() {
        let cases: &[(&[u8], bool)] = &[
            (b"delete a\r\n", false),
            (b"delete a 0\r\n", false),
            (b"delete a noreply\r\n", true),
            (b"delete a 0 noreply\r\n", true),
        ];
        for &(input, noreply) in cases {
            let want = Parsed {
                request: Request::Delete(Delete { key: b"a", noreply }),
                consumed: input.len(),
            };
            assert_eq!(parse(input, &Limits::default()), Ok(want), "{input:?}");
        }
    }

    /// Found by the memcache_parse fuzz target (its encoding of `delete noreply` did not parse
    /// back to the same request): strata took the only argument for both the key and the
    /// `noreply` flag, and sent no reply, where memcached 1.6.18 deletes the key `noreply` and
    /// replies; a client waiting for that reply would hang.
    #[test]
    fn a_key_named_noreply_alone_is_a_key_and_gets_a_reply() {
        let input = b"delete noreply\r\n";
        let want = Parsed {
            request: Request::Delete(Delete {
                key: b"noreply",
                noreply: false,
            }),
            consumed: input.len(),
        };
        assert_eq!(parse(input, &Limits::default()), Ok(want));
        let twice = parse(b"delete noreply noreply\r\n", &Limits::default()).unwrap();
        let want = Delete {
            key: b"noreply",
            noreply: true,
        };
        assert_eq!(twice.request, Request::Delete(want));
    }

    #[test]
    fn rejected() {
        let mut long = b"delete ".to_vec();
        long.extend_from_slice(&[b'k'; 251]);
        let mut long_noreply = long.clone();
        long.extend_from_slice(b"\r\n");
        long_noreply.extend_from_slice(b" noreply\r\n");
        // memcached 1.6.18's answers.
        let cases: &[(&[u8], &[u8])] = &[
            (b"delete\r\n", ERROR),
            (b"delete a 0 0 0\r\n", ERROR),
            (b"delete a 1\r\n", CLIENT_ERROR_DELETE_USAGE),
            (b"delete a x\r\n", CLIENT_ERROR_DELETE_USAGE),
            (b"delete a 0 x\r\n", CLIENT_ERROR_DELETE_USAGE),
            (b"delete a 1 noreply\r\n", b""),
            (&long, CLIENT_ERROR_BAD_FORMAT),
            (&long_noreply, b""),
        ];
        assert_refused(cases);
    }
}
