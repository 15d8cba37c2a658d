//! The HTTP/1.x the admin endpoint speaks: reading a request head, routing it, writing a reply.
//!
//! Only what `/metrics` and `/health` need: a request line (`METHOD TARGET HTTP/1.x`) and
//! headers, which are skipped; no body is read. Every reply closes the connection
//! (`Connection: close`), so no request framing beyond the head matters. Pure functions over
//! bytes, so every case is checked by a table test.

/// A request head the endpoint understood enough to route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head<'a> {
    /// The method, as sent (methods are case-sensitive).
    pub method: &'a [u8],
    /// The path of the target, without its query (`/metrics` of `/metrics?x=1`).
    pub path: &'a [u8],
}

/// Why a buffer does not (yet) hold a routable request head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadError {
    /// The empty line ending the head has not arrived.
    Incomplete,
    /// The request line is not `METHOD TARGET HTTP/x.y`.
    Malformed,
    /// An HTTP version other than 1.0 and 1.1.
    VersionNotSupported,
}

/// A reply's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// 200.
    Ok,
    /// 400: the request line is malformed.
    BadRequest,
    /// 404: neither `/metrics` nor `/health`.
    NotFound,
    /// 405: a method other than GET or HEAD.
    MethodNotAllowed,
    /// 431: the request head is larger than the endpoint reads.
    HeaderFieldsTooLarge,
    /// 503: `/health` found something that does not serve.
    ServiceUnavailable,
    /// 505: not HTTP/1.0 or HTTP/1.1.
    VersionNotSupported,
}

impl Status {
    /// The status code and reason phrase of the status line.
    pub fn text(self) -> &'static str {
        match self {
            Status::Ok => "200 OK",
            Status::BadRequest => "400 Bad Request",
            Status::NotFound => "404 Not Found",
            Status::MethodNotAllowed => "405 Method Not Allowed",
            Status::HeaderFieldsTooLarge => "431 Request Header Fields Too Large",
            Status::ServiceUnavailable => "503 Service Unavailable",
            Status::VersionNotSupported => "505 HTTP Version Not Supported",
        }
    }
}

/// What the endpoint serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource {
    /// `/metrics`: the Prometheus exposition.
    Metrics,
    /// `/health`: 200 or 503 with the reasons.
    Health,
}

/// Media type of the Prometheus text exposition format.
pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// Media type of every other reply.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; charset=utf-8";
/// The methods every resource allows (the `Allow` header of a 405).
pub const METHODS_ALLOWED: &str = "GET, HEAD";

/// Parses the request head at the start of `buf`. Empty lines before the request line are
/// skipped (RFC 9112 §2.2); a line may end in CRLF or a bare LF. Headers are not looked at.
pub fn parse_head(buf: &[u8]) -> Result<Head<'_>, HeadError> {
    let start = buf
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .ok_or(HeadError::Incomplete)?;
    let buf = &buf[start..];
    if head_end(buf).is_none() {
        return Err(HeadError::Incomplete);
    }
    let line_end = buf.iter().position(|&b| b == b'\n').unwrap_or(buf.len());
    let line = &buf[..line_end];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut parts = line.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HeadError::Malformed);
    };
    if method.is_empty() || !method.iter().all(u8::is_ascii_alphanumeric) {
        return Err(HeadError::Malformed);
    }
    let path = path_of(target).ok_or(HeadError::Malformed)?;
    match version {
        b"HTTP/1.0" | b"HTTP/1.1" => Ok(Head { method, path }),
        [b'H', b'T', b'T', b'P', b'/', major, b'.', minor]
            if major.is_ascii_digit() && minor.is_ascii_digit() =>
        {
            Err(HeadError::VersionNotSupported)
        }
        _ => Err(HeadError::Malformed),
    }
}

/// The offset just past the empty line that ends the head, if it has arrived.
fn head_end(buf: &[u8]) -> Option<usize> {
    let mut line_start = 0;
    while let Some(newline) = buf[line_start..].iter().position(|&b| b == b'\n') {
        let line = &buf[line_start..line_start + newline];
        if line.is_empty() || line == b"\r" {
            return Some(line_start + newline + 1);
        }
        line_start += newline + 1;
    }
    None
}

/// The path of a request target in origin form (`/health?verbose`) or absolute form
/// (`http://host:9121/health`), without its query; `None` for anything else.
fn path_of(target: &[u8]) -> Option<&[u8]> {
    let target = if target.starts_with(b"/") {
        target
    } else {
        let rest = target
            .strip_prefix(b"http://")
            .or_else(|| target.strip_prefix(b"https://"))?;
        let slash = rest.iter().position(|&b| b == b'/').unwrap_or(rest.len());
        let path = &rest[slash..];
        if path.is_empty() {
            b"/"
        } else {
            path
        }
    };
    let end = target
        .iter()
        .position(|&b| b == b'?' || b == b'#')
        .unwrap_or(target.len());
    let path = &target[..end];
    path.iter().all(u8::is_ascii_graphic).then_some(path)
}

/// What a routed request asks for: a resource, or the error status to answer.
pub fn route(head: &Head<'_>) -> Result<Resource, Status> {
    let resource = match head.path {
        b"/metrics" => Resource::Metrics,
        b"/health" => Resource::Health,
        _ => return Err(Status::NotFound),
    };
    match head.method {
        b"GET" | b"HEAD" => Ok(resource),
        _ => Err(Status::MethodNotAllowed),
    }
}

/// Whether the reply to `head` carries no body (HEAD).
pub fn head_only(head: &Head<'_>) -> bool {
    head.method == b"HEAD"
}

/// Appends a whole reply to `out`: the status line, `Content-Type`, `Content-Length` (of the
/// body a GET would get, also for HEAD), `Connection: close`, `Allow` on a 405, then the body
/// unless `head_only`.
pub fn reply(out: &mut Vec<u8>, status: Status, content_type: &str, body: &[u8], head_only: bool) {
    use std::io::Write as _;
    let _ = write!(
        out,
        "HTTP/1.1 {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n",
        status.text(),
        body.len()
    );
    if status == Status::MethodNotAllowed {
        let _ = write!(out, "Allow: {METHODS_ALLOWED}\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if !head_only {
        out.extend_from_slice(body);
    }
}

/// The body of an error reply, telling the client what the endpoint serves.
pub fn error_body(status: Status) -> &'static str {
    match status {
        Status::NotFound => "not found: try /metrics or /health\n",
        Status::MethodNotAllowed => "method not allowed: use GET or HEAD\n",
        Status::HeaderFieldsTooLarge => "request head too large\n",
        Status::VersionNotSupported => "use HTTP/1.0 or HTTP/1.1\n",
        Status::BadRequest => "malformed request line\n",
        Status::Ok | Status::ServiceUnavailable => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_heads_are_parsed_or_refused() {
        let ok = |method: &'static str, path: &'static str| {
            Ok(Head {
                method: method.as_bytes(),
                path: path.as_bytes(),
            })
        };
        let table: &[(&str, Result<Head<'_>, HeadError>)] = &[
            (
                "GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
                ok("GET", "/health"),
            ),
            ("GET /health HTTP/1.0\r\n\r\n", ok("GET", "/health")),
            ("GET /metrics HTTP/1.0\n\n", ok("GET", "/metrics")),
            ("\r\nGET /health HTTP/1.1\r\n\r\n", ok("GET", "/health")),
            ("HEAD /metrics?x=1 HTTP/1.1\r\n\r\n", ok("HEAD", "/metrics")),
            (
                "GET http://h:9121/health HTTP/1.1\r\n\r\n",
                ok("GET", "/health"),
            ),
            ("GET http://h:9121 HTTP/1.1\r\n\r\n", ok("GET", "/")),
            (
                "POST /health HTTP/1.1\r\nContent-Length: 3\r\n\r\n",
                ok("POST", "/health"),
            ),
            (
                "GET /health HTTP/1.1\r\nHost: x\r\n",
                Err(HeadError::Incomplete),
            ),
            ("GET /health HTTP/1.1", Err(HeadError::Incomplete)),
            ("", Err(HeadError::Incomplete)),
            ("\r\n\r\n", Err(HeadError::Incomplete)),
            (
                "GET /health HTTP/2.0\r\n\r\n",
                Err(HeadError::VersionNotSupported),
            ),
            (
                "GET /health HTTP/0.9\r\n\r\n",
                Err(HeadError::VersionNotSupported),
            ),
            ("GET /health\r\n\r\n", Err(HeadError::Malformed)),
            ("GET  /health HTTP/1.1\r\n\r\n", Err(HeadError::Malformed)),
            ("GET /health HTTP/1.1 x\r\n\r\n", Err(HeadError::Malformed)),
            ("GET health HTTP/1.1\r\n\r\n", Err(HeadError::Malformed)),
            ("GET /he alth HTTP/1.1\r\n\r\n", Err(HeadError::Malformed)),
            ("G:T /health HTTP/1.1\r\n\r\n", Err(HeadError::Malformed)),
            ("GET /health http/1.1\r\n\r\n", Err(HeadError::Malformed)),
            ("GET /health HTTP/1.1.1\r\n\r\n", Err(HeadError::Malformed)),
        ];
        for (input, want) in table {
            assert_eq!(parse_head(input.as_bytes()), *want, "{input:?}");
        }
    }

    #[test]
    fn routes_by_path_then_method() {
        let head = |method: &'static str, path: &'static str| Head {
            method: method.as_bytes(),
            path: path.as_bytes(),
        };
        assert_eq!(route(&head("GET", "/metrics")), Ok(Resource::Metrics));
        assert_eq!(route(&head("HEAD", "/health")), Ok(Resource::Health));
        assert_eq!(route(&head("GET", "/")), Err(Status::NotFound));
        assert_eq!(route(&head("POST", "/nope")), Err(Status::NotFound));
        assert_eq!(
            route(&head("POST", "/health")),
            Err(Status::MethodNotAllowed)
        );
        assert_eq!(
            route(&head("get", "/health")),
            Err(Status::MethodNotAllowed)
        );
        assert!(head_only(&head("HEAD", "/health")) && !head_only(&head("GET", "/health")));
    }

    #[test]
    fn replies_have_exact_status_lines_and_lengths() {
        let mut out = Vec::new();
        reply(&mut out, Status::Ok, TEXT_CONTENT_TYPE, b"OK\n", false);
        assert_eq!(
            out,
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\n\
              Content-Length: 3\r\nConnection: close\r\n\r\nOK\n"
        );
        out.clear();
        reply(
            &mut out,
            Status::MethodNotAllowed,
            TEXT_CONTENT_TYPE,
            b"no\n",
            true,
        );
        assert_eq!(
            out,
            b"HTTP/1.1 405 Method Not Allowed\r\nContent-Type: text/plain; charset=utf-8\r\n\
              Content-Length: 3\r\nConnection: close\r\nAllow: GET, HEAD\r\n\r\n"
        );
    }
}
