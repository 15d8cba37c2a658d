//! Requests of another protocol: HTTP sent to a cache port.
//!
//! A web page can make a browser send an HTTP request to any address, including a cache on the
//! user's network or loopback ("cross-protocol scripting"): the request line and headers come
//! first, and a `POST` body can carry cache commands that a lenient server would run after
//! answering the HTTP lines with errors. Both reference servers hang up instead:
//!
//! - memcached 1.6.18 (`process_command_ascii`, `proto_text.c`): a command it does not know
//!   whose last space-separated token starts with `HTTP/` (`GET / HTTP/1.1`, `PUT /x HTTP/1.0`,
//!   `HTTP/1.1` alone) closes the connection without a reply.
//! - Redis 7.0.15 (`processCommand`, `server.c`): a command named `POST` or `Host:`, in any case
//!   and in either request form, closes the connection and logs "Possible SECURITY ATTACK
//!   detected", at most once a minute.
//!
//! strata applies both rules on both ports ([`is_http`]), so a `Host:` header line also closes a
//! memcached connection (memcached answers `ERROR` to it and reads on) and `PUT / HTTP/1.1`
//! closes a Redis one (Redis answers an unknown-command error): neither line is ever a cache
//! command. memcached checks its rule only for names not starting with one of its commands'
//! initials (an artifact of its dispatch: `trace / HTTP/1.1` gets `ERROR`); strata checks it
//! for every unknown command.
//!
//! The servers call this only for a line that is not a known command, so the requests they
//! serve pay nothing for it; a known command whose arguments look like HTTP (`get / HTTP/1.1`
//! on memcached, a key named `HTTP/1.1`) runs as usual, as in the reference servers.

/// What the last token of a request line starts with in every HTTP/1.x request.
const HTTP_VERSION_PREFIX: &[u8] = b"HTTP/";

/// Redis's rule: the command name is `POST` or `Host:`, in any case.
pub fn is_http_command_name(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"post") || name.eq_ignore_ascii_case(b"host:")
}

/// memcached's rule: the last argument starts with `HTTP/` (exactly that case).
pub fn is_http_version(last: &[u8]) -> bool {
    last.starts_with(HTTP_VERSION_PREFIX)
}

/// Whether an unknown command with name `first` and last token `last` (the name itself when
/// there is no argument) comes from an HTTP client: either rule above.
pub fn is_http(first: &[u8], last: &[u8]) -> bool {
    is_http_command_name(first) || is_http_version(last)
}

/// [`is_http`] on a text line (no line end), split into tokens on spaces as memcached splits
/// them: leading, trailing and repeated spaces separate nothing.
pub fn is_http_line(line: &[u8]) -> bool {
    let mut tokens = line.split(|&b| b == b' ').filter(|token| !token.is_empty());
    let Some(first) = tokens.next() else {
        return false;
    };
    let last = tokens.next_back().unwrap_or(first);
    is_http(first, last)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines every reference server or both hang up on (checked against memcached 1.6.18 and
    /// redis-server 7.0.15 over a socket; `Host:` lines close Redis connections only).
    const REJECTED: &[&str] = &[
        "GET / HTTP/1.0",
        "GET / HTTP/1.1",
        "PUT /x HTTP/1.1",
        "DELETE HTTP/1.1",
        "POST / HTTP/1.1",
        "HEAD /metrics HTTP/1.1",
        "OPTIONS * HTTP/1.1",
        "HTTP/1.1",
        "FOO HTTP/",
        "bar HTTP/1.1",
        "GET / HTTP/1.1 ",
        "  GET  /  HTTP/1.1",
        "POST",
        "post /x",
        "Host: example.com",
        "HOST:",
        "host: 127.0.0.1:11211",
    ];

    /// Lines that stay ordinary (unknown or malformed) commands.
    const ACCEPTED: &[&str] = &[
        "",
        "   ",
        "GET / http/1.1",
        "FOO HTTP",
        "FOO HTTP/1.1 x",
        "GET /\tHTTP/1.1",
        "Host:example.com",
        "Hostname: x",
        "POSTS",
        "XPOST",
        "User-Agent: curl/8.0",
        "Accept: */*",
        "lpush list HTTP",
    ];

    #[test]
    fn http_lines_are_recognised() {
        for line in REJECTED {
            assert!(is_http_line(line.as_bytes()), "{line:?} should be refused");
        }
        for line in ACCEPTED {
            assert!(!is_http_line(line.as_bytes()), "{line:?} should pass");
        }
    }

    #[test]
    fn the_rules_look_at_the_name_and_the_last_argument_only() {
        assert!(is_http(b"PoSt", b"x"));
        assert!(is_http(b"x", b"HTTP/2"));
        assert!(!is_http(b"GET", b"/"));
        assert!(!is_http(b"GET", b"http/1.1"));
        assert!(is_http_command_name(b"Host:") && !is_http_command_name(b"Host"));
        assert!(is_http_version(b"HTTP/") && !is_http_version(b"HTTP"));
    }
}
