//! HTTP requests sent to the cache ports (issue 10, finding 8): a browser on the operator's
//! machine can be made to send one by any web page ("cross-protocol scripting"). memcached
//! 1.6.18 hangs up on an unknown command whose last token starts with `HTTP/`, Redis 7.0.15 on
//! a `POST` or `Host:` command; strata applies both rules on both ports, without a reply and
//! dropping any reply it had buffered, counts the closes and warns at most once a minute.
//! Before, the memcached port answered `ERROR` to each line and read on.

mod harness;

use harness::{resp_command, Client, Server};

/// Sends `request` on a new connection to `addr` and returns what the server sent before it
/// closed the connection; panics if the connection stays open.
fn hung_up_after(addr: std::net::SocketAddr, request: &[u8]) -> usize {
    let mut client = Client::connect(addr);
    client.send(request);
    client.bytes_until_closed().unwrap_or_else(|| {
        panic!(
            "the server kept the connection open after {}",
            request.escape_ascii()
        )
    })
}

const WARNING: &str = "possible security attack: an HTTP request reached a cache port";

#[test]
fn http_requests_on_the_memcached_port_are_hung_up_on() {
    let mut server = Server::start(&[]);
    let requests: &[&[u8]] = &[
        b"GET / HTTP/1.0\r\n",
        b"GET / HTTP/1.1\r\nHost: localhost:11211\r\n\r\n",
        b"PUT /x HTTP/1.1\r\n",
        b"DELETE HTTP/1.1\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 20\r\n\r\nset k 0 0 1\r\nx\r\n",
        b"Host: example.com\r\n",
        // The reply to `version`, buffered before the HTTP line, is dropped with it.
        b"version\r\nGET / HTTP/1.1\r\n",
    ];
    for request in requests {
        let sent = hung_up_after(server.memcache, request);
        assert_eq!(sent, 0, "no reply to {}", request.escape_ascii());
    }
    assert_eq!(
        server.metric("strata_cross_protocol_closes_total"),
        requests.len() as u64
    );
    let mut client = Client::connect(server.memcache);
    assert_eq!(
        client.call(b"get k\r\n"),
        "END\r\n",
        "the POST body never ran"
    );
    let warnings = server.log().matches(WARNING).count();
    assert_eq!(warnings, 1, "one warning a minute:\n{}", server.log());
    server.terminate();
}

#[test]
fn memcached_commands_that_merely_look_like_http_still_work() {
    let mut server = Server::start(&[]);
    let mut client = Client::connect(server.memcache);
    assert_eq!(client.call(b"get /foo\r\n"), "END\r\n");
    assert_eq!(client.call(b"set /foo 0 0 2\r\nhi\r\n"), "STORED\r\n");
    assert_eq!(
        client.call(b"get / HTTP/1.1 /foo\r\n"),
        "VALUE /foo 0 2\r\n"
    );
    assert_eq!(client.line(), "hi\r\n");
    assert_eq!(client.line(), "END\r\n");
    assert_eq!(client.call(b"set HTTP/1.1 0 0 1\r\nx\r\n"), "STORED\r\n");
    assert_eq!(client.call(b"GET / http/1.1\r\n"), "ERROR\r\n", "not HTTP/");
    assert_eq!(client.call(b"version\r\n").get(..8), Some("VERSION "));
    assert_eq!(server.metric("strata_cross_protocol_closes_total"), 0);
    server.terminate();
}

#[test]
fn http_requests_on_the_redis_port_are_hung_up_on() {
    let mut server = Server::start(&[]);
    let requests: &[&[u8]] = &[
        b"POST / HTTP/1.1\r\n",
        b"Host: localhost:6379\r\n",
        b"host: x\r\n",
        b"PUT /x HTTP/1.1\r\n",
        b"DELETE HTTP/1.1\r\n",
        b"*1\r\n$4\r\npost\r\n",
        b"*2\r\n$5\r\nHOST:\r\n$1\r\nx\r\n",
        // Redis answers the GET line with an arity error and hangs up at `Host:`, dropping
        // the error it had buffered: the client sees nothing.
        b"GET / HTTP/1.1\r\nHost: localhost:6379\r\n\r\n",
    ];
    for request in requests {
        let sent = hung_up_after(server.resp, request);
        assert_eq!(sent, 0, "no reply to {}", request.escape_ascii());
    }
    assert_eq!(
        server.metric("strata_cross_protocol_closes_total"),
        requests.len() as u64
    );
    assert_eq!(server.log().matches(WARNING).count(), 1);
    server.terminate();
}

#[test]
fn redis_commands_that_merely_look_like_http_still_work() {
    let mut server = Server::start(&[]);
    let mut client = Client::connect(server.resp);
    let set = resp_command(&[b"SET", b"HTTP/1.1", b"v"]);
    assert_eq!(client.call(&set), "+OK\r\n");
    client.send(&resp_command(&[b"GET", b"HTTP/1.1"]));
    assert_eq!(client.bulk(), Some(b"v".to_vec()));
    // A multibulk command whose last argument starts with HTTP/ is a command, not a request
    // line; a known inline command keeps Redis's reply.
    let unknown = resp_command(&[b"PUT", b"/x", b"HTTP/1.1"]);
    assert_eq!(
        client.call(&unknown),
        "-ERR unknown command 'PUT', with args beginning with: '/x' 'HTTP/1.1' \r\n"
    );
    assert_eq!(
        client.call(b"GET / HTTP/1.1\r\n"),
        "-ERR wrong number of arguments for 'get' command\r\n"
    );
    assert_eq!(client.call(b"GET HTTP/1.1\r\n"), "$1\r\n");
    assert_eq!(client.line(), "v\r\n");
    assert_eq!(server.metric("strata_cross_protocol_closes_total"), 0);
    server.terminate();
}
