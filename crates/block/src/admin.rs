//! `strata block`'s admin port (`--admin-listen`): plain HTTP/1.0-style requests, one thread
//! each, answered and closed.
//!
//! - `GET /health`: `ok`.
//! - `GET /metrics`: Prometheus text, per export: the mode, the cache's lines and its counters.
//! - `GET /stats`: the same as one human-readable line per export.
//! - `POST /exports/NAME/mode/MODE`: switches an export's cache mode (`wt`, `wa`, `wi`, `pt`),
//!   logged; `400` with the reason when it cannot.
//! - `POST /exports/NAME/flush`: writes every dirty line back (write-back) and makes every
//!   completed write of the export durable.
//! - `POST /exports/NAME/detach`: writes every dirty line back, switches to pass-through and
//!   drops every cached line.
//!
//! Requests over 8 KiB, or slower than 5 s, are dropped. The port is loopback by default:
//! whoever reaches it can switch modes.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::export::{Export, Exports, Mode};

/// Longest request read.
const REQUEST_MAX_BYTES: usize = 8192;
/// How long a request may take to arrive.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves the admin port for ever.
pub fn serve(listener: TcpListener, exports: Arc<Exports>) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else {
            continue;
        };
        let exports = Arc::clone(&exports);
        let _ = std::thread::Builder::new()
            .name("strata-block-admin".into())
            .spawn(move || {
                let _ = answer(stream, &exports);
            });
    }
}

fn answer(mut stream: TcpStream, exports: &Exports) -> std::io::Result<()> {
    stream.set_read_timeout(Some(REQUEST_TIMEOUT))?;
    let mut request = Vec::new();
    let mut chunk = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") && !request.windows(2).any(|w| w == b"\n\n")
    {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        request.extend_from_slice(&chunk[..n]);
        if request.len() > REQUEST_MAX_BYTES {
            respond(&mut stream, 431, "request too large\n")?;
            // Read on a little (bounded) before closing: closing with unread bytes resets the
            // connection, and the client could lose the reply.
            stream.shutdown(std::net::Shutdown::Write)?;
            stream.set_read_timeout(Some(std::time::Duration::from_secs(1)))?;
            let mut drained = 0;
            while drained < 16 * REQUEST_MAX_BYTES {
                match stream.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => drained += n,
                }
            }
            return Ok(());
        }
    }
    let text = String::from_utf8_lossy(&request);
    let mut words = text.lines().next().unwrap_or("").split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let (status, body) = route(method, path, exports);
    respond(&mut stream, status, &body)
}

fn respond(stream: &mut TcpStream, status: u16, body: &str) -> std::io::Result<()> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        _ => "Internal Server Error",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())
}

/// The answer to `method path`: status and body.
fn route(method: &str, path: &str, exports: &Exports) -> (u16, String) {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (method, parts.as_slice()) {
        ("GET", ["health"]) => (200, "ok\n".into()),
        ("GET", ["metrics"]) => (200, metrics(exports)),
        ("GET", ["stats"]) => (200, stats(exports)),
        ("POST", ["exports", name, "mode", mode]) => {
            let Some(export) = exports.find(name).filter(|_| !name.is_empty()) else {
                return (404, format!("no export named {name:?}\n"));
            };
            let Some(mode) = Mode::parse(mode) else {
                return (
                    400,
                    format!("mode {mode:?}: expected wt, wb, wa, wi or pt\n"),
                );
            };
            match export.set_mode(mode) {
                Ok(previous) => {
                    tracing::info!(
                        export = export.name(),
                        from = previous.name(),
                        to = mode.name(),
                        "cache mode switched"
                    );
                    (
                        200,
                        format!("{} {} -> {}\n", export.name(), previous.name(), mode.name()),
                    )
                }
                Err(why) => (400, format!("{why}\n")),
            }
        }
        ("POST", ["exports", name, "flush"]) => {
            let Some(export) = exports.find(name).filter(|_| !name.is_empty()) else {
                return (404, format!("no export named {name:?}\n"));
            };
            match export
                .clean_all()
                .and_then(|lines| export.flush().map(|()| lines))
            {
                Ok(lines) => {
                    tracing::info!(
                        export = export.name(),
                        written_back = lines,
                        "flushed on request"
                    );
                    (200, format!("flushed: {lines} dirty lines written back\n"))
                }
                Err(err) => (500, format!("flush failed: {}\n", err.0)),
            }
        }
        ("POST", ["exports", name, "detach"]) => {
            let Some(export) = exports.find(name).filter(|_| !name.is_empty()) else {
                return (404, format!("no export named {name:?}\n"));
            };
            match export.detach() {
                Ok(lines) => (
                    200,
                    format!(
                        "{} detached: {lines} lines dropped, now pt\n",
                        export.name()
                    ),
                ),
                Err(why) => (400, format!("{why}\n")),
            }
        }
        (_, ["health" | "metrics" | "stats"]) | (_, ["exports", ..]) => {
            (405, "method not allowed\n".into())
        }
        _ => (404, "not found\n".into()),
    }
}

/// One export's counters: (name, help, value).
fn counters(export: &Export) -> Vec<(&'static str, &'static str, u64)> {
    let mut out = Vec::new();
    if let Some(cache) = export.cache() {
        let c = &cache.counters;
        let load = |n: &std::sync::atomic::AtomicU64| n.load(Ordering::Relaxed);
        out.extend([
            (
                "read_hits",
                "Lines read from the cache.",
                load(&c.read_hits),
            ),
            (
                "read_misses",
                "Lines read from the backing store.",
                load(&c.read_misses),
            ),
            ("fills", "Lines filled by read misses.", load(&c.fills)),
            (
                "fills_deferred",
                "Misses not filled: the line had missed fewer times than --promote-after.",
                load(&c.fills_deferred),
            ),
            (
                "seq_cutoff_bypasses",
                "Lines read or written past the sequential cut-off, bypassing the cache.",
                load(&c.seq_cutoff_bypasses),
            ),
            (
                "fills_raced",
                "Fills given up because a write touched the line meanwhile.",
                load(&c.fills_raced),
            ),
            (
                "write_updates",
                "Lines that writes put their bytes in.",
                load(&c.write_updates),
            ),
            (
                "write_invalidations",
                "Lines that writes, zeroes or trims left invalid.",
                load(&c.write_invalidations),
            ),
            (
                "evictions",
                "Lines evicted to make room.",
                load(&c.evictions),
            ),
        ]);
        out.extend(write_back_counters(c));
    }
    out
}

/// The write-back counters of a cache: (name, help, value).
fn write_back_counters(c: &crate::cache::CacheCounters) -> [(&'static str, &'static str, u64); 5] {
    let load = |n: &std::sync::atomic::AtomicU64| n.load(Ordering::Relaxed);
    [
        (
            "dirty_writes",
            "Write-back: lines written into the cache as dirty.",
            load(&c.dirty_writes),
        ),
        (
            "dirty_write_hits",
            "Write-back: of those, lines that were cached already.",
            load(&c.dirty_write_hits),
        ),
        (
            "writebacks",
            "Write-back: dirty lines written back to the backing store.",
            load(&c.writebacks),
        ),
        (
            "room_waits",
            "Write-back: writes that wrote lines back to find room.",
            load(&c.room_waits),
        ),
        (
            "settles",
            "Write-back: pool settles (dirty lines made durable, replaced versions cleared).",
            load(&c.settles),
        ),
    ]
}

fn metrics(exports: &Exports) -> String {
    let mut out = String::new();
    out.push_str("# HELP strata_block_export_size_bytes The export's size.\n# TYPE strata_block_export_size_bytes gauge\n");
    for e in exports.iter() {
        out.push_str(&format!(
            "strata_block_export_size_bytes{{export=\"{}\"}} {}\n",
            e.name(),
            e.size_bytes()
        ));
    }
    out.push_str("# HELP strata_block_mode The export's cache mode (1 for the current one).\n# TYPE strata_block_mode gauge\n");
    for e in exports.iter() {
        out.push_str(&format!(
            "strata_block_mode{{export=\"{}\",mode=\"{}\"}} 1\n",
            e.name(),
            e.mode().name()
        ));
    }
    out.push_str("# HELP strata_block_cache_lines Lines cached now.\n# TYPE strata_block_cache_lines gauge\n");
    out.push_str("# HELP strata_block_cache_capacity_lines Lines the cache holds at most.\n# TYPE strata_block_cache_capacity_lines gauge\n");
    out.push_str("# HELP strata_block_cache_dirty_lines Lines the backing store lacks (write-back).\n# TYPE strata_block_cache_dirty_lines gauge\n");
    for e in exports.iter() {
        if let Some(cache) = e.cache() {
            out.push_str(&format!(
                "strata_block_cache_lines{{export=\"{}\"}} {}\n",
                e.name(),
                cache.cached_lines()
            ));
            out.push_str(&format!(
                "strata_block_cache_capacity_lines{{export=\"{}\"}} {}\n",
                e.name(),
                cache.capacity_lines()
            ));
            out.push_str(&format!(
                "strata_block_cache_dirty_lines{{export=\"{}\"}} {}\n",
                e.name(),
                cache.dirty_lines()
            ));
        }
    }
    let names: Vec<(&str, &str)> = exports
        .iter()
        .next()
        .map(|e| counters(e).into_iter().map(|(n, h, _)| (n, h)).collect())
        .unwrap_or_default();
    for (name, help) in names {
        out.push_str(&format!("# HELP strata_block_cache_{name}_total {help}\n# TYPE strata_block_cache_{name}_total counter\n"));
        for e in exports.iter() {
            if let Some((_, _, value)) = counters(e).into_iter().find(|(n, _, _)| *n == name) {
                out.push_str(&format!(
                    "strata_block_cache_{name}_total{{export=\"{}\"}} {value}\n",
                    e.name()
                ));
            }
        }
    }
    out
}

fn stats(exports: &Exports) -> String {
    exports.iter().map(|e| stats_line(e) + "\n").collect()
}

/// One export's `/stats` line: name, mode, size, cache occupancy and counters.
pub fn stats_line(e: &Export) -> String {
    let mut out = format!(
        "export={} mode={} size_bytes={}",
        e.name(),
        e.mode().name(),
        e.size_bytes()
    );
    if let Some(cache) = e.cache() {
        out.push_str(&format!(
            " cache_lines={} capacity_lines={} line_bytes={} dirty_lines={}",
            cache.cached_lines(),
            cache.capacity_lines(),
            cache.line_bytes(),
            cache.dirty_lines()
        ));
    }
    for (name, _, value) in counters(e) {
        out.push_str(&format!(" {name}={value}"));
    }
    out
}

/// Sends one request to a running `strata block`'s admin port (`strata block stats|mode|flush`):
/// its status and body.
pub fn request(addr: &str, method: &str, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(REQUEST_TIMEOUT))?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut text = String::new();
    stream.read_to_string(&mut text)?;
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other("not an HTTP reply"))?;
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    Ok((status, body))
}
