//! Request parse errors. Every [`ProtocolError`] carries Redis 7.0's exact reply, and after
//! sending it the connection must be closed, as Redis does (`CLIENT_CLOSE_AFTER_REPLY`): the
//! stream position is lost, so nothing after the error can be trusted.

use core::fmt;

/// Why [`crate::resp::parse_command`] returned no command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParseError {
    /// The buffer holds only part of a command: read more bytes and parse again from the same
    /// start. Nothing was consumed.
    Incomplete,
    /// The client broke the protocol: send [`ProtocolError::encode`] and close the connection.
    Protocol(ProtocolError),
    /// A bulk argument is longer than [`crate::resp::Limits::bulk_len_max`] but within
    /// [`crate::resp::Limits::bulk_len_discard_max`]: the stream can still be followed, so the
    /// caller drops the command's remaining bytes as they arrive, without buffering them, and
    /// then refuses the command instead of closing the connection.
    /// [`crate::resp::too_long_at`] says where the command stands. (The variant carries nothing
    /// so that every parse result stays two words, returned in registers.)
    TooLong,
}

/// Where a command with a too-long bulk argument stands ([`ParseError::TooLong`],
/// [`crate::resp::too_long_at`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooLong {
    /// Bytes of the command up to the long bulk's data (its `$<len>` line included): the caller
    /// drops them.
    pub consumed: usize,
    /// Bytes still to drop for that bulk: its data and the two bytes after it.
    pub discard_len: usize,
    /// Arguments of the command after it, to drop too: each starts with a `$<len>` line that
    /// [`crate::resp::parse_bulk_header`] reads.
    pub args_left: usize,
}

/// A protocol violation, named after Redis 7.0's reply (`networking.c`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProtocolError {
    /// `*<count>` is not a `string2ll` integer or exceeds [`crate::resp::Limits::args_max`].
    InvalidMultibulkLength,
    /// `$<len>` is not a `string2ll` integer, is negative, or exceeds `bulk_len_max`.
    InvalidBulkLength,
    /// An argument of a multibulk request does not start with `$`; holds the byte found.
    ExpectedDollar(u8),
    /// An inline request has no `\n` within `inline_len_max` bytes.
    TooBigInlineRequest,
    /// An inline request has an unterminated quote, or a closing quote not followed by space.
    UnbalancedQuotes,
    /// A `*<count>` line has no `\r` within `inline_len_max` bytes.
    TooBigMbulkCountString,
    /// A `$<len>` line has no `\r` within `inline_len_max` bytes.
    TooBigBulkCountString,
    /// More than 10 arguments before authentication.
    UnauthenticatedMultibulkLength,
    /// A bulk longer than 16384 bytes before authentication.
    UnauthenticatedBulkLength,
}

impl ProtocolError {
    /// The message after `-ERR `, except for [`ProtocolError::ExpectedDollar`] whose byte is
    /// appended by [`ProtocolError::encode`] and [`fmt::Display`].
    fn message(self) -> &'static str {
        match self {
            Self::InvalidMultibulkLength => "Protocol error: invalid multibulk length",
            Self::InvalidBulkLength => "Protocol error: invalid bulk length",
            Self::ExpectedDollar(_) => "Protocol error: expected '$', got '",
            Self::TooBigInlineRequest => "Protocol error: too big inline request",
            Self::UnbalancedQuotes => "Protocol error: unbalanced quotes in request",
            Self::TooBigMbulkCountString => "Protocol error: too big mbulk count string",
            Self::TooBigBulkCountString => "Protocol error: too big bulk count string",
            Self::UnauthenticatedMultibulkLength => {
                "Protocol error: unauthenticated multibulk length"
            }
            Self::UnauthenticatedBulkLength => "Protocol error: unauthenticated bulk length",
        }
    }

    /// Appends the exact Redis error reply, e.g. `-ERR Protocol error: invalid bulk length\r\n`,
    /// and returns the bytes written.
    pub fn encode(self, out: &mut Vec<u8>) -> usize {
        let start = out.len();
        out.extend_from_slice(b"-ERR ");
        out.extend_from_slice(self.message().as_bytes());
        if let Self::ExpectedDollar(byte) = self {
            // Redis formats the byte with %c and then maps \r and \n in the reply to spaces.
            out.push(if matches!(byte, b'\r' | b'\n') {
                b' '
            } else {
                byte
            });
            out.push(b'\'');
        }
        out.extend_from_slice(b"\r\n");
        out.len() - start
    }
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())?;
        if let Self::ExpectedDollar(byte) = self {
            write!(f, "{}'", byte.escape_ascii())?;
        }
        Ok(())
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Incomplete => f.write_str("incomplete request: read more bytes"),
            Self::Protocol(error) => error.fmt(f),
            Self::TooLong => f.write_str("a bulk argument is too long: drop the command"),
        }
    }
}

impl std::error::Error for ProtocolError {}
impl std::error::Error for ParseError {}

impl From<ProtocolError> for ParseError {
    fn from(error: ProtocolError) -> Self {
        Self::Protocol(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_redis_exact() {
        let table: &[(ProtocolError, &[u8])] = &[
            (
                ProtocolError::InvalidMultibulkLength,
                b"-ERR Protocol error: invalid multibulk length\r\n",
            ),
            (
                ProtocolError::InvalidBulkLength,
                b"-ERR Protocol error: invalid bulk length\r\n",
            ),
            (
                ProtocolError::ExpectedDollar(b'x'),
                b"-ERR Protocol error: expected '$', got 'x'\r\n",
            ),
            (
                ProtocolError::ExpectedDollar(b'\r'),
                b"-ERR Protocol error: expected '$', got ' '\r\n",
            ),
            (
                ProtocolError::TooBigInlineRequest,
                b"-ERR Protocol error: too big inline request\r\n",
            ),
            (
                ProtocolError::UnbalancedQuotes,
                b"-ERR Protocol error: unbalanced quotes in request\r\n",
            ),
            (
                ProtocolError::TooBigMbulkCountString,
                b"-ERR Protocol error: too big mbulk count string\r\n",
            ),
            (
                ProtocolError::TooBigBulkCountString,
                b"-ERR Protocol error: too big bulk count string\r\n",
            ),
        ];
        for &(error, reply) in table {
            let mut out = Vec::new();
            assert_eq!(error.encode(&mut out), reply.len());
            assert_eq!(out, reply);
        }
    }

    #[test]
    fn display_escapes_the_byte() {
        let error = ProtocolError::ExpectedDollar(b'\n');
        assert_eq!(error.to_string(), "Protocol error: expected '$', got '\\n'");
    }
}
