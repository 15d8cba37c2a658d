//! `strata serve` as a process: startup, admin endpoint, limits, shutdown, bad configuration.

mod harness;

use std::io::Write;
use std::net::TcpStream;

use harness::{run_to_exit, Client, Server};

#[test]
fn health_answers_ok() {
    let server = Server::start(&[]);
    assert_eq!(server.http_get("/health"), (200, "OK\n".to_string()));
    assert_eq!(server.http_get("/nope").0, 404);
}

#[test]
fn metrics_expose_the_expected_families_and_move_with_traffic() {
    let mut server = Server::start(&[]);
    let (status, body) = server.http_get("/metrics");
    assert_eq!(status, 200);
    for name in [
        "strata_commands_total{command=\"get\"}",
        "strata_get_hits_total",
        "strata_get_misses_total",
        "strata_evictions_total",
        "strata_expirations_total",
        "strata_items",
        "strata_bytes",
        "strata_connections_current",
        "strata_connections_total",
        "strata_connections_rejected_total",
        "strata_read_bytes_total",
        "strata_written_bytes_total",
        "strata_request_batch_duration_seconds_bucket{le=\"+Inf\"}",
        "strata_request_batch_duration_seconds_count",
    ] {
        assert!(body.contains(&format!("\n{name} ")), "missing {name}");
    }
    assert_eq!(server.metric("strata_connections_total"), 0);
    let mut client = Client::connect(server.memcache);
    assert!(client.call(b"version\r\n").ends_with("\r\n"));
    server.wait_metric("strata_connections_total", |n| n == 1);
    server.wait_metric("strata_read_bytes_total", |n| n == 9);
    server.wait_metric("strata_request_batch_duration_seconds_count", |n| n >= 1);
    server.wait_metric("strata_connections_current", |n| n == 1);
    drop(client);
    server.wait_metric("strata_connections_current", |n| n == 0);
}

#[test]
fn sigterm_exits_zero_and_closes_the_listeners() {
    let mut server = Server::start(&[]);
    let mut client = Client::connect(server.resp);
    assert!(client.call(b"PING\r\n").ends_with("\r\n"));
    server.signal("TERM");
    let status = server.wait_exit();
    assert_eq!(status.code(), Some(0), "{}", server.log());
    assert!(client.closed_by_server());
    assert!(
        TcpStream::connect(server.memcache).is_err(),
        "listener closed"
    );
    assert!(
        server.log().contains("pool closed cleanly"),
        "{}",
        server.log()
    );
}

#[test]
fn sigint_exits_zero() {
    let mut server = Server::start(&[]);
    server.signal("INT");
    assert_eq!(server.wait_exit().code(), Some(0), "{}", server.log());
}

#[test]
fn connections_over_the_limit_get_the_reference_refusal() {
    let mut server = Server::start(&["--max-connections", "2"]);
    let _first = Client::connect(server.memcache);
    let _second = Client::connect(server.resp);
    server.wait_metric("strata_connections_current", |n| n == 2);
    let mut memcache = Client::connect(server.memcache);
    assert_eq!(memcache.line(), "ERROR Too many open connections\r\n");
    assert!(memcache.closed_by_server());
    let mut resp = Client::connect(server.resp);
    assert_eq!(resp.line(), "-ERR max number of clients reached\r\n");
    assert!(resp.closed_by_server());
    assert_eq!(server.metric("strata_connections_rejected_total"), 2);
    assert!(
        server.log().contains("refused connections"),
        "{}",
        server.log()
    );
}

#[test]
fn a_huge_request_without_newline_is_dropped_while_others_carry_on() {
    // Largest request: 1 KiB value + 64 KiB of room for the command.
    let server = Server::start(&["--max-value-size", "1KiB"]);
    let mut abuser = Client::connect(server.memcache);
    let mut neighbour = Client::connect(server.memcache);
    let chunk = vec![b'a'; 16 << 10];
    for _ in 0..16 {
        if abuser.stream().write_all(&chunk).is_err() {
            break; // Already closed by the server.
        }
    }
    assert!(abuser.closed_by_server());
    assert!(neighbour.call(b"version\r\n").ends_with("\r\n"));
}

#[test]
fn invalid_flags_exit_2_with_a_message() {
    for (args, needle) in [
        (&["serve", "--threads", "0"][..], "--threads"),
        (&["serve", "--memory", "lots"], "--memory"),
        (&["serve", "--memory", "1MiB"], "--memory"),
        (&["serve", "--eviction", "lru"], "--eviction"),
        (&["serve", "--no-such-flag"], "--no-such-flag"),
        (
            &["serve", "--config", "/nonexistent/strata.toml"],
            "/nonexistent/strata.toml",
        ),
    ] {
        let (status, stderr) = run_to_exit(args);
        assert_eq!(status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}

#[test]
fn a_port_in_use_fails_with_exit_1_and_names_the_listener() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let (status, stderr) = run_to_exit(&[
        "serve",
        "--memcache-listen",
        &addr,
        "--resp-listen",
        "off",
        "--admin-listen",
        "off",
    ]);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--memcache-listen"), "{stderr}");
}

#[test]
fn idle_clients_are_closed_after_the_idle_timeout() {
    let server = Server::start(&["--idle-timeout", "1"]);
    let mut idle = Client::connect(server.resp);
    assert!(
        idle.closed_by_server(),
        "closed without having sent anything"
    );
}

#[test]
fn a_half_sent_request_holds_no_worker_hostage() {
    let server = Server::start(&["--threads", "1"]);
    let mut slow = Client::connect(server.memcache);
    slow.send(b"set k 0 0 10\r\nabc");
    let mut other = Client::connect(server.memcache);
    assert_eq!(other.call(b"set j 0 0 1\r\nx\r\n"), "STORED\r\n");
    slow.send(b"defghij\r\n");
    assert_eq!(slow.line(), "STORED\r\n");
}

#[test]
fn connections_waiting_while_out_of_file_descriptors_are_served_once_some_close() {
    // 48 descriptors: the server's own take about 16, so some of 60 clients wait in the
    // listen backlog, where no new readiness event will announce them.
    let server = Server::start_wrapped(&["prlimit", "--nofile=48:48"], &[]);
    let mut clients: Vec<Client> = (0..60).map(|_| Client::connect(server.memcache)).collect();
    for client in &mut clients {
        client.send(b"version\r\n");
    }
    let waiting = clients.split_off(40);
    drop(clients);
    for mut client in waiting {
        assert!(client.line().starts_with("VERSION "), "{}", server.log());
    }
    assert!(
        server.log().contains("accept failed; retrying"),
        "{}",
        server.log()
    );
}
