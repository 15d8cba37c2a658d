//! Kill loop for `strata block`: the real binary serving a file in pass-through and in
//! write-through is killed with SIGKILL (under load, or a few milliseconds after a SIGTERM, while
//! it shuts down) and started again on the same file, round after round. Client threads write
//! 4 KiB blocks of their own slice of the export (each block's bytes name the thread, the block
//! and a sequence number), one request at a time, some with FUA, with a FLUSH now and then.
//! After each restart every block must hold its last answered write, or, for the one write in
//! flight at the kill, that write's bytes, sector by sector (NBD promises nothing for a write not
//! answered; a sector mix is what a torn write leaves). In the write-through modes the store has
//! every answered write before the reply, which is more than NBD asks (FUA or a later FLUSH);
//! so does write-back with its cache in a pool, as a kill leaves the pool's mapping with every
//! store made (a power cut is the simulator's: `crates/block/tests/write_back_power_failure.rs`).
//! Write-back with its cache in DRAM is held to NBD's rule only: a block may read as its last
//! acknowledged write (FUA, or a FLUSH of its thread answered after it) or any answered since.
//!
//! The write-through cache runs twice: in DRAM (cold after each start) and in a cache pool
//! (`--cache`), whose lines survive the kills, so a line left older than the store would be
//! served after the restart and fail the check. Write-back runs in a pool of 64 KiB lines
//! (each write a part of a line, so the rest comes from the cache or the store) and in DRAM.
//!
//! `STRATA_BLOCK_KILL_ROUNDS=N`: rounds per mode and kill point (default 4).
#![allow(
    clippy::too_many_lines,
    reason = "a test scenario reads best as one function"
)]
// NBD is big-endian on the wire (the workspace denies big-endian conversions elsewhere).
#![allow(clippy::big_endian_bytes)]

mod harness;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use harness::WAIT_MAX;
use strata_block::nbd;

const BLOCK: usize = 4096;
const SECTOR: usize = 512;
const THREADS: u64 = 3;
const BLOCKS_PER_THREAD: u64 = 64;
const STORE_BYTES: usize = (THREADS * BLOCKS_PER_THREAD) as usize * BLOCK;

/// What a thread knows of its blocks: the last answered bytes, the writes answered since the
/// last acknowledged one (FUA or a FLUSH after it), and the write in flight.
#[derive(Default)]
struct Model {
    answered: HashMap<u64, Vec<u8>>,
    acknowledged: HashMap<u64, Vec<u8>>,
    unacknowledged: HashMap<u64, Vec<Vec<u8>>>,
    in_flight: Option<(u64, Vec<u8>)>,
}

fn block_bytes(thread: u64, block: u64, seq: u64) -> Vec<u8> {
    let mut out = vec![0u8; BLOCK];
    for (i, chunk) in out.chunks_mut(8).enumerate() {
        let word = (thread << 56) ^ (block << 40) ^ (seq << 8) ^ i as u64;
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    out
}

/// The sequence number a block's bytes carry (0 for the store's original bytes).
fn seq_of(bytes: &[u8]) -> u64 {
    let word = u64::from_le_bytes(bytes[0..8].try_into().unwrap());
    (word >> 8) & 0xFFFF_FFFF
}

struct Server {
    child: Child,
    socket: PathBuf,
}

impl Server {
    fn start(dir: &Path, store: &Path, mode: &[&str]) -> Server {
        let socket = dir.join("nbd.sock");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("log"))
            .unwrap();
        let mut args = vec!["block".to_string()];
        args.extend(mode.iter().map(|s| s.to_string()));
        args.extend([
            "--export".into(),
            format!("disk={}", store.display()),
            "--nbd-listen".into(),
            format!("unix:{}", socket.display()),
        ]);
        let child = Command::new(env!("CARGO_BIN_EXE_strata"))
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let started = Instant::now();
        // The socket of a killed server is left behind: wait for one that accepts.
        while UnixStream::connect(&socket).is_err() {
            assert!(
                started.elapsed() < WAIT_MAX,
                "no socket: {}",
                std::fs::read_to_string(dir.join("log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        Server { child, socket }
    }

    /// SIGKILL, and waits for the process to be gone.
    fn kill(self) {
        drop(self);
    }
}

impl Drop for Server {
    /// Also when a check fails: no server outlives the test.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A connection past `NBD_OPT_GO`; `None` if the server is gone.
fn connect(socket: &Path) -> Option<UnixStream> {
    let mut s = UnixStream::connect(socket).ok()?;
    s.set_read_timeout(Some(WAIT_MAX)).ok()?;
    let mut greeting = [0u8; 18];
    s.read_exact(&mut greeting).ok()?;
    s.write_all(&3u32.to_be_bytes()).ok()?;
    let name = b"disk";
    let mut option = nbd::OPTION_MAGIC.to_be_bytes().to_vec();
    option.extend_from_slice(&nbd::OPT_GO.to_be_bytes());
    option.extend_from_slice(&(4 + name.len() as u32 + 2).to_be_bytes());
    option.extend_from_slice(&(name.len() as u32).to_be_bytes());
    option.extend_from_slice(name);
    option.extend_from_slice(&0u16.to_be_bytes());
    s.write_all(&option).ok()?;
    loop {
        let mut header = [0u8; 20];
        s.read_exact(&mut header).ok()?;
        let reply = u32::from_be_bytes(header[12..16].try_into().unwrap());
        let len = u32::from_be_bytes(header[16..20].try_into().unwrap()) as usize;
        let mut data = vec![0u8; len];
        s.read_exact(&mut data).ok()?;
        if reply == nbd::REP_ACK {
            return Some(s);
        }
        assert_eq!(reply, nbd::REP_INFO, "GO refused");
    }
}

/// One request and its reply; `None` when the connection broke (the server was killed).
fn request(
    s: &mut UnixStream,
    command: u16,
    flags: u16,
    offset: u64,
    payload: &[u8],
    length: u32,
) -> Option<(u32, Vec<u8>)> {
    let header = nbd::encode_request(&nbd::Request {
        flags,
        command,
        cookie: offset ^ 0xC0,
        offset,
        length,
    });
    s.write_all(&header).ok()?;
    s.write_all(payload).ok()?;
    let mut reply = [0u8; 16];
    s.read_exact(&mut reply).ok()?;
    let error = u32::from_be_bytes(reply[4..8].try_into().unwrap());
    let mut data = Vec::new();
    if command == nbd::CMD_READ && error == 0 {
        data.resize(length as usize, 0);
        s.read_exact(&mut data).ok()?;
    }
    Some((error, data))
}

/// Writes until the connection breaks or `stop`; returns nothing (the model is updated).
fn load(
    socket: &Path,
    thread: u64,
    model: &Mutex<Model>,
    seq: &AtomicU64,
    stop: &AtomicBool,
    answered: &AtomicU64,
) {
    let Some(mut s) = connect(socket) else { return };
    let mut rng = thread * 7919 + seq.load(Ordering::Relaxed);
    while !stop.load(Ordering::Relaxed) {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        if (rng >> 60) == 0 {
            // Acknowledges every write answered before it was sent.
            let answered_before = model.lock().unwrap().unacknowledged.clone();
            if request(&mut s, nbd::CMD_FLUSH, 0, 0, &[], 0).is_none() {
                return;
            }
            let mut m = model.lock().unwrap();
            for (block, writes) in answered_before {
                m.acknowledged
                    .insert(block, writes.last().expect("a write").clone());
                m.unacknowledged.remove(&block);
            }
            continue;
        }
        let block = thread * BLOCKS_PER_THREAD + (rng >> 33) % BLOCKS_PER_THREAD;
        let n = seq.fetch_add(1, Ordering::Relaxed);
        let bytes = block_bytes(thread, block, n);
        model.lock().unwrap().in_flight = Some((block, bytes.clone()));
        let flags = if (rng >> 40).is_multiple_of(4) {
            nbd::CMD_FLAG_FUA
        } else {
            0
        };
        match request(
            &mut s,
            nbd::CMD_WRITE,
            flags,
            block * BLOCK as u64,
            &bytes,
            BLOCK as u32,
        ) {
            Some((0, _)) => {
                let mut m = model.lock().unwrap();
                if flags & nbd::CMD_FLAG_FUA == 0 {
                    m.unacknowledged
                        .entry(block)
                        .or_default()
                        .push(bytes.clone());
                } else {
                    m.unacknowledged.remove(&block);
                    m.acknowledged.insert(block, bytes.clone());
                }
                m.answered.insert(block, bytes);
                m.in_flight = None;
                answered.fetch_add(1, Ordering::Relaxed);
            }
            Some((error, _)) => panic!("write refused with {error}"),
            None => return,
        }
    }
}

/// Reads every block back and checks it against the models; what the write in flight at the
/// kill left (its bytes, the old ones, or a mix) is the block's content from then on.
/// `strict`: every answered write must be there; else NBD's rule (an unacknowledged write may
/// be lost, back to the last acknowledged one).
fn verify(socket: &Path, models: &[Mutex<Model>], original: &[u8], label: &str, strict: bool) {
    let mut s = connect(socket).expect("restarted server");
    for (thread, model) in models.iter().enumerate() {
        let mut m = model.lock().unwrap();
        let in_flight = m.in_flight.take();
        for block in thread as u64 * BLOCKS_PER_THREAD..(thread as u64 + 1) * BLOCKS_PER_THREAD {
            let (error, got) = request(
                &mut s,
                nbd::CMD_READ,
                0,
                block * BLOCK as u64,
                &[],
                BLOCK as u32,
            )
            .expect("read");
            assert_eq!(error, 0);
            let start = block as usize * BLOCK;
            let original = original[start..start + BLOCK].to_vec();
            let before = m.answered.get(&block).cloned().unwrap_or(original.clone());
            let acknowledged = m.acknowledged.get(&block).cloned().unwrap_or(original);
            let unacknowledged = m.unacknowledged.remove(&block).unwrap_or_default();
            // What the block may hold, besides the write in flight.
            let allowed: Vec<Vec<u8>> = if strict {
                vec![before]
            } else {
                std::iter::once(acknowledged)
                    .chain(unacknowledged)
                    .collect()
            };
            match &in_flight {
                Some((b, new)) if *b == block => {
                    for (i, sector) in got.chunks(SECTOR).enumerate() {
                        let range = i * SECTOR..(i + 1) * SECTOR;
                        assert!(
                            sector == &new[range.clone()]
                                || allowed.iter().any(|bytes| sector == &bytes[range.clone()]),
                            "{label}: block {block} sector {i} is neither an answered write the \
                             kill may leave nor the in-flight write"
                        );
                    }
                }
                _ => assert!(
                    allowed.contains(&got),
                    "{label}: block {block} lost its last answered write (seq {} read, {:?} \
                     allowed; in flight {:?})",
                    seq_of(&got),
                    allowed.iter().map(|b| seq_of(b)).collect::<Vec<_>>(),
                    in_flight.as_ref().map(|(b, bytes)| (b, seq_of(bytes)))
                ),
            }
            // What the restarted server serves is on the store or in its pool from now on.
            m.answered.insert(block, got.clone());
            m.acknowledged.insert(block, got);
        }
    }
}

#[test]
fn every_answered_write_survives_kill_9_in_every_mode_and_write_back_keeps_nbd_s_rule() {
    let rounds: u64 = std::env::var("STRATA_BLOCK_KILL_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    let dir = std::env::temp_dir().join(format!("strata-block-kill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut seed = std::process::id() as u64;
    // A cache pool on tmpfs where there is one: it keeps its lines across every kill.
    let pool_file = harness::PoolFile::on_tmpfs("block-kill");
    let pool = PathBuf::from(pool_file.path());
    let pool_arg = pool.display().to_string();
    // (flags, strict: every answered write survives a kill)
    let modes: [(&[&str], bool); 5] = [
        (&["--mode", "pt"], true),
        (&["--mode", "wt", "--cache-size", "1MiB"], true),
        (
            &[
                "--mode",
                "wt",
                "--cache-size",
                "16MiB",
                "--seq-cutoff",
                "0",
                "--cache",
                &pool_arg,
            ],
            true,
        ),
        (
            &[
                "--mode",
                "wb",
                "--cache-size",
                "16MiB",
                "--cache-line-size",
                "64KiB",
                "--cache",
                &pool_arg,
            ],
            true,
        ),
        (
            &[
                "--mode",
                "wb",
                "--cache-size",
                "512KiB",
                "--clean-staleness",
                "0",
            ],
            false,
        ),
    ];
    for (mode, strict) in modes {
        for shutdown in [false, true] {
            // A new store each time, so a new cache pool too (a pool's lines describe the store
            // as it was; one written behind strata's back is not detected).
            let _ = std::fs::remove_file(&pool);
            let store = dir.join("store.img");
            let original: Vec<u8> = (0..STORE_BYTES).map(|i| (i % 249) as u8).collect();
            std::fs::write(&store, &original).unwrap();
            let models: Arc<Vec<Mutex<Model>>> =
                Arc::new((0..THREADS).map(|_| Mutex::new(Model::default())).collect());
            let seq = Arc::new(AtomicU64::new(1));
            for round in 0..rounds {
                let label = format!("{mode:?} shutdown={shutdown} round {round}");
                let server = Server::start(&dir, &store, mode);
                if round > 0 {
                    verify(&server.socket, &models, &original, &label, strict);
                }
                let stop = Arc::new(AtomicBool::new(false));
                let answered = Arc::new(AtomicU64::new(0));
                let clients: Vec<_> = (0..THREADS)
                    .map(|t| {
                        let (socket, models, seq, stop, answered) = (
                            server.socket.clone(),
                            Arc::clone(&models),
                            Arc::clone(&seq),
                            Arc::clone(&stop),
                            Arc::clone(&answered),
                        );
                        std::thread::spawn(move || {
                            load(&socket, t, &models[t as usize], &seq, &stop, &answered)
                        })
                    })
                    .collect();
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                let kill_after = 50 + (seed >> 33) % 1500;
                let started = Instant::now();
                while answered.load(Ordering::Relaxed) < kill_after {
                    assert!(started.elapsed() < WAIT_MAX, "{label}: the load stalled");
                    std::thread::sleep(Duration::from_millis(1));
                }
                if shutdown {
                    let pid = server.child.id().to_string();
                    assert!(Command::new("kill")
                        .args(["-TERM", &pid])
                        .status()
                        .unwrap()
                        .success());
                    std::thread::sleep(Duration::from_micros((seed >> 20) % 20_000));
                }
                server.kill();
                stop.store(true, Ordering::Relaxed);
                for client in clients {
                    client.join().expect("client thread");
                }
            }
            let server = Server::start(&dir, &store, mode);
            verify(
                &server.socket,
                &models,
                &original,
                &format!("{mode:?} final"),
                strict,
            );
            server.kill();
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
