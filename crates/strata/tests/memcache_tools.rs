//! memcached tools and a real client library against the real `strata serve` binary.
//!
//! - `memccapable -a` (libmemcached's protocol conformance tester, ASCII tests only: strata
//!   does not speak the deprecated binary protocol, which `-a` leaves out): every test must
//!   pass. No test is excluded.
//! - libmemcached's command-line clients (`memccp`, `memccat`, `memcexist`, `memctouch`,
//!   `memcrm`, `memcstat`, `memcflush`, `memcslap`) as the real client library: a store, fetch,
//!   touch, delete and stats round trip, and a short load.
//!
//! `memcdump` is not exercised: it needs memcached's `lru_crawler metadump` or
//! `stats cachedump`, which strata answers with `ERROR` (see the session's documentation).
//! Python's pymemcache is not used because `./scripts/test.sh` does not install it.
//!
//! The tools come from Debian's `libmemcached-tools`; `./scripts/test.sh` installs it.

mod harness;

use std::process::{Command, Output};

use harness::Server;

/// Runs a libmemcached tool; fails with how to install it when it is missing.
fn tool(name: &str, args: &[&str]) -> Output {
    Command::new(name)
        .args(args)
        .output()
        .unwrap_or_else(|error| {
            panic!(
            "cannot run {name} ({error}): install libmemcached-tools by running ./scripts/test.sh"
        )
        })
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn memccapable_ascii_tests_all_pass() {
    let server = Server::start(&[]);
    let port = server.memcache.port().to_string();
    let output = tool("memccapable", &["-h", "127.0.0.1", "-p", &port, "-a"]);
    let report = text(&output.stdout) + &text(&output.stderr);
    assert!(output.status.success(), "memccapable failed:\n{report}");
    assert!(
        !report.contains("[fail]"),
        "memccapable failures:\n{report}"
    );
    assert!(report.contains("All tests passed"), "{report}");
    for test in [
        "ascii set",
        "ascii cas",
        "ascii incr",
        "ascii prepend",
        "ascii stat",
    ] {
        assert!(report.contains(test), "{test} did not run:\n{report}");
    }
}

#[test]
fn libmemcached_client_round_trip() {
    let server = Server::start(&[]);
    let servers = format!("--servers={}", server.memcache);
    let dir = std::env::temp_dir().join(format!("strata-memcache-tools-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("greeting.txt");
    std::fs::write(&file, "hello from libmemcached\n").expect("write file");
    let path = file.to_str().expect("utf-8 path");

    let ok = |output: Output, what: &str| {
        assert!(
            output.status.success(),
            "{what}: {}{}",
            text(&output.stdout),
            text(&output.stderr)
        );
        text(&output.stdout)
    };
    ok(tool("memccp", &[&servers, path]), "memccp");
    let value = ok(tool("memccat", &[&servers, "greeting.txt"]), "memccat");
    // memccat prints a newline after each value.
    assert_eq!(value, "hello from libmemcached\n\n");
    ok(tool("memcexist", &[&servers, "greeting.txt"]), "memcexist");
    ok(
        tool("memctouch", &[&servers, "--expire=100", "greeting.txt"]),
        "memctouch",
    );
    ok(tool("memcrm", &[&servers, "greeting.txt"]), "memcrm");
    let missing = tool("memccat", &[&servers, "greeting.txt"]);
    assert!(!missing.status.success(), "the key was deleted");

    let stats = ok(tool("memcstat", &[&servers]), "memcstat");
    assert!(stats.contains("version: 1.6.18-strata-"), "{stats}");
    assert!(stats.contains("curr_items:"), "{stats}");
    let load = [&servers[..], "--concurrency=2", "--execute-number=500"];
    ok(tool("memcslap", &load), "memcslap");
    ok(tool("memcflush", &[&servers]), "memcflush");
    let _ = std::fs::remove_dir_all(&dir);
}
