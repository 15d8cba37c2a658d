//! Kill loop: the real `strata serve` on a `/dev/shm` pool, under concurrent SET / DELETE /
//! INCR / APPEND load over both protocols, is killed with SIGKILL at a random moment and
//! restarted on the same pool, again and again. After each restart every key must hold exactly
//! its last acknowledged value, or, for the one key per client that had an operation in flight
//! at the kill, the value before or after that operation. Deleted keys stay deleted; a torn,
//! stale or foreign value fails the test. No eviction happens (checked through the metrics), so
//! a missing key is never excused. The last round stops the server with SIGTERM instead and
//! checks the clean path the same way.
//!
//! Each client thread owns a disjoint slice of the key space, so its model of those keys is
//! exact: every reply is checked against it during the load too (an INCR that answers a wrong
//! number after a restart fails at once).
//!
//! - `STRATA_KILLS=N`: rounds (default 20); `scripts/soak-kill.sh` runs hundreds.
//! - `STRATA_KILL_SEED=S`: replays a run (the seed is printed at the start).
//! - `STRATA_KILL_DURABILITY=LEVEL`, `STRATA_KILL_INDEX=dram|pool`: fix what otherwise rotates
//!   (durability every round; index placement every three rounds).
//!
//! When the pool runs short of free segments (each restart seals the segments that were open),
//! the test starts a new pool generation (new file, empty model) rather than let eviction in.

mod harness;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use harness::{resp_command, PoolFile, Server, WAIT_MAX};

/// Client threads; even ones speak memcached text, odd ones RESP.
const THREADS: usize = 4;
/// Keys in the key space; every fourth one is a counter.
const KEYS: usize = 3000;
/// Rounds when `STRATA_KILLS` is not set.
const KILLS_DEFAULT: u64 = 20;
/// The kill comes after a random number of acknowledged operations in this range.
const KILL_AFTER_OPS: (u64, u64) = (20, 20_000);
/// A value longer than this is replaced by SET rather than appended to.
const APPEND_LEN_MAX: usize = 1500;
/// One SET in this many (on string keys) stores a value over 64 KiB (the wide record form).
const WIDE_ONE_IN: u64 = 400;
/// Expiries given to three SETs in ten: long enough that nothing expires during a run.
const TTL_SECS: (u64, u64) = (3_600, 2_000_000);
/// Pool settings: 256 KiB segments give about 250 segments in 64 MiB.
const SERVER_FLAGS: [&str; 8] = [
    "--threads",
    "2",
    "--memory",
    "64MiB",
    "--segment-size",
    "256KiB",
    "--max-value-size",
    "128KiB",
];
/// A new pool generation starts when fewer segments than this are free: one round writes at
/// most a few MiB, and a restart seals up to one open segment per shard.
const SEGMENTS_FREE_MIN: u64 = 48;

/// SplitMix64: small, seedable, good enough to pick operations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn range(&mut self, (low, high): (u64, u64)) -> u64 {
        low + self.below(high - low)
    }
}

fn env_u64(name: &str) -> Option<u64> {
    let text = std::env::var(name).ok()?;
    Some(
        text.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text}: not a number")),
    )
}

fn key_name(i: usize) -> String {
    format!("kl-{i:05}")
}

fn is_counter(i: usize) -> bool {
    i.is_multiple_of(4)
}

fn fnv64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xCBF2_9CE4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01B3)
    })
}

/// A self-checking piece of a string value: `<key:version:pad:checksum>`. SET stores one,
/// APPEND adds one; a torn or foreign value shows in `diagnose`.
fn token(key: &str, version: u64, rng: &mut Rng) -> Vec<u8> {
    let pad_len = if rng.below(WIDE_ONE_IN) == 0 {
        rng.range((66_000, 70_000))
    } else {
        rng.below(300)
    } as usize;
    let pad_char = b'a' + (version % 26) as u8;
    let body = format!(
        "{key}:{version}:{}",
        String::from_utf8(vec![pad_char; pad_len]).expect("ascii")
    );
    format!("<{body}:{:016x}>", fnv64(body.as_bytes())).into_bytes()
}

/// What a value looks like, for a failure message: its tokens and whether each is intact.
fn diagnose(key: &str, value: &[u8]) -> String {
    if value.iter().all(u8::is_ascii_digit) && !value.is_empty() {
        return format!("counter {}", String::from_utf8_lossy(value));
    }
    let text = String::from_utf8_lossy(value);
    let mut parts = Vec::new();
    let mut rest = &*text;
    while let Some(start) = rest.find('<') {
        let Some(end) = rest[start..].find('>') else {
            parts.push(format!("TORN tail of {} bytes", rest.len() - start));
            break;
        };
        let inner = &rest[start + 1..start + end];
        let (body, sum) = inner.rsplit_once(':').unwrap_or((inner, ""));
        let fields: Vec<&str> = body.splitn(3, ':').collect();
        let intact = u64::from_str_radix(sum, 16).ok() == Some(fnv64(body.as_bytes()));
        let owner = if fields.first().is_some_and(|k| *k == key) {
            ""
        } else {
            " FOREIGN"
        };
        parts.push(format!(
            "{}:v{}{}{}",
            fields.first().unwrap_or(&"?"),
            fields.get(1).unwrap_or(&"?"),
            if intact { "" } else { " TORN" },
            owner
        ));
        rest = &rest[start + end + 1..];
    }
    format!("{} bytes, tokens [{}]", value.len(), parts.join(", "))
}

fn show(value: &Option<Vec<u8>>, key: &str) -> String {
    match value {
        None => "absent".into(),
        Some(v) => diagnose(key, v),
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Protocol {
    Memcache,
    Resp,
}

enum Op {
    /// SET with an expiry in seconds (0: never). Expiries are long (nothing expires during the
    /// test) and varied, so a key's writes move between TTL buckets and their segments.
    Set(Vec<u8>, u64),
    Delete,
    Incr(u64),
    Append(Vec<u8>),
}

/// The value after `op` on `current`, and the reply line the server must give.
fn apply(protocol: Protocol, current: &Option<Vec<u8>>, op: &Op) -> (Option<Vec<u8>>, String) {
    let memcache = protocol == Protocol::Memcache;
    match (op, current) {
        (Op::Set(v, _), _) => (
            Some(v.clone()),
            if memcache { "STORED" } else { "+OK" }.into(),
        ),
        (Op::Delete, None) => (None, if memcache { "NOT_FOUND" } else { ":0" }.into()),
        (Op::Delete, Some(_)) => (None, if memcache { "DELETED" } else { ":1" }.into()),
        (Op::Incr(_), None) if memcache => (None, "NOT_FOUND".into()),
        (Op::Incr(d), current) => {
            let old: u64 = current.as_ref().map_or(0, |v| {
                std::str::from_utf8(v)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .expect("counter keys hold numbers")
            });
            let new = old + d;
            let reply = if memcache {
                new.to_string()
            } else {
                format!(":{new}")
            };
            (Some(new.to_string().into_bytes()), reply)
        }
        (Op::Append(_), None) if memcache => (None, "NOT_STORED".into()),
        (Op::Append(data), current) => {
            let mut new = current.clone().unwrap_or_default();
            new.extend_from_slice(data);
            let reply = if memcache {
                "STORED".into()
            } else {
                format!(":{}", new.len())
            };
            (Some(new), reply)
        }
    }
}

fn encode(protocol: Protocol, key: &str, op: &Op) -> Vec<u8> {
    let storage = |verb: &str, data: &[u8], ttl: u64| {
        let mut out = format!("{verb} {key} 0 {ttl} {}\r\n", data.len()).into_bytes();
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
        out
    };
    let k = key.as_bytes();
    match (protocol, op) {
        (Protocol::Memcache, Op::Set(v, ttl)) => storage("set", v, *ttl),
        (Protocol::Memcache, Op::Append(v)) => storage("append", v, 0),
        (Protocol::Memcache, Op::Delete) => format!("delete {key}\r\n").into_bytes(),
        (Protocol::Memcache, Op::Incr(d)) => format!("incr {key} {d}\r\n").into_bytes(),
        (Protocol::Resp, Op::Set(v, 0)) => resp_command(&[b"SET", k, v]),
        (Protocol::Resp, Op::Set(v, ttl)) => {
            resp_command(&[b"SET", k, v, b"EX", ttl.to_string().as_bytes()])
        }
        (Protocol::Resp, Op::Append(v)) => resp_command(&[b"APPEND", k, v]),
        (Protocol::Resp, Op::Delete) => resp_command(&[b"DEL", k]),
        (Protocol::Resp, Op::Incr(d)) => resp_command(&[b"INCRBY", k, d.to_string().as_bytes()]),
    }
}

/// One key as a client thread knows it: its last acknowledged value, and how many tokens
/// were made for it (the next token's version).
#[derive(Clone, Default)]
struct KeyState {
    value: Option<Vec<u8>>,
    versions: u64,
    /// The last few acknowledged operations, for a failure message.
    history: Vec<String>,
}

/// Operations kept in `KeyState::history`.
const HISTORY_LEN: usize = 6;

fn describe_op(op: &Op) -> String {
    match op {
        Op::Set(v, ttl) => format!("set ttl={ttl} {}b", v.len()),
        Op::Delete => "delete".into(),
        Op::Incr(d) => format!("incr {d}"),
        Op::Append(v) => format!("append {}b", v.len()),
    }
}

/// A thread's keys are `thread, thread + THREADS, ...`: local index `j` is key `j * THREADS +
/// thread`.
fn key_of(thread: usize, j: usize) -> usize {
    j * THREADS + thread
}

fn pick_op(i: usize, state: &mut KeyState, rng: &mut Rng) -> Op {
    let roll = rng.below(100);
    let ttl = match rng.below(10) {
        0..=6 => 0,
        _ => rng.range(TTL_SECS),
    };
    if is_counter(i) {
        return match roll {
            0..=19 => Op::Set(rng.below(1_000_000).to_string().into_bytes(), ttl),
            20..=84 => Op::Incr(1 + rng.below(100)),
            _ => Op::Delete,
        };
    }
    state.versions += 1;
    let long = state
        .value
        .as_ref()
        .is_some_and(|v| v.len() > APPEND_LEN_MAX);
    match roll {
        0..=44 => Op::Set(token(&key_name(i), state.versions, rng), ttl),
        45..=79 if !long => Op::Append(token(&key_name(i), state.versions, rng)),
        45..=79 => Op::Set(token(&key_name(i), state.versions, rng), ttl),
        _ => Op::Delete,
    }
}

/// An operation whose reply never came: the key may hold `before` or `after`.
struct InFlight {
    key: usize,
    after: Option<Vec<u8>>,
}

/// What one client thread did in a round.
struct ThreadRun {
    states: Vec<KeyState>,
    in_flight: Option<InFlight>,
    acked: u64,
}

struct Shared {
    killed: AtomicBool,
    acked: AtomicU64,
    finished: AtomicUsize,
}

/// Reads one CRLF-terminated line; `None` when the connection broke (EOF, reset, partial).
fn read_line(reader: &mut BufReader<TcpStream>) -> Option<String> {
    let mut line = String::new();
    match reader.read_line(&mut line) {
        Ok(_) if line.ends_with("\r\n") => {
            line.truncate(line.len() - 2);
            Some(line)
        }
        _ => None,
    }
}

/// Runs operations on the thread's keys until the connection breaks (the kill). Every reply
/// is checked against the model; a broken connection before the kill is an error.
fn client_thread(
    thread: usize,
    addr: SocketAddr,
    mut states: Vec<KeyState>,
    seed: u64,
    shared: &Shared,
) -> Result<ThreadRun, String> {
    let protocol = if thread.is_multiple_of(2) {
        Protocol::Memcache
    } else {
        Protocol::Resp
    };
    let mut rng = Rng(seed);
    let stream = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    stream.set_read_timeout(Some(WAIT_MAX)).expect("timeout");
    stream.set_nodelay(true).expect("nodelay");
    let mut reader = BufReader::new(stream);
    let mut acked = 0;
    loop {
        let j = rng.below(states.len() as u64) as usize;
        let i = key_of(thread, j);
        let key = key_name(i);
        let op = pick_op(i, &mut states[j], &mut rng);
        let (after, expected) = apply(protocol, &states[j].value, &op);
        let sent = reader.get_mut().write_all(&encode(protocol, &key, &op));
        let reply = sent.ok().and_then(|()| read_line(&mut reader));
        let Some(reply) = reply else {
            if !shared.killed.load(Ordering::SeqCst) {
                return Err(format!(
                    "thread {thread}: connection broke before the kill ({key})"
                ));
            }
            return Ok(ThreadRun {
                states,
                in_flight: Some(InFlight { key: j, after }),
                acked,
            });
        };
        if reply != expected {
            return Err(format!(
                "thread {thread} ({protocol:?}): {key} {} replied {reply:?}, expected {expected:?}; \
                 the model holds {}; history (oldest first): {:?}",
                describe_op(&op),
                show(&states[j].value, &key),
                states[j].history,
            ));
        }
        let history = &mut states[j].history;
        if history.len() == HISTORY_LEN {
            history.remove(0);
        }
        history.push(format!("{} -> {reply}", describe_op(&op)));
        states[j].value = after;
        acked += 1;
        shared.acked.fetch_add(1, Ordering::Relaxed);
    }
}

/// Reads every key of the key space through memcached multi-gets: value and CAS per key.
fn read_all(addr: SocketAddr) -> HashMap<usize, (Vec<u8>, u64)> {
    let stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(WAIT_MAX)).expect("timeout");
    let mut reader = BufReader::new(stream);
    let mut found = HashMap::new();
    let index: HashMap<String, usize> = (0..KEYS).map(|i| (key_name(i), i)).collect();
    for chunk in (0..KEYS).collect::<Vec<_>>().chunks(100) {
        let names: Vec<String> = chunk.iter().map(|&i| key_name(i)).collect();
        let request = format!("gets {}\r\n", names.join(" "));
        reader
            .get_mut()
            .write_all(request.as_bytes())
            .expect("send gets");
        loop {
            let line = read_line(&mut reader).expect("gets reply");
            if line == "END" {
                break;
            }
            let fields: Vec<&str> = line.split(' ').collect();
            assert!(
                fields.len() == 5 && fields[0] == "VALUE",
                "bad gets line {line:?}"
            );
            let len: usize = fields[3].parse().expect("length");
            let cas: u64 = fields[4].parse().expect("cas");
            let mut data = vec![0; len + 2];
            reader.read_exact(&mut data).expect("value");
            assert_eq!(&data[len..], b"\r\n");
            data.truncate(len);
            let i = *index.get(fields[1]).expect("a key of the key space");
            assert!(
                found.insert(i, (data, cas)).is_none(),
                "{} returned twice",
                fields[1]
            );
        }
    }
    found
}

/// Generation `generation`'s pool file, on /dev/shm when there is one; removed on drop.
fn pool_file(generation: u64) -> PoolFile {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .subsec_nanos();
    let shm = std::path::Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    PoolFile::in_dir(&dir, &format!("kill-loop-{nanos}-{generation}"))
}

/// The durability levels the rounds rotate through: each promises that an acknowledged write
/// survives a process crash on a tmpfs pool.
const DURABILITIES: [&str; 3] = ["none", "sync", "interval=20"];

/// The durability of the server started after `round` kills: `STRATA_KILL_DURABILITY`, else
/// the next of [`DURABILITIES`].
fn durability(round: u64) -> String {
    std::env::var("STRATA_KILL_DURABILITY")
        .unwrap_or_else(|_| DURABILITIES[round as usize % DURABILITIES.len()].to_string())
}

/// Index placements: three rounds (one of each durability) with the index in DRAM, then three
/// with it in the pool, so pool-to-pool restarts (which map the index files) happen under every
/// durability level. `STRATA_KILL_INDEX` fixes one.
const PLACEMENTS: [&str; 2] = ["dram", "pool"];

fn placement(round: u64) -> String {
    std::env::var("STRATA_KILL_INDEX").unwrap_or_else(|_| {
        PLACEMENTS[(round as usize / DURABILITIES.len()) % PLACEMENTS.len()].to_string()
    })
}

fn start(pool: &PoolFile, round: u64) -> Server {
    let durability = durability(round);
    let placement = placement(round);
    let mut args = vec![
        "--pool",
        pool.path(),
        "--durability",
        &durability,
        "--index-placement",
        &placement,
    ];
    args.extend(SERVER_FLAGS);
    Server::start(&args)
}

/// A `field=value` of the server's "engine open" log line.
fn open_field(server: &Server, field: &str) -> String {
    let log = server.log();
    let line = log
        .lines()
        .find(|line| line.contains("engine open"))
        .unwrap_or_default();
    line.split(' ')
        .find_map(|f| f.strip_prefix(field)?.strip_prefix('='))
        .unwrap_or("?")
        .to_string()
}

/// Checks every key against the model (and the in-flight operations), then folds the
/// observed values of in-flight keys into the model. Panics with a description on mismatch.
///
/// CAS values must be unique for the life of the pool: `cas_seen` maps each CAS observed so far
/// to the key and value (checksum) that carried it.
fn verify(
    server: &Server,
    states: &mut [Vec<KeyState>],
    in_flight: &[Option<InFlight>],
    cas_seen: &mut HashMap<u64, (usize, u64)>,
    context: &str,
) {
    let found = read_all(server.memcache);
    let mut failures = Vec::new();
    let mut present_min = 0u64;
    let mut present_max = 0u64;
    for (thread, keys) in states.iter_mut().enumerate() {
        let pending = in_flight[thread].as_ref();
        for (j, state) in keys.iter_mut().enumerate() {
            let i = key_of(thread, j);
            let actual = found.get(&i).map(|(value, _)| value.clone());
            if let Some((value, cas)) = found.get(&i) {
                let carried = (i, fnv64(value));
                let first = *cas_seen.entry(*cas).or_insert(carried);
                if first != carried {
                    failures.push(format!(
                        "{}: CAS {cas} was already given to {} (another value)",
                        key_name(i),
                        key_name(first.0)
                    ));
                }
            }
            let mut allowed = vec![&state.value];
            if let Some(op) = pending.filter(|p| p.key == j) {
                allowed.push(&op.after);
            }
            present_min += u64::from(allowed.iter().all(|v| v.is_some()));
            present_max += u64::from(allowed.iter().any(|v| v.is_some()));
            if !allowed.contains(&&actual) {
                let key = key_name(i);
                failures.push(format!(
                    "{key}: found {}; allowed {}",
                    show(&actual, &key),
                    allowed
                        .iter()
                        .map(|v| show(v, &key))
                        .collect::<Vec<_>>()
                        .join(" or ")
                ));
            }
            state.value = actual;
        }
    }
    assert!(
        failures.is_empty(),
        "{context}: {} keys wrong:\n  {}\nserver log:\n{}",
        failures.len(),
        failures
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n  "),
        server.log()
    );
    let items = server.metric("strata_items");
    assert!(
        (present_min..=present_max).contains(&items),
        "{context}: {items} items indexed, {present_min}..={present_max} keys present"
    );
    assert_eq!(
        server.metric("strata_evictions_total"),
        0,
        "{context}: nothing may be evicted"
    );
}

/// One round of load: starts the client threads, kills the server after a random number of
/// acknowledged operations, and returns what each thread knows.
fn load_and_kill(
    server: &mut Server,
    states: &mut Vec<Vec<KeyState>>,
    rng: &mut Rng,
    context: &str,
) -> (Vec<Option<InFlight>>, u64) {
    let shared = Shared {
        killed: AtomicBool::new(false),
        acked: AtomicU64::new(0),
        finished: AtomicUsize::new(0),
    };
    let kill_after = rng.range(KILL_AFTER_OPS);
    let seeds: Vec<u64> = (0..THREADS).map(|_| rng.next()).collect();
    let addrs = [server.memcache, server.resp];
    let taken = std::mem::take(states);
    // Sampled just before the kill: nothing may have been evicted or expired in this round.
    let (results, evictions_before_kill, expirations) = std::thread::scope(|scope| {
        let handles: Vec<_> = taken
            .into_iter()
            .enumerate()
            .map(|(thread, keys)| {
                let (shared, seed) = (&shared, seeds[thread]);
                scope.spawn(move || {
                    let run = client_thread(thread, addrs[thread % 2], keys, seed, shared);
                    shared.finished.fetch_add(1, Ordering::SeqCst);
                    run
                })
            })
            .collect();
        let deadline = Instant::now() + WAIT_MAX;
        while shared.acked.load(Ordering::Relaxed) < kill_after
            && shared.finished.load(Ordering::SeqCst) == 0
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_micros(200));
        }
        let evictions = server.metric("strata_evictions_total");
        let expirations = server.metric("strata_expirations_total");
        shared.killed.store(true, Ordering::SeqCst);
        server.signal("KILL");
        server.wait_exit();
        let results: Vec<_> = handles
            .into_iter()
            .map(|h| h.join().expect("client thread"))
            .collect();
        (results, evictions, expirations)
    });
    let first_error = results.iter().find_map(|r| r.as_ref().err());
    assert!(
        evictions_before_kill == 0 && expirations == 0,
        "{context}: {evictions_before_kill} items evicted and {expirations} expired before the \
         kill (absence can no longer be judged: size the pool larger); first client error: \
         {first_error:?}\nserver log:\n{}",
        server.log()
    );
    let mut in_flight = Vec::new();
    let mut acked = 0;
    for result in results {
        let run =
            result.unwrap_or_else(|e| panic!("{context}: {e}\nserver log:\n{}", server.log()));
        states.push(run.states);
        in_flight.push(run.in_flight);
        acked += run.acked;
    }
    (in_flight, acked)
}

fn empty_model() -> Vec<Vec<KeyState>> {
    (0..THREADS)
        .map(|t| vec![KeyState::default(); (KEYS - t).div_ceil(THREADS)])
        .collect()
}

#[test]
fn every_acknowledged_write_survives_kill_9() {
    let seed = env_u64("STRATA_KILL_SEED").unwrap_or_else(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock");
        now.as_nanos() as u64 ^ u64::from(std::process::id())
    });
    let kills = env_u64("STRATA_KILLS").unwrap_or(KILLS_DEFAULT);
    println!("kill loop: seed {seed} (replay with STRATA_KILL_SEED={seed}), {kills} kills");
    let began = Instant::now();
    let mut rng = Rng(seed);
    let mut generation = 0;
    let mut pool = pool_file(generation);
    let mut server = start(&pool, 0);
    let mut states = empty_model();
    let mut cas_seen = HashMap::new();
    for round in 1..=kills {
        let context = format!("seed {seed}, kill {round}, generation {generation}");
        let (in_flight, acked) = load_and_kill(&mut server, &mut states, &mut rng, &context);
        drop(server);
        server = start(&pool, round);
        verify(&server, &mut states, &in_flight, &mut cas_seen, &context);
        println!(
            "kill {round} ({}, index {} -> {}): {acked} acked, {} in flight; recovered {} items, \
             {} invalid records, {} shards mapped, {} ms to open; {} segments used, {} free",
            durability(round - 1),
            placement(round - 1),
            placement(round),
            in_flight.iter().flatten().count(),
            open_field(&server, "items_recovered"),
            open_field(&server, "records_invalid"),
            open_field(&server, "shards_from_index_files"),
            open_field(&server, "elapsed_ms"),
            server.metric("strata_segments_used"),
            server.metric("strata_segments_free"),
        );
        if server.metric("strata_segments_free") < SEGMENTS_FREE_MIN && round < kills {
            generation += 1;
            println!("pool nearly full: generation {generation} starts on a new pool");
            drop(server);
            pool = pool_file(generation);
            server = start(&pool, round);
            states = empty_model();
            cas_seen.clear();
        }
    }
    // Last, the clean path: SIGTERM, restart, and every key exactly as acknowledged.
    let context = format!("seed {seed}, clean stop");
    server.terminate();
    drop(server);
    let server = start(&pool, 0);
    let none: Vec<Option<InFlight>> = (0..THREADS).map(|_| None).collect();
    verify(&server, &mut states, &none, &mut cas_seen, &context);
    drop(server);
    println!(
        "kill loop: {kills} kills, {} generations, {:.1} s",
        generation + 1,
        began.elapsed().as_secs_f64()
    );
}
