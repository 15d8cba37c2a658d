//! The NBD server: listeners (TCP and Unix sockets), one thread per connection, the fixed
//! newstyle handshake and the transmission phase. NBD clients are few and long-lived (one or a
//! few connections per attached device), so a thread per connection costs little and keeps
//! each connection's requests in order without an event loop.

use std::io::{self, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use crate::export::{Export, Exports, IoFailure};
use crate::nbd::{self, Request};

/// Largest payload of one request (advertised in `NBD_INFO_BLOCK_SIZE`): a write longer
/// than this ends the session, a read longer than this is refused with `EINVAL`.
pub const PAYLOAD_MAX_BYTES: u32 = 32 << 20;
/// Preferred block size advertised (requests of whole 4 KiB blocks avoid read-modify-write).
pub const PREFERRED_BLOCK_BYTES: u32 = 4096;
/// Largest option data read; a longer option gets `NBD_REP_ERR_TOO_BIG` (its data is read
/// and dropped) up to [`OPTION_DISCARD_MAX_BYTES`], beyond which the session ends.
pub const OPTION_DATA_MAX_BYTES: u32 = 4096 + 64;
/// Longest option data read and dropped before the session is ended instead.
pub const OPTION_DISCARD_MAX_BYTES: u32 = 1 << 20;
/// Options one session may send before it is ended (a client looping forever).
pub const OPTIONS_PER_SESSION_MAX: usize = 1024;
/// How long the handshake may take in all before the session is ended (a client that
/// connects and stays silent holds a thread).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; more are closed at once with a log line.
pub const CONNECTIONS_MAX: usize = 256;

/// A connection: a TCP or Unix stream.
pub trait Stream: Read + Write + Send + 'static {
    /// A second handle on the same connection (one reads, one writes).
    fn try_clone_stream(&self) -> io::Result<Box<dyn Stream>>;
    /// Sets the read timeout.
    fn set_read_timeout_to(&self, timeout: Option<Duration>) -> io::Result<()>;
}

impl Stream for TcpStream {
    fn try_clone_stream(&self) -> io::Result<Box<dyn Stream>> {
        Ok(Box::new(self.try_clone()?))
    }
    fn set_read_timeout_to(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(timeout)
    }
}

impl Stream for UnixStream {
    fn try_clone_stream(&self) -> io::Result<Box<dyn Stream>> {
        Ok(Box::new(self.try_clone()?))
    }
    fn set_read_timeout_to(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(timeout)
    }
}

/// A bound listener.
pub enum Listener {
    /// TCP.
    Tcp(TcpListener),
    /// A Unix socket.
    Unix(UnixListener),
}

/// Accepts connections on `listener` for ever, each served on its own thread.
pub fn accept_loop(listener: Listener, exports: Arc<Exports>) {
    let open = Arc::new(AtomicUsize::new(0));
    loop {
        let accepted: io::Result<(Box<dyn Stream>, String)> = match &listener {
            Listener::Tcp(l) => l.accept().map(|(s, peer)| {
                let _ = s.set_nodelay(true);
                (Box::new(s) as Box<dyn Stream>, peer.to_string())
            }),
            Listener::Unix(l) => l
                .accept()
                .map(|(s, _)| (Box::new(s) as Box<dyn Stream>, "unix".to_string())),
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(err) => {
                tracing::warn!(%err, "accept failed");
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        if open.fetch_add(1, Ordering::AcqRel) >= CONNECTIONS_MAX {
            open.fetch_sub(1, Ordering::AcqRel);
            tracing::warn!(
                peer,
                limit = CONNECTIONS_MAX,
                "connection refused: too many"
            );
            continue; // Dropped: closed.
        }
        let (exports, open) = (Arc::clone(&exports), Arc::clone(&open));
        let spawned = std::thread::Builder::new()
            .name("strata-nbd".into())
            .spawn(move || {
                match serve_connection(stream, &exports) {
                    Ok(()) => tracing::info!(peer, "nbd connection closed"),
                    Err(err) => tracing::info!(peer, %err, "nbd connection ended"),
                }
                open.fetch_sub(1, Ordering::AcqRel);
            });
        if let Err(err) = spawned {
            tracing::error!(%err, "could not start a connection thread");
        }
    }
}

/// Why a session ended other than by the client's choice.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The socket failed or the client went away mid-message.
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
    /// The client broke the protocol in a way that leaves the stream out of step.
    #[error("protocol: {0}")]
    Protocol(String),
}

/// Serves one connection: handshake, then requests until the client disconnects.
pub fn serve_connection(stream: Box<dyn Stream>, exports: &Exports) -> Result<(), SessionError> {
    let mut writer = stream.try_clone_stream()?;
    stream.set_read_timeout_to(Some(HANDSHAKE_TIMEOUT))?;
    let mut reader = BufReader::with_capacity(64 << 10, stream);
    let Some(export) = handshake(&mut reader, &mut writer, exports)? else {
        return Ok(());
    };
    reader.get_ref().set_read_timeout_to(None)?;
    tracing::info!(export = %export.name(), "nbd transmission");
    transmission(&mut reader, &mut writer, &export)
}

/// Answers NBD_OPT_INFO or NBD_OPT_GO (`option`, with its `data`): the export's size and
/// flags and the block sizes, or an error reply. Returns the export named, if it was found.
fn info_or_go(
    writer: &mut impl Write,
    exports: &Exports,
    option: u32,
    data: &[u8],
) -> Result<Option<Arc<Export>>, SessionError> {
    let request = match nbd::parse_info_request(data) {
        Ok(request) => request,
        Err(why) => {
            let text = why.into_bytes();
            writer.write_all(&nbd::option_reply(option, nbd::REP_ERR_INVALID, &text))?;
            return Ok(None);
        }
    };
    let Some(export) = exports.find(&request.name) else {
        let text = format!("no export named {:?}", request.name).into_bytes();
        writer.write_all(&nbd::option_reply(option, nbd::REP_ERR_UNKNOWN, &text))?;
        return Ok(None);
    };
    let mut out = nbd::option_reply(
        option,
        nbd::REP_INFO,
        &nbd::info_export_data(export.size_bytes(), export.transmission_flags()),
    );
    // Sent whether asked or not: the sizes are the defaults any client assumes
    // (1-byte minimum), so a client that did not ask loses nothing.
    out.extend_from_slice(&nbd::option_reply(
        option,
        nbd::REP_INFO,
        &nbd::info_block_size_data(1, PREFERRED_BLOCK_BYTES, PAYLOAD_MAX_BYTES),
    ));
    out.extend_from_slice(&nbd::option_reply(option, nbd::REP_ACK, &[]));
    writer.write_all(&out)?;
    Ok(Some(export))
}

/// The handshake: greeting, client flags, options. Returns the export chosen, or `None` when
/// the client aborted.
fn handshake(
    reader: &mut impl Read,
    writer: &mut impl Write,
    exports: &Exports,
) -> Result<Option<Arc<Export>>, SessionError> {
    writer.write_all(&nbd::greeting())?;
    let mut flags = [0u8; 4];
    reader.read_exact(&mut flags)?;
    let client_flags = nbd::parse_client_flags(flags).map_err(SessionError::Protocol)?;
    let zeroes = client_flags & nbd::CLIENT_FLAG_NO_ZEROES == 0;
    for _ in 0..OPTIONS_PER_SESSION_MAX {
        let mut header = [0u8; 16];
        reader.read_exact(&mut header)?;
        let (option, length) = nbd::parse_option_header(header).map_err(SessionError::Protocol)?;
        if length > OPTION_DATA_MAX_BYTES {
            if option == nbd::OPT_EXPORT_NAME {
                // Its only reply is the export's size and flags: a name no export has can
                // only be answered by closing (an option reply would be read as the size).
                return Err(SessionError::Protocol(format!(
                    "export name of {length} bytes"
                )));
            }
            if length > OPTION_DISCARD_MAX_BYTES {
                return Err(SessionError::Protocol(format!(
                    "option {option} with {length} bytes of data"
                )));
            }
            io::copy(&mut reader.take(u64::from(length)), &mut io::sink())?;
            writer.write_all(&nbd::option_reply(option, nbd::REP_ERR_TOO_BIG, &[]))?;
            continue;
        }
        let mut data = vec![0u8; length as usize];
        reader.read_exact(&mut data)?;
        match option {
            nbd::OPT_EXPORT_NAME => {
                let name = String::from_utf8_lossy(&data);
                let Some(export) = exports.find(&name) else {
                    // The protocol leaves no way to say so but closing.
                    return Err(SessionError::Protocol(format!("no export named {name:?}")));
                };
                writer.write_all(&nbd::export_name_reply(
                    export.size_bytes(),
                    export.transmission_flags(),
                    zeroes,
                ))?;
                return Ok(Some(export));
            }
            nbd::OPT_ABORT => {
                writer.write_all(&nbd::option_reply(option, nbd::REP_ACK, &[]))?;
                return Ok(None);
            }
            nbd::OPT_LIST => {
                if !data.is_empty() {
                    writer.write_all(&nbd::option_reply(option, nbd::REP_ERR_INVALID, &[]))?;
                    continue;
                }
                for export in exports.iter() {
                    let entry = nbd::server_reply_data(export.name());
                    writer.write_all(&nbd::option_reply(option, nbd::REP_SERVER, &entry))?;
                }
                writer.write_all(&nbd::option_reply(option, nbd::REP_ACK, &[]))?;
            }
            nbd::OPT_INFO | nbd::OPT_GO => {
                let export = info_or_go(writer, exports, option, &data)?;
                if option == nbd::OPT_GO && export.is_some() {
                    return Ok(export);
                }
            }
            _ => {
                // STARTTLS, STRUCTURED_REPLY, metadata contexts and anything unknown.
                writer.write_all(&nbd::option_reply(option, nbd::REP_ERR_UNSUP, &[]))?;
            }
        }
    }
    Err(SessionError::Protocol(format!(
        "more than {OPTIONS_PER_SESSION_MAX} options"
    )))
}

/// The flags each command accepts (`NBD_CMD_FLAG_FUA` is valid on every command).
fn flags_allowed(command: u16) -> u16 {
    match command {
        nbd::CMD_WRITE_ZEROES => nbd::CMD_FLAG_FUA | nbd::CMD_FLAG_NO_HOLE,
        nbd::CMD_DISC => 0,
        _ => nbd::CMD_FLAG_FUA,
    }
}

/// Requests of one connection run at once, at most this many (fio and the kernel keep up to
/// their queue depth in flight on one connection); more wait, unread, in the socket.
pub const IN_FLIGHT_PER_CONNECTION_MAX: usize = 16;

/// The transmission phase: the connection's thread reads requests (and write payloads) in
/// order and hands each to one of the connection's workers, which runs it and writes its reply
/// whole under the writer's lock. Replies may leave out of order (NBD matches them by cookie);
/// a flush covers every write answered before it, as NBD asks.
fn transmission<R: Read, W: Write + Send>(
    reader: &mut BufReader<R>,
    writer: &mut W,
    export: &Export,
) -> Result<(), SessionError> {
    let writer = Mutex::new(writer);
    let (jobs, queue) = mpsc::sync_channel::<Job>(IN_FLIGHT_PER_CONNECTION_MAX);
    let queue = Mutex::new(queue);
    // Requests handed to the workers and not answered yet.
    let in_flight = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..IN_FLIGHT_PER_CONNECTION_MAX)
            .map(|_| {
                scope.spawn(|| -> io::Result<()> {
                    loop {
                        let job = queue.lock().unwrap_or_else(|e| e.into_inner()).recv();
                        let Ok(Job {
                            request,
                            payload,
                            past_cutoff,
                        }) = job
                        else {
                            return Ok(()); // The reader is done: no more requests.
                        };
                        run_and_reply(export, &request, &payload, past_cutoff, &writer)?;
                        in_flight.fetch_sub(1, Ordering::AcqRel);
                    }
                })
            })
            .collect();
        let read = read_requests(reader, &jobs, export, &writer, &in_flight);
        drop(jobs); // Workers finish what is queued, answer it, and stop.
        let mut replies: io::Result<()> = Ok(());
        for worker in workers {
            let done = worker
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("a request's worker panicked")));
            replies = replies.and(done);
        }
        read.and(replies.map_err(SessionError::from))
    })
}

/// A request handed to a connection's workers.
struct Job {
    request: Request,
    /// A write's payload.
    payload: Vec<u8>,
    /// Part of a sequential stream past the export's cut-off: bypasses the cache.
    past_cutoff: bool,
}

/// A connection's current sequential run (reads and writes alike).
#[derive(Default)]
struct SequentialRun {
    /// Where the last read or write ended.
    end: u64,
    /// Consecutive bytes up to there.
    bytes: u64,
}

impl SequentialRun {
    /// Counts a read or write into the run; whether the stream is now past `cutoff_bytes`
    /// (never when it is 0; other commands never are).
    fn past_cutoff(&mut self, request: &Request, cutoff_bytes: u64) -> bool {
        if !matches!(request.command, nbd::CMD_READ | nbd::CMD_WRITE) {
            return false;
        }
        let length = u64::from(request.length);
        self.bytes = if request.offset == self.end {
            self.bytes.saturating_add(length)
        } else {
            length
        };
        self.end = request.offset.saturating_add(length);
        cutoff_bytes > 0 && self.bytes > cutoff_bytes
    }
}

/// Reads requests until the client disconnects, handing each to the workers, except reads
/// the cache holds whole and write-back writes the cache takes without waiting, which are
/// answered here at once (a hand-off to a worker and back would cost more than the copy), and
/// any request that arrives alone (none in flight, no more bytes read ahead: the client is
/// waiting for it), which runs here too.
fn read_requests<W: Write>(
    reader: &mut BufReader<impl Read>,
    jobs: &mpsc::SyncSender<Job>,
    export: &Export,
    writer: &Mutex<&mut W>,
    in_flight: &AtomicUsize,
) -> Result<(), SessionError> {
    let mut run = SequentialRun::default();
    loop {
        let mut header = [0u8; nbd::REQUEST_BYTES];
        match reader.read_exact(&mut header) {
            Ok(()) => {}
            // The client closed between requests: a hard disconnect, which NBD allows.
            Err(err) if err.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(err) => return Err(err.into()),
        }
        let request = nbd::parse_request(&header).map_err(SessionError::Protocol)?;
        let mut payload = Vec::new();
        if request.command == nbd::CMD_WRITE {
            if request.length > PAYLOAD_MAX_BYTES {
                return Err(SessionError::Protocol(format!(
                    "write of {} bytes (most {PAYLOAD_MAX_BYTES})",
                    request.length
                )));
            }
            payload.resize(request.length as usize, 0);
            // A client that vanishes here leaves its write undone: nothing was written yet.
            reader.read_exact(&mut payload)?;
        }
        if request.command == nbd::CMD_DISC {
            return Ok(()); // Requests already read are answered before the close.
        }
        if request.command == nbd::CMD_WRITE
            && request.flags == 0
            && export.write_back_without_waiting(request.offset, &payload)
        {
            // Write-back into the cache alone: answered here, as a cached read is.
            send_reply(writer, &nbd::simple_reply(0, request.cookie))?;
            continue;
        }
        if request.command == nbd::CMD_READ && request.flags == 0 {
            if let Some(reply) = cached_read_reply(export, &request) {
                send_reply(writer, &reply)?;
                continue;
            }
        }
        let past_cutoff = run.past_cutoff(&request, export.seq_cutoff_bytes());
        if in_flight.load(Ordering::Acquire) == 0 && reader.buffer().is_empty() {
            // Nothing else in flight and nothing more sent: the client waits for this one (a
            // queue depth of one), so it runs here, saving two thread hand-offs.
            run_and_reply(export, &request, &payload, past_cutoff, writer)?;
            continue;
        }
        in_flight.fetch_add(1, Ordering::AcqRel);
        let job = Job {
            request,
            payload,
            past_cutoff,
        };
        if jobs.send(job).is_err() {
            // Every worker stopped: a reply could not be written (the client is gone).
            return Ok(());
        }
    }
}

/// Writes one whole reply under the connection's writer lock.
fn send_reply<W: Write>(writer: &Mutex<&mut W>, reply: &[u8]) -> io::Result<()> {
    writer
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .write_all(reply)
}

/// Runs a request and sends its reply (with a read's data).
fn run_and_reply<W: Write>(
    export: &Export,
    request: &Request,
    payload: &[u8],
    past_cutoff: bool,
    writer: &Mutex<&mut W>,
) -> io::Result<()> {
    let (error, data) = execute(export, request, payload, past_cutoff);
    let mut reply = nbd::simple_reply(error, request.cookie).to_vec();
    if let Some(data) = data {
        reply.extend_from_slice(&data);
    }
    send_reply(writer, &reply)
}

/// The whole reply to a valid read that the cache holds entirely, or `None`.
fn cached_read_reply(export: &Export, request: &Request) -> Option<Vec<u8>> {
    let end = request.offset.checked_add(u64::from(request.length))?;
    if end > export.size_bytes() || request.length > PAYLOAD_MAX_BYTES || request.length == 0 {
        return None;
    }
    let mut reply = nbd::simple_reply(0, request.cookie).to_vec();
    reply.resize(16 + request.length as usize, 0);
    export
        .read_cached(request.offset, &mut reply[16..])
        .then_some(reply)
}

/// Runs one request: the reply's error value, and a read's data.
fn execute(
    export: &Export,
    request: &Request,
    payload: &[u8],
    past_cutoff: bool,
) -> (u32, Option<Vec<u8>>) {
    if request.flags & !flags_allowed(request.command) != 0 {
        return (nbd::EINVAL, None);
    }
    let fua = request.flags & nbd::CMD_FLAG_FUA != 0;
    let in_range = request
        .offset
        .checked_add(u64::from(request.length))
        .is_some_and(|end| end <= export.size_bytes());
    let result = match request.command {
        nbd::CMD_READ => {
            if !in_range || request.length > PAYLOAD_MAX_BYTES {
                return (nbd::EINVAL, None);
            }
            let mut data = vec![0u8; request.length as usize];
            return match export.read_with(request.offset, &mut data, !past_cutoff) {
                Ok(()) => (0, Some(data)),
                Err(failure) => (failure_code(export, "read", request, &failure), None),
            };
        }
        nbd::CMD_WRITE if !in_range => return (nbd::ENOSPC, None),
        nbd::CMD_WRITE => export.write_with(request.offset, payload, fua, !past_cutoff),
        nbd::CMD_FLUSH => export.flush(),
        nbd::CMD_TRIM if !in_range => return (nbd::EINVAL, None),
        nbd::CMD_TRIM => export.trim(request.offset, u64::from(request.length), fua),
        nbd::CMD_WRITE_ZEROES if !in_range => return (nbd::ENOSPC, None),
        // Zeroes are written, never a hole: NO_HOLE is honoured whether given or not.
        nbd::CMD_WRITE_ZEROES => {
            export.write_zeroes(request.offset, u64::from(request.length), fua)
        }
        nbd::CMD_CACHE if !in_range => return (nbd::EINVAL, None),
        nbd::CMD_CACHE => Ok(()), // Advisory: pass-through has no cache to fill.
        _ => return (nbd::EINVAL, None),
    };
    match result {
        Ok(()) => (0, None),
        Err(failure) => (failure_code(export, "write", request, &failure), None),
    }
}

/// Logs a failed request and maps it to the protocol's error value.
fn failure_code(export: &Export, what: &str, request: &Request, failure: &IoFailure) -> u32 {
    tracing::error!(
        export = %export.name(),
        command = request.command,
        offset = request.offset,
        length = request.length,
        error = %failure.0,
        "{what} failed"
    );
    failure.nbd_error()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(command: u16, offset: u64, length: u32) -> Request {
        Request {
            flags: 0,
            command,
            cookie: 0,
            offset,
            length,
        }
    }

    #[test]
    fn a_run_passes_the_cutoff_only_while_it_stays_consecutive() {
        let mut run = SequentialRun::default();
        let cutoff = 3 * 4096;
        let past: Vec<bool> = (0..5)
            .map(|i| run.past_cutoff(&request(nbd::CMD_READ, i * 4096, 4096), cutoff))
            .collect();
        assert_eq!(past, [false, false, false, true, true]);
        // A jump starts a new run; writes count as reads do; flushes count for nothing.
        assert!(!run.past_cutoff(&request(nbd::CMD_WRITE, 1 << 30, 4096), cutoff));
        assert!(!run.past_cutoff(&request(nbd::CMD_FLUSH, 0, 0), cutoff));
        assert!(!run.past_cutoff(&request(nbd::CMD_WRITE, (1 << 30) + 4096, 8192), cutoff));
        assert!(run.past_cutoff(&request(nbd::CMD_WRITE, (1 << 30) + 12288, 1), cutoff));
        // 0: no cut-off at all.
        assert!(!run.past_cutoff(&request(nbd::CMD_READ, (1 << 30) + 12289, 1 << 20), 0));
    }
}
