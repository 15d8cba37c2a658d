//! Text-protocol authentication (`--memcache-auth-file`, memcached's `-Y <authfile>`): what a
//! memcached connection may do before it has authenticated.
//!
//! With an auth file, a new connection starts locked ([`Gate`]). memcached 1.6.18
//! (`try_read_command_asciiauth` in `proto_text.c`) then accepts one thing, an authentication
//! `set` whose data is `user password`, and strata answers exactly as it does:
//!
//! - `set <k> <f> <e> <n>\r\n<user> <password>\r\n` naming an entry of the file: `STORED`,
//!   and the connection is authenticated for its life.
//! - The same with a user or password not in the file: `CLIENT_ERROR authentication failure`;
//!   still locked, and the client may try again.
//! - The same with fewer than two words in the token:
//!   `CLIENT_ERROR bad authentication token format`. A `set` of ordinary data is thus an
//!   authentication attempt (`set k 0 0 2\r\nhi\r\n` gets this reply).
//! - The same with `<n>` bytes not followed by `\r\n`:
//!   `CLIENT_ERROR bad command line termination`, the `<n> + 2` bytes dropped.
//! - Any other line (`get`, `flush_all`, `mg`, `ms` and then its data line, `mn`, `stats`,
//!   `version`, `quit`, an empty line, ...): `CLIENT_ERROR unauthenticated`; the connection
//!   stays open, `quit` included.
//! - 2048 bytes without a newline: the connection is closed without a reply.
//!
//! How the line and the token are read (which lines count as an authentication `set`, how the
//! token splits into user and password) is in `strata_protocol::memcache::parse_auth_line`.
//! The key, flags and exptime of the `set` are ignored and nothing is stored; `noreply` is
//! ignored too. `stats` counts `auth_cmds` (tokens checked) and `auth_errors` (of those,
//! refused) as memcached does. Once authenticated, the connection is an ordinary one. The
//! session's hot path pays one well-predicted test of a field per call of
//! [`Session::process`] (per read, not per request), whether or not an auth file is set:
//! sessions without one start unlocked.
//!
//! # Where strata departs from memcached 1.6.18, and why
//!
//! - **Pipelined lines before authentication are each answered.** memcached reuses one reply
//!   object for every line it reads before authentication, so of several lines arriving
//!   together only the last one's reply is sent (`get a\r\nget b\r\n` gets one
//!   `CLIENT_ERROR unauthenticated`). strata answers every line, in order, as it does after
//!   authentication; a client that counts replies stays in step.
//! - **A token is at most [`TOKEN_LEN_MAX`] bytes.** memcached 1.6.18 waits for however many
//!   bytes the `set` announces (up to 4 GiB, before the connection is authenticated); 1.6.42
//!   added this bound and its reply, `CLIENT_ERROR auth token too long`, after which the line
//!   is consumed and the bytes that follow are read as command lines. strata does the same.
//! - **A line longer than 2048 bytes closes the connection** whether or not its newline has
//!   arrived; memcached closes only when 2048 bytes are buffered without one, so its outcome
//!   depends on how reads are split (the same departure as the main parser's). A lone `\n` is
//!   answered at once; memcached waits for a second byte first.
//! - **The auth file is stricter** (`crate::auth`): an empty file, more than 8 entries, and
//!   entries that could never match are refused at startup instead of loaded.
//! - **No reload.** memcached rereads the file on `SIGHUP`; strata reads it once at startup,
//!   so a change needs a restart.
//! - **No SASL.** memcached's other mechanism, SASL PLAIN (`-S`), exists only in its binary
//!   protocol, which strata does not speak (memcached itself refuses `-Y` with the binary
//!   protocol enabled).
//!
//! [`Session::process`]: crate::context::Session::process

use std::sync::atomic::Ordering;

use strata_protocol::memcache::{encode, parse_auth_line, split_auth_token, AuthLine};

use crate::auth::Credentials;
use crate::context::ServerContext;

/// Longest command line read before authentication, in bytes before the `\n`; a longer one
/// closes the connection (memcached's 2048 bytes without a newline).
pub const LINE_LEN_MAX: usize = 2048;

/// Longest authentication token, without its `\r\n` (memcached 1.6.42's `MAX_AUTH_REQ_LEN`).
pub const TOKEN_LEN_MAX: usize = 16384;

// A token and its line fit in the room a read buffer keeps beyond the largest value, so a
// connection can always buffer a whole authentication request.
const _: () =
    assert!(LINE_LEN_MAX + 1 + TOKEN_LEN_MAX + 2 <= crate::config::REQUEST_OVERHEAD_BYTES_MAX);

/// Where a locked connection is in memcached's authentication exchange.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Waiting for a command line; only an authentication `set` is accepted.
    Line,
    /// An authentication `set` was read: waiting for its token of `len` bytes and `\r\n`.
    Token {
        /// The token's length, at most [`TOKEN_LEN_MAX`].
        len: usize,
    },
}

/// How a call of [`Gate::process`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Passage {
    /// The input so far is answered; the connection stays locked.
    Locked,
    /// The client authenticated; input after `consumed` is for the ordinary session.
    Authenticated,
    /// A line too long: close the connection.
    Close,
}

impl Gate {
    /// Answers the requests at the start of `input` until the client authenticates, the input
    /// runs out or the connection must close. Returns the bytes consumed and how it ended.
    pub fn process(
        &mut self,
        input: &[u8],
        ctx: &ServerContext,
        credentials: &Credentials,
        out: &mut Vec<u8>,
    ) -> (usize, Passage) {
        let mut consumed = 0;
        loop {
            let rest = &input[consumed..];
            match *self {
                Gate::Line => {
                    let Some(newline) = rest.iter().position(|&b| b == b'\n') else {
                        let passage = if rest.len() > LINE_LEN_MAX {
                            Passage::Close
                        } else {
                            Passage::Locked
                        };
                        return (consumed, passage);
                    };
                    if newline > LINE_LEN_MAX {
                        return (consumed, Passage::Close);
                    }
                    consumed += newline + 1;
                    *self = line(&rest[..newline], out);
                }
                Gate::Token { len } => {
                    let Some(block) = rest.get(..len + 2) else {
                        return (consumed, Passage::Locked);
                    };
                    consumed += len + 2;
                    *self = Gate::Line;
                    if token(block, ctx, credentials, out) {
                        return (consumed, Passage::Authenticated);
                    }
                }
            }
        }
    }
}

/// Answers one command line of a locked connection; returns the next state.
fn line(line: &[u8], out: &mut Vec<u8>) -> Gate {
    match parse_auth_line(line) {
        AuthLine::Set { token_len } => match usize::try_from(token_len) {
            Ok(len) if len <= TOKEN_LEN_MAX => Gate::Token { len },
            _ => {
                out.extend_from_slice(encode::CLIENT_ERROR_AUTH_TOKEN_TOO_LONG);
                Gate::Line
            }
        },
        AuthLine::Other => {
            out.extend_from_slice(encode::CLIENT_ERROR_UNAUTHENTICATED);
            Gate::Line
        }
    }
}

/// Checks a token's data block (the token and its `\r\n`) and answers it; returns whether the
/// client authenticated.
fn token(block: &[u8], ctx: &ServerContext, credentials: &Credentials, out: &mut Vec<u8>) -> bool {
    let Some(token) = block.strip_suffix(b"\r\n") else {
        out.extend_from_slice(encode::CLIENT_ERROR_BAD_TERMINATION);
        return false;
    };
    let Some((user, password)) = split_auth_token(token) else {
        out.extend_from_slice(encode::CLIENT_ERROR_BAD_AUTH_TOKEN);
        return false;
    };
    ctx.stats.auth_commands.fetch_add(1, Ordering::Relaxed);
    if credentials.check(user, password) {
        out.extend_from_slice(encode::STORED);
        true
    } else {
        ctx.stats.auth_errors.fetch_add(1, Ordering::Relaxed);
        out.extend_from_slice(encode::CLIENT_ERROR_AUTH_FAILURE);
        false
    }
}

#[cfg(test)]
mod tests;
