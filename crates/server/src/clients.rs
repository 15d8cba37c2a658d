//! The clients of every worker, for `CLIENT LIST`, `CLIENT KILL` and memcached's `stats conns`.
//!
//! A Redis or memcached session adds itself when its worker attaches it to a connection
//! (`Session::attach`) and removes itself when dropped (the connection closed, however: by
//! the client, a limit, a kill, a worker's panic). What other sessions read of it is in its
//! [`Client`]: fixed at attach (id, addresses, worker and slot), or kept current by the session
//! (name, library, protocol, last command and when it ran, a transaction open) through fields
//! only it writes. The registry's lock is taken at attach, drop, and by `CLIENT LIST`/`KILL`,
//! never per command.
//!
//! A kill marks the client and wakes its worker ([`Clients::set_waker`]), which closes every
//! marked connection of its own on that wake-up (`Worker::close_killed`): at once for an idle
//! connection, as in Redis, and after its current pass for a busy one.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Instant;

/// One Redis client, as others see it.
#[derive(Debug)]
pub struct Client {
    /// `CLIENT ID`.
    pub id: u64,
    /// The peer's address.
    pub peer: Option<SocketAddr>,
    /// The address it connected to.
    pub local: Option<SocketAddr>,
    /// When it connected.
    pub created: Instant,
    /// `Clients::coarse_ms` when it connected.
    connected_ms: u64,
    /// The worker serving it, and its slot there.
    pub worker: usize,
    /// Its slot in the worker.
    pub slot: usize,
    /// What the session keeps current.
    pub info: Mutex<ClientInfo>,
    /// The command table row of its last command, plus one (0: none yet).
    pub last_command: AtomicUsize,
    /// Milliseconds since `created` when its last command ran.
    pub last_command_ms: AtomicU64,
    /// Marked by a `CLIENT KILL`: its worker closes it.
    pub killed: AtomicBool,
    /// A memcached connection (`CLIENT LIST` marks it `proto=memcache`).
    pub memcache: bool,
    /// Commands queued after MULTI (-1: no transaction open); a relaxed store per queued
    /// command, no lock.
    pub multi: std::sync::atomic::AtomicI64,
    /// Its connection's buffers, as its worker last saw them.
    pub buffers: ClientBuffers,
}

/// A connection's buffers as its worker saw them after the connection's last event (what
/// `CLIENT LIST` shows as `qbuf`, `qbuf-free`, `obl`, `oll`, `omem` and `tot-mem`): written by
/// that worker only, a relaxed store each per event, read by anyone. The figures may be one
/// event old and need not agree with each other; each is one the connection had.
#[derive(Debug, Default)]
pub struct ClientBuffers {
    input_bytes: AtomicU64,
    input_capacity_bytes: AtomicU64,
    output_bytes: AtomicU64,
    output_capacity_bytes: AtomicU64,
}

/// What [`ClientBuffers`] holds, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BufferFigures {
    /// Input read and not yet consumed by the session.
    pub input_bytes: u64,
    /// The read buffer's size.
    pub input_capacity_bytes: u64,
    /// Output built and not yet written to the socket.
    pub output_bytes: u64,
    /// The write buffer's capacity.
    pub output_capacity_bytes: u64,
}

impl BufferFigures {
    /// The output memory the write buffer holds, as the output budget counts it
    /// (`context::output_held_bytes`): CLIENT LIST's `omem`.
    #[must_use]
    pub fn output_memory_bytes(&self) -> u64 {
        let capacity = usize::try_from(self.output_capacity_bytes).unwrap_or(usize::MAX);
        crate::context::output_held_bytes(capacity) as u64
    }
}

impl ClientBuffers {
    /// Publishes `figures` (the connection's worker).
    pub fn store(&self, figures: BufferFigures) {
        debug_assert!(figures.input_bytes <= figures.input_capacity_bytes);
        debug_assert!(figures.output_bytes <= figures.output_capacity_bytes);
        self.input_bytes
            .store(figures.input_bytes, Ordering::Relaxed);
        self.input_capacity_bytes
            .store(figures.input_capacity_bytes, Ordering::Relaxed);
        self.output_bytes
            .store(figures.output_bytes, Ordering::Relaxed);
        self.output_capacity_bytes
            .store(figures.output_capacity_bytes, Ordering::Relaxed);
    }

    /// The figures last published.
    #[must_use]
    pub fn load(&self) -> BufferFigures {
        BufferFigures {
            input_bytes: self.input_bytes.load(Ordering::Relaxed),
            input_capacity_bytes: self.input_capacity_bytes.load(Ordering::Relaxed),
            output_bytes: self.output_bytes.load(Ordering::Relaxed),
            output_capacity_bytes: self.output_capacity_bytes.load(Ordering::Relaxed),
        }
    }
}

/// What a session changes rarely (names, protocol), under the client's own lock.
#[derive(Clone, Debug, Default)]
pub struct ClientInfo {
    /// `CLIENT SETNAME`.
    pub name: Option<Vec<u8>>,
    /// `CLIENT SETINFO LIB-NAME`.
    pub lib_name: Option<Vec<u8>>,
    /// `CLIENT SETINFO LIB-VER`.
    pub lib_ver: Option<Vec<u8>>,
    /// 2 or 3.
    pub resp: u8,
    /// `CLIENT NO-TOUCH ON` (flag `T`).
    pub no_touch: bool,
}

/// Per worker: its waker (set once it runs), whether a kill waits for it, and whether output
/// was pushed for one of its connections (MONITOR).
#[derive(Debug, Default)]
struct WorkerLink {
    waker: OnceLock<Arc<mio::Waker>>,
    kills: AtomicBool,
    pushes: AtomicBool,
}

/// See the module documentation.
#[derive(Debug)]
pub struct Clients {
    by_id: Mutex<BTreeMap<u64, Arc<Client>>>,
    workers: Box<[WorkerLink]>,
    /// Milliseconds since `started`, as of the last [`Clients::tick`]: what a command's run
    /// time is noted in (a relaxed load per command, no clock read).
    coarse_ms: AtomicU64,
    started: Instant,
}

impl Clients {
    /// A registry for `workers` worker threads.
    #[must_use]
    pub fn new(workers: usize) -> Clients {
        Clients {
            by_id: Mutex::new(BTreeMap::new()),
            workers: (0..workers).map(|_| WorkerLink::default()).collect(),
            coarse_ms: AtomicU64::new(0),
            started: Instant::now(),
        }
    }

    /// Brings the coarse clock up to date (the server's maintenance thread, every 10 ms or so).
    pub fn tick(&self) {
        let ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.coarse_ms.store(ms, Ordering::Relaxed);
    }

    /// The coarse clock (see [`Clients::tick`]).
    #[must_use]
    pub fn coarse_ms(&self) -> u64 {
        self.coarse_ms.load(Ordering::Relaxed)
    }

    /// Worker `worker`'s waker, for the kills of its clients.
    pub fn set_waker(&self, worker: usize, waker: Arc<mio::Waker>) {
        if let Some(link) = self.workers.get(worker) {
            let _ = link.waker.set(waker);
        }
    }

    /// Adds `client`.
    pub fn add(&self, client: Arc<Client>) {
        self.lock().insert(client.id, client);
    }

    /// Removes client `id`.
    pub fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// Every client, by id.
    #[must_use]
    pub fn all(&self) -> Vec<Arc<Client>> {
        self.lock().values().cloned().collect()
    }

    /// Marks `client` killed and wakes its worker.
    pub fn kill(&self, client: &Client) {
        client.killed.store(true, Ordering::Release);
        if let Some(link) = self.workers.get(client.worker) {
            link.kills.store(true, Ordering::Release);
            if let Some(waker) = link.waker.get() {
                let _ = waker.wake();
            }
        }
    }

    /// Tells worker `worker` that output waits to be pushed to one of its connections
    /// (`Session::take_pushed`), and wakes it.
    pub fn push(&self, worker: usize) {
        if let Some(link) = self.workers.get(worker) {
            if !link.pushes.swap(true, Ordering::AcqRel) {
                if let Some(waker) = link.waker.get() {
                    let _ = waker.wake();
                }
            }
        }
    }

    /// Wakes every worker (CLIENT UNPAUSE: the connections a pause held run again).
    pub fn wake_all(&self) {
        for link in self.workers.iter() {
            if let Some(waker) = link.waker.get() {
                let _ = waker.wake();
            }
        }
    }

    /// Whether pushed output waits for worker `worker`'s connections (and clears it).
    pub fn take_pushes(&self, worker: usize) -> bool {
        self.workers
            .get(worker)
            .is_some_and(|link| link.pushes.swap(false, Ordering::AcqRel))
    }

    /// Whether a kill waits for worker `worker` (and clears it).
    pub fn take_kills(&self, worker: usize) -> bool {
        self.workers
            .get(worker)
            .is_some_and(|link| link.kills.swap(false, Ordering::AcqRel))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<Client>>> {
        self.by_id.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A client's place in the registry: it leaves the registry when this is dropped.
#[derive(Debug)]
pub struct Registration {
    /// The client.
    pub client: Arc<Client>,
    clients: Arc<Clients>,
}

impl Registration {
    /// Adds `client` to `clients`.
    #[must_use]
    pub fn new(clients: &Arc<Clients>, client: Client) -> Registration {
        let client = Arc::new(client);
        clients.add(Arc::clone(&client));
        Registration {
            client,
            clients: Arc::clone(clients),
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.clients.remove(self.client.id);
    }
}

impl Client {
    /// A client that has run no command yet.
    #[must_use]
    pub fn new(
        id: u64,
        (peer, local): (Option<SocketAddr>, Option<SocketAddr>),
        (worker, slot): (usize, usize),
        connected_ms: u64,
    ) -> Client {
        Client {
            id,
            peer,
            local,
            created: Instant::now(),
            connected_ms,
            worker,
            slot,
            info: Mutex::new(ClientInfo {
                resp: 2,
                ..ClientInfo::default()
            }),
            last_command: AtomicUsize::new(0),
            last_command_ms: AtomicU64::new(0),
            killed: AtomicBool::new(false),
            memcache: false,
            multi: std::sync::atomic::AtomicI64::new(-1),
            buffers: ClientBuffers::default(),
        }
    }

    /// A memcached connection's client (no command names; see `Client::active`).
    #[must_use]
    pub fn memcache(
        id: u64,
        addresses: (Option<SocketAddr>, Option<SocketAddr>),
        place: (usize, usize),
        connected_ms: u64,
    ) -> Client {
        Client {
            memcache: true,
            ..Client::new(id, addresses, place, connected_ms)
        }
    }

    /// Notes that it sent requests at `now_ms` (by `Clients::coarse_ms`), without naming one.
    pub fn active(&self, now_ms: u64) {
        self.last_command_ms.store(now_ms, Ordering::Relaxed);
    }

    /// A copy of what the session keeps current.
    #[must_use]
    pub fn info(&self) -> ClientInfo {
        self.info
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Changes what the session keeps current.
    pub fn update(&self, change: impl FnOnce(&mut ClientInfo)) {
        change(&mut self.info.lock().unwrap_or_else(PoisonError::into_inner));
    }

    /// Notes that the command of table row `row` runs now, `now_ms` by `Clients::coarse_ms`.
    pub fn ran(&self, row: usize, now_ms: u64) {
        self.last_command.store(row + 1, Ordering::Relaxed);
        self.last_command_ms.store(now_ms, Ordering::Relaxed);
    }

    /// Seconds from its last command (from when it connected, before any) to `now_ms`, by
    /// `Clients::coarse_ms`.
    #[must_use]
    pub fn idle_secs(&self, now_ms: u64) -> u64 {
        let since = self
            .last_command_ms
            .load(Ordering::Relaxed)
            .max(self.connected_ms);
        now_ms.saturating_sub(since) / 1000
    }
}
