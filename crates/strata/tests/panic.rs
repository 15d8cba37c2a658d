//! The panic policy (issue 17): a panicking worker closes its connections and serves again; a
//! panicking acceptor ends the process; `/health` tells which. The faults are injected with the
//! Redis `DEBUG` command, which `--enable-debug-command` turns on (as Redis's
//! `enable-debug-command`).
//!
//! Before the policy, a panic in `strata-worker-0` killed that thread silently: the acceptor
//! kept handing it connections, which were accepted and dropped, and `/health` still said 200.

mod harness;

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use harness::{resp_command, Client, Server};

/// Redis 7.0's refusal of `DEBUG` while `enable-debug-command` is `no`.
const DEBUG_REFUSED: &str = "-ERR DEBUG command not allowed. If the enable-debug-command option \
                             is set to \"local\", you can run it from a local connection, \
                             otherwise you need to set this option in the configuration file, \
                             and then restart the server.\r\n";

/// Longest a probe may take: only a hang misses it.
const PROBE_TIME_MAX: Duration = Duration::from_secs(1);

fn ping(client: &mut Client) -> String {
    client.call(&resp_command(&[b"PING"]))
}

/// `/health` within [`PROBE_TIME_MAX`].
fn health(server: &Server) -> (u16, String) {
    let started = Instant::now();
    let answer = server.http_get("/health");
    assert!(
        started.elapsed() < PROBE_TIME_MAX,
        "{:?}",
        started.elapsed()
    );
    answer
}

/// Connections are dealt to the workers round-robin in the order they are accepted: each
/// client here is accepted (it has an answer) before the next connects.
fn connect_in_order(server: &Server, count: usize) -> Vec<Client> {
    (0..count)
        .map(|_| {
            let mut client = Client::connect(server.resp);
            assert_eq!(ping(&mut client), "+PONG\r\n");
            client
        })
        .collect()
}

fn a_worker_panic_closes_its_connections_and_the_worker_serves_again(threads: usize) {
    let server = Server::start(&["--threads", &threads.to_string(), "--enable-debug-command"]);
    assert_eq!(health(&server), (200, "OK\n".to_string()));
    // Clients 0 and 2 land on worker 0, client 1 on worker 1 when there are two workers.
    let mut clients = connect_in_order(&server, 3);
    let set = resp_command(&[b"SET", b"kept", b"across the panic"]);
    assert_eq!(clients[1].call(&set), "+OK\r\n");

    clients[2].send(&resp_command(&[b"DEBUG", b"PANIC"]));
    assert!(
        clients[2].closed_by_server(),
        "the panicking connection is closed"
    );
    assert!(
        clients[0].closed_by_server(),
        "worker 0's other connection too"
    );
    let (status, body) = health(&server);
    assert!(
        (status, body.as_str()) == (200, "OK\n")
            || (status, body.as_str()) == (503, "worker 0 restarting after a panic\n"),
        "{status} {body}"
    );
    let mut server = server;
    let closed = if threads == 1 { 3 } else { 2 };
    server.wait_metric("strata_worker_panics_total", |n| n == 1);
    server.wait_metric("strata_panic_closed_connections_total", |n| n == closed);
    server.wait_until(|s| s.http_get("/health").0 == 200, "/health back to 200");
    if threads > 1 {
        assert_eq!(
            ping(&mut clients[1]),
            "+PONG\r\n",
            "worker 1's client is untouched"
        );
    }
    server.assert_logged("panic: the worker closes its connections and restarts");
    server.assert_logged("thread=\"strata-worker-0\"");
    server.assert_logged("DEBUG PANIC: a client asked this worker to panic");
    server.assert_logged("debug.rs:");
    server.assert_logged("worker restarting after a panic; its connections were closed");

    // New connections reach every worker, the restarted one included, and the data is there.
    for mut client in connect_in_order(&server, threads + 1) {
        assert_eq!(
            client.call(&resp_command(&[b"GET", b"kept"])),
            "$16\r\n",
            "the store kept its data"
        );
        assert_eq!(client.line(), "across the panic\r\n");
    }
    let mut memcache = Client::connect(server.memcache);
    assert_eq!(memcache.call(b"get kept\r\n"), "VALUE kept 0 16\r\n");
    assert_eq!(memcache.line(), "across the panic\r\n");
    assert_eq!(memcache.line(), "END\r\n");
    // The counts are in INFO and memcached stats too.
    let mut info = Client::connect(server.resp);
    info.send(&resp_command(&[b"INFO", b"strata"]));
    let info = String::from_utf8(info.bulk().expect("INFO")).expect("text");
    assert!(info.contains("\r\nworker_panics:1\r\n"), "{info}");
    assert!(info.contains(&format!("\r\npanic_closed_connections:{closed}\r\n")));
    memcache.send(b"stats\r\n");
    let stats: Vec<String> = std::iter::from_fn(|| Some(memcache.line()))
        .take_while(|line| line != "END\r\n" && !line.is_empty())
        .collect();
    assert!(
        stats.contains(&"STAT strata_worker_panics 1\r\n".to_string()),
        "{stats:?}"
    );
    server.terminate();
}

#[test]
fn a_worker_panic_with_one_worker() {
    a_worker_panic_closes_its_connections_and_the_worker_serves_again(1);
}

#[test]
fn a_worker_panic_with_two_workers() {
    a_worker_panic_closes_its_connections_and_the_worker_serves_again(2);
}

#[test]
fn a_panic_on_the_acceptor_ends_the_process_with_sigabrt() {
    let mut server = Server::start(&["--enable-debug-command"]);
    let mut client = Client::connect(server.resp);
    let reply = client.call(&resp_command(&[b"DEBUG", b"PANIC-ACCEPTOR"]));
    assert_eq!(reply, "+OK\r\n");
    // The acceptor panics on its next connection.
    let _next = std::net::TcpStream::connect(server.resp);
    let status = server.wait_exit();
    assert_eq!(
        status.signal(),
        Some(6),
        "SIGABRT: {status:?}\n{}",
        server.log()
    );
    server.assert_logged("panic on a thread strata cannot run without: aborting the process");
    server.assert_logged("DEBUG PANIC-ACCEPTOR: a client asked the acceptor to panic");
}

#[test]
fn debug_is_refused_unless_enabled_as_in_redis() {
    let mut server = Server::start(&[]);
    let mut client = Client::connect(server.resp);
    for args in [&[&b"DEBUG"[..], b"PANIC"][..], &[b"DEBUG", b"SLEEP", b"0"]] {
        assert_eq!(client.call(&resp_command(args)), DEBUG_REFUSED);
    }
    assert_eq!(
        client.call(&resp_command(&[b"DEBUG"])),
        "-ERR wrong number of arguments for 'debug' command\r\n"
    );
    assert_eq!(client.call(b"DEBUG PANIC\r\n"), DEBUG_REFUSED, "inline too");
    assert_eq!(server.metric("strata_worker_panics_total"), 0);
    server.terminate();

    let mut server = Server::start(&["--enable-debug-command"]);
    let mut client = Client::connect(server.resp);
    assert_eq!(
        client.call(&resp_command(&[b"DEBUG", b"sleep", b"0"])),
        "-ERR unknown subcommand or wrong number of arguments for 'sleep'. Try DEBUG HELP.\r\n"
    );
    assert_eq!(client.call(&resp_command(&[b"DEBUG", b"HELP"])), "*7\r\n");
    assert_eq!(
        client.line(),
        "+DEBUG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:\r\n"
    );
    server.terminate();
}
