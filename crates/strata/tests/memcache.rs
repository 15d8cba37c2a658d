//! memcached protocol end to end over TCP against the real binary (a smoke test of the wiring;
//! the protocol-exact suites live with the session), and the three views of the counters —
//! memcached `stats`, Redis INFO and Prometheus /metrics — agreeing.

mod harness;

use std::collections::HashMap;

use harness::{Client, PoolFile, Server};

#[test]
fn set_get_delete_over_tcp() {
    let server = Server::start(&[]);
    let mut client = Client::connect(server.memcache);
    assert_eq!(client.call(b"set k 5 0 3\r\nabc\r\n"), "STORED\r\n");
    assert_eq!(client.call(b"get k\r\n"), "VALUE k 5 3\r\n");
    assert_eq!(client.line(), "abc\r\n");
    assert_eq!(client.line(), "END\r\n");
    assert_eq!(client.call(b"delete k\r\n"), "DELETED\r\n");
    assert_eq!(client.call(b"get k\r\n"), "END\r\n");
    assert!(client.call(b"version\r\n").starts_with("VERSION "));
}

#[test]
fn a_pipelined_batch_and_a_multi_get_are_answered_in_order() {
    let server = Server::start(&[]);
    let mut client = Client::connect(server.memcache);
    let mut batch = Vec::new();
    for i in 0..100 {
        batch.extend(
            format!(
                "set key{i} 0 0 {}\r\nvalue{i}\r\n",
                format!("value{i}").len()
            )
            .bytes(),
        );
    }
    let keys: Vec<String> = (0..100).map(|i| format!("key{i}")).collect();
    batch.extend(format!("get {}\r\n", keys.join(" ")).bytes());
    client.send(&batch);
    for _ in 0..100 {
        assert_eq!(client.line(), "STORED\r\n");
    }
    for i in 0..100 {
        let value = format!("value{i}");
        assert_eq!(client.line(), format!("VALUE key{i} 0 {}\r\n", value.len()));
        assert_eq!(client.line(), format!("{value}\r\n"));
    }
    assert_eq!(client.line(), "END\r\n");
}

#[test]
fn a_value_larger_than_the_initial_buffer_round_trips() {
    let server = Server::start(&[]);
    let mut client = Client::connect(server.memcache);
    let value = "v".repeat(500 << 10);
    let request = format!("set big 0 0 {}\r\n{value}\r\n", value.len());
    assert_eq!(client.call(request.as_bytes()), "STORED\r\n");
    assert_eq!(
        client.call(b"get big\r\n"),
        format!("VALUE big 0 {}\r\n", value.len())
    );
    assert_eq!(client.line(), format!("{value}\r\n"));
    assert_eq!(client.line(), "END\r\n");
}

/// The data block of a store one byte over `--max-value-size` is refused with memcached's
/// reply and dropped as it arrives, in pieces, the connection staying in step; a value well
/// under the limit is stored. (A value of exactly the limit is the engine's business.)
#[test]
fn a_store_one_byte_over_the_value_limit_is_refused_and_its_data_dropped() {
    const VALUE_LEN_MAX: usize = 64 << 10;
    let server = Server::start(&["--max-value-size", "64KiB"]);
    let mut client = Client::connect(server.memcache);
    assert_eq!(client.call(b"set k 0 0 1\r\nx\r\n"), "STORED\r\n");
    for command in ["set", "add", "replace", "append", "prepend"] {
        let over = VALUE_LEN_MAX + 1;
        client.send(format!("{command} k 0 0 {over}\r\n").as_bytes());
        // The data arrives in pieces smaller than the value, then the next command.
        for piece in vec![b'v'; over].chunks(4096) {
            client.send(piece);
        }
        client.send(b"\r\nversion\r\n");
        assert_eq!(
            client.line(),
            "SERVER_ERROR object too large for cache\r\n",
            "{command}"
        );
        assert!(
            client.line().starts_with("VERSION "),
            "in step after {command}"
        );
    }
    // memcached removes the old value when a set fails, so a stale one is never read.
    assert_eq!(client.call(b"get k\r\n"), "END\r\n");
    let under = "u".repeat(VALUE_LEN_MAX - 4096);
    let set = format!("set k 0 0 {}\r\n{under}\r\n", under.len());
    assert_eq!(client.call(set.as_bytes()), "STORED\r\n");
}

/// Meta `E` over TCP: the chosen CAS is the item's for `mg c`, `gets` and a later `C`
/// compare, and it is stored with the record, so a file pool still has it after a restart.
/// `h` and the refusal of `l` go through the real binary too.
#[test]
fn meta_e_sets_the_cas_and_it_survives_a_restart() {
    let pool = PoolFile::new("meta-e");
    {
        let mut server = Server::start(&["--pool", pool.path(), "--fresh"]);
        let mut client = Client::connect(server.memcache);
        assert_eq!(client.call(b"ms key 1 E12345 c\r\nx\r\n"), "HD c12345\r\n");
        assert_eq!(client.call(b"mg key c h\r\n"), "HD c12345 h0\r\n");
        assert_eq!(client.call(b"mg key c h\r\n"), "HD c12345 h1\r\n");
        assert_eq!(
            client.call(b"mg key l\r\n"),
            "CLIENT_ERROR invalid flag\r\n"
        );
        assert_eq!(
            client.call(b"ms key 1 C12345 c\r\ny\r\n").get(..4),
            Some("HD c")
        );
        assert_eq!(client.call(b"ms key 1 C12345\r\nz\r\n"), "EX\r\n");
        assert_eq!(client.call(b"ms key 1 E777\r\nw\r\n"), "HD\r\n");
        server.terminate();
    }
    let server = Server::start(&["--pool", pool.path()]);
    let mut client = Client::connect(server.memcache);
    assert_eq!(client.call(b"gets key\r\n"), "VALUE key 0 1 777\r\n");
    assert_eq!(client.line(), "w\r\n");
    assert_eq!(client.line(), "END\r\n");
    assert_eq!(
        client.call(b"ms key 1 C777 q\r\nv\r\nmg key v\r\n"),
        "VA 1\r\n"
    );
    assert_eq!(client.line(), "v\r\n");
}

/// `STAT name value` lines up to `END`.
fn memcache_stats(client: &mut Client) -> HashMap<String, String> {
    client.send(b"stats\r\n");
    let mut stats = HashMap::new();
    loop {
        let line = client.line();
        if line == "END\r\n" {
            return stats;
        }
        let mut parts = line.trim_end().splitn(3, ' ');
        assert_eq!(parts.next(), Some("STAT"), "{line}");
        let name = parts.next().expect("name").to_string();
        stats.insert(name, parts.next().unwrap_or_default().to_string());
    }
}

/// INFO's `name:value` fields.
fn redis_info(client: &mut Client) -> HashMap<String, String> {
    client.send(b"INFO\r\n");
    let body = String::from_utf8(client.bulk().expect("INFO")).expect("text");
    body.lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect()
}

#[test]
fn stats_info_and_metrics_agree() {
    let server = Server::start(&["--threads", "1"]);
    let mut memcache = Client::connect(server.memcache);
    let mut resp = Client::connect(server.resp);
    assert_eq!(memcache.call(b"set a 0 0 1\r\n1\r\n"), "STORED\r\n");
    assert_eq!(memcache.call(b"get a b c\r\n"), "VALUE a 0 1\r\n");
    assert_eq!(
        (memcache.line(), memcache.line()),
        ("1\r\n".into(), "END\r\n".into())
    );
    assert_eq!(resp.call(b"GET a\r\n"), "$1\r\n");
    assert_eq!(resp.line(), "1\r\n");
    assert_eq!(resp.call(b"GET zzz\r\n"), "$-1\r\n");

    // Nothing moves while the three are read: both clients are idle and the scrapes count
    // no client connection.
    let stats = memcache_stats(&mut memcache);
    let info = redis_info(&mut resp);
    let pairs = [
        ("get_hits", "keyspace_hits", "strata_get_hits_total"),
        ("get_misses", "keyspace_misses", "strata_get_misses_total"),
        ("curr_items", "", "strata_items"),
        (
            "curr_connections",
            "connected_clients",
            "strata_connections_current",
        ),
        (
            "total_connections",
            "total_connections_received",
            "strata_connections_total",
        ),
        ("evictions", "evicted_keys", "strata_evictions_total"),
    ];
    for (stat, field, metric) in pairs {
        let value: u64 = stats[stat].parse().expect("number");
        assert_eq!(value, server.metric(metric), "stats {stat} vs {metric}");
        if !field.is_empty() {
            assert_eq!(
                info[field],
                value.to_string(),
                "stats {stat} vs INFO {field}"
            );
        }
    }
    assert_eq!(stats["get_hits"], "2");
    assert_eq!(stats["get_misses"], "3");
}

/// A memcached binary-protocol request (a client configured for binary, `memcslap --binary`)
/// is answered with a binary response, status "Not supported" (0x0083), its opcode and opaque
/// echoed, and the connection closed; before, strata waited for a line end and the client hung.
/// Other connections carry on.
#[test]
fn a_binary_protocol_request_gets_a_binary_error_and_the_connection_closes() {
    let server = Server::start(&[]);
    let mut bystander = Client::connect(server.memcache);
    assert_eq!(bystander.call(b"set k 0 0 1\r\nv\r\n"), "STORED\r\n");
    let mut client = Client::connect(server.memcache);
    // GET "foo": magic, opcode 0x00, key length 3, extras 0, data type 0, vbucket 0, body 3,
    // opaque 0xdeadbeef, CAS 0, then the key.
    let mut request = vec![0x80, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00];
    request.extend_from_slice(&[0x00, 0x00, 0x00, 0x03, 0xde, 0xad, 0xbe, 0xef]);
    request.extend_from_slice(&[0; 8]);
    request.extend_from_slice(b"foo");
    client.send(&request);
    let header = client.read_bytes(24);
    assert_eq!(header[0], 0x81, "response magic: {header:?}");
    assert_eq!(header[1], 0x00, "the request's opcode");
    assert_eq!(&header[2..6], &[0, 0, 0, 0], "no key, no extras");
    assert_eq!(&header[6..8], &[0x00, 0x83], "status: Not supported");
    let body_len = u32::from_le_bytes([header[11], header[10], header[9], header[8]]) as usize;
    assert_eq!(
        &header[12..16],
        &[0xde, 0xad, 0xbe, 0xef],
        "the request's opaque"
    );
    assert_eq!(&header[16..24], &[0; 8], "CAS 0");
    let body = client.read_bytes(body_len);
    assert!(
        String::from_utf8_lossy(&body).contains("not the binary protocol"),
        "{body:?}"
    );
    let mut rest = Vec::new();
    std::io::Read::read_to_end(client.stream(), &mut rest).expect("closed by the server");
    assert!(rest.is_empty(), "{rest:?}");
    assert_eq!(bystander.call(b"get k\r\n"), "VALUE k 0 1\r\n");
}
