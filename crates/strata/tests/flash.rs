//! The flash tier through the real binary: `--flash`, items evicted from memory served from
//! flash, kept across a clean restart and a `kill -9`, never a wrong value, and the tier in
//! `stats`, `INFO` and `/metrics`.
#![allow(
    clippy::too_many_lines,
    reason = "a test scenario reads best as one function"
)]

mod harness;

use harness::{flash_dir, resp_command, run_to_exit, stat, tier_medium, Client, PoolFile, Server};

/// Keys written: 24,000 values of 1,000 bytes (24 MB) into a 16 MiB memory tier.
const KEYS: usize = 24_000;
const VALUE_LEN: usize = 1000;

fn value_of(i: usize) -> Vec<u8> {
    let mut value = format!("v{i}:").into_bytes();
    value.resize(VALUE_LEN, b'a' + (i % 26) as u8);
    value
}

/// Writes every key with pipelined `noreply` sets, then a `mn` to wait for them all.
fn write_all(client: &mut Client) {
    let mut batch = Vec::new();
    for i in 0..KEYS {
        batch.extend_from_slice(format!("set k{i} 0 0 {VALUE_LEN} noreply\r\n").as_bytes());
        batch.extend_from_slice(&value_of(i));
        batch.extend_from_slice(b"\r\n");
        if batch.len() > 256 << 10 {
            client.send(&batch);
            batch.clear();
        }
    }
    client.send(&batch);
    assert_eq!(client.call(b"mn\r\n"), "MN\r\n");
}

/// Reads every key; every value returned must be the key's own. Returns the keys found.
fn read_all(client: &mut Client) -> Vec<usize> {
    (0..KEYS).filter(|&i| read_one(client, i)).collect()
}

/// Reads key `i`: whether it was found; a value returned must be the key's own.
fn read_one(client: &mut Client, i: usize) -> bool {
    let reply = client.call(format!("get k{i}\r\n").as_bytes());
    if reply == "END\r\n" {
        return false;
    }
    assert_eq!(reply, format!("VALUE k{i} 0 {VALUE_LEN}\r\n"), "key {i}");
    let data = client.read_bytes(VALUE_LEN + 2);
    assert_eq!(&data[..VALUE_LEN], &value_of(i)[..], "value of key {i}");
    assert_eq!(client.line(), "END\r\n");
    true
}

/// `INFO strata` over RESP.
fn info_strata(server: &Server) -> String {
    let mut resp = Client::connect(server.resp);
    resp.send(b"INFO strata\r\n");
    String::from_utf8(resp.bulk().expect("INFO")).expect("utf-8")
}

/// Asserts that no byte of a reply has reached `client` yet (`what`: whose reply it would be).
fn assert_no_reply_yet(client: &mut Client, what: &str) {
    client.stream().set_nonblocking(true).expect("nonblocking");
    let mut byte = [0u8; 1];
    let early = std::io::Read::read(client.stream(), &mut byte);
    assert!(
        matches!(&early, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "{what}: {early:?}"
    );
    client.stream().set_nonblocking(false).expect("blocking");
}

/// [`flash_flags`] for the small tier most tests use: 96 MiB in 1 MiB regions.
fn small_tier_flags<'a>(medium: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    flash_flags(medium, "96MiB", "1MiB", extra)
}

/// The flash flags every test here uses: the tier on `flash`, `size` large, in regions of
/// `region`, with 64 KiB segments (small regions fill, and get written, quickly), then `extra`.
fn flash_flags<'a>(
    flash: &'a str,
    size: &'a str,
    region: &'a str,
    extra: &[&'a str],
) -> Vec<&'a str> {
    let mut flags = vec![
        "--flash",
        flash,
        "--flash-size",
        size,
        "--flash-region-size",
        region,
        "--segment-size",
        "64KiB",
        "--max-value-size",
        "32KiB",
    ];
    flags.extend_from_slice(extra);
    flags
}

#[test]
fn evicted_items_are_served_from_flash_across_a_clean_restart_and_a_kill() {
    let pool_file = PoolFile::new("flash");
    let (dir, medium) = tier_medium("restart");
    let flags = small_tier_flags(
        &medium,
        &["--pool", pool_file.path(), "--index-placement", "pool"],
    );
    let mut server = Server::start(&flags);
    server.assert_logged("flash tier ready");
    assert!(
        !server.log().contains("flash tier restarts empty"),
        "no crash warning with the index in the pool:\n{}",
        server.log()
    );
    let mut client = Client::connect(server.memcache);
    write_all(&mut client);
    let found = read_all(&mut client);
    let on_flash = stat(&mut client, "strata_flash_items");
    assert!(on_flash > 5_000, "{on_flash} items on flash");
    assert!(stat(&mut client, "get_extstore") > 5_000, "reads hit flash");
    let refused = stat(&mut client, "strata_flash_refused_items");
    assert!(
        found.len() as u64 + refused >= KEYS as u64 * 9 / 10,
        "{} found, {refused} refused by flash",
        found.len()
    );
    assert!(server.metric("strata_tier_items{tier=\"flash\"}") > 0);
    // Every read of a flash item waited for its read ahead, and every wait ended with one
    // (none abandoned); where io_uring reads the medium, the worker's own ring read them.
    let waits = stat(&mut client, "strata_flash_waits");
    assert!(waits > 1_000, "{waits} waits for flash");
    assert_eq!(stat(&mut client, "strata_flash_waits_done"), waits);
    assert!(stat(&mut client, "strata_flash_staged_reads") > 1_000);
    // Reads in the device's direct-I/O pieces (512 B on this machine's disk), all good.
    let align = stat(&mut client, "strata_flash_read_align_bytes");
    assert!(
        align.is_power_of_two() && (64..=4096).contains(&align),
        "{align}"
    );
    assert_eq!(stat(&mut client, "strata_flash_read_errors"), 0);
    // A small medium packs records at 8 bytes (format version 3), and says so.
    assert_eq!(stat(&mut client, "strata_flash_record_align_bytes"), 8);
    server.assert_logged("record_align=8 B");
    assert_eq!(
        stat(&mut client, "strata_flash_read_rings_kernel_polled"),
        0
    );
    if server.log().contains("io_engine=\"io_uring\"") {
        server.assert_logged("reads=\"each worker's own io_uring\"");
    } else {
        server.assert_logged("reads=\"I/O threads\"");
    }
    let info = info_strata(&server);
    assert!(info.contains("tier_flash:medium=file"), "{info}");

    // A clean stop writes every region still in memory: the restart serves the same keys.
    server.terminate();
    let mut server = Server::start(&flags);
    server.assert_logged("flash tier reopened");
    let mut client = Client::connect(server.memcache);
    let after_restart = read_all(&mut client);
    assert_eq!(
        after_restart.len(),
        found.len(),
        "a clean restart keeps every item"
    );

    // A kill -9 after new writes, once the flash thread is idle (no suspect left to settle,
    // no sealed region queued): what flash had written survives, nothing is wrong. (A kill
    // while a shard's lock is held rebuilds that shard from the pool's records, which do not
    // name flash: its flash entries are dropped, never served stale.)
    write_all(&mut client);
    server.wait_until(
        |_| {
            stat(&mut client, "strata_flash_suspects") == 0
                && stat(&mut client, "strata_flash_regions_queued") == 0
        },
        "the flash thread to be idle",
    );
    server.signal("KILL");
    let _ = server.wait_exit();
    let mut server = Server::start(&flags);
    let mut client = Client::connect(server.memcache);
    let after_kill = read_all(&mut client);
    assert!(
        after_kill.len() > KEYS / 4,
        "{} of {KEYS} after the kill",
        after_kill.len()
    );
    assert!(stat(&mut client, "strata_flash_items") > 0);
    server.terminate();
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--flash-sqpoll-idle-ms`: a kernel thread issues each worker's flash reads. Every value is
/// still the key's own, with the thread awake (reads back to back) and after it fell asleep
/// (the next submit must wake it, or the reads would never be issued and the GETs hang).
/// One field of `INFO section` over RESP.
fn info_field(server: &Server, section: &str, name: &str) -> u64 {
    let mut resp = Client::connect(server.resp);
    resp.send(format!("INFO {section}\r\n").as_bytes());
    let text = String::from_utf8(resp.bulk().expect("INFO")).expect("utf-8");
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{name}:"))?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

/// `evicted_keys` counts every item that left the server for lack of room, from memory and
/// from flash (it counted memory only: a tier that dropped thousands said 0): with distinct
/// keys written once and nothing read, deleted or expiring, the keys written are exactly the
/// keys held plus the keys evicted.
#[test]
fn evicted_keys_counts_what_left_memory_and_flash() {
    let (dir, medium) = tier_medium("evicted");
    let flags = flash_flags(&medium, "10MiB", "1MiB", &[]);
    let server = Server::start(&flags);
    // Without --pool the tier cannot survive a restart: said at start, with the remedy.
    assert!(
        server
            .log()
            .lines()
            .any(|line| line.contains("WARN") && line.contains("pass --pool PATH")),
        "{}",
        server.log()
    );
    let mut client = Client::connect(server.memcache);
    write_all(&mut client);
    // The flash thread may still write and reclaim: read until its write queue is empty and
    // two readings agree (a region on its way to the medium holds items that are, for that
    // moment, neither indexed nor evicted; a loaded machine can starve the flash thread for
    // longer than one interval).
    let reading = || {
        let mut resp = Client::connect(server.resp);
        let held: u64 = resp.call(b"DBSIZE\r\n")[1..]
            .trim()
            .parse()
            .expect("DBSIZE");
        let evicted = info_field(&server, "stats", "evicted_keys");
        let memory = info_field(&server, "stats", "evicted_keys_memory");
        let flash = info_field(&server, "stats", "evicted_keys_flash");
        (held, evicted, memory, flash)
    };
    let mut last = reading();
    for _ in 0..100 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let now = reading();
        let idle = server.metric("strata_flash_regions_queued") == 0;
        if now == last && idle {
            break;
        }
        last = now;
    }
    let (held, evicted, memory, flash) = last;
    assert!(flash > 0, "the 10 MiB tier reclaimed regions: {last:?}");
    assert_eq!(evicted, memory + flash, "{last:?}");
    assert_eq!(held + evicted, KEYS as u64, "{last:?}");
    // Each tier's item gauge counts the items whose record it holds: together, every key.
    let memory_items = server.metric("strata_tier_items{tier=\"memory\"}");
    let flash_items = server.metric("strata_tier_items{tier=\"flash\"}");
    assert!(
        memory_items > 0 && flash_items > 0,
        "{memory_items} + {flash_items}"
    );
    assert_eq!(
        memory_items + flash_items,
        held,
        "{memory_items} + {flash_items}"
    );
    drop(server);
    std::fs::remove_dir_all(dir).expect("remove flash dir");
}

#[test]
fn flash_reads_issued_by_a_kernel_thread_serve_every_value() {
    let (dir, medium) = tier_medium("sqpoll");
    let flags = small_tier_flags(&medium, &["--flash-sqpoll-idle-ms", "2", "--threads", "2"]);
    let mut server = Server::start(&flags);
    server.assert_logged("sqpoll_idle_ms=2");
    let mut client = Client::connect(server.memcache);
    write_all(&mut client);
    let found = read_all(&mut client);
    let waits = stat(&mut client, "strata_flash_waits");
    assert!(waits > 1_000, "{waits} waits for flash");
    // The oldest keys (on flash, read once so far: this read still reads flash), each read
    // after the polling thread has fallen asleep.
    let flash_hits = stat(&mut client, "get_extstore");
    for &i in &found[..20] {
        std::thread::sleep(std::time::Duration::from_millis(10));
        assert!(read_one(&mut client, i), "key {i}");
    }
    let spaced_hits = stat(&mut client, "get_extstore") - flash_hits;
    assert!(
        spaced_hits >= 15,
        "{spaced_hits} of 20 spaced reads from flash"
    );
    assert_eq!(read_all(&mut client), found, "the same keys again");
    let waits = stat(&mut client, "strata_flash_waits");
    assert_eq!(stat(&mut client, "strata_flash_waits_done"), waits);
    assert_eq!(stat(&mut client, "strata_flash_read_errors"), 0);
    if server.log().contains("io_engine=\"io_uring\"") {
        server.assert_logged("issued by a kernel thread each (SQPOLL)");
        assert_eq!(
            stat(&mut client, "strata_flash_read_rings_kernel_polled"),
            2
        );
        let info = info_strata(&server);
        assert!(info.contains("flash_read_rings_kernel_polled:2"), "{info}");
        assert!(
            !server
                .log()
                .contains("no kernel thread for a worker's flash reads"),
            "the kernel refused SQPOLL:\n{}",
            server.log()
        );
    }
    server.terminate();
    let _ = std::fs::remove_dir_all(&dir);
}

/// SCAN through RESP over a store whose keys are mostly on flash returns every key the store
/// holds; a call reads a bounded number of flash records and then returns, with fewer keys
/// than a large COUNT asks for, so it takes many calls.
/// Every key a full RESP `SCAN … COUNT 1000` returns, with the calls it took and how many of
/// them returned fewer keys than asked with more to come (cut short for their flash reads).
fn scan_all(server: &Server) -> (std::collections::BTreeSet<Vec<u8>>, usize, usize) {
    let mut resp = Client::connect(server.resp);
    let mut seen = std::collections::BTreeSet::new();
    let (mut cursor, mut calls, mut cut_short) = (b"0".to_vec(), 0, 0);
    loop {
        resp.send(&harness::resp_command(&[
            b"SCAN", &cursor, b"COUNT", b"1000",
        ]));
        assert_eq!(resp.line(), "*2\r\n");
        cursor = resp.bulk().expect("cursor");
        let count: usize = resp.line()[1..].trim_end().parse().expect("array length");
        for _ in 0..count {
            seen.insert(resp.bulk().expect("key"));
        }
        calls += 1;
        if cursor == b"0" {
            return (seen, calls, cut_short);
        }
        if count < 1000 {
            cut_short += 1;
        }
    }
}

#[test]
fn scan_returns_every_key_on_flash() {
    let (dir, medium) = tier_medium("scan");
    let flags = small_tier_flags(&medium, &[]);
    let mut server = Server::start(&flags);
    let mut client = Client::connect(server.memcache);
    write_all(&mut client);
    let found = read_all(&mut client);
    assert!(stat(&mut client, "strata_flash_items") > 5_000);
    let (seen, calls, cut_short) = scan_all(&server);
    assert!(cut_short > 0, "no SCAN call stopped for its flash reads");
    let expected: std::collections::BTreeSet<Vec<u8>> =
        found.iter().map(|i| format!("k{i}").into_bytes()).collect();
    let missing = expected.difference(&seen).count();
    assert_eq!(
        missing,
        0,
        "keys never returned by SCAN ({} seen)",
        seen.len()
    );
    assert!(calls > 10, "{calls} SCAN calls");
    // RANDOMKEY draws from flash too: the oldest third of the keys are all on flash (16 MiB
    // of memory holds the newest ~15,000 of 24,000), and about a third of the draws are among them.
    let mut resp = Client::connect(server.resp);
    let mut oldest = 0;
    for _ in 0..100 {
        resp.send(&harness::resp_command(&[b"RANDOMKEY"]));
        let key = resp.bulk().expect("a key");
        assert!(expected.contains(&key), "{key:?}");
        let i: usize = std::str::from_utf8(&key[1..]).unwrap().parse().unwrap();
        oldest += usize::from(i < KEYS / 3);
    }
    assert!(
        oldest >= 10,
        "{oldest} of 100 random keys among the oldest third"
    );
    server.terminate();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The elements of a RESP array of bulk strings (a KEYS reply) whose `*N` line was read.
fn bulks(resp: &mut Client, count: usize) -> std::collections::BTreeSet<Vec<u8>> {
    (0..count).map(|_| resp.bulk().expect("key")).collect()
}

/// KEYS over a store whose keys are mostly on flash reads every flash key from the disk (each
/// read slowed here): it runs on the flash walk thread while the worker answers its other
/// connections, and its reply holds every key once. A connection that closes while its KEYS
/// walks leaves the server serving, and the next KEYS is whole; a SIGTERM while one walks stops
/// the server cleanly with every key kept.
#[test]
fn keys_over_flash_does_not_hold_up_other_connections() {
    let pool_file = PoolFile::new("flash-keys");
    let (dir, medium) = tier_medium("keys");
    let flags = small_tier_flags(&medium, &["--threads", "1", "--pool", pool_file.path()]);
    let mut server = Server::start(&flags);
    let mut client = Client::connect(server.memcache);
    write_all(&mut client);
    let found = read_all(&mut client);
    assert!(stat(&mut client, "strata_flash_items") > 5_000);
    server.terminate();
    let expected: std::collections::BTreeSet<Vec<u8>> =
        found.iter().map(|i| format!("k{i}").into_bytes()).collect();

    // Each flash read now takes a millisecond more: KEYS takes seconds.
    let mut server = Server::launch(&[], &flags, &[("STRATA_TEST_FLASH_READ_DELAY_MS", "1")]);
    server.await_ready();
    let mut b = Client::connect(server.memcache);
    let waits = stat(&mut b, "strata_flash_waits");
    let mut a = Client::connect(server.resp);
    a.send(&harness::resp_command(&[b"KEYS", b"*"]));
    let newest = KEYS - 1;
    for _ in 0..20 {
        assert!(read_one(&mut b, newest), "key {newest}");
    }
    assert_no_reply_yet(&mut a, "KEYS answered before B's GETs");
    let count: usize = a.line()[1..].trim_end().parse().expect("array length");
    assert_eq!(count, expected.len(), "every key once");
    assert_eq!(bulks(&mut a, count), expected);
    assert_eq!(
        stat(&mut b, "strata_flash_waits"),
        waits + 1,
        "KEYS waited once"
    );

    // A KEYS whose connection closes while it walks.
    let mut gone = Client::connect(server.resp);
    gone.send(&harness::resp_command(&[b"KEYS", b"k1*"]));
    drop(gone);
    assert!(read_one(&mut b, newest), "key {newest}");
    a.send(&harness::resp_command(&[b"KEYS", b"k1*"]));
    let count: usize = a.line()[1..].trim_end().parse().expect("array length");
    let ones: std::collections::BTreeSet<Vec<u8>> = expected
        .iter()
        .filter(|key| key.starts_with(b"k1"))
        .cloned()
        .collect();
    assert_eq!(bulks(&mut a, count), ones);
    assert_eq!(count, ones.len());
    // SIGTERM while a KEYS walks: the server still stops cleanly (exit 0; the KEYS
    // connection closes unanswered), and what it held is there after the restart below.
    let waits = stat(&mut b, "strata_flash_waits");
    let mut walking = Client::connect(server.resp);
    walking.send(&harness::resp_command(&[b"KEYS", b"*"]));
    server.wait_until(
        |_| stat(&mut b, "strata_flash_waits") > waits,
        "the KEYS to walk",
    );
    server.terminate();

    // A walk whose keys pass the output hard limit (128 KiB here; `KEYS *` is ~280 KB): the
    // connection is closed with no reply, as on the worker, and the server serves on.
    let mut limited = flags.clone();
    limited.extend_from_slice(&["--output-buffer-limit", "128KiB"]);
    let mut server = Server::start(&limited);
    let mut a = Client::connect(server.resp);
    a.send(&harness::resp_command(&[b"KEYS", b"*"]));
    assert_eq!(a.line(), "", "closed without a reply");
    let mut b = Client::connect(server.memcache);
    assert!(read_one(&mut b, newest), "key {newest}");
    assert_eq!(stat(&mut b, "strata_flash_waits"), 1, "the KEYS walked");
    assert_eq!(
        read_all(&mut b),
        found,
        "every key kept across the stop during a walk"
    );
    server.terminate();
    let _ = std::fs::remove_dir_all(&dir);
}

/// `strata flash verify` given what is no flash medium: a missing path, a directory, a
/// foreign file. Each is exit 1 with a line that says what it is, never a panic or "ok".
#[test]
fn flash_verify_refuses_what_is_no_flash_medium() {
    let dir = flash_dir("verify-foreign");
    let missing = dir.join("missing.flash");
    let foreign = dir.join("foreign.flash");
    std::fs::write(&foreign, vec![0xAB; 64 * 1024]).expect("write foreign file");
    let path = |p: &std::path::Path| p.to_str().expect("utf-8").to_owned();
    for (what, target, expected) in [
        ("missing", path(&missing), "No such file"),
        ("directory", path(&dir), "Is a directory"),
        ("foreign", path(&foreign), "no strata flash magic"),
    ] {
        let (status, stdout, stderr) = harness::run_output(&["flash", "verify", &target]);
        assert_eq!(status.code(), Some(1), "{what}: {stdout}{stderr}");
        assert!(
            format!("{stdout}{stderr}").contains(expected),
            "{what}: {stdout}{stderr}"
        );
        assert!(!stdout.contains("ok\n"), "{what}: {stdout}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn flash_options_need_flash_and_a_size() {
    let (status, stderr) = run_to_exit(&["serve", "--flash-size", "1GiB"]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--flash-size configures the flash tier: give --flash PATH too"),
        "{stderr}"
    );
    let dir = flash_dir("flags");
    let missing = dir.join("missing.flash");
    let (status, stderr) = run_to_exit(&["serve", "--flash", missing.to_str().expect("utf-8")]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("give --flash-size SIZE"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A GET of an item on flash waits for an I/O thread without holding up the other connections
/// of its worker (every flash read is slowed to one second here, as on a very slow device: a
/// read on the worker would hold B's reply up behind A's), and a pipeline behind it keeps its
/// order.
#[test]
fn a_flash_read_does_not_hold_up_other_connections() {
    let (dir, medium) = tier_medium("parked");
    let flags = small_tier_flags(&medium, &["--threads", "1"]);
    let mut server = Server::launch(&[], &flags, &[("STRATA_TEST_FLASH_READ_DELAY_MS", "1000")]);
    server.await_ready();
    let mut writer = Client::connect(server.memcache);
    write_all(&mut writer);
    assert!(stat(&mut writer, "strata_flash_items") > 5_000);
    let newest = KEYS - 1;

    // A asks for the oldest key (on flash), then, pipelined, for the newest (in memory).
    let mut a = Client::connect(server.memcache);
    a.send(format!("get k0\r\nget k{newest}\r\n").as_bytes());
    // B, on the same worker, asks for the newest key and is answered while A waits.
    let mut b = Client::connect(server.memcache);
    let reply = b.call(format!("get k{newest}\r\n").as_bytes());
    assert_eq!(reply, format!("VALUE k{newest} 0 {VALUE_LEN}\r\n"));
    assert_eq!(
        &b.read_bytes(VALUE_LEN + 2)[..VALUE_LEN],
        &value_of(newest)[..]
    );
    assert_eq!(b.line(), "END\r\n");
    assert_no_reply_yet(&mut a, "A's reply came before its flash read finished");
    // Then A's replies, in request order.
    assert_eq!(a.line(), format!("VALUE k0 0 {VALUE_LEN}\r\n"));
    assert_eq!(&a.read_bytes(VALUE_LEN + 2)[..VALUE_LEN], &value_of(0)[..]);
    assert_eq!(a.line(), "END\r\n");
    assert_eq!(a.line(), format!("VALUE k{newest} 0 {VALUE_LEN}\r\n"));
    assert_eq!(
        &a.read_bytes(VALUE_LEN + 2)[..VALUE_LEN],
        &value_of(newest)[..]
    );
    assert_eq!(a.line(), "END\r\n");
    assert!(
        stat(&mut b, "strata_flash_staged_reads") >= 1,
        "served from the read-ahead"
    );
    let waits = stat(&mut b, "strata_flash_waits");
    assert!(waits >= 1, "A's request waited");
    assert_eq!(
        stat(&mut b, "strata_flash_waits_done"),
        waits,
        "and resumed"
    );
    // The same through RESP: MGET of a flash key and a memory key.
    let mut resp = Client::connect(server.resp);
    resp.send(&harness::resp_command(&[
        b"MGET",
        b"k1",
        format!("k{newest}").as_bytes(),
    ]));
    assert_eq!(resp.line(), "*2\r\n");
    assert_eq!(resp.bulk().as_deref(), Some(&value_of(1)[..]));
    assert_eq!(resp.bulk().as_deref(), Some(&value_of(newest)[..]));
    // A pipeline of reads of flash keys waits once: the keys of the gets behind the first are
    // read ahead with its own, in parallel (one wait of a second, not four in a row).
    let waits_before = stat(&mut b, "strata_flash_waits");
    let mut pipelined = Client::connect(server.memcache);
    pipelined.send(b"get k5\r\nget k6 k7\r\nset x 0 0 1\r\ny\r\nget k8\r\n");
    for i in 5..9 {
        assert_eq!(pipelined.line(), format!("VALUE k{i} 0 {VALUE_LEN}\r\n"));
        assert_eq!(
            &pipelined.read_bytes(VALUE_LEN + 2)[..VALUE_LEN],
            &value_of(i)[..]
        );
        if i != 6 {
            assert_eq!(pipelined.line(), "END\r\n");
        }
        if i == 7 {
            assert_eq!(pipelined.line(), "STORED\r\n");
        }
    }
    assert_eq!(stat(&mut b, "strata_flash_waits"), waits_before + 1);
    // Two connections waiting for one key's record at once each get it read for them (the
    // records belong to the request: neither takes the other's, leaving it to read the
    // medium on the worker), and each is served from its own.
    let staged_before = stat(&mut b, "strata_flash_staged_reads");
    let mut first = Client::connect(server.memcache);
    let mut second = Client::connect(server.memcache);
    first.send(b"get k20\r\n");
    second.send(b"get k20\r\n");
    for client in [&mut first, &mut second] {
        assert_eq!(client.line(), format!("VALUE k20 0 {VALUE_LEN}\r\n"));
        assert_eq!(
            &client.read_bytes(VALUE_LEN + 2)[..VALUE_LEN],
            &value_of(20)[..]
        );
        assert_eq!(client.line(), "END\r\n");
    }
    assert_eq!(
        stat(&mut b, "strata_flash_staged_reads"),
        staged_before + 2,
        "both served from what was read for them"
    );
    let waits_before = stat(&mut b, "strata_flash_waits");
    resp.send(
        &[
            harness::resp_command(&[b"GET", b"k9"]),
            harness::resp_command(&[b"MGET", b"k10", b"k11"]),
        ]
        .concat(),
    );
    assert_eq!(resp.bulk().as_deref(), Some(&value_of(9)[..]));
    assert_eq!(resp.line(), "*2\r\n");
    assert_eq!(resp.bulk().as_deref(), Some(&value_of(10)[..]));
    assert_eq!(resp.bulk().as_deref(), Some(&value_of(11)[..]));
    assert_eq!(stat(&mut b, "strata_flash_waits"), waits_before + 1);
    // A batch whose middle command waits runs on from it as parsed (its rest parked), then
    // parsing goes on after it: a command the batch ended on, another wait, and a command that
    // arrives in two pieces.
    resp.send(
        &[
            harness::resp_command(&[b"SET", b"x", b"1"]),
            harness::resp_command(&[b"GET", b"k30"]),
            harness::resp_command(&[b"GET", b"x"]),
            harness::resp_command(&[b"INCR", b"x"]),
            harness::resp_command(&[b"GET", b"k31"]),
            b"*2\r\n$3\r\nGET\r\n$1".to_vec(),
        ]
        .concat(),
    );
    assert_eq!(resp.line(), "+OK\r\n");
    assert_eq!(resp.bulk().as_deref(), Some(&value_of(30)[..]));
    assert_eq!(resp.bulk().as_deref(), Some(&b"1"[..]));
    assert_eq!(resp.line(), ":2\r\n");
    assert_eq!(resp.bulk().as_deref(), Some(&value_of(31)[..]));
    resp.send(b"\r\nx\r\n");
    assert_eq!(resp.bulk().as_deref(), Some(&b"2"[..]));
    // A waiting command longer than the connection's first piece of input (1 KiB): parked
    // as parsed, it runs once the connection hands it back whole.
    let keys: Vec<Vec<u8>> = (100..260).map(|i| format!("k{i}").into_bytes()).collect();
    let mut mget: Vec<&[u8]> = vec![b"MGET"];
    mget.extend(keys.iter().map(Vec::as_slice));
    let command = harness::resp_command(&mget);
    assert!(command.len() > 1536, "{} bytes", command.len());
    resp.send(&[command, harness::resp_command(&[b"GET", b"x"])].concat());
    assert_eq!(resp.line(), format!("*{}\r\n", keys.len()));
    for i in 100..260 {
        assert_eq!(resp.bulk().as_deref(), Some(&value_of(i)[..]), "k{i}");
    }
    assert_eq!(resp.bulk().as_deref(), Some(&b"2"[..]));
    // The other commands that read or change a flash item wait the same way, instead of
    // reading flash on the worker: meta get, append, delete; RESP STRLEN, EXISTS, DEL.
    let waits_before = stat(&mut b, "strata_flash_waits");
    let mut other = Client::connect(server.memcache);
    other.send(b"mg k12 v\r\n");
    assert_eq!(other.line(), format!("VA {VALUE_LEN}\r\n"));
    assert_eq!(
        &other.read_bytes(VALUE_LEN + 2)[..VALUE_LEN],
        &value_of(12)[..]
    );
    assert_eq!(other.call(b"append k13 0 0 1\r\nz\r\n"), "STORED\r\n");
    assert_eq!(other.call(b"delete k14\r\n"), "DELETED\r\n");
    assert_eq!(other.call(b"get k14\r\n"), "END\r\n");
    assert_eq!(stat(&mut b, "strata_flash_waits"), waits_before + 3);
    resp.send(&harness::resp_command(&[b"STRLEN", b"k13"]));
    assert_eq!(resp.line(), format!(":{}\r\n", VALUE_LEN + 1), "appended");
    resp.send(&harness::resp_command(&[b"EXISTS", b"k15", b"k16", b"k14"]));
    assert_eq!(resp.line(), ":2\r\n");
    resp.send(&harness::resp_command(&[b"DEL", b"k17"]));
    assert_eq!(resp.line(), ":1\r\n");
    assert_eq!(stat(&mut b, "strata_flash_waits"), waits_before + 5);
    // A client that hangs up while its request waits for flash. The hang-up reads as the end
    // of its input, which may be a half-close whose requests are still owed their replies
    // (memcached's rule), so the request completes and the connection then closes. C,
    // connected meanwhile, gets its own replies only, before and after that read completes.
    let connections = stat(&mut b, "curr_connections");
    let waits_before = stat(&mut b, "strata_flash_waits");
    let mut gone = Client::connect(server.memcache);
    gone.send(b"get k3\r\n");
    while stat(&mut b, "strata_flash_waits") == waits_before {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    drop(gone);
    let mut c = Client::connect(server.memcache);
    let own_reply = |c: &mut Client| {
        assert_eq!(c.call(b"get k4\r\n"), format!("VALUE k4 0 {VALUE_LEN}\r\n"));
        assert_eq!(&c.read_bytes(VALUE_LEN + 2)[..VALUE_LEN], &value_of(4)[..]);
        assert_eq!(c.line(), "END\r\n");
    };
    own_reply(&mut c);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while stat(&mut b, "curr_connections") != connections + 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "the departed client's connection was never closed"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let waits = stat(&mut b, "strata_flash_waits");
    let done = stat(&mut b, "strata_flash_waits_done");
    let abandoned = stat(&mut b, "strata_flash_waits_abandoned");
    assert_eq!(done + abandoned, waits, "every wait ended");
    own_reply(&mut c);
    assert_eq!(c.call(b"mn\r\n"), "MN\r\n", "nothing else was sent to C");
    // A shutdown while a request waits for flash answers it before closing.
    a.send(b"get k2\r\n");
    server.signal("TERM");
    assert_eq!(a.line(), format!("VALUE k2 0 {VALUE_LEN}\r\n"));
    assert_eq!(&a.read_bytes(VALUE_LEN + 2)[..VALUE_LEN], &value_of(2)[..]);
    assert_eq!(a.line(), "END\r\n");
    assert!(server.wait_exit().success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Keys of the flash kill loop: 36 MB of values through a 16 MiB memory tier.
const KILL_LOOP_KEYS: usize = 40_000;

/// What the flash kill loop knows of each key: the last acknowledged version (0: never
/// written, or found absent after a kill) and the versions in flight when the process died.
struct KillModel {
    acked: Vec<u64>,
    in_flight: Vec<Vec<u64>>,
    version: u64,
    rng: u64,
    /// Keys checked after kills, how many were absent, and flash items found after restarts.
    checked: u64,
    absent: u64,
    kept_on_flash: u64,
}

impl KillModel {
    fn new(seed: u64) -> KillModel {
        KillModel {
            acked: vec![0; KILL_LOOP_KEYS],
            in_flight: vec![Vec::new(); KILL_LOOP_KEYS],
            version: 0,
            rng: seed | 1,
            checked: 0,
            absent: 0,
            kept_on_flash: 0,
        }
    }

    fn value(key: usize, version: u64) -> Vec<u8> {
        let mut value = format!("k{key}:v{version}:").into_bytes();
        value.resize(900, b'x');
        value
    }

    fn next(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    fn random_key(&mut self) -> usize {
        (self.next() % KILL_LOOP_KEYS as u64) as usize
    }

    /// After a restart: every key absent, acknowledged or in flight; adopts what survived.
    fn check(&mut self, client: &mut Client, cell: &str) {
        for key in 0..KILL_LOOP_KEYS {
            let reply = client.call(format!("get k{key}\r\n").as_bytes());
            let got = (reply != "END\r\n").then(|| {
                let len: usize = reply
                    .trim_end()
                    .rsplit(' ')
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap();
                let data = client.read_bytes(len + 2);
                assert_eq!(client.line(), "END\r\n");
                data[..len].to_vec()
            });
            let is = |v: u64| v > 0 && got.as_deref() == Some(&Self::value(key, v)[..]);
            self.checked += u64::from(self.acked[key] > 0);
            if got.is_none() {
                self.absent += u64::from(self.acked[key] > 0);
                self.acked[key] = 0;
            } else if let Some(&v) = self.in_flight[key].iter().find(|&&v| is(v)) {
                self.acked[key] = v;
            } else if !is(self.acked[key]) {
                let data = got.unwrap_or_default();
                panic!(
                    "{cell}: k{key} = {:?}, acknowledged v{}, in flight {:?}",
                    String::from_utf8_lossy(&data[..data.len().min(24)]),
                    self.acked[key],
                    self.in_flight[key]
                );
            }
            self.in_flight[key].clear();
        }
    }

    /// 200 pipelined GETs of random keys, left unanswered: the kill comes with flash reads
    /// queued or in flight (in a kernel thread's hands, in the cells with `SQPOLL`).
    fn reads_in_flight(&mut self, client: &mut Client) {
        let mut request = Vec::new();
        for _ in 0..200 {
            request.extend_from_slice(format!("get k{}\r\n", self.random_key()).as_bytes());
        }
        client.send(&request);
    }

    /// A pipelined batch of 100 requests to random keys, one in ten a delete, the rest
    /// overwrites; `in_flight` keeps it unanswered. (An acknowledged delete leaves the key
    /// with no version it may come back with, but those of later writes.)
    fn batch(&mut self, client: &mut Client, in_flight: bool) {
        let mut request = Vec::new();
        let mut sent = Vec::new();
        for _ in 0..100 {
            let key = self.random_key();
            if self.next().is_multiple_of(10) {
                sent.push((key, None));
                request.extend_from_slice(format!("delete k{key}\r\n").as_bytes());
                continue;
            }
            self.version += 1;
            sent.push((key, Some(self.version)));
            request.extend_from_slice(format!("set k{key} 0 0 900\r\n").as_bytes());
            request.extend_from_slice(&Self::value(key, self.version));
            request.extend_from_slice(b"\r\n");
        }
        client.send(&request);
        for (key, version) in sent {
            match (version, in_flight) {
                // Absent is always allowed, and the acknowledged value stays possible.
                (None, true) => {}
                (None, false) => {
                    let reply = client.line();
                    assert!(
                        reply == "DELETED\r\n" || reply == "NOT_FOUND\r\n",
                        "{reply:?}"
                    );
                    self.acked[key] = 0;
                    self.in_flight[key].clear();
                }
                (Some(version), true) => self.in_flight[key].push(version),
                (Some(version), false) => {
                    assert_eq!(client.line(), "STORED\r\n");
                    self.acked[key] = version;
                }
            }
        }
    }
}

/// Where a round of the flash kill loop kills the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KillPoint {
    /// `kill -9` under load, a batch in flight.
    Load,
    /// SIGTERM with a batch in flight, then `kill -9` a few milliseconds into the shutdown
    /// (while it drains and writes its flash regions).
    Shutdown,
    /// `kill -9` under load, then again while the restart recovers (each step stalled).
    Recovery,
}

/// Ends a round of the flash kill loop at `point` (the server is gone when it returns).
fn kill_at(point: KillPoint, server: &mut Server, flags: &[&str], model: &mut KillModel) {
    match point {
        KillPoint::Load | KillPoint::Recovery => server.signal("KILL"),
        KillPoint::Shutdown => {
            server.signal("TERM");
            std::thread::sleep(std::time::Duration::from_millis(model.next() % 30));
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &server.pid().to_string()])
                .status();
        }
    }
    let _ = server.wait_exit();
    if point == KillPoint::Recovery {
        let stall = [("STRATA_TEST_RECOVERY_STALL_MS", "50")];
        let mut recovering = Server::launch(&[], flags, &stall);
        std::thread::sleep(std::time::Duration::from_millis(model.next() % 400));
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &recovering.pid().to_string()])
            .status();
        let _ = recovering.wait_exit();
    }
}

/// Every cell of the flash kill loop (index placement × durability × kill point), filtered by
/// `STRATA_FLASH_KILL_INDEX` (pool, dram), `STRATA_FLASH_KILL_DURABILITY` (none, sync,
/// interval=20) and `STRATA_FLASH_KILL_POINT` (load, shutdown, recovery) where set.
fn flash_kill_cells() -> Vec<(&'static str, &'static str, KillPoint)> {
    let wanted = |name: &str, value: &str| {
        std::env::var(name).map_or(true, |want| want.eq_ignore_ascii_case(value))
    };
    let mut cells = Vec::new();
    for placement in ["pool", "dram"] {
        for durability in ["none", "sync", "interval=20"] {
            for (point, point_name) in [
                (KillPoint::Load, "load"),
                (KillPoint::Shutdown, "shutdown"),
                (KillPoint::Recovery, "recovery"),
            ] {
                if wanted("STRATA_FLASH_KILL_INDEX", placement)
                    && wanted("STRATA_FLASH_KILL_DURABILITY", durability)
                    && wanted("STRATA_FLASH_KILL_POINT", point_name)
                {
                    cells.push((placement, durability, point));
                }
            }
        }
    }
    assert!(
        !cells.is_empty(),
        "the STRATA_FLASH_KILL_* filters leave no cell"
    );
    cells
}

/// A kill loop with the flash tier, in every cell of index placement (pool, dram) × durability
/// (none, sync, interval) × kill point (under load, during shutdown, during recovery), every
/// other cell with a kernel thread issuing the flash reads (`--flash-sqpoll-idle-ms`): rounds
/// of pipelined overwrites and deletes of more data than memory holds (so items keep moving to
/// flash and back), each ended by `kill -9` with GETs and a batch of writes in flight, and a
/// restart on the same pool and flash file. After each restart, every key is absent (a cache
/// may lose what flash had not written; with the index in DRAM a crash drops every flash
/// entry) or holds its last acknowledged value or one of the values in flight: never an older
/// one, never a torn one. `STRATA_FLASH_KILL_ROUNDS=N` runs more rounds per cell (default 2);
/// `STRATA_FLASH_KILL_SQPOLL=on` or `off` puts SQPOLL in every cell or none.
#[test]
fn kill_loop_with_flash_never_serves_an_older_value() {
    let rounds: u64 = std::env::var("STRATA_FLASH_KILL_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2);
    let mut kept_with_index_in_pool = 0;
    for (i, (placement, durability, point)) in flash_kill_cells().into_iter().enumerate() {
        let sqpoll = match std::env::var("STRATA_FLASH_KILL_SQPOLL").as_deref() {
            Ok("on") => true,
            Ok("off") => false,
            _ => i % 2 == 1,
        };
        let cell = format!(
            "index {placement}, durability {durability}, kill {point:?}{}",
            if sqpoll {
                ", reads issued by SQPOLL"
            } else {
                ""
            }
        );
        let pool_file = PoolFile::new(&format!("flash-kill-{i}"));
        let (dir, medium) = tier_medium(&format!("kill-{i}"));
        let extra = [
            "--pool",
            pool_file.path(),
            "--index-placement",
            placement,
            "--durability",
            durability,
        ];
        let mut flags = flash_flags(&medium, "64MiB", "256KiB", &extra);
        if sqpoll {
            flags.extend_from_slice(&["--flash-sqpoll-idle-ms", "2"]);
        }
        let mut model = KillModel::new(0x9E37_79B9_7F4A_7C15 ^ i as u64);
        for round in 0..=rounds {
            let mut server = Server::start(&flags);
            // The index in DRAM beside a file pool was asked for: the operator is told that a
            // crash empties the flash tier (as the cell's count of flash items kept shows).
            assert_eq!(
                server.log().contains("the flash tier restarts empty"),
                placement == "dram",
                "{cell}:\n{}",
                server.log()
            );
            let mut client = Client::connect(server.memcache);
            model.check(&mut client, &cell);
            if round > 0 {
                model.kept_on_flash += stat(&mut client, "strata_flash_items");
            }
            if round == rounds {
                break;
            }
            for _ in 0..20 + model.next() % 200 {
                model.batch(&mut client, false);
            }
            model.reads_in_flight(&mut client);
            model.batch(&mut client, true);
            kill_at(point, &mut server, &flags, &mut model);
        }
        eprintln!(
            "{cell}, {rounds} kills: {} written keys checked, {} absent, {} flash items found \
             after restarts, no older or torn value",
            model.checked, model.absent, model.kept_on_flash
        );
        if placement == "pool" {
            kept_with_index_in_pool += model.kept_on_flash;
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    // Coverage, not a promise per kill: whether one kill leaves flash entries depends on
    // whether a shard was mid-change (then rebuilt from the pool's records, without them).
    let pool_cells = std::env::var("STRATA_FLASH_KILL_INDEX").map_or(true, |v| v == "pool");
    assert!(
        !pool_cells || kept_with_index_in_pool > 0,
        "flash items survived some kill with the index in the pool"
    );
}

/// Damage to the flash file while the server is stopped (issue 17's rule for every tier): a
/// flipped record byte, a zeroed 4 KiB block, a damaged region header, then a damaged
/// superblock. No damaged value is ever served, damage costs only what it hit, and it is
/// counted.
#[test]
fn damaged_flash_bytes_are_never_served() {
    const REGION: u64 = 1 << 20;
    const HEADER: u64 = 4096;
    let pool_file = PoolFile::new("flash-damage");
    let (dir, flash_path) = tier_medium("damage");
    let flash_path = flash_path.as_str();
    let flags = small_tier_flags(flash_path, &["--pool", pool_file.path()]);
    let mut server = Server::start(&flags);
    let mut client = Client::connect(server.memcache);
    write_all(&mut client);
    let before = read_all(&mut client).len();
    let on_flash = stat(&mut client, "strata_flash_items");
    assert!(on_flash > 5_000);
    // `strata flash verify` is refused while the server holds the medium.
    let (status, _, stderr) = harness::run_output(&["flash", "verify", flash_path]);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("a server has it open"), "{stderr}");
    server.terminate();
    // Once stopped, the medium checks sound.
    let (status, stdout, stderr) = harness::run_output(&["flash", "verify", flash_path]);
    assert_eq!(status.code(), Some(0), "{stdout}{stderr}");
    assert!(
        stdout.ends_with("ok\n") && stdout.contains(" 0 damaged"),
        "{stdout}"
    );

    // Region i starts at HEADER + i * REGION; its records after its own 4 KiB header.
    let mut bytes = std::fs::read(flash_path).expect("read flash file");
    let record_area = |region: u64| (HEADER + region * REGION + HEADER) as usize;
    bytes[record_area(0) + 700] ^= 0x10; // One flipped byte inside a record.
    let block = record_area(1) + 8192;
    bytes[block..block + 4096].fill(0); // A zeroed block.
    bytes[(HEADER + 2 * REGION) as usize + 20] ^= 0xff; // Region 2's header.
    std::fs::write(flash_path, &bytes).expect("write flash file");
    // The offline check finds each damage: the damaged header, and the damaged records.
    let (status, stdout, _) = harness::run_output(&["flash", "verify", flash_path]);
    assert_eq!(status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("problem: region 2: header fails its checks")
            && stdout.contains("problem: region 0: payload checksum wrong")
            && stdout.contains("problem: region 1: payload checksum wrong")
            && stdout.contains("problem: region 0: record at payload offset"),
        "{stdout}"
    );

    let mut server = Server::start(&flags);
    let mut client = Client::connect(server.memcache);
    // SCAN first, so it is the first to read the damaged records: it returns no key that
    // was never written (a key read from damaged bytes), and every key GET finds after it.
    let (scanned, _, _) = scan_all(&server);
    let written: std::collections::BTreeSet<Vec<u8>> =
        (0..KEYS).map(|i| format!("k{i}").into_bytes()).collect();
    let foreign: Vec<_> = scanned.difference(&written).collect();
    assert!(
        foreign.is_empty(),
        "SCAN returned keys never written: {foreign:?}"
    );
    let after = read_all(&mut client); // Asserts every value it gets is the key's own.
    let unscanned = after
        .iter()
        .filter(|&&i| !scanned.contains(format!("k{i}").as_bytes()))
        .count();
    assert_eq!(unscanned, 0, "keys GET found that SCAN did not return");
    let damaged = stat(&mut client, "strata_flash_damaged_records");
    assert!(
        damaged >= 2,
        "the flipped and zeroed records were found: {damaged}"
    );
    assert!(
        after.len() + 3 * (REGION as usize / 1024) >= before,
        "damage cost about what it hit: {} of {before} left",
        after.len()
    );
    server.terminate();

    // A damaged superblock: the tier starts empty (said in the log), nothing wrong is served.
    let mut bytes = std::fs::read(flash_path).expect("read flash file");
    bytes[30] ^= 0x01;
    std::fs::write(flash_path, &bytes).expect("write flash file");
    let (status, stdout, _) = harness::run_output(&["flash", "verify", flash_path]);
    assert_eq!(status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("problem: superblock: checksum"), "{stdout}");
    let mut server = Server::start(&flags);
    server.assert_logged("flash tier formatted");
    let mut client = Client::connect(server.memcache);
    let _ = read_all(&mut client);
    assert_eq!(stat(&mut client, "strata_flash_items"), 0);
    server.terminate();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Transactions over items on flash: the keys a queued GET and a WATCH name are read ahead
/// before EXEC runs (EXEC counts as a flash wait), and EXEC answers every value right; a write
/// to a watched flash item by another client aborts it.
#[test]
fn transactions_read_flash_items_ahead_and_watch_them() {
    let (dir, medium) = tier_medium("transactions");
    let server = Server::start(&small_tier_flags(&medium, &[]));
    let mut client = Client::connect(server.memcache);
    write_all(&mut client);
    // The first keys written were the first evicted to flash (the flash waits below show that
    // EXEC found some there).
    assert!(stat(&mut client, "strata_flash_items") > 5_000);
    let on_flash: Vec<usize> = (0..10).collect();
    let mut resp = Client::connect(server.resp);
    let keys: Vec<String> = on_flash.iter().map(|i| format!("k{i}")).collect();
    let watch: Vec<&[u8]> = [&b"WATCH"[..], keys[0].as_bytes()].to_vec();
    assert_eq!(resp.call(&harness::resp_command(&watch)), "+OK\r\n");
    // (WATCH waited for its key itself; what follows counts EXEC's wait.)
    let waits_before = stat(&mut client, "strata_flash_waits");
    let mut batch = harness::resp_command(&[b"MULTI"]);
    for key in &keys {
        batch.extend(harness::resp_command(&[b"GET", key.as_bytes()]));
    }
    batch.extend(harness::resp_command(&[b"EXEC"]));
    resp.send(&batch);
    assert_eq!(resp.line(), "+OK\r\n");
    for _ in &keys {
        assert_eq!(resp.line(), "+QUEUED\r\n");
    }
    assert_eq!(resp.line(), format!("*{}\r\n", keys.len()));
    for &i in &on_flash {
        assert_eq!(resp.bulk(), Some(value_of(i)), "key {i}");
    }
    assert!(
        stat(&mut client, "strata_flash_waits") > waits_before,
        "EXEC waited for flash"
    );
    // A watched flash item written meanwhile by a memcached client aborts the EXEC.
    assert_eq!(resp.call(&harness::resp_command(&watch)), "+OK\r\n");
    let set = format!("set {} 0 0 1\r\nx\r\n", keys[0]);
    assert_eq!(client.call(set.as_bytes()), "STORED\r\n");
    let mut batch = harness::resp_command(&[b"MULTI"]);
    batch.extend(harness::resp_command(&[b"GET", keys[1].as_bytes()]));
    batch.extend(harness::resp_command(&[b"EXEC"]));
    resp.send(&batch);
    assert_eq!(resp.line(), "+OK\r\n");
    assert_eq!(resp.line(), "+QUEUED\r\n");
    assert_eq!(resp.line(), "*-1\r\n");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Hashes go to flash and come back as hashes: HGET, TYPE and HINCRBY of items evicted from
/// memory answer from the tier (their reads wait for the read ahead like a GET's), and a
/// string command on one still answers WRONGTYPE.
#[test]
fn hashes_evicted_to_flash_answer_as_hashes() {
    let (dir, medium) = tier_medium("hashes");
    let server = Server::start(&small_tier_flags(&medium, &[]));
    let mut client = Client::connect(server.resp);
    let mut batch = Vec::new();
    for i in 0..KEYS {
        let (key, number) = (format!("h{i}"), i.to_string());
        let value = value_of(i);
        batch.extend(resp_command(&[
            b"HSET",
            key.as_bytes(),
            b"n",
            number.as_bytes(),
            b"v",
            &value,
        ]));
        if batch.len() > 256 << 10 || i + 1 == KEYS {
            let sent = batch.iter().filter(|&&b| b == b'*').count();
            client.send(&batch);
            batch.clear();
            for _ in 0..sent {
                assert_eq!(client.line(), ":2\r\n");
            }
        }
    }
    let mut memcache = Client::connect(server.memcache);
    assert!(stat(&mut memcache, "strata_flash_items") > 5_000);
    let mut found = 0;
    for i in (0..KEYS).step_by(7) {
        let key = format!("h{i}");
        client.send(&resp_command(&[b"HGET", key.as_bytes(), b"n"]));
        match client.bulk() {
            Some(number) => {
                assert_eq!(number, i.to_string().into_bytes(), "{key}");
                found += 1;
            }
            None => continue,
        }
        assert_eq!(
            client.call(&resp_command(&[b"TYPE", key.as_bytes()])),
            "+hash\r\n"
        );
        let incremented = format!(":{}\r\n", i + 1);
        let reply = client.call(&resp_command(&[b"HINCRBY", key.as_bytes(), b"n", b"1"]));
        assert_eq!(reply, incremented, "{key}");
        assert!(client
            .call(&resp_command(&[b"GET", key.as_bytes()]))
            .starts_with("-WRONGTYPE"));
    }
    // Items flash could not take (its writer behind, as on a loaded machine) are dropped, as
    // in `evicted_items_are_served_from_flash_across_a_clean_restart_and_a_kill`; one in seven of them was sampled here, counted twice
    // for the sampling's spread.
    let sampled = (0..KEYS).step_by(7).count() as u64;
    let refused = stat(&mut memcache, "strata_flash_refused_items");
    assert!(
        found + refused.div_ceil(7) * 2 >= sampled * 9 / 10,
        "{found} of {sampled} hashes found, {refused} items refused by flash"
    );
    assert!(stat(&mut memcache, "get_extstore") > 500, "reads hit flash");
    drop(server);
    let _ = std::fs::remove_dir_all(dir);
}

/// A pipelined batch that waits twice, with a long command behind the second wait: the
/// connection hands the parked batch back from the first wait in a piece shorter than the
/// one it was parsed from (its first chunk, 1 KiB), and the second wait reads ahead only the
/// keys of the commands that piece holds. (The worker sliced the piece past its end, panicked
/// and closed its connections.) The second wait: the first read of k5 took the record read
/// ahead for it, so the second read of k5 waits again.
#[test]
fn a_second_wait_with_a_long_command_behind_it_runs_the_batch_whole() {
    let (dir, medium) = tier_medium("long-behind");
    let server = Server::start(&small_tier_flags(&medium, &[]));
    let mut writer = Client::connect(server.memcache);
    write_all(&mut writer);
    assert!(stat(&mut writer, "strata_flash_items") > 5_000);
    let long = vec![b'b'; 3 << 10];
    // 93 KB of short commands first: the connection's chunks double to their largest (64
    // KiB), so the batch is most likely parsed from one piece (it is 3.3 KB).
    let mut request = Vec::new();
    for i in 0..3_000 {
        request.extend(resp_command(&[b"SET", format!("f{i:04}").as_bytes(), b"x"]));
    }
    let batch = [
        resp_command(&[b"GET", b"k3"]),
        resp_command(&[b"GET", b"k5"]),
        resp_command(&[b"GET", b"k5"]),
        resp_command(&[b"SET", b"long", &long]),
        resp_command(&[b"GET", b"long"]),
    ];
    request.extend(batch.concat());
    let mut resp = Client::connect(server.resp);
    let waits_before = stat(&mut writer, "strata_flash_waits");
    resp.send(&request);
    for _ in 0..3_000 {
        assert_eq!(resp.line(), "+OK\r\n");
    }
    assert_eq!(resp.bulk().as_deref(), Some(&value_of(3)[..]));
    assert_eq!(resp.bulk().as_deref(), Some(&value_of(5)[..]));
    assert_eq!(resp.bulk().as_deref(), Some(&value_of(5)[..]));
    assert_eq!(resp.line(), "+OK\r\n");
    assert_eq!(resp.bulk().as_deref(), Some(&long[..]));
    assert_eq!(
        stat(&mut writer, "strata_flash_waits"),
        waits_before + 2,
        "two waits"
    );
    assert!(!server.log().contains("panic"), "{}", server.log());
    drop(server);
    let _ = std::fs::remove_dir_all(dir);
}

/// Replies held while a request waits for flash that pass the output's soft limit: once the
/// reads are done the connection writes them and runs the request. (It stalled: a resumed
/// connection skipped its write until its request had run, and one past its soft limit runs
/// nothing until its output drains.)
#[test]
fn replies_held_past_the_soft_limit_while_a_request_waits_still_go_out() {
    let (dir, medium) = tier_medium("held-past-soft");
    // A soft limit of 256 KiB (a quarter of the hard one).
    let extra = ["--threads", "1", "--output-buffer-limit", "1MiB"];
    let flags = small_tier_flags(&medium, &extra);
    let mut server = Server::launch(&[], &flags, &[("STRATA_TEST_FLASH_READ_DELAY_MS", "200")]);
    server.await_ready();
    let mut writer = Client::connect(server.memcache);
    write_all(&mut writer);
    assert!(stat(&mut writer, "strata_flash_items") > 5_000);
    // 400 KB of the newest values, in memory, then a key only flash holds, in one piece.
    let mut batch = Vec::new();
    for i in 0..400 {
        batch.extend_from_slice(format!("set m{i} 0 0 {VALUE_LEN} noreply\r\n").as_bytes());
        batch.extend_from_slice(&value_of(i));
        batch.extend_from_slice(b"\r\n");
    }
    writer.send(&batch);
    assert_eq!(writer.call(b"mn\r\n"), "MN\r\n");
    let names: Vec<Vec<u8>> = (0..400).map(|i| format!("m{i}").into_bytes()).collect();
    let mut mget: Vec<&[u8]> = vec![b"MGET"];
    mget.extend(names.iter().map(Vec::as_slice));
    let mut resp = Client::connect(server.resp);
    resp.send(
        &[
            harness::resp_command(&mget),
            harness::resp_command(&[b"GET", b"k60"]),
        ]
        .concat(),
    );
    assert_eq!(resp.line(), "*400\r\n");
    for i in 0..400 {
        assert_eq!(resp.bulk().as_deref(), Some(&value_of(i)[..]), "m{i}");
    }
    assert_eq!(
        resp.bulk().as_deref(),
        Some(&value_of(60)[..]),
        "k60, from flash"
    );
    assert!(stat(&mut writer, "strata_flash_waits") >= 1);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
