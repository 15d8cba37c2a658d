//! CLIENT LIST and CLIENT KILL across worker threads, against the real binary: every client
//! is listed with what it set, and a kill closes an idle connection on another worker at once.

mod harness;

use std::time::{Duration, Instant};

use harness::{resp_command, Client, Server};

fn command(args: &[&str]) -> Vec<u8> {
    let args: Vec<&[u8]> = args.iter().map(|arg| arg.as_bytes()).collect();
    resp_command(&args)
}

/// `CLIENT LIST`'s text (a bulk string in RESP2).
fn client_list(client: &mut Client) -> String {
    client.send(&command(&["CLIENT", "LIST"]));
    String::from_utf8(client.bulk().expect("a bulk")).unwrap()
}

/// A client's id (`CLIENT ID`).
fn client_id(client: &mut Client) -> u64 {
    let reply = client.call(&command(&["CLIENT", "ID"]));
    reply.trim_start_matches(':').trim_end().parse().unwrap()
}

/// Whether the server closes `client` within a few seconds (it sends nothing meanwhile).
fn closed_soon(client: &mut Client) -> bool {
    client
        .stream()
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let started = Instant::now();
    client.closed_by_server() && started.elapsed() < Duration::from_secs(5)
}

/// Waits (up to 10 s) until `CLIENT LIST` shows a client at `addr`.
fn wait_until_listed(admin: &mut Client, addr: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let field = format!(" addr={addr} ");
    while !client_list(admin).contains(&field) {
        assert!(Instant::now() < deadline, "{addr} was never listed");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The id in a `CLIENT LIST` line.
fn id_of(line: &str) -> u64 {
    line.strip_prefix("id=")
        .and_then(|rest| rest.split(' ').next())
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn client_list_shows_every_client_with_what_it_set() {
    let server = Server::start(&["--threads", "2"]);
    let mut admin = Client::connect(server.resp);
    let mut named = Client::connect(server.resp);
    let mut idle = Client::connect(server.resp);
    let idle_addr = idle.stream().local_addr().unwrap().to_string();
    assert_eq!(
        named.call(&command(&["CLIENT", "SETNAME", "worker-a"])),
        "+OK\r\n"
    );
    assert_eq!(named.call(&command(&["MULTI"])), "+OK\r\n");
    assert_eq!(named.call(&command(&["SET", "k", "v"])), "+QUEUED\r\n");
    let admin_id = client_id(&mut admin);
    wait_until_listed(&mut admin, &idle_addr);
    let list = client_list(&mut admin);
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(lines.len(), 3, "admin, named and idle: {list}");
    let named_line = lines
        .iter()
        .find(|l| l.contains(" name=worker-a "))
        .unwrap_or_else(|| panic!("the named client is listed: {list}"));
    for field in [" multi=1 ", " flags=x ", " cmd=set ", " addr=127.0.0.1:"] {
        assert!(named_line.contains(field), "{field} in {named_line}");
    }
    let admin_line = lines.iter().find(|l| id_of(l) == admin_id).unwrap();
    assert!(admin_line.contains(" cmd=client|list "), "{admin_line}");
    let filtered = {
        admin.send(&command(&["CLIENT", "LIST", "ID", &admin_id.to_string()]));
        String::from_utf8(admin.bulk().unwrap()).unwrap()
    };
    assert_eq!(filtered.lines().count(), 1, "{filtered}");
}

/// The value of `field` in a `CLIENT LIST` line.
fn field_of(line: &str, field: &str) -> u64 {
    let prefix = format!("{field}=");
    line.split(' ')
        .find_map(|word| word.strip_prefix(prefix.as_str()))
        .unwrap_or_else(|| panic!("{field} in {line}"))
        .parse()
        .unwrap()
}

/// Waits (up to 10 s) until the `CLIENT LIST` line of the client at `addr` passes `ok`;
/// returns it.
fn wait_for_line(admin: &mut Client, addr: &str, ok: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    let field = format!(" addr={addr} ");
    loop {
        let list = client_list(admin);
        let line = list.lines().find(|l| l.contains(&field)).map(str::to_owned);
        if let Some(line) = line.filter(|line| ok(line)) {
            return line;
        }
        assert!(Instant::now() < deadline, "{addr}: {list}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// CLIENT LIST shows what each connection's buffers hold, as Redis's does: a client halfway
/// through sending a large SET has it in `qbuf`; one that stops reading the replies to its
/// GETs of a large value has them in `obl`, `oll` and `omem`; an idle one holds only its two
/// base buffers. (All were 0 before.)
#[test]
fn client_list_shows_what_each_client_buffers() {
    let server = Server::start(&["--threads", "2"]);
    let mut admin = Client::connect(server.resp);
    let value = vec![b'v'; 1 << 20];
    assert_eq!(
        admin.call(&resp_command(&[b"SET", b"big", &value])),
        "+OK\r\n"
    );
    // Half of a 200 KB SET, the rest never sent.
    let mut sender = Client::connect(server.resp);
    let sender_addr = sender.stream().local_addr().unwrap().to_string();
    let request = resp_command(&[b"SET", b"half", &vec![b'h'; 200_000]]);
    sender.send(&request[..100_000]);
    let line = wait_for_line(&mut admin, &sender_addr, |l| field_of(l, "qbuf") >= 100_000);
    assert_eq!(field_of(&line, "qbuf"), 100_000, "{line}");
    assert!(field_of(&line, "tot-mem") >= 100_000, "{line}");
    // 64 GETs of 1 MiB, their replies never read: past what the sockets take, they wait in
    // the connection's output.
    let mut reader = Client::connect(server.resp);
    let reader_addr = reader.stream().local_addr().unwrap().to_string();
    let gets: Vec<u8> = (0..64)
        .flat_map(|_| resp_command(&[b"GET", b"big"]))
        .collect();
    reader.send(&gets);
    let line = wait_for_line(&mut admin, &reader_addr, |l| field_of(l, "omem") > 1 << 20);
    assert_eq!(field_of(&line, "obl"), 16 << 10, "{line}");
    assert!(field_of(&line, "oll") > 0, "{line}");
    assert!(field_of(&line, "tot-mem") > 1 << 20, "{line}");
    // INFO clients names the largest of them, as Redis's does.
    admin.send(&command(&["INFO", "clients"]));
    let info = String::from_utf8(admin.bulk().expect("a bulk")).unwrap();
    let info_field = |name: &str| -> u64 {
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .unwrap_or_else(|| panic!("{name} in {info}"))
            .trim()
            .parse()
            .unwrap()
    };
    assert!(
        info_field("client_recent_max_input_buffer") >= 100_000,
        "{info}"
    );
    assert!(
        info_field("client_recent_max_output_buffer") >= field_of(&line, "omem"),
        "{info}"
    );
    // An idle client: nothing held beyond its base buffers.
    let mut idle = Client::connect(server.resp);
    let idle_addr = idle.stream().local_addr().unwrap().to_string();
    assert_eq!(idle.call(&command(&["PING"])), "+PONG\r\n");
    let line = wait_for_line(&mut admin, &idle_addr, |l| l.contains(" cmd=ping "));
    for (field, expected) in [("qbuf", 0), ("obl", 0), ("oll", 0), ("omem", 0)] {
        assert_eq!(field_of(&line, field), expected, "{field}: {line}");
    }
    assert_eq!(field_of(&line, "qbuf-free"), 16 << 10, "{line}");
    assert_eq!(field_of(&line, "tot-mem"), 32 << 10, "{line}");
    drop(sender);
    drop(reader);
}

#[test]
fn client_kill_closes_clients_at_once_on_any_worker() {
    let server = Server::start(&["--threads", "2"]);
    let mut admin = Client::connect(server.resp);
    let mut idle = Client::connect(server.resp);
    let mut named = Client::connect(server.resp);
    assert_eq!(named.call(&command(&["PING"])), "+PONG\r\n");
    let named_id = client_id(&mut named);
    let admin_id = client_id(&mut admin);
    // The idle client (it sent nothing) is killed by its address: closed at once. It is a
    // client once its worker has taken it from the acceptor (the kernel completes the
    // handshake before that, as it does before Redis's accept), so wait until it is listed.
    let idle_addr = idle.stream().local_addr().unwrap().to_string();
    wait_until_listed(&mut admin, &idle_addr);
    assert_eq!(
        admin.call(&command(&["CLIENT", "KILL", "ADDR", &idle_addr])),
        ":1\r\n"
    );
    assert!(closed_soon(&mut idle), "the killed idle client was closed");
    let kill_named = command(&["CLIENT", "KILL", "ID", &named_id.to_string()]);
    assert_eq!(admin.call(&kill_named), ":1\r\n");
    assert!(closed_soon(&mut named), "the killed client was closed");
    assert_eq!(admin.call(&kill_named), ":0\r\n", "gone from the list");
    let mut other = Client::connect(server.resp);
    let other_addr = other.stream().local_addr().unwrap().to_string();
    assert_eq!(other.call(&command(&["PING"])), "+PONG\r\n");
    assert_eq!(
        admin.call(&command(&["CLIENT", "KILL", &other_addr])),
        "+OK\r\n"
    );
    assert!(closed_soon(&mut other));
    assert_eq!(
        admin.call(&command(&["CLIENT", "KILL", "TYPE", "normal"])),
        ":0\r\n",
        "SKIPME yes by default: only the caller was left"
    );
    let kill_self = [
        "CLIENT",
        "KILL",
        "ID",
        &admin_id.to_string(),
        "SKIPME",
        "no",
    ];
    assert_eq!(admin.call(&command(&kill_self)), ":1\r\n");
    assert!(
        closed_soon(&mut admin),
        "a client that kills itself is closed after the reply"
    );
}

/// memcached connections are clients too: CLIENT LIST marks them `proto=memcache`, memcached's
/// `stats conns` lists every connection with its address, and CLIENT KILL closes one.
#[test]
fn memcached_connections_are_listed_and_killed_like_redis_ones() {
    let server = Server::start(&["--threads", "2"]);
    let mut admin = Client::connect(server.resp);
    let mut memcache = Client::connect(server.memcache);
    assert!(memcache.call(b"version\r\n").starts_with("VERSION"));
    let memcache_addr = memcache.stream().local_addr().unwrap().to_string();
    let list = client_list(&mut admin);
    let line = list
        .lines()
        .find(|l| l.contains(&format!(" addr={memcache_addr} ")))
        .unwrap_or_else(|| panic!("the memcached connection is listed: {list}"));
    assert!(line.ends_with(" proto=memcache"), "{line}");
    // memcached's own view: this connection, and the Redis one.
    memcache.send(b"stats conns\r\n");
    let mut stats = Vec::new();
    loop {
        let line = memcache.line();
        if line == "END\r\n" {
            break;
        }
        stats.push(line);
    }
    let addr_line = format!(":addr tcp:{memcache_addr}\r\n");
    assert!(stats.iter().any(|l| l.ends_with(&addr_line)), "{stats:?}");
    assert_eq!(
        stats.len(),
        8,
        "four lines for each of the two connections: {stats:?}"
    );
    assert_eq!(
        admin.call(&command(&[
            "CLIENT",
            "KILL",
            "ID",
            &id_of(line).to_string()
        ])),
        ":1\r\n"
    );
    assert!(
        closed_soon(&mut memcache),
        "the killed memcached connection was closed"
    );
}

/// Whether `client` has a reply waiting within `ms` milliseconds (false: none came).
fn reply_within(client: &mut Client, ms: u64) -> bool {
    let stream = client.stream();
    stream
        .set_read_timeout(Some(std::time::Duration::from_millis(ms)))
        .unwrap();
    let mut byte = [0u8; 1];
    let ready = matches!(stream.peek(&mut byte), Ok(n) if n > 0);
    stream.set_read_timeout(Some(harness::WAIT_MAX)).unwrap();
    ready
}

/// CLIENT PAUSE WRITE holds writes (and what a client sent after one) on every worker while
/// reads go on; ALL holds reads too; UNPAUSE lets them run at once, and a pause's end without
/// one does too. Nothing is refused, nothing is lost; memcached clients are not paused.
#[test]
fn client_pause_holds_writes_or_everything_until_it_ends() {
    let server = Server::start(&["--threads", "2"]);
    let mut admin = Client::connect(server.resp);
    let mut writer = Client::connect(server.resp);
    let mut reader = Client::connect(server.resp);
    assert_eq!(writer.call(&command(&["SET", "k", "old"])), "+OK\r\n");
    assert_eq!(
        admin.call(&command(&["CLIENT", "PAUSE", "30000", "WRITE"])),
        "+OK\r\n"
    );
    writer.send(&command(&["SET", "k", "new"]));
    writer.send(&command(&["GET", "k"]));
    assert!(!reply_within(&mut writer, 300), "a write is held");
    reader.send(&command(&["GET", "k"]));
    assert_eq!(reader.bulk().as_deref(), Some(&b"old"[..]), "reads go on");
    let mut memcache = Client::connect(server.memcache);
    assert_eq!(memcache.call(b"set m 0 0 1\r\nx\r\n"), "STORED\r\n");
    assert_eq!(admin.call(&command(&["CLIENT", "UNPAUSE"])), "+OK\r\n");
    assert_eq!(writer.line(), "+OK\r\n");
    assert_eq!(writer.bulk().as_deref(), Some(&b"new"[..]));
    // ALL holds reads too; its end, without UNPAUSE, lets them through.
    assert_eq!(
        admin.call(&command(&["CLIENT", "PAUSE", "2000", "ALL"])),
        "+OK\r\n"
    );
    reader.send(&command(&["GET", "k"]));
    assert!(!reply_within(&mut reader, 150), "a read is held");
    assert_eq!(
        reader.bulk().as_deref(),
        Some(&b"new"[..]),
        "answered once it ends"
    );
}
