//! Hashes end to end against the real binary: redis-py as applications use it (field expiry
//! included), memcached's view of a hash, and `kill -9` under pipelined hash writes (field
//! expiries among them), with the whole hash checked after each restart against the model's
//! state after some prefix of the client's requests. (Reply-exact checks against a real redis-server are in the server
//! crate's differential test.)
#![allow(
    clippy::too_many_lines,
    reason = "a test scenario reads best as one function"
)]

mod harness;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use harness::{resp_command, Client, PoolFile, Server};

fn command(args: &[&str]) -> Vec<u8> {
    let args: Vec<&[u8]> = args.iter().map(|arg| arg.as_bytes()).collect();
    resp_command(&args)
}

/// redis-py (Debian's python3-redis, which `scripts/test.sh` installs): a session store, a
/// large hash walked by HSCAN, HRANDFIELD, WRONGTYPE both ways, pipelines, field expiry, and
/// HINCRBY from eight threads losing no increment.
#[test]
fn redis_py_hashes_work() {
    let server = Server::start(&["--threads", "2"]);
    harness::run_python(
        "redis_py_hashes.py",
        server.resp.port(),
        "all hashes checks passed",
    );
}

/// memcached sees only strings: a hash reads as absent (get misses, append and incr find
/// nothing), `set` replaces it with a string, and the hash is untouched until then.
#[test]
fn memcached_sees_a_hash_as_absent_and_may_replace_it() {
    let server = Server::start(&[]);
    let mut redis = Client::connect(server.resp);
    assert_eq!(redis.call(&command(&["HSET", "h", "f", "v"])), ":1\r\n");
    let mut memcache = Client::connect(server.memcache);
    assert_eq!(memcache.call(b"get h\r\n"), "END\r\n");
    assert_eq!(memcache.call(b"mg h v\r\n"), "EN\r\n");
    assert_eq!(memcache.call(b"append h 0 0 1\r\nx\r\n"), "NOT_STORED\r\n");
    assert_eq!(memcache.call(b"incr h 1\r\n"), "NOT_FOUND\r\n");
    assert_eq!(memcache.call(b"touch h 100\r\n"), "NOT_FOUND\r\n");
    assert_eq!(memcache.call(b"add h 0 0 1\r\nx\r\n"), "NOT_STORED\r\n");
    assert_eq!(redis.call(&command(&["HGET", "h", "f"])), "$1\r\n");
    assert_eq!(redis.line(), "v\r\n");
    assert_eq!(memcache.call(b"set h 0 0 1\r\nx\r\n"), "STORED\r\n");
    assert_eq!(redis.call(&command(&["TYPE", "h"])), "+string\r\n");
}

/// The hashes a kill test writes: how many fields, and how long each value is at least (a
/// large hash passes 8 KiB and is kept in chunks).
#[derive(Clone, Copy)]
struct Shape {
    fields: u64,
    value_len: usize,
}

const SMALL: Shape = Shape {
    fields: 40,
    value_len: 0,
};

const LARGE: Shape = Shape {
    fields: 600,
    value_len: 30,
};

/// A field's value, and whether it has an expiry (the tests' expiries are a day away, so
/// none passes while they run).
type Model = BTreeMap<String, (String, bool)>;

/// The kill tests' field expiry: a day, in milliseconds.
const FIELD_TTL_MS: &str = "86400000";

impl Shape {
    fn value(self, i: u64) -> String {
        format!("{i:0>width$}", width = self.value_len)
    }

    /// Request `i`: every seventh deletes a field, every eleventh (else) gives a field an
    /// expiry (`HPEXPIRE`), every thirteenth (else) takes another's away (`HPERSIST`); the
    /// rest are `HSET h n i f<i % fields> i`, which clears the two fields' expiries.
    fn request(self, key: &str, i: u64) -> Vec<u8> {
        let field = format!("f{}", i % self.fields);
        if i.is_multiple_of(7) {
            command(&["HDEL", key, &field])
        } else if i.is_multiple_of(11) {
            command(&["HPEXPIRE", key, FIELD_TTL_MS, "FIELDS", "1", &field])
        } else if i.is_multiple_of(13) {
            let other = format!("f{}", (i + 5) % self.fields);
            command(&["HPERSIST", key, "FIELDS", "1", &other])
        } else {
            let value = self.value(i);
            command(&["HSET", key, "n", &value, &field, &value])
        }
    }

    /// The hash after requests `1..=k`.
    fn model(self, k: u64) -> Model {
        let mut hash = Model::new();
        for i in 1..=k {
            let field = format!("f{}", i % self.fields);
            if i.is_multiple_of(7) {
                hash.remove(&field);
            } else if i.is_multiple_of(11) {
                if let Some((_, expiring)) = hash.get_mut(&field) {
                    *expiring = true;
                }
            } else if i.is_multiple_of(13) {
                let other = format!("f{}", (i + 5) % self.fields);
                if let Some((_, expiring)) = hash.get_mut(&other) {
                    *expiring = false;
                }
            } else {
                hash.insert("n".to_owned(), (self.value(i), false));
                hash.insert(field, (self.value(i), false));
            }
        }
        hash
    }

    /// Every field name a request may write.
    fn names(self) -> Vec<String> {
        let mut names: Vec<String> = (0..self.fields).map(|f| format!("f{f}")).collect();
        names.push("n".to_owned());
        names
    }
}

/// Reads one RESP reply line from `reader`.
fn reply_line(reader: &mut impl BufRead) -> String {
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    line.trim_end().to_owned()
}

/// Reads the hash at `key` from the server at `addr`: `HGETALL`, then `HPTTL` of every name
/// the shape writes (a positive TTL marks the field expiring).
fn read_hash(addr: SocketAddr, key: &str, shape: Shape) -> Model {
    let stream = TcpStream::connect(addr).expect("connect");
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    writer.write_all(&command(&["HGETALL", key])).unwrap();
    let count: usize = reply_line(&mut reader)[1..].parse().expect("an array");
    let mut items = Vec::new();
    for _ in 0..count {
        reply_line(&mut reader); // The bulk string's length.
        items.push(reply_line(&mut reader));
    }
    let names = shape.names();
    let count = names.len().to_string();
    let mut hpttl = vec!["HPTTL", key, "FIELDS", &count];
    hpttl.extend(names.iter().map(String::as_str));
    writer.write_all(&command(&hpttl)).unwrap();
    assert_eq!(reply_line(&mut reader), format!("*{count}"));
    let ttls: BTreeMap<&str, i64> = names
        .iter()
        .map(|name| {
            let ttl = reply_line(&mut reader)[1..].parse().expect("an integer");
            (name.as_str(), ttl)
        })
        .collect();
    items
        .chunks_exact(2)
        .map(|pair| {
            let ttl = ttls[pair[0].as_str()];
            assert!(ttl == -1 || ttl > 0, "{key} {}: HPTTL {ttl}", pair[0]);
            (pair[0].clone(), (pair[1].clone(), ttl > 0))
        })
        .collect()
}

/// One client pipelining its requests in batches, counting the answered ones, until `stop`.
fn writer(
    addr: SocketAddr,
    (key, shape): (String, Shape),
    answered: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) {
    let stream = TcpStream::connect(addr).expect("connect");
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let mut next = answered.load(Ordering::SeqCst) + 1;
    let mut line = String::new();
    while !stop.load(Ordering::SeqCst) {
        let batch: Vec<u8> = (next..next + 20)
            .flat_map(|i| shape.request(&key, i))
            .collect();
        if writer.write_all(&batch).is_err() {
            return;
        }
        for _ in 0..20 {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "*1\r\n" {
                // HPEXPIRE's and HPERSIST's reply: one integer per field.
                line.clear();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
            }
            assert!(line.starts_with(':'), "{key}: request {next}: {line}");
            answered.store(next, Ordering::SeqCst);
            next += 1;
        }
    }
}

/// `kill -9` under pipelined HSET/HDEL/HPEXPIRE/HPERSIST load on four hashes, eight rounds
/// per durability level: after each restart every hash is exactly the model's state after `k`
/// requests, its fields' values and which of them expire, for a `k` from the last answered
/// one to the last sent (a connection's requests apply in order; a torn, stale or mixed hash
/// fails).
#[test]
fn hashes_survive_kill_9_whole() {
    kill_9_rounds(SMALL, 8);
}

/// [`hashes_survive_kill_9_whole`] for hashes of 600 fields of 30-byte values (about 25 KiB:
/// kept in chunks, split as they grow): after each `kill -9`, each is exactly a state its
/// requests made, every chunk of it as that state left it (field expiries are kept in the
/// chunks, with a bound on them in the owner).
#[test]
fn large_hashes_survive_kill_9_whole() {
    kill_9_rounds(LARGE, 5);
}

/// `kill -9` under load, `rounds` times per durability level (see the tests above).
fn kill_9_rounds(shape: Shape, rounds: u64) {
    for durability in ["none", "sync"] {
        let pool = PoolFile::on_tmpfs(&format!("hashes-kill-{}-{durability}", shape.fields));
        let args = [
            "--pool",
            pool.path(),
            "--durability",
            durability,
            "--threads",
            "2",
            "--memory",
            "32MiB",
        ];
        let keys: Vec<String> = (0..4).map(|i| format!("hash-{i}")).collect();
        let answered: Vec<Arc<AtomicU64>> = keys.iter().map(|_| Arc::default()).collect();
        for round in 0..rounds {
            let mut server = Server::start(&args);
            for (key, answered) in keys.iter().zip(&answered) {
                let found = read_hash(server.resp, key, shape);
                let low = answered.load(Ordering::SeqCst);
                let k = (low..low + 21).find(|&k| shape.model(k) == found);
                let Some(k) = k else {
                    let want = shape.model(low);
                    let missing: Vec<_> = want.keys().filter(|f| !found.contains_key(*f)).collect();
                    let extra: Vec<_> = found.keys().filter(|f| !want.contains_key(*f)).collect();
                    let differ: Vec<_> = want
                        .iter()
                        .filter(|(f, v)| found.get(*f).is_some_and(|g| g != *v))
                        .collect();
                    eprintln!("missing {missing:?} extra {extra:?} differ {differ:?}");
                    panic!("{durability} round {round}: {key} after {low} answered: {found:?}");
                };
                answered.store(k, Ordering::SeqCst);
            }
            let target = answered[0].load(Ordering::SeqCst) + 200 + round * 150;
            let first = Arc::clone(&answered[0]);
            let (keys, answered) = (keys.clone(), answered.clone());
            harness::kill_9_under_writers(
                &mut server,
                keys.len(),
                move |addr, i, stop| {
                    writer(
                        addr,
                        (keys[i].clone(), shape),
                        Arc::clone(&answered[i]),
                        stop,
                    );
                },
                || first.load(Ordering::SeqCst) >= target,
                "the first writer's requests to be answered",
            );
        }
    }
}

/// Large hashes (kept in chunks past 8 KiB, splitting as they grow) through redis-py against
/// a model: every field command, the whole-hash walks, HSCAN paging, HRANDFIELD, key expiry,
/// MULTI/EXEC and WATCH, field expiry, RENAME and COPY (inside an EXEC that runs alone too),
/// and the key gone with its last field.
#[test]
fn redis_py_large_hashes_work() {
    let server = Server::start(&["--threads", "2"]);
    harness::run_python(
        "redis_py_large_hashes.py",
        server.resp.port(),
        "all large hashes checks passed",
    );
}
