//! Kill loop, the crash matrix of issue 10: the real `strata serve` on a `/dev/shm` pool, under
//! concurrent pipelined SET / DELETE / INCR / APPEND load over both protocols, is killed with
//! SIGKILL and restarted on the same pool, again and again, in every cell of index placement
//! (dram, pool) × durability (none, sync, interval) × kill point:
//!
//! - under load;
//! - during recovery: killed under load, restarted with its recovery stalled after each step
//!   (`STRATA_TEST_RECOVERY_STALL_MS`), and killed again after a random step, while clients that
//!   connected early wait, then restarted;
//! - during shutdown: SIGTERM under load, then SIGKILL a random few milliseconds later.
//!
//! Clients pipeline up to 100 requests per write, so several land in one group commit. After
//! each restart every key must hold exactly its last acknowledged value, or a value that a
//! prefix of the client's unanswered requests explains (a connection's requests run in order:
//! a later one never survives without an earlier one). Deleted keys stay deleted; a torn, stale
//! or foreign value fails the test. No eviction happens (checked through the metrics), so a
//! missing key is never excused. The last round stops the server with SIGTERM instead and checks
//! the clean path the same way.
//!
//! One Redis batch in five is a transaction (MULTI, the batch, EXEC): an answered EXEC's writes
//! all survive, in every cell (with `sync`, EXEC's reply waits for them like any write's), and
//! an EXEC cut by the kill left all of its writes or none (the transaction log), never a part.
//!
//! Each client thread owns a disjoint slice of the key space, so its model of those keys is
//! exact: every reply is checked against it during the load too (an INCR that answers a wrong
//! number after a restart fails at once).
//!
//! - `STRATA_KILL_ROUNDS=N`: rounds per cell (default 20); `scripts/soak-kill.sh` runs more.
//! - `STRATA_KILL_SEED=S`: replays a run (the seed is printed at the start).
//! - `STRATA_KILL_DURABILITY=LEVEL`, `STRATA_KILL_INDEX=dram|pool`,
//!   `STRATA_KILL_POINT=load|recovery|shutdown`: run only the matching cells.
//!
//! The pool (40 MiB) holds the live data (3,000 keys, a few MiB) many times over but not the
//! writes of all rounds, nor the segments each restart seals half empty: the cleaner moves live
//! records throughout (a kill lands in the middle of its passes), and nothing may be evicted,
//! so a missing key is a lost write.
#![allow(
    clippy::too_many_lines,
    reason = "a test scenario reads best as one function"
)]

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
/// The kill comes after a random number of acknowledged operations in this range.
const KILL_AFTER_OPS: (u64, u64) = (20, 8_000);
/// Requests a client pipelines at most in one write (several land in one group commit).
const BATCH_MAX: u64 = 100;
/// Rounds per cell of the crash matrix when `STRATA_KILL_ROUNDS` is not set.
const ROUNDS_PER_CELL_DEFAULT: u64 = 20;
/// A `kill -9` during shutdown comes up to this long after the SIGTERM.
const SHUTDOWN_KILL_DELAY_US_MAX: u64 = 30_000;
/// How long a recovery stalls after each step when a test means to kill it there.
const RECOVERY_STALL_MS: u64 = 50;
/// A value longer than this is replaced by SET rather than appended to.
const APPEND_LEN_MAX: usize = 1500;
/// One SET in this many (on string keys) stores a value over 64 KiB (the wide record form).
const WIDE_ONE_IN: u64 = 400;
/// Expiries given to three SETs in ten: long enough that nothing expires during a run.
/// A few TTL buckets only: every restart seals each open segment, one per TTL bucket written
/// per shard, and a spread of TTLs would fill a pool with sealed, nearly empty segments.
const TTL_SECS: [u64; 4] = [3_600, 86_400, 604_800, 2_000_000];
/// Pool settings: 256 KiB segments give about 160 segments in 40 MiB.
const SERVER_FLAGS: [&str; 8] = [
    "--threads",
    "2",
    "--memory",
    "40MiB",
    "--segment-size",
    "256KiB",
    "--max-value-size",
    "128KiB",
];

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

fn pick_op(i: usize, current: &Option<Vec<u8>>, versions: &mut u64, rng: &mut Rng) -> Op {
    let roll = rng.below(100);
    let ttl = match rng.below(10) {
        0..=6 => 0,
        _ => TTL_SECS[rng.below(TTL_SECS.len() as u64) as usize],
    };
    if is_counter(i) {
        return match roll {
            0..=19 => Op::Set(rng.below(1_000_000).to_string().into_bytes(), ttl),
            20..=84 => Op::Incr(1 + rng.below(100)),
            _ => Op::Delete,
        };
    }
    *versions += 1;
    let long = current.as_ref().is_some_and(|v| v.len() > APPEND_LEN_MAX);
    match roll {
        0..=44 => Op::Set(token(&key_name(i), *versions, rng), ttl),
        45..=79 if !long => Op::Append(token(&key_name(i), *versions, rng)),
        45..=79 => Op::Set(token(&key_name(i), *versions, rng), ttl),
        _ => Op::Delete,
    }
}

/// Operations sent but not answered when the connection broke, in the order they were sent:
/// `(local key index, value after the operation)`. A connection's requests run in order, so the
/// server applied some prefix of them.
/// Operations sent and not answered: key, value after, description, and whether a prefix may
/// end after it (false inside a transaction: EXEC applies all of its operations or none).
type InFlight = Vec<(usize, Option<Vec<u8>>, String, bool)>;

/// What one client thread did in a round.
struct ThreadRun {
    states: Vec<KeyState>,
    in_flight: InFlight,
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

/// One pipelined batch: the requests' bytes and, per request, the key, the operation's
/// description, the value after it and the expected reply.
struct Batch {
    bytes: Vec<u8>,
    ops: Vec<(usize, String, Option<Vec<u8>>, String)>,
    /// Sent as one MULTI ... EXEC (Redis threads, one batch in [`TRANSACTION_ONE_IN`]): the
    /// replies are `+OK`, a `+QUEUED` per operation, `*N`, then the operations' own.
    transaction: bool,
}

/// One Redis batch in this many is a transaction.
const TRANSACTION_ONE_IN: u64 = 5;

/// Picks a batch of 1 to [`BATCH_MAX`] operations (one in four batches is a single request),
/// each computed against the model as the ones before it in the batch leave it.
fn pick_batch(thread: usize, protocol: Protocol, states: &mut [KeyState], rng: &mut Rng) -> Batch {
    let len = if rng.below(4) == 0 {
        1
    } else {
        1 + rng.below(BATCH_MAX)
    };
    let mut projected: HashMap<usize, Option<Vec<u8>>> = HashMap::new();
    let mut batch = Batch {
        bytes: Vec::new(),
        ops: Vec::new(),
        transaction: protocol == Protocol::Resp && rng.below(TRANSACTION_ONE_IN) == 0,
    };
    if batch.transaction {
        batch.bytes.extend(resp_command(&[b"MULTI"]));
    }
    for _ in 0..len {
        let j = rng.below(states.len() as u64) as usize;
        let i = key_of(thread, j);
        let key = key_name(i);
        let current = projected
            .get(&j)
            .cloned()
            .unwrap_or_else(|| states[j].value.clone());
        let op = pick_op(i, &current, &mut states[j].versions, rng);
        let (after, expected) = apply(protocol, &current, &op);
        batch.bytes.extend(encode(protocol, &key, &op));
        projected.insert(j, after.clone());
        batch.ops.push((j, describe_op(&op), after, expected));
    }
    if batch.transaction {
        batch.bytes.extend(resp_command(&[b"EXEC"]));
    }
    batch
}

/// Reads a transaction's replies up to its operations' own (`+OK`, the `+QUEUED`s, `*N`):
/// `Ok(false)` when the connection broke first (every operation is in flight: EXEC applies a
/// prefix of them, or none), an error for a wrong reply.
fn read_transaction_prelude(
    reader: &mut BufReader<TcpStream>,
    ops: usize,
    thread: usize,
) -> Result<bool, String> {
    let expected = std::iter::once("+OK".to_string())
        .chain(std::iter::repeat_n("+QUEUED".to_string(), ops))
        .chain(std::iter::once(format!("*{ops}")));
    for want in expected {
        match read_line(reader) {
            None => return Ok(false),
            Some(line) if line == want => {}
            Some(line) => {
                let what = format!("a transaction of {ops} replied {line:?}, not {want:?}");
                return Err(format!("thread {thread}: {what}"));
            }
        }
    }
    Ok(true)
}

/// Runs pipelined batches on the thread's keys until the connection breaks (the kill). Every
/// reply is checked against the model; a broken connection before the kill is an error.
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
    let stream = match TcpStream::connect(addr) {
        Ok(stream) => stream,
        // A round that stops the server after few operations can beat a thread to connecting.
        Err(_) if shared.killed.load(Ordering::SeqCst) => {
            return Ok(ThreadRun {
                states,
                in_flight: Vec::new(),
                acked: 0,
            })
        }
        Err(e) => return Err(format!("connect: {e}")),
    };
    stream.set_read_timeout(Some(WAIT_MAX)).expect("timeout");
    stream.set_nodelay(true).expect("nodelay");
    let mut reader = BufReader::new(stream);
    let mut acked = 0;
    loop {
        let batch = pick_batch(thread, protocol, &mut states, &mut rng);
        let mut sent = reader.get_mut().write_all(&batch.bytes).is_ok();
        if sent && batch.transaction {
            sent = read_transaction_prelude(&mut reader, batch.ops.len(), thread)?;
        }
        for (n, (j, op, after, expected)) in batch.ops.iter().enumerate() {
            let Some(reply) = sent.then(|| read_line(&mut reader)).flatten() else {
                if !shared.killed.load(Ordering::SeqCst) {
                    return Err(format!(
                        "thread {thread}: connection broke before the kill ({})",
                        key_name(key_of(thread, *j))
                    ));
                }
                if batch.transaction && n > 0 {
                    // EXEC's reply comes after all of its writes: every one of them is done.
                    for (j, _, after, _) in &batch.ops[n..] {
                        states[*j].value = after.clone();
                    }
                    return Ok(ThreadRun {
                        states,
                        in_flight: Vec::new(),
                        acked,
                    });
                }
                let last = batch.ops.len() - 1;
                let in_flight = batch.ops[n..]
                    .iter()
                    .enumerate()
                    .map(|(m, (j, op, after, _))| {
                        let unit_end = !batch.transaction || n + m == last;
                        (*j, after.clone(), op.clone(), unit_end)
                    })
                    .collect();
                return Ok(ThreadRun {
                    states,
                    in_flight,
                    acked,
                });
            };
            let state = &mut states[*j];
            if reply != *expected {
                let key = key_name(key_of(thread, *j));
                return Err(format!(
                    "thread {thread} ({protocol:?}): {key} {op} replied {reply:?}, expected \
                     {expected:?}; the model holds {}; history (oldest first): {:?}",
                    show(&state.value, &key),
                    state.history,
                ));
            }
            if state.history.len() == HISTORY_LEN {
                state.history.remove(0);
            }
            state.history.push(format!("{op} -> {reply}"));
            state.value = after.clone();
            acked += 1;
            shared.acked.fetch_add(1, Ordering::Relaxed);
        }
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
    PoolFile::on_tmpfs(&format!("kill-loop-{nanos}-{generation}"))
}

/// The durability levels of the matrix: each promises that an acknowledged write survives a
/// process crash on a tmpfs pool.
const DURABILITIES: [&str; 3] = ["none", "sync", "interval=20"];

/// The index placements of the matrix.
const PLACEMENTS: [&str; 2] = ["dram", "pool"];

/// When the server dies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KillPoint {
    /// `kill -9` under load.
    UnderLoad,
    /// `kill -9` under load, then `kill -9` of the restarted server while it recovers (after a
    /// random step of its recovery), then a restart.
    DuringRecovery,
    /// SIGTERM under load, then `kill -9` a random few milliseconds later, while the server
    /// drains its workers or closes its pool (or after it stopped cleanly).
    DuringShutdown,
}

const KILL_POINTS: [KillPoint; 3] = [
    KillPoint::UnderLoad,
    KillPoint::DuringRecovery,
    KillPoint::DuringShutdown,
];

/// One cell of the crash matrix: the server's configuration and when it is killed.
#[derive(Clone, Copy, Debug)]
struct Cell {
    placement: &'static str,
    durability: &'static str,
    kill: KillPoint,
}

/// Every cell, filtered by `STRATA_KILL_INDEX`, `STRATA_KILL_DURABILITY` and
/// `STRATA_KILL_POINT` (`load`, `recovery`, `shutdown`) when set.
fn cells() -> Vec<Cell> {
    let only = |name: &str, value: &str| std::env::var(name).map_or(true, |v| v == value);
    let point_name = |kill: KillPoint| match kill {
        KillPoint::UnderLoad => "load",
        KillPoint::DuringRecovery => "recovery",
        KillPoint::DuringShutdown => "shutdown",
    };
    let mut cells = Vec::new();
    for placement in PLACEMENTS {
        for durability in DURABILITIES {
            for kill in KILL_POINTS {
                if only("STRATA_KILL_INDEX", placement)
                    && only("STRATA_KILL_DURABILITY", durability)
                    && only("STRATA_KILL_POINT", point_name(kill))
                {
                    cells.push(Cell {
                        placement,
                        durability,
                        kill,
                    });
                }
            }
        }
    }
    assert!(!cells.is_empty(), "the STRATA_KILL_* filters leave no cell");
    cells
}

fn server_args<'a>(pool: &'a PoolFile, cell: &Cell) -> Vec<&'a str> {
    let mut args = vec![
        "--pool",
        pool.path(),
        "--durability",
        cell.durability,
        "--index-placement",
        cell.placement,
    ];
    args.extend(SERVER_FLAGS);
    args
}

fn start(pool: &PoolFile, cell: &Cell) -> Server {
    Server::start(&server_args(pool, cell))
}

/// A `field=value` of the last log line holding `marker`.
fn log_field(server: &Server, marker: &str, field: &str) -> String {
    let log = server.log();
    let line = log
        .lines()
        .rev()
        .find(|line| line.contains(marker))
        .unwrap_or_default();
    line.split(' ')
        .find_map(|f| f.strip_prefix(field)?.strip_prefix('='))
        .unwrap_or("?")
        .to_string()
}

/// The values a thread's key `j` may hold: a prefix of the in-flight operations ran, so for
/// each prefix length, each key holds the value after the last operation on it in the prefix.
/// Returns the prefix lengths consistent with `actual` for this key.
fn consistent_prefixes(
    j: usize,
    acked: &Option<Vec<u8>>,
    in_flight: &InFlight,
    actual: &Option<Vec<u8>>,
) -> Vec<usize> {
    let mut value = acked;
    let mut prefixes = Vec::new();
    for prefix in 0..=in_flight.len() {
        if prefix > 0 && in_flight[prefix - 1].0 == j {
            value = &in_flight[prefix - 1].1;
        }
        let may_end_here = prefix == 0 || in_flight[prefix - 1].3;
        if value == actual && may_end_here {
            prefixes.push(prefix);
        }
    }
    prefixes
}

/// Checks every key against the model: each thread's keys must agree with ONE prefix of its
/// in-flight operations (requests of a connection run in order, so a later one never survives
/// without an earlier one). Then folds the observed values into the model. Panics with a
/// description on mismatch.
///
/// CAS values must be unique for the life of the pool: `cas_seen` maps each CAS observed so far
/// to the key and value (checksum) that carried it.
fn verify(
    server: &Server,
    states: &mut [Vec<KeyState>],
    in_flight: &[InFlight],
    cas_seen: &mut HashMap<u64, (usize, u64)>,
    context: &str,
) {
    let found = read_all(server.memcache);
    let mut failures = Vec::new();
    let (mut present_min, mut present_max) = (0u64, 0u64);
    for (thread, keys) in states.iter_mut().enumerate() {
        let pending = &in_flight[thread];
        let mut prefixes: Vec<usize> = (0..=pending.len()).collect();
        let mut fits_by_key = Vec::new();
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
            let allowed: Vec<&Option<Vec<u8>>> = std::iter::once(&state.value)
                .chain(pending.iter().filter(|op| op.0 == j).map(|op| &op.1))
                .collect();
            present_min += u64::from(allowed.iter().all(|v| v.is_some()));
            present_max += u64::from(allowed.iter().any(|v| v.is_some()));
            let fits = consistent_prefixes(j, &state.value, pending, &actual);
            if fits.is_empty() {
                let key = key_name(i);
                failures.push(format!(
                    "{key}: found {}; allowed {}; history (oldest first): {:?}",
                    show(&actual, &key),
                    allowed
                        .iter()
                        .map(|v| show(v, &key))
                        .collect::<Vec<_>>()
                        .join(" or "),
                    state.history
                ));
            }
            prefixes.retain(|p| fits.contains(p));
            if pending.iter().any(|op| op.0 == j) {
                let ops: Vec<String> = pending
                    .iter()
                    .enumerate()
                    .filter(|(_, op)| op.0 == j)
                    .map(|(n, op)| format!("#{n} {} -> {}", op.2, show(&op.1, &key_name(i))))
                    .collect();
                fits_by_key.push(format!(
                    "{}: acked {}, found {}, ops {ops:?}, prefixes {}..={}",
                    key_name(i),
                    show(&state.value, &key_name(i)),
                    show(&actual, &key_name(i)),
                    fits.first().map_or(-1, |&f| f as i64),
                    fits.last().map_or(-1, |&f| f as i64),
                ));
            }
            state.value = actual;
        }
        if prefixes.is_empty() && failures.is_empty() {
            failures.push(format!(
                "thread {thread}: no prefix of its {} in-flight operations explains every key \
                 (a later request survived without an earlier one); in-flight keys (in order \
                 {:?}) fit: {}",
                pending.len(),
                pending.iter().map(|op| op.0).collect::<Vec<_>>(),
                fits_by_key.join("; ")
            ));
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

/// One round of load: starts the client threads, stops the server as `kill` says once a random
/// number of operations were acknowledged, and returns what each thread knows, and how many
/// records the cleaner had moved before the kill.
fn load_and_kill(
    server: &mut Server,
    kill: KillPoint,
    states: &mut Vec<Vec<KeyState>>,
    rng: &mut Rng,
    context: &str,
) -> (Vec<InFlight>, u64, u64) {
    let shared = Shared {
        killed: AtomicBool::new(false),
        acked: AtomicU64::new(0),
        finished: AtomicUsize::new(0),
    };
    let kill_after = rng.range(KILL_AFTER_OPS);
    let shutdown_grace = Duration::from_micros(rng.below(SHUTDOWN_KILL_DELAY_US_MAX));
    let seeds: Vec<u64> = (0..THREADS).map(|_| rng.next()).collect();
    let addrs = [server.memcache, server.resp];
    let taken = std::mem::take(states);
    // Sampled just before the kill: nothing may have been evicted or expired in this round.
    let (results, evictions_before_kill, expirations, moved) = std::thread::scope(|scope| {
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
        let moved = server.metric("strata_memory_cleaner_items_moved_total");
        shared.killed.store(true, Ordering::SeqCst);
        if kill == KillPoint::DuringShutdown {
            server.signal("TERM");
            std::thread::sleep(shutdown_grace);
            // The server may have stopped cleanly already: then there is nothing to kill.
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &server.pid().to_string()])
                .status();
        } else {
            server.signal("KILL");
        }
        server.wait_exit();
        let results: Vec<_> = handles
            .into_iter()
            .map(|h| h.join().expect("client thread"))
            .collect();
        (results, evictions, expirations, moved)
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
    (in_flight, acked, moved)
}

/// Shards of the servers in this test (the default).
const SHARDS: usize = 8;

/// With the index in the pool, sets a random non-empty set of shards' control lines to
/// "changing", as a kill that caught those shards in the middle of a change leaves them (under
/// heavier load than this test's, most kills do): their index must then be rebuilt from the
/// segments, and a recovery has rebuilds to be killed in. Returns how many were marked.
fn mark_shards_changing(pool: &PoolFile, rng: &mut Rng) -> usize {
    use std::io::{Seek, SeekFrom};
    let path = format!("{}.index/control", pool.path());
    let Ok(mut control) = std::fs::OpenOptions::new().write(true).open(&path) else {
        return 0; // Not created yet: every shard will be built from the segments anyway.
    };
    let mask = 1 + rng.below((1 << SHARDS) - 1);
    let mut marked = 0;
    for shard in (0..SHARDS).filter(|s| mask & (1 << s) != 0) {
        control
            .seek(SeekFrom::Start((64 * (1 + shard)) as u64))
            .expect("seek control line");
        control
            .write_all(&1u64.to_le_bytes())
            .expect("write control line");
        marked += 1;
    }
    marked
}

/// Restarts the server on `pool` with recovery stalled after each step, waits until it has
/// taken a random number of steps, and kills it there. Returns the steps it had taken.
fn kill_during_recovery(pool: &PoolFile, cell: &Cell, rng: &mut Rng) -> usize {
    if cell.placement == "pool" {
        mark_shards_changing(pool, rng);
    }
    let stall = RECOVERY_STALL_MS.to_string();
    // Each recovery step is logged at debug.
    let mut args = server_args(pool, cell);
    args.extend(["--log-level", "debug"]);
    let mut server = Server::launch(&[], &args, &[("STRATA_TEST_RECOVERY_STALL_MS", &stall)]);
    server.wait_until(
        |s| s.log().contains("recovery: segments adopted"),
        "the recovery to adopt its segments",
    );
    let shards: usize = log_field(&server, "recovery: segments adopted", "shards_to_rebuild")
        .parse()
        .expect("shards_to_rebuild");
    // Fewer steps than shards: the recovery still has a shard (and its stall) to go, so the kill
    // cannot miss it.
    let steps = rng.below(shards.max(1) as u64) as usize;
    server.wait_until(
        |s| s.log().matches("recovery: shard rebuilt").count() >= steps,
        "the recovery to rebuild shards",
    );
    server.signal("KILL");
    server.wait_exit();
    assert!(
        !server.log().contains("strata ready"),
        "the kill was meant to land during recovery:\n{}",
        server.log()
    );
    steps
}

fn empty_model() -> Vec<Vec<KeyState>> {
    (0..THREADS)
        .map(|t| vec![KeyState::default(); (KEYS - t).div_ceil(THREADS)])
        .collect()
}

/// Issue 10: the crash matrix. Every cell (index placement × durability × kill point) gets
/// `STRATA_KILL_ROUNDS` rounds (default 20); the cells take turns, so the server restarted
/// after a kill runs the next cell's configuration (a restart switches placement or durability
/// as often as not).
#[test]
fn every_acknowledged_write_survives_kill_9() {
    let seed = env_u64("STRATA_KILL_SEED").unwrap_or_else(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock");
        now.as_nanos() as u64 ^ u64::from(std::process::id())
    });
    let cells = cells();
    let rounds =
        env_u64("STRATA_KILL_ROUNDS").unwrap_or(ROUNDS_PER_CELL_DEFAULT) as usize * cells.len();
    println!(
        "kill loop: seed {seed} (replay with STRATA_KILL_SEED={seed}), {} cells, {rounds} rounds",
        cells.len()
    );
    let began = Instant::now();
    let mut rng = Rng(seed);
    let pool = pool_file(0);
    let mut server = start(&pool, &cells[0]);
    let mut states = empty_model();
    let mut cas_seen = HashMap::new();
    let mut kills = 0;
    let mut moved_total = 0;
    for round in 0..rounds {
        let cell = cells[round % cells.len()];
        let next = cells[(round + 1) % cells.len()];
        let context = format!("seed {seed}, round {round} {cell:?}");
        let (in_flight, acked, moved) =
            load_and_kill(&mut server, cell.kill, &mut states, &mut rng, &context);
        moved_total += moved;
        kills += 1;
        drop(server);
        let recovery_steps = (cell.kill == KillPoint::DuringRecovery).then(|| {
            kills += 1;
            kill_during_recovery(&pool, &cell, &mut rng)
        });
        server = start(&pool, &next);
        verify(&server, &mut states, &in_flight, &mut cas_seen, &context);
        println!(
            "round {round} {} {} {:?}{}: {acked} acked, {} in flight; recovered {} items, {} \
             torn records, {} shards mapped, {} ms to open; {} segments used, {} free; {moved} \
             records moved by the cleaner before the kill",
            cell.placement,
            cell.durability,
            cell.kill,
            recovery_steps.map_or(String::new(), |s| format!(" (killed after {s} steps)")),
            in_flight.iter().map(Vec::len).sum::<usize>(),
            log_field(&server, "engine open", "items_recovered"),
            log_field(&server, "engine open", "records_torn"),
            log_field(&server, "engine open", "shards_from_index_files"),
            log_field(&server, "engine open", "elapsed_ms"),
            server.metric("strata_segments_used"),
            server.metric("strata_segments_free"),
        );
    }
    // Last, the clean path: SIGTERM, restart, and every key exactly as acknowledged.
    let context = format!("seed {seed}, clean stop");
    server.terminate();
    drop(server);
    let server = start(&pool, &cells[0]);
    let none: Vec<InFlight> = (0..THREADS).map(|_| Vec::new()).collect();
    verify(&server, &mut states, &none, &mut cas_seen, &context);
    drop(server);
    println!(
        "kill loop: {kills} kills in {rounds} rounds, {moved_total} records moved by the \
         cleaner, {:.1} s",
        began.elapsed().as_secs_f64()
    );
    assert!(
        moved_total > 0 || rounds < cells.len() * 4,
        "the cleaner must run during the loop"
    );
}
