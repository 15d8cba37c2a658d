//! Strings longer than one record holds (up to `--max-value-size`, at most 512 MiB like
//! Redis's `proto-max-bulk-len`; kept in several records) end to end against the real binary:
//! both protocols reading and writing them, the limit's errors, and `kill -9` under writes of
//! short and long values, with every value checked whole after each restart. (Reply-exact
//! checks of every string command against a real redis-server are in the server crate's
//! differential test, `large_strings_match_redis`.)
#![allow(
    clippy::too_many_lines,
    reason = "a test scenario reads best as one function"
)]

mod harness;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use harness::{resp_command, Client, PoolFile, Server};

/// Write `i`'s value: its length cycles through one record, a few parts and many, and every
/// byte says which write made it and where it is (`i:<n>|` then a pattern).
fn value(i: u64) -> Vec<u8> {
    let len = [100, 200 << 10, 1_500_000, 3 << 20][(i % 4) as usize];
    let mut bytes = format!("i:{i}|").into_bytes();
    bytes.extend((bytes.len()..len).map(|at| b'a' + ((at as u64 * 7 + i) % 26) as u8));
    bytes
}

/// Which write `bytes` is, if it is exactly one's value.
fn which(bytes: &[u8]) -> Option<u64> {
    let end = bytes.iter().position(|&b| b == b'|')?;
    let i: u64 = std::str::from_utf8(bytes.get(2..end)?).ok()?.parse().ok()?;
    (value(i) == bytes).then_some(i)
}

fn get(addr: SocketAddr, key: &str) -> Option<Vec<u8>> {
    let mut client = Client::connect(addr);
    client.send(&resp_command(&[b"GET", key.as_bytes()]));
    client.bulk()
}

/// Reads a memcached `VALUE` reply's data (or `None` at `END`), then its `END`.
fn memcache_value(reader: &mut BufReader<TcpStream>) -> Option<Vec<u8>> {
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    if line == "END\r\n" {
        return None;
    }
    let len: usize = line.split(' ').nth(3).unwrap().trim().parse().unwrap();
    let mut data = vec![0; len + 2];
    reader.read_exact(&mut data).unwrap();
    data.truncate(len);
    line.clear();
    reader.read_line(&mut line).unwrap();
    assert_eq!(line, "END\r\n");
    Some(data)
}

/// Reads a memcached multiget's reply: each `VALUE` line's words after `VALUE` and its data,
/// up to the `END`.
fn memcache_values(reader: &mut BufReader<TcpStream>) -> Vec<(String, Vec<u8>)> {
    let mut values = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if line == "END\r\n" {
            return values;
        }
        let words = line.trim_end().strip_prefix("VALUE ").unwrap().to_owned();
        let len: usize = words.split(' ').nth(2).unwrap().parse().unwrap();
        let mut data = vec![0; len + 2];
        reader.read_exact(&mut data).unwrap();
        assert_eq!(&data[len..], b"\r\n", "{words}");
        data.truncate(len);
        values.push((words, data));
    }
}

/// memcached and RESP clients share large strings: a 3 MiB `set` read back through both, an
/// append, a `gat` that keeps it whole, a meta set appending; the limit's errors at the configured size (RESP keeps
/// the old value, memcached's `set` drops it as memcached does), the connection serving on.
#[test]
fn large_strings_through_both_protocols_and_the_limit() {
    let server = Server::start(&["--max-value-size", "8MiB", "--memory", "128MiB"]);
    let stream = TcpStream::connect(server.memcache).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let call = |request: &[u8], reader: &mut BufReader<TcpStream>| {
        reader.get_mut().write_all(request).unwrap();
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        line
    };
    let data = value(3);
    let mut set = format!("set big 7 0 {}\r\n", data.len()).into_bytes();
    set.extend_from_slice(&data);
    set.extend_from_slice(b"\r\n");
    assert_eq!(call(&set, &mut reader), "STORED\r\n");
    writer.write_all(b"get big\r\n").unwrap();
    assert!(memcache_value(&mut reader).unwrap() == data);
    assert!(get(server.resp, "big").unwrap() == data);
    assert_eq!(
        call(b"append big 0 0 3\r\nxyz\r\n", &mut reader),
        "STORED\r\n"
    );
    let mut appended = data.clone();
    appended.extend_from_slice(b"xyz");
    writer.write_all(b"gat 100 big\r\n").unwrap();
    assert!(memcache_value(&mut reader).unwrap() == appended);
    assert!(
        get(server.resp, "big").unwrap() == appended,
        "touched whole"
    );
    // A meta set that appends (mode A) to the large string, and a meta get of it all.
    assert_eq!(call(b"ms big 2 MA\r\nmm\r\n", &mut reader), "HD\r\n");
    appended.extend_from_slice(b"mm");
    let header = call(b"mg big v s\r\n", &mut reader);
    assert_eq!(header, format!("VA {0} s{0}\r\n", appended.len()));
    let mut data = vec![0; appended.len() + 2];
    reader.read_exact(&mut data).unwrap();
    assert!(data[..appended.len()] == appended[..]);
    let mut redis = Client::connect(server.resp);
    // Replies copied from the parts unjoined: MGET beside a short value and a missing key, and
    // GET inside MULTI (a transaction's read of the parts).
    assert_eq!(
        redis.call(&resp_command(&[b"SET", b"short", b"s"])),
        "+OK\r\n"
    );
    redis.send(&resp_command(&[b"MGET", b"big", b"short", b"none", b"big"]));
    assert_eq!(redis.line(), "*4\r\n");
    assert!(redis.bulk().unwrap() == appended);
    assert!(redis.bulk().unwrap() == b"s");
    assert_eq!(redis.bulk(), None);
    assert!(redis.bulk().unwrap() == appended);
    // memcached's multiget copies the parts the same way: `gets` beside a short value and a
    // missing key, each with its flags, length and CAS.
    writer.write_all(b"gets big short none big\r\n").unwrap();
    let values = memcache_values(&mut reader);
    assert_eq!(values.len(), 3, "two hits of big, one of short");
    for (at, expected) in [(0, &appended[..]), (1, b"s"), (2, &appended[..])] {
        let (words, data) = &values[at];
        assert!(data == expected, "value {at}: {words}");
        let words: Vec<&str> = words.split(' ').collect();
        assert_eq!(words.len(), 4, "key, flags, length and CAS: {words:?}");
        assert_eq!(words[2], expected.len().to_string());
    }
    assert_eq!(values[0].0, values[2].0, "one item, one CAS");
    assert_eq!(values[0].0.split(' ').nth(1), Some("7"), "big's flags");
    assert_eq!(redis.call(&resp_command(&[b"MULTI"])), "+OK\r\n");
    assert_eq!(redis.call(&resp_command(&[b"GET", b"big"])), "+QUEUED\r\n");
    assert_eq!(redis.call(&resp_command(&[b"EXEC"])), "*1\r\n");
    assert!(redis.bulk().unwrap() == appended, "read in a transaction");
    assert_eq!(redis.call(&resp_command(&[b"TTL", b"big"])), ":100\r\n");
    assert_eq!(
        redis.call(&resp_command(&[b"STRLEN", b"big"])),
        format!(":{}\r\n", appended.len())
    );
    // Past the limit: Redis's error, the old value kept, the connection still serving.
    let over = vec![b'o'; (8 << 20) + 1];
    let reply = redis.call(&resp_command(&[b"SET", b"big", &over]));
    assert_eq!(
        reply,
        "-ERR string exceeds maximum allowed size (max-value-size)\r\n"
    );
    assert!(get(server.resp, "big").unwrap() == appended);
    assert_eq!(redis.call(&resp_command(&[b"PING"])), "+PONG\r\n");
    let mut over_set = format!("set big 0 0 {}\r\n", over.len()).into_bytes();
    over_set.extend_from_slice(&over);
    over_set.extend_from_slice(b"\r\n");
    let reply = call(&over_set, &mut reader);
    assert!(
        reply.starts_with("SERVER_ERROR object too large"),
        "{reply}"
    );
    assert_eq!(
        get(server.resp, "big"),
        None,
        "as memcached, a refused set drops the old"
    );
    let all = redis.call(&resp_command(&[b"CONFIG", b"GET", b"proto-max-bulk-len"]));
    assert!(all.starts_with("*2\r\n"), "{all}");
    assert_eq!(redis.line(), "$18\r\n");
    assert_eq!(redis.line(), "proto-max-bulk-len\r\n");
    assert_eq!(redis.line(), "$7\r\n");
    assert_eq!(redis.line(), "8388608\r\n");
}

/// Sends SET `key` with write `i`'s value, one request at a time, recording each answered.
fn writer(addr: SocketAddr, key: String, answered: Arc<AtomicU64>, stop: Arc<AtomicBool>) {
    let Ok(mut client) = TcpStream::connect(addr) else {
        return;
    };
    let mut reply = [0u8; 5];
    let mut next = answered.load(Ordering::SeqCst) + 1;
    while !stop.load(Ordering::SeqCst) {
        let request = resp_command(&[b"SET", key.as_bytes(), &value(next)]);
        if client.write_all(&request).is_err() || client.read_exact(&mut reply).is_err() {
            return;
        }
        assert_eq!(&reply, b"+OK\r\n", "{key}: write {next}");
        answered.store(next, Ordering::SeqCst);
        next += 1;
    }
}

/// `kill -9` under SETs of short and long values on three keys, four rounds per durability
/// level: after each restart every key holds exactly the last answered write's value or the
/// one in flight after it, whole (a torn, stale or mixed string fails).
#[test]
fn large_strings_survive_kill_9_whole() {
    for durability in ["none", "sync"] {
        let pool = PoolFile::on_tmpfs(&format!("large-strings-kill-{durability}"));
        let args = [
            "--pool",
            pool.path(),
            "--durability",
            durability,
            "--threads",
            "2",
            "--memory",
            "96MiB",
            "--max-value-size",
            "4MiB",
        ];
        let keys: Vec<String> = (0..3).map(|i| format!("string-{i}")).collect();
        let answered: Vec<Arc<AtomicU64>> = keys.iter().map(|_| Arc::default()).collect();
        for round in 0..4u64 {
            let mut server = Server::start(&args);
            for (key, answered) in keys.iter().zip(&answered) {
                let low = answered.load(Ordering::SeqCst);
                let found = get(server.resp, key);
                let k = match &found {
                    None => 0,
                    Some(bytes) => which(bytes).unwrap_or_else(|| {
                        panic!("{durability} round {round}: {key} holds no write's value whole")
                    }),
                };
                assert!(
                    k == low || k == low + 1,
                    "{durability} round {round}: {key} holds write {k}, {low} were answered"
                );
                answered.store(k, Ordering::SeqCst);
            }
            let target = answered[0].load(Ordering::SeqCst) + 12 + round * 5;
            let first = Arc::clone(&answered[0]);
            let (keys, answered) = (keys.clone(), answered.clone());
            harness::kill_9_under_writers(
                &mut server,
                keys.len(),
                move |addr, i, stop| writer(addr, keys[i].clone(), Arc::clone(&answered[i]), stop),
                || first.load(Ordering::SeqCst) >= target,
                "the first writer's requests to be answered",
            );
        }
    }
}
