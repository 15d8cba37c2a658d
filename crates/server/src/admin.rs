//! The admin endpoint: a minimal HTTP/1.1 server for `GET /metrics` (Prometheus text format)
//! and `GET /health`.
//!
//! It runs on its own thread with blocking sockets, one request per connection: scrapes come
//! every few seconds, so simplicity wins over throughput. Every socket has read and write
//! timeouts, so a client that stalls holds the endpoint for at most [`ADMIN_IO_TIMEOUT`] and
//! never touches the data path.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::context::ServerContext;
use crate::metrics::{self, Metrics};

/// Longest wait for a request to arrive or a reply to leave.
pub const ADMIN_IO_TIMEOUT: Duration = Duration::from_secs(2);
/// Largest request head read (request line and headers).
pub const ADMIN_REQUEST_BYTES_MAX: usize = 8 << 10;

/// Serves `listener` on a new thread for the life of the process.
pub fn spawn(
    listener: TcpListener,
    ctx: Arc<ServerContext>,
    metrics: Arc<Metrics>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("strata-admin".into())
        .spawn(move || {
            for stream in listener.incoming() {
                match stream {
                    Ok(stream) => {
                        if let Err(err) = serve(stream, &ctx, &metrics) {
                            tracing::debug!(error = %err, "admin request failed");
                        }
                    }
                    Err(err) => tracing::warn!(error = %err, "admin accept failed"),
                }
            }
        })?;
    Ok(())
}

fn serve(mut stream: TcpStream, ctx: &ServerContext, metrics: &Metrics) -> std::io::Result<()> {
    stream.set_read_timeout(Some(ADMIN_IO_TIMEOUT))?;
    stream.set_write_timeout(Some(ADMIN_IO_TIMEOUT))?;
    let mut head = [0u8; ADMIN_REQUEST_BYTES_MAX];
    let mut len = 0;
    while !head[..len].windows(4).any(|w| w == b"\r\n\r\n") {
        if len == head.len() {
            return respond(
                &mut stream,
                "431 Request Header Fields Too Large",
                "text/plain",
                "",
            );
        }
        let n = stream.read(&mut head[len..])?;
        if n == 0 {
            return Ok(());
        }
        len += n;
    }
    let request_line = head[..len]
        .split(|&b| b == b'\r')
        .next()
        .unwrap_or_default();
    let mut parts = request_line.split(|&b| b == b' ');
    let (method, path) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    if method != b"GET" {
        return respond(
            &mut stream,
            "405 Method Not Allowed",
            "text/plain",
            "use GET\n",
        );
    }
    let path = path.split(|&b| b == b'?').next().unwrap_or_default();
    match path {
        b"/metrics" => {
            let body = metrics::render(ctx, metrics);
            respond(
                &mut stream,
                "200 OK",
                "text/plain; version=0.0.4; charset=utf-8",
                &body,
            )
        }
        b"/health" if ctx.shutdown.load(Ordering::Relaxed) => respond(
            &mut stream,
            "503 Service Unavailable",
            "text/plain",
            "shutting down\n",
        ),
        b"/health" => respond(&mut stream, "200 OK", "text/plain", "OK\n"),
        _ => respond(
            &mut stream,
            "404 Not Found",
            "text/plain",
            "try /metrics or /health\n",
        ),
    }
}

fn respond(
    stream: &mut TcpStream,
    status: &str,
    content_type: &str,
    body: &str,
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())?;
    stream.flush()
}
