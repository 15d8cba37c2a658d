//! The connection cycle (read → process → write) allocates nothing per request once its
//! buffers are warm: a counting global allocator watches this thread while a pipelined
//! exchange runs through a real loopback socket with a session that itself never allocates.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream as StdStream};
use std::sync::Arc;
use std::time::Instant;

use strata_engine::{Engine, EngineConfig};
use strata_server::connection::{Connection, Limits, PassContext, Status, Traffic};
use strata_server::context::{Processed, ServerContext, Session, Settings};
use strata_server::metrics::LatencyHistogram;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

/// Counts allocations made by each thread.
struct Counting;

// SAFETY: delegates to the system allocator unchanged; only counts.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout` (see `alloc`).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: as for `alloc` and `dealloc`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

/// Echoes complete lines.
struct Echo;

impl Session for Echo {
    fn process(&mut self, input: &[u8], _ctx: &ServerContext, out: &mut Vec<u8>) -> Processed {
        let consumed = input
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |end| end + 1);
        out.extend_from_slice(&input[..consumed]);
        Processed {
            consumed,
            close: false,
            ..Processed::default()
        }
    }
}

#[test]
fn a_warm_connection_allocates_nothing_per_request() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let mut client = StdStream::connect(listener.local_addr().expect("addr")).expect("connect");
    let (server, _) = listener.accept().expect("accept");
    server.set_nonblocking(true).expect("non-blocking");
    let config = EngineConfig {
        memory_bytes: 4 << 20,
        ..EngineConfig::default()
    };
    let ctx = ServerContext::new(
        Arc::new(Engine::open(config).expect("engine")),
        Settings::default(),
    );
    let limits = Limits::new(1 << 20);
    let latency = LatencyHistogram::default();
    let mut traffic = Traffic::default();
    let stream = mio::net::TcpStream::from_std(server);
    let mut connection = Connection::new(stream, Box::new(Echo), Instant::now());

    let batch = b"get key:000001\nget key:000002\nget key:000003\nget key:000004\n".repeat(16);
    let mut reply = vec![0u8; batch.len()];
    let mut exchange = |connection: &mut Connection, traffic: &mut Traffic| {
        client.write_all(&batch).expect("send");
        let expected = traffic.read_bytes + batch.len() as u64;
        while traffic.read_bytes < expected {
            let mut pass = PassContext {
                ctx: &ctx,
                limits: &limits,
                latency: &latency,
                traffic,
                now: Instant::now(),
                defer_flush: true,
            };
            // As the worker does: replies left for the end of the round are written then.
            let status = match connection.pass(&mut pass) {
                Status::Flush => connection.flush_only(traffic, &ctx),
                status => status,
            };
            assert_eq!(status, Status::Open);
        }
        client.read_exact(&mut reply).expect("reply");
        assert_eq!(reply, batch);
    };
    for _ in 0..10 {
        exchange(&mut connection, &mut traffic);
    }
    let before = allocations();
    for _ in 0..1000 {
        exchange(&mut connection, &mut traffic);
    }
    assert_eq!(
        allocations() - before,
        0,
        "allocations during 64,000 warm requests"
    );
}
