//! Redis transactions end to end against the real binary with several worker threads: no
//! client sees part of a transaction, WATCH retry loops lose no update, and redis-py's
//! pipelines, `transaction()` helper and WATCH loops behave as against Redis. (Reply-exact
//! checks against a real redis-server are in the server crate's differential test.)
#![allow(
    clippy::too_many_lines,
    reason = "a test scenario reads best as one function"
)]

mod harness;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use harness::{resp_command, Client, Server};

/// Worker threads of the server: clients land on both.
const SERVER_FLAGS: [&str; 2] = ["--threads", "2"];

fn command(args: &[&str]) -> Vec<u8> {
    let args: Vec<&[u8]> = args.iter().map(|arg| arg.as_bytes()).collect();
    resp_command(&args)
}

/// Reads one reply line and, for a bulk header, its data line: the value as text (`None` for a
/// null bulk).
fn read_bulk_text(client: &mut Client) -> Option<String> {
    client.bulk().map(|bytes| String::from_utf8(bytes).unwrap())
}

/// MULTI, `first`, `filler` `count` times, `last`, EXEC.
fn transaction(first: &[u8], filler: &[u8], count: usize, last: &[u8]) -> Vec<u8> {
    let mut batch = command(&["MULTI"]);
    batch.extend_from_slice(first);
    for _ in 0..count {
        batch.extend_from_slice(filler);
    }
    batch.extend_from_slice(last);
    batch.extend(command(&["EXEC"]));
    batch
}

/// Reads a transaction's replies up to its commands' own: `+OK`, `queued` `+QUEUED`, `*queued`.
fn read_queued(client: &mut Client, queued: usize) {
    assert_eq!(client.line(), "+OK\r\n");
    for _ in 0..queued {
        assert_eq!(client.line(), "+QUEUED\r\n");
    }
    assert_eq!(client.line(), format!("*{queued}\r\n"));
}

/// Lets `threads` run until the readers among them made `reads_min` reads, then stops and joins
/// them.
fn run_until(
    reads: &AtomicU64,
    reads_min: u64,
    stop: &AtomicBool,
    threads: impl IntoIterator<Item = std::thread::JoinHandle<()>>,
) {
    while reads.load(Ordering::Relaxed) < reads_min {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        thread.join().unwrap();
    }
}

/// Writers set two keys to the same number in each transaction while readers read both in
/// theirs, on connections spread over both workers: a reader never finds them different.
/// (Without the gate that runs EXEC alone, a reader's two GETs interleave with the writers'
/// SETs and differ.)
#[test]
fn no_client_sees_part_of_a_transaction() {
    // Commands between the two keys' in each transaction: a window for another worker.
    const FILLER: usize = 20;
    let server = Server::start(&SERVER_FLAGS);
    let addr = server.resp;
    let stop = Arc::new(AtomicBool::new(false));
    let torn = Arc::new(AtomicU64::new(0));
    let reads = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut client = Client::connect(addr);
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let n = format!("{w}-{i}");
                    let filler = command(&["SET", &format!("filler-{w}"), &n]);
                    client.send(&transaction(
                        &command(&["SET", "x", &n]),
                        &filler,
                        FILLER,
                        &command(&["SET", "y", &n]),
                    ));
                    read_queued(&mut client, FILLER + 2);
                    for _ in 0..FILLER + 2 {
                        assert_eq!(client.line(), "+OK\r\n");
                    }
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (stop, torn, reads) = (Arc::clone(&stop), Arc::clone(&torn), Arc::clone(&reads));
            std::thread::spawn(move || {
                let mut client = Client::connect(addr);
                while !stop.load(Ordering::Relaxed) {
                    client.send(&transaction(
                        &command(&["GET", "x"]),
                        &command(&["EXISTS", "x"]),
                        FILLER,
                        &command(&["GET", "y"]),
                    ));
                    read_queued(&mut client, FILLER + 2);
                    let x = read_bulk_text(&mut client);
                    for _ in 0..FILLER {
                        client.line();
                    }
                    let y = read_bulk_text(&mut client);
                    if x != y {
                        torn.fetch_add(1, Ordering::Relaxed);
                    }
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    run_until(&reads, 2_000, &stop, writers.into_iter().chain(readers));
    assert_eq!(
        torn.load(Ordering::Relaxed),
        0,
        "a reader saw x and y differ"
    );
}

/// Clients on both workers increment one counter by WATCH, GET, MULTI, SET n+1, EXEC, and try
/// again when EXEC answers the null array: the final value is the number of EXECs that
/// succeeded (no lost update), and some EXECs were aborted (the watch was exercised).
#[test]
fn watch_retry_loops_lose_no_update() {
    const CLIENTS: usize = 6;
    const INCREMENTS: u64 = 200;
    let server = Server::start(&SERVER_FLAGS);
    let addr = server.resp;
    Client::connect(addr).call(&command(&["SET", "counter", "0"]));
    let aborted = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let aborted = Arc::clone(&aborted);
            std::thread::spawn(move || {
                let mut client = Client::connect(addr);
                for _ in 0..INCREMENTS {
                    loop {
                        assert_eq!(client.call(&command(&["WATCH", "counter"])), "+OK\r\n");
                        client.send(&command(&["GET", "counter"]));
                        let value: u64 = read_bulk_text(&mut client).unwrap().parse().unwrap();
                        let mut batch = command(&["MULTI"]);
                        batch.extend(command(&["SET", "counter", &(value + 1).to_string()]));
                        batch.extend(command(&["EXEC"]));
                        client.send(&batch);
                        assert_eq!(client.line(), "+OK\r\n");
                        assert_eq!(client.line(), "+QUEUED\r\n");
                        match client.line().as_str() {
                            "*1\r\n" => {
                                assert_eq!(client.line(), "+OK\r\n");
                                break;
                            }
                            "*-1\r\n" => {
                                aborted.fetch_add(1, Ordering::Relaxed);
                            }
                            other => panic!("EXEC answered {other:?}"),
                        }
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let mut client = Client::connect(addr);
    client.send(&command(&["GET", "counter"]));
    let total = CLIENTS as u64 * INCREMENTS;
    assert_eq!(read_bulk_text(&mut client), Some(total.to_string()));
    assert!(aborted.load(Ordering::Relaxed) > 0, "no EXEC was aborted");
}

/// redis-py (Debian's python3-redis, which `scripts/test.sh` installs): its default pipeline
/// (MULTI/EXEC), the `transaction()` helper with a watched key, a queue-time error raising
/// and applying nothing, and WATCH retry loops on eight threads.
#[test]
fn redis_py_pipelines_and_watch_loops_work() {
    let server = Server::start(&SERVER_FLAGS);
    harness::run_python(
        "redis_py_transactions.py",
        server.resp.port(),
        "all transactions checks passed",
    );
}

/// Multi-key commands are atomic across workers: a client alternating `MSET x n y n ...`
/// (with keys between) and one renaming a key back and forth, while others read: `MGET` never
/// finds x and y different, and `EXISTS a b` always counts exactly one.
#[test]
fn multi_key_commands_are_atomic_across_workers() {
    let server = Server::start(&SERVER_FLAGS);
    let addr = server.resp;
    Client::connect(addr).call(&command(&["SET", "a", "value"]));
    let stop = Arc::new(AtomicBool::new(false));
    let torn = Arc::new(AtomicU64::new(0));
    let reads = Arc::new(AtomicU64::new(0));
    let mset = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut client = Client::connect(addr);
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let n = i.to_string();
                let mut args = vec!["MSET", "x", &n];
                let fillers: Vec<String> = (0..20).map(|f| format!("filler-{f}")).collect();
                for filler in &fillers {
                    args.extend([filler.as_str(), n.as_str()]);
                }
                args.extend(["y", &n]);
                assert_eq!(client.call(&command(&args)), "+OK\r\n");
            }
        })
    };
    let rename = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut client = Client::connect(addr);
            while !stop.load(Ordering::Relaxed) {
                assert_eq!(client.call(&command(&["RENAME", "a", "b"])), "+OK\r\n");
                assert_eq!(client.call(&command(&["RENAME", "b", "a"])), "+OK\r\n");
            }
        })
    };
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (stop, torn, reads) = (Arc::clone(&stop), Arc::clone(&torn), Arc::clone(&reads));
            std::thread::spawn(move || {
                let mut client = Client::connect(addr);
                while !stop.load(Ordering::Relaxed) {
                    let mut batch = command(&["MGET", "x", "y"]);
                    batch.extend(command(&["EXISTS", "a", "b"]));
                    client.send(&batch);
                    assert_eq!(client.line(), "*2\r\n");
                    let (x, y) = (read_bulk_text(&mut client), read_bulk_text(&mut client));
                    let exists = client.line();
                    if x != y || exists != ":1\r\n" {
                        torn.fetch_add(1, Ordering::Relaxed);
                    }
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    run_until(
        &reads,
        5_000,
        &stop,
        readers.into_iter().chain([mset, rename]),
    );
    assert_eq!(
        torn.load(Ordering::Relaxed),
        0,
        "a reader saw part of a multi-key write"
    );
}

/// Keys one transaction of [`an_exec_cut_by_kill_9_leaves_all_of_it_or_none`] writes.
const EXEC_KEYS: usize = 200;

/// `kill -9` in the middle of an EXEC, made certain: the server stalls halfway through the
/// EXEC's SETs (`STRATA_TEST_EXEC_STALL_MS`, logged) and is killed there, with half of them
/// written. After the restart every key holds its value from before the EXEC, and the server
/// says it undid a transaction. Under `none` and `sync`; fails without the transaction log.
#[test]
fn a_kill_9_halfway_through_an_exec_undoes_all_of_it() {
    for durability in ["none", "sync"] {
        let pool = harness::PoolFile::on_tmpfs(&format!("exec-half-{durability}"));
        let args = ["--pool", pool.path(), "--durability", durability];
        let mut server = Server::launch(&[], &args, &[("STRATA_TEST_EXEC_STALL_MS", "60000")]);
        server.await_ready();
        let mut client = Client::connect(server.resp);
        for k in 0..EXEC_KEYS {
            assert_eq!(
                client.call(&command(&["SET", &format!("x{k}"), "before"])),
                "+OK\r\n"
            );
        }
        let mut batch = command(&["MULTI"]);
        for k in 0..EXEC_KEYS {
            batch.extend(command(&["SET", &format!("x{k}"), "after"]));
        }
        batch.extend(command(&["EXEC"]));
        client.send(&batch);
        server.wait_until(
            |s| s.log().contains("stalling inside EXEC for a test"),
            "the EXEC to stall halfway",
        );
        server.signal("KILL");
        server.wait_exit();
        let server = Server::start(&args);
        assert!(
            server
                .log()
                .contains("transactions a crash interrupted were undone")
                && server.log().contains("transactions=1"),
            "{durability}: {}",
            server.log()
        );
        let mut client = Client::connect(server.resp);
        for k in 0..EXEC_KEYS {
            client.send(&command(&["GET", &format!("x{k}")]));
            assert_eq!(
                client.bulk().as_deref(),
                Some(&b"before"[..]),
                "{durability}: x{k}"
            );
        }
    }
}

/// `kill -9` while clients run transactions of [`EXEC_KEYS`] SETs back to back: after each
/// restart every key holds the same round's value, never a mix, and the round is at least the
/// last one answered. Under `none` and `sync`. (Whether a kill lands inside an EXEC depends on
/// timing; the test above makes sure of one.)
#[test]
fn an_exec_cut_by_kill_9_leaves_all_of_it_or_none() {
    for durability in ["none", "sync"] {
        let pool = harness::PoolFile::on_tmpfs(&format!("exec-kill-{durability}"));
        let args = [
            "--pool",
            pool.path(),
            "--durability",
            durability,
            "--threads",
            "2",
        ];
        let mut answered = 0u64;
        for round in 0..8u64 {
            let mut server = Server::start(&args);
            let mut client = Client::connect(server.resp);
            let values: Vec<Option<Vec<u8>>> = (0..EXEC_KEYS)
                .map(|k| {
                    client.send(&command(&["GET", &format!("x{k}")]));
                    client.bulk()
                })
                .collect();
            assert!(
                values.iter().all(|v| *v == values[0]),
                "{durability} round {round}: a transaction was left in part: {:?}",
                values
                    .iter()
                    .map(|v| v.as_deref().map(String::from_utf8_lossy))
                    .collect::<Vec<_>>()
            );
            let found: u64 = values[0]
                .as_deref()
                .map_or(0, |v| String::from_utf8_lossy(v).parse().unwrap());
            assert!(
                found >= answered,
                "{durability}: answered {answered}, found {found}"
            );
            let stop = Arc::new(AtomicBool::new(false));
            let last = Arc::new(AtomicU64::new(found));
            let writer = {
                let (stop, last) = (Arc::clone(&stop), Arc::clone(&last));
                let addr = server.resp;
                std::thread::spawn(move || exec_rounds(addr, &stop, &last))
            };
            let target = found + 5 + round % 4 * 7;
            server.wait_until(
                |_| last.load(Ordering::SeqCst) >= target,
                "transactions to be answered",
            );
            server.signal("KILL");
            server.wait_exit();
            stop.store(true, Ordering::SeqCst);
            writer.join().expect("writer");
            answered = last.load(Ordering::SeqCst);
        }
    }
}

/// Sends `MULTI`, [`EXEC_KEYS`] SETs of the next round's number, `EXEC`, again and again,
/// storing each answered round in `last`, until `stop` or the connection breaks.
fn exec_rounds(addr: std::net::SocketAddr, stop: &AtomicBool, last: &AtomicU64) {
    let Ok(stream) = std::net::TcpStream::connect(addr) else {
        return;
    };
    let mut writer = stream.try_clone().expect("clone");
    let mut reader = std::io::BufReader::new(stream);
    let mut line = String::new();
    while !stop.load(Ordering::SeqCst) {
        let round = last.load(Ordering::SeqCst) + 1;
        let mut batch = command(&["MULTI"]);
        for k in 0..EXEC_KEYS {
            batch.extend(command(&["SET", &format!("x{k}"), &round.to_string()]));
        }
        batch.extend(command(&["EXEC"]));
        if std::io::Write::write_all(&mut writer, &batch).is_err() {
            return;
        }
        // +OK, a +QUEUED per SET, *N, then N +OK.
        for _ in 0..2 * EXEC_KEYS + 2 {
            line.clear();
            if std::io::BufRead::read_line(&mut reader, &mut line).unwrap_or(0) == 0 {
                return;
            }
        }
        assert_eq!(line, "+OK\r\n", "the last reply of an EXEC");
        last.store(round, Ordering::SeqCst);
    }
}

/// A panic in the middle of an EXEC (DEBUG PANIC queued after two writes, with
/// `--enable-debug-command`) closes the client's connection and undoes the EXEC's writes at
/// once: the server goes on serving with none of them.
#[test]
fn a_panic_inside_an_exec_undoes_its_writes() {
    let pool = harness::PoolFile::on_tmpfs("exec-panic");
    let server = Server::start(&["--pool", pool.path(), "--enable-debug-command"]);
    let mut client = Client::connect(server.resp);
    assert_eq!(client.call(&command(&["SET", "a", "old"])), "+OK\r\n");
    let mut batch = command(&["MULTI"]);
    batch.extend(command(&["SET", "a", "new"]));
    batch.extend(command(&["SET", "b", "new"]));
    batch.extend(command(&["DEBUG", "PANIC"]));
    batch.extend(command(&["EXEC"]));
    client.send(&batch);
    assert!(
        client.bytes_until_closed().is_some(),
        "the connection closes"
    );
    let mut other = Client::connect(server.resp);
    other.send(&command(&["GET", "a"]));
    assert_eq!(other.bulk().as_deref(), Some(&b"old"[..]));
    assert_eq!(other.call(&command(&["EXISTS", "b"])), ":0\r\n");
}

/// An EXEC that queues a command acting on the whole keyspace (DBSIZE, FLUSHALL) runs alone,
/// as one group of the transaction log, with the multi-key writes inside it run as they are
/// (they must not take the log or their keys again: the test would hang); one that queues
/// only keyed commands holds its keys, multi-key commands inside it included.
#[test]
fn an_exec_with_keyspace_commands_runs_alone_and_one_with_keys_holds_them() {
    let pool = harness::PoolFile::on_tmpfs("exec-alone");
    let server = Server::start(&["--pool", pool.path(), "--threads", "2"]);
    let mut client = Client::connect(server.resp);
    let mut batch = command(&["MULTI"]);
    batch.extend(command(&["MSET", "a", "1", "b", "2"]));
    batch.extend(command(&["DBSIZE"]));
    batch.extend(command(&["DEL", "a", "b"]));
    batch.extend(command(&["FLUSHALL"]));
    batch.extend(command(&["MSET", "c", "3", "d", "4"]));
    batch.extend(command(&["MGET", "c", "d"]));
    batch.extend(command(&["EXEC"]));
    client.send(&batch);
    read_queued(&mut client, 6);
    assert_eq!(client.line(), "+OK\r\n");
    assert_eq!(client.line(), ":2\r\n");
    assert_eq!(client.line(), ":2\r\n");
    assert_eq!(client.line(), "+OK\r\n");
    assert_eq!(client.line(), "+OK\r\n");
    assert_eq!(client.line(), "*2\r\n");
    assert_eq!(read_bulk_text(&mut client).as_deref(), Some("3"));
    assert_eq!(read_bulk_text(&mut client).as_deref(), Some("4"));
    // Keyed only: MSET, RENAME, COPY, MGET and a single-key write, held together.
    let mut batch = command(&["MULTI"]);
    batch.extend(command(&["MSET", "x", "1", "y", "2"]));
    batch.extend(command(&["RENAME", "x", "z"]));
    batch.extend(command(&["COPY", "z", "w"]));
    batch.extend(command(&["INCR", "w"]));
    batch.extend(command(&["MGET", "x", "y", "z", "w"]));
    batch.extend(command(&["EXEC"]));
    client.send(&batch);
    read_queued(&mut client, 5);
    for reply in ["+OK\r\n", "+OK\r\n", ":1\r\n", ":2\r\n", "*4\r\n"] {
        assert_eq!(client.line(), reply);
    }
    assert_eq!(read_bulk_text(&mut client), None);
    for value in ["2", "1", "2"] {
        assert_eq!(read_bulk_text(&mut client).as_deref(), Some(value));
    }
    let mut other = Client::connect(server.resp);
    assert_eq!(other.call(&command(&["DBSIZE"])), ":5\r\n");
}

/// While an EXEC holds its keys (made to stall 3 s halfway, `STRATA_TEST_EXEC_STALL_MS`), the
/// other worker goes on serving: of two clients connected then (the acceptor hands connections
/// to the workers in turn, so one is on the other worker), one gets its PING answered long
/// before the EXEC's reply (before the door, every worker waited for the EXEC, and no answer
/// came before it). (A command on another key answers too, unless its key shares a shard with
/// the EXEC's, which the test cannot choose from outside.) A read of the EXEC's key, sent
/// meanwhile, waits for it and sees all of it.
#[test]
fn an_exec_holding_its_keys_leaves_the_other_worker_serving() {
    use std::io::Read as _;
    let mut server = Server::launch(
        &[],
        &["--threads", "2"],
        &[("STRATA_TEST_EXEC_STALL_MS", "3000")],
    );
    server.await_ready();
    let mut writer = Client::connect(server.resp);
    let mut batch = command(&["MULTI"]);
    batch.extend(command(&["SET", "held", "1"]));
    batch.extend(command(&["SET", "held", "2"]));
    batch.extend(command(&["EXEC"]));
    writer.send(&batch);
    server.wait_until(
        |s| s.log().contains("stalling inside EXEC for a test"),
        "the EXEC to stall halfway",
    );
    let stalled_at = std::time::Instant::now();
    let (answers, answered) = std::sync::mpsc::channel();
    let pings: Vec<_> = (0..2)
        .map(|i| {
            let (addr, answers) = (server.resp, answers.clone());
            std::thread::spawn(move || {
                let mut client = Client::connect(addr);
                client.send(&command(&["PING", &format!("from-{i}")]));
                assert_eq!(client.bulk(), Some(format!("from-{i}").into_bytes()));
                let _ = answers.send(std::time::Instant::now());
            })
        })
        .collect();
    // The client on the other worker answers first; the one on the stalled worker waits.
    let first_answer = answered.recv().unwrap();
    // Sent now, a read of the EXEC's key waits for the EXEC's end (a worker waiting for a key a
    // transaction holds waits with all its connections: transactions are meant to be short).
    let reader = {
        let addr = server.resp;
        std::thread::spawn(move || {
            let mut client = Client::connect(addr);
            client.send(&command(&["GET", "held"]));
            client.bulk()
        })
    };
    read_queued(&mut writer, 2);
    assert_eq!(writer.line(), "+OK\r\n");
    assert_eq!(writer.line(), "+OK\r\n");
    let exec_done = std::time::Instant::now();
    for ping in pings {
        ping.join().unwrap();
    }
    assert_eq!(reader.join().unwrap().as_deref(), Some(&b"2"[..]));
    // The stall is 3 s: an answer from the other worker comes within milliseconds of it.
    assert!(
        exec_done.duration_since(first_answer) > std::time::Duration::from_secs(1),
        "answered {:?} after the stall began, the EXEC {:?}",
        first_answer.duration_since(stalled_at),
        exec_done.duration_since(stalled_at)
    );
    let mut rest = Vec::new();
    let _ = writer
        .stream()
        .set_read_timeout(Some(std::time::Duration::from_millis(10)));
    let _ = writer.stream().read_to_end(&mut rest);
    assert!(rest.is_empty(), "nothing more for the writer");
}
