//! `incr <key> <delta> [noreply]` and `decr <key> <delta> [noreply]`.
//!
//! As memcached 1.6.18 answers: other token counts are `ERROR`; a bad key is
//! `CLIENT_ERROR bad command line format`; a delta that is not an unsigned 64-bit decimal
//! (`x`, `-1`, `18446744073709551616`) is `CLIENT_ERROR invalid numeric delta argument`; an
//! extra token other than `noreply` is ignored; `noreply` suppresses the error replies.

use super::encode::CLIENT_ERROR_INVALID_DELTA;
use super::token::parse_u64;
use super::{key_and_number, Limits, Line, ParseError, Parsed, Request};

/// Increment or decrement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArithCommand {
    /// `incr`: add, wrapping at 2^64.
    Incr,
    /// `decr`: subtract, stopping at 0.
    Decr,
}

impl ArithCommand {
    /// The command as sent.
    pub fn name(self) -> &'static [u8] {
        match self {
            Self::Incr => b"incr",
            Self::Decr => b"decr",
        }
    }

    /// The command named `name`, if it is `incr` or `decr`.
    pub fn from_name(name: &[u8]) -> Option<Self> {
        match name {
            b"incr" => Some(Self::Incr),
            b"decr" => Some(Self::Decr),
            _ => None,
        }
    }
}

/// An `incr`/`decr` request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arith<'a> {
    /// Which command.
    pub command: ArithCommand,
    /// The key, valid by [`super::key_is_valid`].
    pub key: &'a [u8],
    /// The amount to add or subtract.
    pub delta: u64,
    /// Whether to suppress the reply.
    pub noreply: bool,
}

pub(crate) fn parse<'a>(
    command: ArithCommand,
    line: Line<'a>,
    limits: &Limits,
) -> Result<Parsed<'a>, ParseError> {
    let (key, delta, noreply) =
        key_and_number(&line, limits, parse_u64, CLIENT_ERROR_INVALID_DELTA)?;
    let request = Request::Arith(Arith {
        command,
        key,
        delta,
        noreply,
    });
    line.parsed(request)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memcache::encode::{CLIENT_ERROR_BAD_FORMAT, ERROR};
    use crate::memcache::parse;
    use crate::memcache::tests::assert_refused;

    #[test]
    fn accepted() {
        let cases: &[(&[u8], ArithCommand, u64, bool)] = &[
            (b"incr a 1\r\n", ArithCommand::Incr, 1, false),
            (
                b"decr a 18446744073709551615\r\n",
                ArithCommand::Decr,
                u64::MAX,
                false,
            ),
            (b"incr a 1 noreply\r\n", ArithCommand::Incr, 1, true),
            (b"incr a 1 foo\r\n", ArithCommand::Incr, 1, false),
        ];
        for &(input, command, delta, noreply) in cases {
            let request = Request::Arith(Arith {
                command,
                key: b"a",
                delta,
                noreply,
            });
            assert_eq!(
                parse(input, &Limits::default()),
                Ok(Parsed {
                    request,
                    consumed: input.len()
                })
            );
        }
    }

    #[test]
    fn rejected() {
        let mut long = b"incr ".to_vec();
        long.extend_from_slice(&[b'k'; 251]);
        long.extend_from_slice(b" 1\r\n");
        let cases: &[(&[u8], &[u8])] = &[
            (b"incr a\r\n", ERROR),
            (b"decr a 1 2 3\r\n", ERROR),
            (b"incr a x\r\n", CLIENT_ERROR_INVALID_DELTA),
            (b"incr a -1\r\n", CLIENT_ERROR_INVALID_DELTA),
            (
                b"incr a 18446744073709551616\r\n",
                CLIENT_ERROR_INVALID_DELTA,
            ),
            (b"incr a x noreply\r\n", b""),
            (&long, CLIENT_ERROR_BAD_FORMAT),
        ];
        assert_refused(cases);
    }
}
