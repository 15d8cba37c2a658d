//! memcached tools and a real client library against the real `strata serve` binary.
//!
//! - `memccapable -a` (libmemcached's protocol conformance tester, ASCII tests only: strata
//!   does not speak the deprecated binary protocol, which `-a` leaves out): every test must
//!   pass. No test is excluded.
//! - libmemcached's command-line clients (`memccp`, `memccat`, `memcexist`, `memctouch`,
//!   `memcrm`, `memcstat`, `memcflush`, `memcslap`) as the real client library: a store, fetch,
//!   touch, delete and stats round trip, and a short load.
//!
//! - `memcdump` (libmemcached's key dump, over `stats cachedump`) and memcached's own
//!   `memcached-tool dump` (over `lru_crawler metadump`, from the memcached package) list every
//!   key stored.
//!
//! Python's pymemcache is not used because `./scripts/test.sh` does not install it.
//!
//! The tools come from Debian's `libmemcached-tools`; `./scripts/test.sh` installs it.

mod harness;

use std::io::{Read, Write};
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

/// `memcdump` and `memcached-tool dump` list every key (memcached-tool's dump is `add`
/// commands that load the items elsewhere: key, flags, expiry and value).
#[test]
fn memcdump_and_memcached_tool_dump_every_key() {
    let server = Server::start(&[]);
    let port = server.memcache.port().to_string();
    let servers = format!("--servers=127.0.0.1:{port}");
    for i in 0..50 {
        let key = format!("dump:{i}");
        let mut client = std::net::TcpStream::connect(server.memcache).unwrap();
        write!(client, "set {key} {i} 0 1\r\nv\r\n").unwrap();
        let mut reply = [0u8; 8];
        client.read_exact(&mut reply).unwrap();
        assert_eq!(&reply, b"STORED\r\n");
    }
    let output = tool("memcdump", &[&servers]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let mut keys: Vec<String> = text(&output.stdout).lines().map(str::to_owned).collect();
    keys.sort();
    let mut want: Vec<String> = (0..50).map(|i| format!("dump:{i}")).collect();
    want.sort();
    assert_eq!(keys, want);
    let output = Command::new("perl")
        .args([
            "/usr/share/memcached/scripts/memcached-tool",
            &format!("127.0.0.1:{port}"),
            "dump",
        ])
        .output()
        .expect("perl and memcached's memcached-tool (the memcached package)");
    assert!(output.status.success(), "{}", text(&output.stderr));
    let dump = text(&output.stdout);
    for i in 0..50 {
        assert!(
            dump.contains(&format!("add dump:{i} {i} 0 1\r\nv\r\n")),
            "{i}: {dump}"
        );
    }
}
