//! `kind = "restart"`: how long each server takes from process start to its first GET hit after
//! a stop, with its data kept in a file (pool, memory file or dump) on tmpfs.
//!
//! ```text
//!  start server with its persistence file ─▶ preload [load] ─▶ for stop in [restart] stops:
//!    (Redis: SAVE) ─▶ stop (clean: the server's graceful signal; kill: SIGKILL) ─▶ wait for
//!    exit ─▶ downtime ─▶ t0; spawn ─▶ GET the last preloaded key until it hits (or misses:
//!    "cold") ─▶ read every key back (items retained) ─▶ next stop
//! ```
//!
//! Per server (the "recipe"), appended to its usual command:
//!
//! | server | persistence | clean stop | kill |
//! |---|---|---|---|
//! | strata | `--pool FILE` | SIGTERM (marks the pool clean, saves the index) | SIGKILL |
//! | strata variants (`strata_variants`) | the same, plus the variant's flags | SIGTERM | SIGKILL |
//! | memcached | `-e FILE` (restartable cache, 1.5.18+) | SIGUSR1 (writes `FILE.meta`) | SIGKILL |
//! | Redis | `--dir DIR --dbfilename FILE` | `SAVE`, then SIGTERM | `SAVE`, then SIGKILL |
//!
//! The clock starts just before the spawn (`sh -c "exec taskset ..."`, the same for every
//! server) and stops at the first hit; connection attempts and GETs are retried every 200 µs,
//! and Redis's `-LOADING` replies are retried too. memcached restarts cold when started within
//! the same second as its stop, so the downtime before each start (not timed) is at least 1 s.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::runner::{target_flags, RunRecord, RunStatus, Target};
use super::scenarios::Scenario;
use super::servers::{ServerProcess, ServerResources, ServerSpec};
use super::CompareArgs;
use crate::error::BenchError;
use crate::protocol::Protocol;
use crate::workload::{KeyBatch, KeySpace, OpKind};

/// Longest a stop or a restart may take.
const WAIT_MAX: Duration = Duration::from_secs(120);
/// Gap between connection attempts and between retried GETs.
const RETRY_INTERVAL: Duration = Duration::from_micros(200);

/// A way of stopping the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopKind {
    /// The server's graceful stop (after which it promises a warm restart).
    Clean,
    /// SIGKILL: a process crash.
    Kill,
}

impl StopKind {
    /// Its name in reports.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            StopKind::Clean => "clean stop",
            StopKind::Kill => "kill -9",
        }
    }
}

/// The `[restart]` table of a restart scenario.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestartSpec {
    /// Directory for the servers' files (tmpfs: `/dev/shm`).
    #[serde(default = "default_dir")]
    pub dir: PathBuf,
    /// Stops to measure, in order, each followed by a restart.
    #[serde(default = "default_stops")]
    pub stops: Vec<StopKind>,
    /// Memory budget for every server in this scenario, MiB (instead of `--memory-mib`), so
    /// that every server keeps every item.
    pub memory_mib: Option<u64>,
    /// Pause between a server's exit and its restart, ms (not timed).
    #[serde(default = "default_downtime_ms")]
    pub downtime_ms: u64,
    /// strata run again with extra flags, reported under its own name (e.g. the index placed
    /// in the pool).
    #[serde(default)]
    pub strata_variants: Vec<StrataVariant>,
}

/// strata with extra flags, as a server of its own in a restart scenario.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StrataVariant {
    /// Its name in reports; starts with `strata`.
    pub name: String,
    /// Flags appended to strata's command.
    pub args: String,
}

/// The table's defaults, as when every key is left out.
impl Default for RestartSpec {
    fn default() -> Self {
        RestartSpec {
            dir: default_dir(),
            stops: default_stops(),
            memory_mib: None,
            downtime_ms: default_downtime_ms(),
            strata_variants: Vec::new(),
        }
    }
}

fn default_dir() -> PathBuf {
    PathBuf::from("/dev/shm")
}

fn default_stops() -> Vec<StopKind> {
    vec![StopKind::Clean, StopKind::Kill]
}

fn default_downtime_ms() -> u64 {
    1100
}

/// What one restart measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RestartResult {
    /// How the server was stopped.
    pub stop: StopKind,
    /// Exactly how (signal, and Redis's SAVE).
    pub stop_how: String,
    /// Process start → first GET answered (hit or miss, not `-LOADING`), ms.
    pub serving_ms: f64,
    /// Process start → first GET hit, ms; `None` when the first answer was a miss (cold).
    pub first_hit_ms: Option<f64>,
    /// Items found when reading every preloaded key back after the restart.
    pub items_retained: Option<u64>,
    /// Items preloaded.
    pub items_offered: u64,
}

/// How one server keeps its data across a restart.
pub(crate) struct Recipe {
    /// Appended to the server's command.
    pub(crate) args: String,
    /// The graceful stop's signal.
    clean_signal: &'static str,
    /// Send Redis's SAVE before stopping.
    save_first: bool,
    /// Files to remove before and after (prefix match in the directory).
    pub(crate) prefix: String,
}

/// `server`'s restart recipe with its files in `dir`, or `None` for a server without one.
pub(crate) fn recipe(server: &str, dir: &Path) -> Option<Recipe> {
    let prefix = format!("strata-bench-restart-{}-{server}", std::process::id());
    let file = dir.join(&prefix);
    let file = file.display();
    let (args, clean_signal, save_first) = match server {
        name if name.starts_with("strata") => (format!("--pool {file}.pool"), "TERM", false),
        name if name.starts_with("memcached") => (format!("-e {file}.mem"), "USR1", false),
        "redis" | "valkey" => (
            format!("--dir {} --dbfilename {prefix}.rdb", dir.display()),
            "TERM",
            true,
        ),
        _ => return None,
    };
    Some(Recipe {
        args,
        clean_signal,
        save_first,
        prefix,
    })
}

/// Removes the files in `dir` whose names start with `prefix`.
pub(crate) fn remove_files(dir: &Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with(prefix) {
            // strata's `<pool>.index/` is a directory.
            if entry.path().is_dir() {
                let _ = std::fs::remove_dir_all(entry.path());
            } else {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

/// Runs a restart scenario against one server: one record per stop.
pub(crate) fn run_restart(
    args: &CompareArgs,
    scenario: &Scenario,
    target: &Target<'_>,
    logs: &Path,
) -> Vec<RunRecord> {
    let spec = scenario.restart.clone().unwrap_or_default();
    let fail_all = |status: RunStatus| -> Vec<RunRecord> {
        spec.stops
            .iter()
            .map(|&stop| {
                let mut record = target.record(scenario, None, status.clone());
                record.restart = Some(RestartResult {
                    stop,
                    stop_how: String::new(),
                    serving_ms: f64::NAN,
                    first_hit_ms: None,
                    items_retained: None,
                    items_offered: 0,
                });
                record
            })
            .collect()
    };
    let Some(recipe) = recipe(&target.server.name, &spec.dir) else {
        return fail_all(RunStatus::NotRun(format!(
            "no restart recipe for {}",
            target.server.name
        )));
    };
    remove_files(&spec.dir, &recipe.prefix);
    let mut session = Session::new(args, scenario, target, logs, &spec, &recipe);
    let log = session.log_path();
    let result = match ServerProcess::start(&session.server_spec, session.resources, &log) {
        Ok(server) => session.run(server),
        Err(error) => {
            eprintln!("  not run: {error}");
            remove_files(&spec.dir, &recipe.prefix);
            return fail_all(RunStatus::NotRun(error.to_string()));
        }
    };
    remove_files(&spec.dir, &recipe.prefix);
    match result {
        Ok(records) => records,
        Err(error) => {
            eprintln!("  failed: {error}");
            fail_all(RunStatus::Failed(error.to_string()))
        }
    }
}

/// One server's restart measurements.
struct Session<'a> {
    args: &'a CompareArgs,
    scenario: &'a Scenario,
    target: &'a Target<'a>,
    logs: &'a Path,
    spec: &'a RestartSpec,
    recipe: &'a Recipe,
    server_spec: ServerSpec,
    resources: ServerResources,
    starts: usize,
}

impl<'a> Session<'a> {
    fn new(
        args: &'a CompareArgs,
        scenario: &'a Scenario,
        target: &'a Target<'a>,
        logs: &'a Path,
        spec: &'a RestartSpec,
        recipe: &'a Recipe,
    ) -> Self {
        let server_spec = ServerSpec {
            command: format!("{} {}", target.server.command, recipe.args),
            ..target.server.clone()
        };
        let resources = ServerResources {
            threads: args.server_threads,
            memory_mib: spec.memory_mib.unwrap_or(args.memory_mib),
            cpu: args.server_cpu,
        };
        Session {
            args,
            scenario,
            target,
            logs,
            spec,
            recipe,
            server_spec,
            resources,
            starts: 0,
        }
    }

    fn log_path(&mut self) -> PathBuf {
        self.starts += 1;
        self.logs.join(format!(
            "{}-{}-{}-start{}.log",
            self.scenario.name, self.target.server.name, self.target.repeat, self.starts
        ))
    }

    /// Preloads `server`, then stops and restarts it once per stop.
    fn run(&mut self, mut server: ServerProcess) -> Result<Vec<RunRecord>, BenchError> {
        let preload = self.bench(&server, true)?;
        let items_offered = preload.preload.as_ref().map_or(0, |p| p.counts.sets_stored);
        let probe_key = self.probe_key()?;
        let mut records = Vec::new();
        for &stop in &self.spec.stops {
            let stop_how = self.stop(&mut server, stop)?;
            std::thread::sleep(Duration::from_millis(self.spec.downtime_ms));
            let log = self.log_path();
            let (started, serving, hit) = start_and_probe(
                &self.server_spec,
                self.resources,
                &log,
                self.target.protocol,
                &probe_key,
                stop,
            )?;
            server = started;
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            // The probe's GET was answered on the protocol's port: no readiness wait is left.
            let readback = self.bench(&server, false)?;
            let retained = readback.readback.as_ref().map(|p| p.counts.hits);
            let mut record = self.target.record(self.scenario, None, RunStatus::Ok);
            record.report = Some(readback);
            record.restart = Some(RestartResult {
                stop,
                stop_how,
                serving_ms: ms(serving),
                first_hit_ms: hit.map(ms),
                items_retained: retained,
                items_offered,
            });
            records.push(record);
        }
        Ok(records)
    }

    /// The last preloaded key: written last, so the likeliest to be missing.
    fn probe_key(&self) -> Result<KeyBatch, BenchError> {
        let bench = self.scenario.bench_args(&[]).map_err(BenchError::Config)?;
        let keys = KeySpace::new(bench.keyspace, bench.key_size)?;
        let mut key = KeyBatch::default();
        key.push(&keys, bench.keyspace - 1);
        Ok(key)
    }

    /// A preload (`preload`) or a read-back of every key, with the scenario's `[load]` flags.
    fn bench(&self, server: &ServerProcess, preload: bool) -> Result<crate::Report, BenchError> {
        let extra = target_flags(self.args, self.target.protocol, server);
        let mut bench = self
            .scenario
            .bench_args(&extra)
            .map_err(BenchError::Config)?;
        bench.preload = preload;
        bench.readback = !preload;
        bench.duration_secs = 0.0;
        bench.warmup_secs = 0.0;
        crate::run(&bench)
    }

    /// Stops the server as `stop` says and waits for it to exit; returns how.
    fn stop(&self, server: &mut ServerProcess, stop: StopKind) -> Result<String, BenchError> {
        stop_server(server, &self.target.server.name, self.recipe, stop)
    }
}

/// Starts the server of `spec` again after `stop`, logging to `log`, and GETs `probe_key`
/// until it answers: the running server, process start → first answer, and process start →
/// first hit (`None`: the first answer was a miss, a cold start).
pub(crate) fn start_and_probe(
    spec: &ServerSpec,
    resources: ServerResources,
    log: &Path,
    protocol: Protocol,
    probe_key: &KeyBatch,
    stop: StopKind,
) -> Result<(ServerProcess, Duration, Option<Duration>), BenchError> {
    let started = Instant::now();
    let mut server = ServerProcess::spawn(spec, resources, log)?;
    let (serving, hit) =
        probe(&mut server, protocol, probe_key, started).map_err(|detail| BenchError::Server {
            server: spec.name.clone(),
            detail: format!("{detail}; see {}", log.display()),
        })?;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    eprintln!(
        "  {}: serving after {:.1} ms, {}",
        stop.name(),
        ms(serving),
        hit.map_or("first GET missed (cold)".into(), |h| format!(
            "first hit after {:.1} ms",
            ms(h)
        ))
    );
    Ok((server, serving, hit))
}

/// Stops `server` (named `name`) as `stop` says, the recipe's way, and waits for it to exit;
/// returns how.
pub(crate) fn stop_server(
    server: &mut ServerProcess,
    name: &str,
    recipe: &Recipe,
    stop: StopKind,
) -> Result<String, BenchError> {
    let fail = |detail: String| BenchError::Server {
        server: name.to_owned(),
        detail,
    };
    let mut how = Vec::new();
    if recipe.save_first {
        let port = server.port(Protocol::Resp);
        redis_save(port).map_err(|e| fail(format!("SAVE failed: {e}")))?;
        how.push("SAVE");
    }
    let signal = match stop {
        StopKind::Clean => recipe.clean_signal,
        StopKind::Kill => "KILL",
    };
    server.signal(signal).map_err(fail)?;
    let status = server.wait_exit(WAIT_MAX).map_err(fail)?;
    let signal = format!("SIG{signal}");
    how.push(&signal);
    let how = how.join(", then ");
    eprintln!("  stopped with {how}: {status}");
    Ok(how)
}

/// Sends SAVE and waits for `+OK`.
fn redis_save(port: u16) -> std::io::Result<()> {
    let mut stream = TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], port)))?;
    stream.set_read_timeout(Some(WAIT_MAX))?;
    stream.write_all(b"*1\r\n$4\r\nSAVE\r\n")?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    if line == "+OK\r\n" {
        Ok(())
    } else {
        Err(std::io::Error::other(format!("SAVE replied {line:?}")))
    }
}

/// A GET's answer.
pub(crate) enum Answer {
    Hit,
    Miss,
    /// Up, not serving yet (Redis `-LOADING`).
    Loading,
}

/// Sends the encoded GET `request` once on `stream` and reads its reply, in `protocol`.
/// `input` holds bytes received but not yet parsed.
pub(crate) fn get_once(
    stream: &mut TcpStream,
    protocol: Protocol,
    request: &[u8],
    input: &mut Vec<u8>,
) -> std::io::Result<Answer> {
    stream.write_all(request)?;
    let reply = loop {
        if let Some(reply) = protocol
            .parse_reply(OpKind::Get, 1, input)
            .map_err(std::io::Error::other)?
        {
            break reply;
        }
        let mut chunk = [0u8; 4096];
        let read = stream.read(&mut chunk)?;
        if read == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        input.extend_from_slice(&chunk[..read]);
    };
    let answer = if reply.error {
        if protocol == Protocol::Resp && input.starts_with(b"-LOADING") {
            Answer::Loading
        } else {
            let line = String::from_utf8_lossy(&input[..reply.consumed]);
            return Err(std::io::Error::other(format!("unexpected reply {line:?}")));
        }
    } else if reply.hits > 0 {
        Answer::Hit
    } else {
        Answer::Miss
    };
    input.drain(..reply.consumed);
    Ok(answer)
}

/// Connects and GETs `key` until the server answers: the time (from `started`) of the first
/// answer, and of the first hit if that answer was one.
pub(crate) fn probe(
    server: &mut ServerProcess,
    protocol: Protocol,
    key: &KeyBatch,
    started: Instant,
) -> Result<(Duration, Option<Duration>), String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], server.port(protocol)));
    // Both memcache protocols are served on one port (`ServerProcess::port`); either probes
    // with a text `get`.
    let protocol = match protocol {
        Protocol::Resp => Protocol::Resp,
        Protocol::MemcacheText | Protocol::MemcacheMeta => Protocol::MemcacheText,
    };
    let mut request = Vec::new();
    protocol.encode_get(&mut request, key);
    while started.elapsed() < WAIT_MAX {
        if let Some(status) = server.exited() {
            return Err(format!("exited during restart ({status})"));
        }
        let Ok(mut stream) = TcpStream::connect(addr) else {
            std::thread::sleep(RETRY_INTERVAL);
            continue;
        };
        let _ = stream.set_nodelay(true);
        stream
            .set_read_timeout(Some(WAIT_MAX))
            .map_err(|e| e.to_string())?;
        let mut input = Vec::new();
        loop {
            match get_once(&mut stream, protocol, &request, &mut input) {
                Ok(Answer::Hit) => {
                    let at = started.elapsed();
                    return Ok((at, Some(at)));
                }
                Ok(Answer::Miss) => return Ok((started.elapsed(), None)),
                Ok(Answer::Loading) => std::thread::sleep(RETRY_INTERVAL),
                // Accepted by the kernel before the server was ready, then reset: reconnect.
                Err(_) => break,
            }
        }
    }
    Err(format!("no answer within {WAIT_MAX:?}"))
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use super::*;

    /// Runs `get_once` against a fake server that answers each request with the next reply,
    /// sent in two writes to exercise partial reads.
    fn answers(protocol: Protocol, replies: &'static [&'static [u8]]) -> Vec<Result<u8, ()>> {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut request = [0u8; 64];
            let mut got = Vec::new();
            for reply in replies {
                let n = stream.read(&mut request).unwrap();
                got.push(request[..n].to_vec());
                let (head, tail) = reply.split_at(reply.len() / 2);
                stream.write_all(head).unwrap();
                stream.flush().unwrap();
                std::thread::sleep(Duration::from_millis(5));
                stream.write_all(tail).unwrap();
            }
            got
        });
        let mut stream = TcpStream::connect(addr).unwrap();
        let mut request = Vec::new();
        let keys = KeySpace::new(10, crate::workload::SizeRange::fixed(3)).unwrap();
        let mut key = KeyBatch::default();
        key.push(&keys, 7);
        protocol.encode_get(&mut request, &key);
        let mut input = Vec::new();
        let answers = replies
            .iter()
            .map(|_| {
                get_once(&mut stream, protocol, &request, &mut input)
                    .map(|a| match a {
                        Answer::Hit => b'h',
                        Answer::Miss => b'm',
                        Answer::Loading => b'l',
                    })
                    .map_err(|_| ())
            })
            .collect();
        let sent = server.join().unwrap();
        let want: &[u8] = match protocol {
            Protocol::Resp => b"*2\r\n$3\r\nGET\r\n$3\r\nk07\r\n",
            _ => b"get k07\r\n",
        };
        assert!(sent.iter().all(|s| s == want), "{sent:?}");
        answers
    }

    #[test]
    fn probe_get_reads_hits_misses_and_loading() {
        let resp: &[&[u8]] = &[
            b"-LOADING Redis is loading the dataset in memory\r\n",
            b"$-1\r\n",
            b"$3\r\nabc\r\n",
            b"-ERR unknown command\r\n",
        ];
        assert_eq!(
            answers(Protocol::Resp, resp),
            [Ok(b'l'), Ok(b'm'), Ok(b'h'), Err(())]
        );
        let text: &[&[u8]] = &[b"END\r\n", b"VALUE k07 0 3\r\nabc\r\nEND\r\n", b"ERROR\r\n"];
        assert_eq!(
            answers(Protocol::MemcacheText, text),
            [Ok(b'm'), Ok(b'h'), Err(())]
        );
    }
}
