//! Redis protocol end to end over TCP against the real binary: a smoke test of the wiring
//! (the protocol-exact suites live with the session and its differential tests).

mod harness;

use harness::{resp_command, Client, PoolFile, Server};

/// A RESP command of text arguments.
fn command(args: &[&str]) -> Vec<u8> {
    let args: Vec<&[u8]> = args.iter().map(|arg| arg.as_bytes()).collect();
    resp_command(&args)
}

#[test]
fn ping_set_get_over_tcp() {
    let server = Server::start(&[]);
    let mut client = Client::connect(server.resp);
    assert_eq!(client.call(&command(&["PING"])), "+PONG\r\n");
    assert_eq!(
        client.call(&command(&["SET", "greeting", "hello"])),
        "+OK\r\n"
    );
    assert_eq!(client.call(&command(&["GET", "greeting"])), "$5\r\n");
    assert_eq!(client.line(), "hello\r\n");
    assert_eq!(
        client.call(b"PING\r\n"),
        "+PONG\r\n",
        "inline commands work too"
    );
}

#[test]
fn pipelined_commands_are_answered_in_order() {
    let server = Server::start(&[]);
    let mut client = Client::connect(server.resp);
    let mut batch = Vec::new();
    for i in 0..100 {
        batch.extend(command(&["SET", &format!("k{i}"), &format!("v{i}")]));
        batch.extend(command(&["GET", &format!("k{i}")]));
    }
    client.send(&batch);
    for i in 0..100 {
        assert_eq!(client.line(), "+OK\r\n");
        let value = format!("v{i}");
        assert_eq!(client.line(), format!("${}\r\n", value.len()));
        assert_eq!(client.line(), format!("{value}\r\n"));
    }
}

#[test]
fn connections_spread_over_workers_all_work() {
    let server = Server::start(&["--threads", "3"]);
    let mut clients: Vec<Client> = (0..6).map(|_| Client::connect(server.resp)).collect();
    for (i, client) in clients.iter_mut().enumerate() {
        let key = format!("client{i}");
        assert_eq!(client.call(&command(&["SET", &key, "x"])), "+OK\r\n");
    }
    for client in &mut clients {
        assert_eq!(client.call(&command(&["DBSIZE"])), ":6\r\n");
    }
}

#[test]
fn requirepass_is_enforced() {
    // The memcached listener is off: open beside a protected Redis, it would refuse to start.
    let server = Server::start(&["--requirepass", "sesame", "--memcache-listen", "off"]);
    let mut client = Client::connect(server.resp);
    assert!(client.call(&command(&["GET", "k"])).starts_with("-NOAUTH"));
    assert!(client
        .call(&command(&["AUTH", "wrong"]))
        .starts_with("-WRONGPASS"));
    assert_eq!(client.call(&command(&["AUTH", "sesame"])), "+OK\r\n");
    assert_eq!(client.call(&command(&["GET", "k"])), "$-1\r\n");
}

#[test]
fn commands_move_the_metrics() {
    let mut server = Server::start(&[]);
    let mut client = Client::connect(server.resp);
    assert_eq!(client.call(&command(&["SET", "k", "v"])), "+OK\r\n");
    assert_eq!(client.call(&command(&["GET", "k"])), "$1\r\n");
    assert_eq!(client.line(), "v\r\n");
    server.wait_metric("strata_commands_total{command=\"set\"}", |n| n == 1);
    server.wait_metric("strata_commands_total{command=\"get\"}", |n| n == 1);
    server.wait_metric("strata_items", |n| n == 1);
}

#[test]
fn shutdown_command_stops_the_server_cleanly() {
    let mut server = Server::start(&[]);
    let mut bystander = Client::connect(server.memcache);
    let mut client = Client::connect(server.resp);
    assert_eq!(client.call(&command(&["SET", "k", "v"])), "+OK\r\n");
    client.send(&command(&["SHUTDOWN", "NOSAVE"]));
    assert!(client.closed_by_server());
    assert_eq!(server.wait_exit().code(), Some(0), "{}", server.log());
    assert!(bystander.closed_by_server());
    server.assert_logged("pool closed cleanly");
}

#[test]
fn a_file_pool_restarts_warm_after_sigterm() {
    let pool = PoolFile::new("warm");
    {
        let mut server = Server::start(&["--pool", pool.path(), "--fresh"]);
        let mut client = Client::connect(server.resp);
        assert_eq!(
            client.call(&command(&["SET", "kept", "across restarts"])),
            "+OK\r\n"
        );
        server.terminate();
    }
    let server = Server::start(&["--pool", pool.path()]);
    let mut client = Client::connect(server.resp);
    assert_eq!(client.call(&command(&["GET", "kept"])), "$15\r\n");
    assert_eq!(client.line(), "across restarts\r\n");
}

/// A value over `--max-value-size` (1 MiB by default), far over the request limit that used to
/// close the connection while the client was still sending it.
const VALUE_OVER_LIMIT_BYTES: usize = 3 << 20;

#[test]
fn a_value_over_the_limit_gets_an_error_and_the_connection_stays_open() {
    let server = Server::start(&[]);
    let mut client = Client::connect(server.resp);
    let value = "v".repeat(VALUE_OVER_LIMIT_BYTES);
    // Sent whole, before reading: strata reads and drops it as it arrives.
    client.send(&command(&["SET", "big", &value]));
    assert_eq!(
        client.line(),
        "-ERR string exceeds maximum allowed size (max-value-size)\r\n"
    );
    assert_eq!(
        client.call(b"PING\r\n"),
        "+PONG\r\n",
        "the same connection goes on"
    );
    client.send(b"GET big\r\n");
    assert_eq!(client.bulk(), None, "nothing stored");
    assert_eq!(client.call(&command(&["SET", "small", "v"])), "+OK\r\n");
}

#[test]
fn redis_cli_shows_the_error_for_a_value_over_the_limit() {
    let server = Server::start(&[]);
    let port = server.resp.port().to_string();
    let run = |args: &[&str], stdin: &[u8]| {
        let mut child = std::process::Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &port])
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|error| {
                panic!("cannot run redis-cli ({error}): install redis-tools (./scripts/test.sh)")
            });
        let mut input = child.stdin.take().expect("stdin");
        std::io::Write::write_all(&mut input, stdin).expect("feed redis-cli");
        drop(input);
        let output = child.wait_with_output().expect("redis-cli runs");
        String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr)
    };
    let value = vec![b'v'; VALUE_OVER_LIMIT_BYTES];
    // `-x` sends standard input as the last argument.
    let reply = run(&["-x", "SET", "big"], &value);
    assert_eq!(
        reply.trim(),
        "ERR string exceeds maximum allowed size (max-value-size)",
        "redis-cli prints the error (without a terminal, with no `(error)` prefix)"
    );
    assert_eq!(run(&["EXISTS", "big"], b"").trim(), "0");
}

/// SLOWLOG through the real binary: `--slowlog-log-slower-than 0` logs every command, and an
/// entry names the client's address and name as Redis does.
#[test]
fn slowlog_names_the_client_address_and_name() {
    let server = Server::start(&["--slowlog-log-slower-than", "0"]);
    let mut client = Client::connect(server.resp);
    let local = client
        .stream()
        .local_addr()
        .expect("local address")
        .to_string();
    assert_eq!(
        client.call(&command(&["CLIENT", "SETNAME", "app"])),
        "+OK\r\n"
    );
    assert_eq!(client.call(&command(&["SET", "k", "v"])), "+OK\r\n");
    client.send(&command(&["SLOWLOG", "GET", "1"]));
    assert_eq!(client.line(), "*1\r\n");
    assert_eq!(client.line(), "*6\r\n");
    for _ in 0..3 {
        assert!(client.line().starts_with(':'));
    }
    assert_eq!(client.line(), "*3\r\n");
    for arg in ["SET", "k", "v"] {
        assert_eq!(client.bulk(), Some(arg.as_bytes().to_vec()));
    }
    assert_eq!(
        client.bulk(),
        Some(local.into_bytes()),
        "the client's address"
    );
    assert_eq!(client.bulk(), Some(b"app".to_vec()), "the client's name");
}

/// redis-cli's key-space tools work against strata: `--bigkeys` finds the largest string and
/// `--memkeys` (MEMORY USAGE per key) sums a byte count at least the values' (it reported 0
/// bytes when strata had no MEMORY command).
#[test]
fn redis_cli_bigkeys_and_memkeys_report_the_keys() {
    let server = Server::start(&[]);
    let mut client = Client::connect(server.resp);
    for i in 1..=50usize {
        let value = "x".repeat(i * 10);
        let key = format!("key:{i}");
        assert_eq!(client.call(&command(&["SET", &key, &value])), "+OK\r\n");
    }
    let port = server.resp.port().to_string();
    let run = |tool: &str| {
        let output = std::process::Command::new("redis-cli")
            .args(["-p", &port, tool])
            .output()
            .unwrap_or_else(|e| panic!("cannot run redis-cli ({e}): install redis-tools"));
        assert!(output.status.success(), "redis-cli {tool} failed");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let bigkeys = run("--bigkeys");
    assert!(
        bigkeys.contains("Biggest string found '\"key:50\"' has 500 bytes"),
        "{bigkeys}"
    );
    let memkeys = run("--memkeys");
    let line = memkeys
        .lines()
        .find(|l| l.starts_with("50 strings with "))
        .unwrap_or_else(|| panic!("{memkeys}"));
    let bytes: u64 = line
        .trim_start_matches("50 strings with ")
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let values: u64 = (1..=50u64).map(|i| i * 10).sum();
    assert!(bytes >= values, "{line}");
}

/// OBJECT FREQ counts a key's reads since it was written (a write starts over), IDLETIME gets
/// Redis's reply under an LFU policy (strata keeps reads, not times), and `redis-cli --hotkeys`,
/// which reads OBJECT FREQ per key, names the most read key.
#[test]
fn object_freq_counts_reads_and_redis_cli_finds_hot_keys() {
    let server = Server::start(&[]);
    let mut client = Client::connect(server.resp);
    for i in 0..20usize {
        let key = format!("key:{i}");
        assert_eq!(client.call(&command(&["SET", &key, "v"])), "+OK\r\n");
    }
    assert_eq!(
        client.call(&command(&["OBJECT", "FREQ", "key:7"])),
        ":0\r\n"
    );
    let mut get = |key: &str| {
        assert_eq!(client.call(&command(&["GET", key])), "$1\r\n");
        assert_eq!(client.line(), "v\r\n");
    };
    for _ in 0..4 {
        get("key:7");
    }
    get("key:3");
    assert_eq!(
        client.call(&command(&["OBJECT", "FREQ", "key:7"])),
        ":4\r\n"
    );
    assert_eq!(
        client.call(&command(&["OBJECT", "FREQ", "key:7"])),
        ":4\r\n",
        "OBJECT reads without counting"
    );
    for _ in 0..10 {
        assert_eq!(client.call(&command(&["GET", "key:7"])), "$1\r\n");
        assert_eq!(client.line(), "v\r\n");
    }
    assert_eq!(
        client.call(&command(&["OBJECT", "FREQ", "key:7"])),
        ":6\r\n",
        "the count saturates"
    );
    assert_eq!(
        client.call(&command(&["OBJECT", "FREQ", "nokey"])),
        "$-1\r\n"
    );
    assert_eq!(
        client.call(&command(&["OBJECT", "IDLETIME", "key:7"])),
        "-ERR An LFU maxmemory policy is selected, idle time not tracked. Please note that \
         when switching between policies at runtime LRU and LFU data will take some time to \
         adjust.\r\n"
    );
    let output = std::process::Command::new("redis-cli")
        .args(["-p", &server.resp.port().to_string(), "--hotkeys"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run redis-cli ({e}): install redis-tools"));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "redis-cli --hotkeys failed: {text}"
    );
    let first = text
        .lines()
        .find(|l| l.starts_with("hot key found with counter"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(first.contains("key:7") && first.contains(": 6"), "{text}");
    assert_eq!(client.call(&command(&["SET", "key:7", "w"])), "+OK\r\n");
    assert_eq!(
        client.call(&command(&["OBJECT", "FREQ", "key:7"])),
        ":0\r\n",
        "a write starts the count over"
    );
}

/// Reads `lines` lines of what `redis-cli ARGS` prints (unbuffered through `stdbuf`), then
/// stops it: for its modes that run until interrupted.
fn redis_cli_lines(port: u16, args: &[&str], lines: usize) -> Vec<String> {
    use std::io::BufRead;
    let mut child = std::process::Command::new("stdbuf")
        .args(["-o0", "redis-cli", "-p", &port.to_string()])
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run stdbuf redis-cli ({e}): install redis-tools"));
    let stdout = child.stdout.take().expect("piped");
    let read: Vec<String> = std::io::BufReader::new(stdout)
        .lines()
        .take(lines)
        .map(|line| line.expect("text"))
        .collect();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(
        read.len(),
        lines,
        "redis-cli {args:?} stopped early: {read:?}"
    );
    read
}

/// `redis-cli --stat` reads INFO every interval and prints keys, clients and requests that
/// move as they should; `--latency-history` measures PING round trips.
#[test]
fn redis_cli_stat_and_latency_work() {
    let server = Server::start(&[]);
    let mut client = Client::connect(server.resp);
    for i in 0..20usize {
        let key = format!("key:{i}");
        assert_eq!(client.call(&command(&["SET", &key, "v"])), "+OK\r\n");
    }
    let port = server.resp.port();
    let stat = redis_cli_lines(port, &["--stat", "-i", "0.2"], 4);
    assert!(
        stat[0].contains("data") && stat[1].starts_with("keys"),
        "{stat:?}"
    );
    let row = |line: &str| -> Vec<String> { line.split_whitespace().map(str::to_owned).collect() };
    let (first, second) = (row(&stat[2]), row(&stat[3]));
    assert_eq!(first[0], "20", "keys: {stat:?}");
    assert!(first[2].parse::<u64>().unwrap() >= 2, "clients: {stat:?}");
    let requests = |r: &[String]| r[4].parse::<u64>().unwrap();
    assert!(
        requests(&second) > requests(&first),
        "requests move: {stat:?}"
    );
    let latency = redis_cli_lines(port, &["--latency-history", "-i", "1"], 1);
    let fields: Vec<f64> = latency[0]
        .split_whitespace()
        .map(|f| f.parse().unwrap_or_else(|_| panic!("{latency:?}")))
        .collect();
    assert_eq!(fields.len(), 4, "min max avg samples: {latency:?}");
    assert!(fields[3] >= 1.0 && fields[0] <= fields[1], "{latency:?}");
}
