//! `strata serve`: binds the listeners, opens the engine, starts the threads, and on shutdown
//! drains the workers and closes the engine cleanly.

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::{Poll, Waker};
use strata_engine::{Engine, OpenError};

use crate::config::ServerConfig;
use crate::connection::Limits;
use crate::context::ServerContext;
use crate::metrics::Metrics;
use crate::sessions::{Protocol, Sessions};
use crate::size::ByteSize;
use crate::worker::{self, WorkerShared};
use crate::{admin, listener, signals};

/// How often the maintenance thread reclaims expired segments.
pub const EXPIRE_INTERVAL: Duration = Duration::from_millis(100);
/// How often the maintenance thread cleans ahead of need (`Engine::clean_ahead`): at 100 MB/s
/// of writes, a megabyte-segment every 10 ms.
pub const CLEAN_AHEAD_INTERVAL: Duration = Duration::from_millis(10);

/// Why the server could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// A listener could not bind.
    #[error(
        "cannot listen on {addr} ({name}): {source}; pass another --{name}-listen ADDR, or off"
    )]
    Bind {
        /// Which listener.
        name: &'static str,
        /// Where.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The engine did not open.
    #[error("cannot open the engine: {0}")]
    Engine(#[from] OpenError),
    /// A thread, poller or signal handler could not be set up.
    #[error("cannot start the server: {0}")]
    Start(#[from] std::io::Error),
    /// `--maxmemory` is outside what the pool allows.
    #[error("--maxmemory: {0}")]
    MaxMemory(String),
    /// Closing the pool failed: the next start recovers it as after a crash.
    #[error("closing the pool failed ({0}); the next start will recover it as after a crash")]
    Close(strata_pool::PoolError),
}

/// The client listeners, bound.
struct Bound {
    memcache: Option<mio::net::TcpListener>,
    resp: Option<mio::net::TcpListener>,
    admin: Option<std::net::TcpListener>,
}

fn bind(config: &ServerConfig) -> Result<Bound, ServeError> {
    let client = |name: &'static str, addr: Option<SocketAddr>| {
        addr.map(|addr| {
            mio::net::TcpListener::bind(addr).map_err(|source| ServeError::Bind {
                name,
                addr,
                source,
            })
        })
        .transpose()
    };
    let admin = config
        .admin_listen
        .map(|addr| {
            std::net::TcpListener::bind(addr).map_err(|source| ServeError::Bind {
                name: "admin",
                addr,
                source,
            })
        })
        .transpose()?;
    Ok(Bound {
        memcache: client("memcache", config.memcache_listen)?,
        resp: client("resp", config.resp_listen)?,
        admin,
    })
}

/// Caps the memory tier at `--maxmemory`, as CONFIG SET maxmemory takes it
/// (`Engine::memory_cap_for`: 0, or the pool's size or more, is the whole pool).
fn apply_memory_limit(engine: &Engine, bytes: Option<u64>) -> Result<(), ServeError> {
    let Some(bytes) = bytes else {
        return Ok(());
    };
    let (min, max) = engine.memory_limit_bounds();
    let refused = |_| {
        ServeError::MaxMemory(format!(
            "the memory tier's cap must be at least {min} bytes (two segments per shard and the \
             cleaner's two), or 0 or {max} or more for the whole pool"
        ))
    };
    let cap = engine.memory_cap_for(bytes).map_err(refused)?;
    let capped = engine
        .set_memory_limit(cap)
        .map_err(ServeError::MaxMemory)?;
    tracing::info!(bytes = capped, "memory tier capped by --maxmemory");
    Ok(())
}

/// Runs the server until SIGTERM, SIGINT or a client's SHUTDOWN, then drains and closes.
pub fn serve(config: &ServerConfig, sessions: Sessions) -> Result<(), ServeError> {
    let bound = bind(config)?;
    let local = |l: &Option<mio::net::TcpListener>| l.as_ref().and_then(|l| l.local_addr().ok());
    let (memcache_addr, resp_addr) = (local(&bound.memcache), local(&bound.resp));
    let admin_addr = bound.admin.as_ref().and_then(|l| l.local_addr().ok());
    warn_unauthenticated(
        config,
        [
            (Protocol::Memcache, memcache_addr),
            (Protocol::Resp, resp_addr),
        ],
    );

    let engine = open_engine(config)?;
    apply_memory_limit(&engine, config.memory_limit_bytes)?;
    let mut settings =
        config.settings(memcache_addr.map(|a| a.port()), resp_addr.map(|a| a.port()));
    settings.exec_stall_for_tests_ms = std::env::var(EXEC_STALL_ENV)
        .ok()
        .and_then(|ms| ms.parse().ok())
        .unwrap_or(0);
    let mut ctx = ServerContext::new(Arc::clone(&engine), settings);
    if engine.has_flash() {
        ctx.flash_io = Some(
            crate::flash_io::FlashIo::start(
                Arc::clone(&engine),
                crate::flash_io::FLASH_IO_THREADS_DEFAULT,
            )
            .map_err(ServeError::Start)?,
        );
    }
    let ctx = Arc::new(ctx);
    let metrics = Arc::new(Metrics::new(config.threads));

    let poll = Poll::new()?;
    let acceptor_waker = Arc::new(Waker::new(poll.registry(), listener::WAKER_TOKEN)?);
    let workers = spawn_workers(config, &ctx, &metrics, sessions, &acceptor_waker)?;
    let listeners = [
        (bound.memcache, Protocol::Memcache),
        (bound.resp, Protocol::Resp),
    ]
    .into_iter()
    .filter_map(|(l, protocol)| l.map(|l| (l, protocol)))
    .collect();
    let acceptor = listener::Acceptor::new(poll, listeners, workers, Arc::clone(&ctx))?;
    signals::spawn(Arc::clone(&ctx), acceptor_waker)?;
    if let Some(admin) = bound.admin {
        admin::spawn(admin, Arc::clone(&ctx), Arc::clone(&metrics))?;
    }
    let maintenance = spawn_maintenance(Arc::clone(&ctx))?;
    spawn_scrub(Arc::clone(&engine))?;
    let kernel_polled = ctx
        .stats
        .flash_read_rings_kernel_polled
        .load(std::sync::atomic::Ordering::Relaxed);
    log_ready(
        config,
        &engine,
        kernel_polled,
        [memcache_addr, resp_addr, admin_addr],
    );
    crate::notify::ready();

    for worker in acceptor.run() {
        let _ = worker.thread.join();
    }
    maintenance.thread().unpark();
    let _ = maintenance.join();
    engine.close().map_err(ServeError::Close)?;
    tracing::info!(
        uptime_secs = ctx.uptime_secs(),
        "stopped; pool closed cleanly"
    );
    Ok(())
}

/// Opens the engine the configuration describes, and logs what the open found.
fn open_engine(config: &ServerConfig) -> Result<Arc<Engine>, ServeError> {
    let opening = Instant::now();
    let mut engine_config = strata_engine::EngineConfig {
        recovery_observer: Some(recovery_observer()),
        ..config.engine_config()
    };
    if let (Some(flash), Ok(ms)) = (
        engine_config.flash.as_mut(),
        std::env::var(FLASH_READ_DELAY_ENV),
    ) {
        flash.read_delay_for_tests = Duration::from_millis(ms.parse().unwrap_or(0));
    }
    let engine = Arc::new(Engine::open(engine_config)?);
    let report = engine.recovery_report();
    tracing::info!(
        elapsed_ms = opening.elapsed().as_millis() as u64,
        items_recovered = report.items_recovered,
        segments_recovered = report.segments_recovered,
        records_damaged = report.records_damaged,
        records_torn = report.records_torn,
        segments_corrupt = report.segments_corrupt,
        from_snapshot = report.from_snapshot,
        shards_from_index_files = report.shards_from_index_files,
        index_placement = engine.index_placement().name(),
        "engine open"
    );
    Ok(engine)
}

/// Starts the worker threads.
fn spawn_workers(
    config: &ServerConfig,
    ctx: &Arc<ServerContext>,
    metrics: &Arc<Metrics>,
    sessions: Sessions,
    acceptor_waker: &Arc<Waker>,
) -> Result<Vec<worker::WorkerHandle>, ServeError> {
    let limits = Limits::new(config.read_buffer_bytes_max());
    Ok((0..config.threads)
        .map(|id| {
            let shared = WorkerShared {
                ctx: Arc::clone(ctx),
                metrics: Arc::clone(metrics),
                limits,
                sessions,
                acceptor_waker: Arc::clone(acceptor_waker),
                flash_read_poll_idle_ms: config.flash.as_ref().map_or(0, |f| f.read_poll_idle_ms),
            };
            worker::spawn(id, shared)
        })
        .collect::<Result<Vec<_>, _>>()?)
}

/// Checks, in the background at the lowest priority, what the open adopted without reading
/// (see `strata_engine::Engine::scrub_step`): until it is done, reads of unchecked records
/// validate them. Ends when the scrub is done or the engine is dropped.
fn spawn_scrub(engine: Arc<Engine>) -> std::io::Result<()> {
    if engine.scrub_done() {
        return Ok(());
    }
    let weak = Arc::downgrade(&engine);
    drop(engine);
    std::thread::Builder::new()
        .name("strata-scrub".into())
        .spawn(move || {
            strata_pool::lower_thread_priority();
            let delay_ms = std::env::var(SCRUB_DELAY_ENV)
                .ok()
                .and_then(|ms| ms.parse().ok());
            std::thread::sleep(Duration::from_millis(delay_ms.unwrap_or(0)));
            let began = Instant::now();
            let mut steps = 0u64;
            loop {
                let Some(engine) = weak.upgrade() else { return };
                if engine.scrub_step() {
                    let stats = engine.stats();
                    tracing::info!(
                        steps,
                        elapsed_ms = began.elapsed().as_millis() as u64,
                        records_damaged = stats.records_damaged.iter().sum::<u64>(),
                        damaged_items_dropped = stats.damaged_items_dropped,
                        "scrub done: every record the open adopted unread is checked"
                    );
                    return;
                }
                steps += 1;
            }
        })?;
    Ok(())
}

/// Environment variable for crash tests: sleep this many milliseconds after each recovery step,
/// so a test can `kill -9` the server while it is recovering (crates/strata/tests/kill_loop.rs).
pub const RECOVERY_STALL_ENV: &str = "STRATA_TEST_RECOVERY_STALL_MS";
/// Tests only: EXEC sleeps this many milliseconds halfway through its commands, after logging
/// "stalling inside EXEC for a test", so a crash test can `kill -9` it there.
pub const EXEC_STALL_ENV: &str = "STRATA_TEST_EXEC_STALL_MS";
/// Tests only: the scrub waits this many milliseconds before its first step, so a test's
/// reads meet damage the scrub has not found yet (crates/strata/tests/damaged_pool.rs).
pub const SCRUB_DELAY_ENV: &str = "STRATA_TEST_SCRUB_DELAY_MS";
/// Tests only: every read of the flash medium takes this many milliseconds longer, as on a
/// very slow device, so a test can see that a worker serves other connections meanwhile.
pub const FLASH_READ_DELAY_ENV: &str = "STRATA_TEST_FLASH_READ_DELAY_MS";

/// Logs how a recovery at open progresses (a large pool can take seconds to rebuild): each
/// step at `debug`, and one line at `info` when a pool with data has been recovered (none for a
/// fresh, empty one).
fn recovery_observer() -> strata_engine::RecoveryObserver {
    use strata_engine::RecoveryProgress;
    let stall = std::env::var(RECOVERY_STALL_ENV)
        .ok()
        .and_then(|ms| ms.parse().ok())
        .map(Duration::from_millis);
    // (segments adopted, shards to rebuild, shards rebuilt, items they indexed)
    let tally = Arc::new(parking_lot::Mutex::new((0u64, 0u64, 0u64, 0u64)));
    strata_engine::RecoveryObserver(Arc::new(move |progress| {
        let mut tally = tally.lock();
        match progress {
            RecoveryProgress::SegmentsAdopted {
                segments,
                shards_to_rebuild,
            } => {
                tracing::debug!(segments, shards_to_rebuild, "recovery: segments adopted");
                *tally = (segments, shards_to_rebuild, 0, 0);
                if shards_to_rebuild == 0 && segments > 0 {
                    tracing::info!(segments, "recovery: segments adopted, every index reopened");
                }
            }
            RecoveryProgress::ShardRebuilt { shard, items } => {
                tracing::debug!(shard, items, "recovery: shard rebuilt");
                tally.2 += 1;
                tally.3 += items;
                let (segments, shards, rebuilt, items) = *tally;
                if rebuilt == shards && (segments > 0 || items > 0) {
                    tracing::info!(segments, shards_rebuilt = rebuilt, items, "recovery: done");
                }
            }
            _ => {}
        }
        drop(tally);
        if let Some(stall) = stall {
            std::thread::sleep(stall);
        }
    }))
}

/// Warns, one line per listener, about each client listener that other hosts can reach while
/// its protocol has no authentication: anyone who can reach it can read, write and flush every
/// key. (The startup rules in `config` only refuse a mix of protected and open listeners.)
fn warn_unauthenticated(config: &ServerConfig, listeners: [(Protocol, Option<SocketAddr>); 2]) {
    for (protocol, addr) in listeners {
        let Some(addr) = addr else { continue };
        if addr.ip().to_canonical().is_loopback() || config.authenticates(protocol) {
            continue;
        }
        let remedy = match protocol {
            Protocol::Memcache => "--memcache-auth-file PATH",
            Protocol::Resp => "--requirepass PASSWORD",
        };
        tracing::warn!(
            protocol = protocol.name(),
            %addr,
            "the {} listener on {addr} is open to other hosts WITHOUT AUTHENTICATION: anyone \
             who can reach it can read, write and flush every key; set {remedy} or listen on a \
             loopback address",
            protocol.name()
        );
    }
}

/// The start-up lines; `kernel_polled`: workers whose flash reads a kernel thread issues.
fn log_ready(
    config: &ServerConfig,
    engine: &Engine,
    kernel_polled: u64,
    addrs: [Option<SocketAddr>; 3],
) {
    // The flash tier's lines (and warnings) come first: whoever waits for "strata ready" has
    // them too.
    log_flash_tier(config, engine, kernel_polled);
    let show = |addr: Option<SocketAddr>| addr.map_or_else(|| "off".to_string(), |a| a.to_string());
    let domain = engine.persistence_domain();
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        memcache = %show(addrs[0]),
        resp = %show(addrs[1]),
        admin = %show(addrs[2]),
        threads = config.threads,
        memory = %ByteSize(config.memory_bytes),
        pool = %engine.pool_path().display(),
        backend = engine.backend().name(),
        persistence = domain.summary(),
        eviction = config.eviction.name(),
        index = config.index_placement.name(),
        connections_max = config.connections_max,
        "strata ready"
    );
}

/// The flash tier's start-up line, and the warnings of a tier that will not survive a restart.
fn log_flash_tier(config: &ServerConfig, engine: &Engine, kernel_polled: u64) {
    if let (Some(settings), Some(flash)) = (&config.flash, engine.stats().flash) {
        tracing::info!(
            path = %settings.path.display(),
            size = %ByteSize(flash.medium_bytes),
            io_engine = flash.io_engine,
            reads = if engine.flash_read_file().is_none() {
                "I/O threads"
            } else if kernel_polled > 0 {
                "each worker's own io_uring, issued by a kernel thread each (SQPOLL)"
            } else {
                "each worker's own io_uring"
            },
            sqpoll_idle_ms = settings.read_poll_idle_ms,
            direct_io = flash.direct_io,
            read_align = %ByteSize(flash.read_align_bytes),
            record_align = %ByteSize(flash.record_align_bytes),
            region_size = %ByteSize(flash.region_size_bytes),
            regions = flash.regions_total,
            items = flash.items,
            admission = settings.admission.name(),
            write_rate_max = %ByteSize(settings.write_bytes_per_sec_max),
            "flash tier ready"
        );
        if let Some(why) = strata_pool::IoEngine::best().1 {
            tracing::warn!(reason = why, "flash I/O falls back to pread/pwrite");
        }
        if config.pool.is_none() {
            tracing::warn!(
                "the flash tier starts empty at every start: without --pool the memory tier \
                 and the index live in anonymous memory, and after a restart nothing names the \
                 items on flash (they are discarded); pass --pool PATH (a file on /dev/shm, a \
                 DAX mount or a disk) to keep both tiers across restarts"
            );
        }
        if config.pool.is_some() && config.index_placement == strata_engine::IndexPlacement::Dram {
            tracing::warn!(
                "after a crash (kill -9, power loss) the flash tier restarts empty: its items \
                 are named only by the index, which --index-placement dram keeps in DRAM and \
                 rebuilds from the pool's records; --index-placement pool (the default with \
                 --pool and --flash) keeps them; a clean stop keeps them either way"
            );
        }
    }
}

/// Until shutdown: cleans ahead of need every [`CLEAN_AHEAD_INTERVAL`] (so that writes find
/// free segments rather than run cleaner passes), reclaims expired segments every
/// [`EXPIRE_INTERVAL`], and flushes under `--durability interval`.
fn spawn_maintenance(ctx: Arc<ServerContext>) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("strata-maintenance".into())
        .spawn(move || {
            let interval = match ctx.engine.durability() {
                strata_engine::Durability::Interval { ms } => {
                    Some(std::time::Duration::from_millis(u64::from(ms)))
                }
                _ => None,
            };
            let mut last_commit = std::time::Instant::now();
            let mut last_expiry: Option<std::time::Instant> = None;
            while !ctx.shutdown.load(std::sync::atomic::Ordering::Acquire) {
                ctx.clients.tick();
                if let Err(err) = ctx.engine.clean_ahead() {
                    tracing::error!(error = %err, "cleaning failed");
                }
                let now = std::time::Instant::now();
                if last_expiry.is_none_or(|at| now >= at + EXPIRE_INTERVAL) {
                    // Items whose records reads found damaged (served as absent) leave the index.
                    ctx.engine.repair();
                    if let Err(err) = ctx.engine.expire() {
                        tracing::error!(error = %err, "expiry failed");
                    }
                    last_expiry = Some(now);
                }
                if interval.is_some_and(|every| now >= last_commit + every) {
                    // `--durability interval=MS`: the background flush.
                    if let Err(err) = ctx.engine.commit() {
                        tracing::error!(error = %err, "interval flush failed; writes are refused until restart");
                    }
                    last_commit = now;
                }
                let tick = interval.map_or(CLEAN_AHEAD_INTERVAL, |every| {
                    every.min(CLEAN_AHEAD_INTERVAL)
                });
                std::thread::park_timeout(tick);
            }
        })
}
