//! Authentication through the real `strata serve`: memcached's text-protocol authentication
//! (`--memcache-auth-file`, memcached's `-Y`), Redis's `requirepass` beside it, the startup
//! rule that keeps one protocol from being left open while the other is protected, and the
//! warning about listeners open to other hosts without authentication.
//!
//! The replies are memcached 1.6.18's (checked against it by
//! `crates/server/tests/memcache_auth_differential.rs`).

mod harness;

use std::path::PathBuf;

use harness::{resp_command, run_to_exit, Client, Server};

const UNAUTHENTICATED: &str = "CLIENT_ERROR unauthenticated\r\n";

/// An auth file in the temporary directory, removed on drop.
struct AuthFile(PathBuf);

impl AuthFile {
    fn new(name: &str, contents: &[u8]) -> AuthFile {
        let path = std::env::temp_dir().join(format!("strata-{name}-{}.auth", std::process::id()));
        std::fs::write(&path, contents).expect("write auth file");
        AuthFile(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("utf-8 path")
    }
}

impl Drop for AuthFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn redis(client: &mut Client, args: &[&str]) -> String {
    let args: Vec<&[u8]> = args.iter().map(|arg| arg.as_bytes()).collect();
    client.call(&resp_command(&args))
}

/// Reads `count` reply lines.
fn lines(client: &mut Client, count: usize) -> String {
    (0..count).map(|_| client.line()).collect()
}

#[test]
fn memcached_clients_must_authenticate_before_anything_else() {
    let file = AuthFile::new("auth-gate", b"app:s3cret\nops:other\n");
    let mut server = Server::start(&[
        "--requirepass",
        "sesame",
        "--memcache-auth-file",
        file.path(),
    ]);
    // Redis still asks for its password; a key stored through it after AUTH.
    let mut resp = Client::connect(server.resp);
    assert!(redis(&mut resp, &["SET", "k", "v"]).starts_with("-NOAUTH"));
    assert_eq!(redis(&mut resp, &["AUTH", "sesame"]), "+OK\r\n");
    assert_eq!(redis(&mut resp, &["SET", "k", "v"]), "+OK\r\n");

    let mut client = Client::connect(server.memcache);
    for (request, reply) in [
        (&b"get k\r\n"[..], UNAUTHENTICATED),
        (b"gets k\r\n", UNAUTHENTICATED),
        (b"mg k v\r\n", UNAUTHENTICATED),
        (b"flush_all\r\n", UNAUTHENTICATED),
        (b"delete k\r\n", UNAUTHENTICATED),
        (b"version\r\n", UNAUTHENTICATED),
        (b"stats\r\n", UNAUTHENTICATED),
        // `quit` does not close a locked connection (memcached's behaviour): the next
        // requests are answered.
        (b"quit\r\n", UNAUTHENTICATED),
        // A `set` of real data is an authentication attempt with a malformed token.
        (
            b"set k 0 0 1\r\nx\r\n",
            "CLIENT_ERROR bad authentication token format\r\n",
        ),
        (
            b"set k 0 0 9\r\napp wrong\r\n",
            "CLIENT_ERROR authentication failure\r\n",
        ),
        (
            b"set k 0 0 10\r\nops s3cret\r\n",
            "CLIENT_ERROR authentication failure\r\n",
        ),
    ] {
        assert_eq!(client.call(request), reply, "{}", request.escape_ascii());
    }
    // `ms` and its data line: two lines, two refusals.
    client.send(b"ms k 1\r\nx\r\n");
    assert_eq!(lines(&mut client, 2), UNAUTHENTICATED.repeat(2));
    // Nothing reached the store: the key is there, unchanged.
    assert_eq!(redis(&mut resp, &["GET", "k"]), "$1\r\n");
    assert_eq!(resp.line(), "v\r\n");

    assert_eq!(
        client.call(b"set auth 0 0 10\r\napp s3cret\r\n"),
        "STORED\r\n"
    );
    client.send(b"get k\r\n");
    assert_eq!(lines(&mut client, 3), "VALUE k 0 1\r\nv\r\nEND\r\n");
    assert_eq!(client.call(b"ms m 2\r\nhi\r\n"), "HD\r\n");
    client.send(b"mg m v\r\n");
    assert_eq!(lines(&mut client, 2), "VA 2\r\nhi\r\n");
    client.send(b"stats\r\n");
    let stats = read_stats(&mut client);
    assert!(stats.contains("STAT auth_cmds 3\r\n"), "{stats}");
    assert!(stats.contains("STAT auth_errors 2\r\n"), "{stats}");
    client.send(b"stats settings\r\n");
    let settings = read_stats(&mut client);
    let enabled = format!("STAT auth_enabled_ascii {}\r\n", file.path());
    assert!(settings.contains(&enabled), "{settings}");
    server.wait_metric("strata_memcache_auth_errors_total", |n| n == 2);

    // Another connection is locked until it authenticates itself.
    let mut other = Client::connect(server.memcache);
    assert_eq!(other.call(b"get k\r\n"), UNAUTHENTICATED);
    assert_eq!(client.call(b"flush_all\r\n"), "OK\r\n");
    assert_eq!(redis(&mut resp, &["GET", "k"]), "$-1\r\n");
    server.terminate();
}

/// Reads a `stats` reply up to its `END`.
fn read_stats(client: &mut Client) -> String {
    let mut text = String::new();
    loop {
        let line = client.line();
        assert!(
            !line.is_empty(),
            "connection closed in a stats reply: {text}"
        );
        text.push_str(&line);
        if line == "END\r\n" {
            return text;
        }
    }
}

#[test]
fn requirepass_alone_is_refused_while_memcached_listens() {
    let (status, stderr) = run_to_exit(&[
        "serve",
        "--requirepass",
        "sesame",
        "--memcache-listen",
        "127.0.0.1:0",
        "--resp-listen",
        "127.0.0.1:0",
        "--admin-listen",
        "off",
    ]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    for needle in [
        "invalid configuration",
        "--requirepass protects the Redis listener",
        "--memcache-auth-file PATH",
        "--memcache-listen off",
        "--allow-unauthenticated-memcache",
    ] {
        assert!(stderr.contains(needle), "{needle:?} not in: {stderr}");
    }
    let file = AuthFile::new("auth-alone", b"app:s3cret\n");
    let (status, stderr) = run_to_exit(&[
        "serve",
        "--memcache-auth-file",
        file.path(),
        "--memcache-listen",
        "127.0.0.1:0",
        "--resp-listen",
        "127.0.0.1:0",
        "--admin-listen",
        "off",
    ]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    for needle in [
        "--requirepass PASSWORD",
        "--resp-listen off",
        "--allow-unauthenticated-resp",
    ] {
        assert!(stderr.contains(needle), "{needle:?} not in: {stderr}");
    }
}

#[test]
fn requirepass_alone_starts_with_the_override_or_memcached_off() {
    let mut server = Server::start(&[
        "--requirepass",
        "sesame",
        "--allow-unauthenticated-memcache",
    ]);
    let mut client = Client::connect(server.memcache);
    assert_eq!(
        client.call(b"get k\r\n"),
        "END\r\n",
        "memcached open, as asked"
    );
    let mut resp = Client::connect(server.resp);
    assert!(redis(&mut resp, &["GET", "k"]).starts_with("-NOAUTH"));
    server.terminate();

    let mut server = Server::start(&["--requirepass", "sesame", "--memcache-listen", "off"]);
    server.assert_logged("memcache=off");
    let mut resp = Client::connect(server.resp);
    assert!(redis(&mut resp, &["GET", "k"]).starts_with("-NOAUTH"));
    server.terminate();
}

#[test]
fn a_malformed_auth_file_stops_the_start_naming_the_file_and_line() {
    let file = AuthFile::new("auth-bad", b"app:s3cret\n\nops:other\n");
    let (status, stderr) = run_to_exit(&[
        "serve",
        "--memcache-auth-file",
        file.path(),
        "--resp-listen",
        "off",
        "--admin-listen",
        "off",
    ]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    for needle in [file.path(), "line 2", "empty line", "user:password"] {
        assert!(stderr.contains(needle), "{needle:?} not in: {stderr}");
    }
}

#[test]
fn listeners_open_to_other_hosts_without_authentication_are_warned_about() {
    let mut server = Server::start(&[
        "--memcache-listen",
        "0.0.0.0:0",
        "--resp-listen",
        "0.0.0.0:0",
    ]);
    let log = server.log();
    let warnings: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("WITHOUT AUTHENTICATION"))
        .collect();
    assert_eq!(warnings.len(), 2, "one line per listener:\n{log}");
    for (name, addr) in [("memcache", server.memcache), ("resp", server.resp)] {
        let expected = format!("the {name} listener on {addr} is open to other hosts");
        assert!(
            warnings
                .iter()
                .any(|line| line.contains(&expected) && line.contains("WARN")),
            "{expected:?} not in:\n{log}"
        );
    }
    // The listener does serve (0.0.0.0 is reachable through loopback).
    assert_eq!(
        Client::connect(server.memcache).call(b"get k\r\n"),
        "END\r\n"
    );
    server.terminate();

    // Protected listeners, and loopback ones, are started without the warning.
    let file = AuthFile::new("auth-warn", b"app:s3cret\n");
    let mut server = Server::start(&[
        "--memcache-listen",
        "0.0.0.0:0",
        "--memcache-auth-file",
        file.path(),
        "--requirepass",
        "sesame",
    ]);
    assert!(
        !server.log().contains("WITHOUT AUTHENTICATION"),
        "{}",
        server.log()
    );
    server.terminate();
}
