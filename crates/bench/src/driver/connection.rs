//! One non-blocking connection: an output buffer, an input buffer, and the FIFO of requests
//! awaiting replies (both protocols answer in order, so the front request owns the next reply).
//!
//! Invariants: `in_start <= in_end <= input.len() <= READ_BUFFER_BYTES_MAX`;
//! `out_pos <= out.len()`; bytes in `input[in_start..in_end]` are an incomplete reply to
//! `pending.front()` (or nothing).

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

use mio::net::TcpStream;

use super::counts::Tally;
use super::request::{Encoded, RequestMaker};
use crate::protocol::Protocol;

/// Input buffer size at connect, in bytes.
const READ_BUFFER_BYTES_INITIAL: usize = 64 * 1024;
/// The largest reply a connection will buffer (a 1000-key multi-get of 64 KiB values), bytes.
const READ_BUFFER_BYTES_MAX: usize = 128 * 1024 * 1024;
/// How long a connect may take on loopback.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A request awaiting its reply.
#[derive(Debug, Clone, Copy)]
struct Pending {
    request: Encoded,
    /// When the request was sent (closed loop) or meant to be sent (open loop), ns.
    start_ns: u64,
    /// Whether it counts towards the phase's results.
    measured: bool,
}

/// A connection that broke: closed by the server or sent something that is not a reply.
#[derive(Debug)]
pub enum ConnectionError {
    /// A socket error, or the server closed the connection.
    Io(io::Error),
    /// Unparseable reply bytes.
    Protocol(String),
}

/// One connection to the target.
#[derive(Debug)]
pub struct Connection {
    stream: TcpStream,
    out: Vec<u8>,
    out_pos: usize,
    input: Vec<u8>,
    in_start: usize,
    in_end: usize,
    pending: VecDeque<Pending>,
}

impl Connection {
    /// Connects with TCP_NODELAY, ready for a mio event loop.
    ///
    /// # Errors
    /// When the connect fails or times out.
    pub fn connect(addr: SocketAddr, pipeline: usize) -> io::Result<Self> {
        let stream = std::net::TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)?;
        stream.set_nodelay(true)?;
        stream.set_nonblocking(true)?;
        Ok(Connection {
            stream: TcpStream::from_std(stream),
            out: Vec::with_capacity(4096),
            out_pos: 0,
            input: vec![0; READ_BUFFER_BYTES_INITIAL],
            in_start: 0,
            in_end: 0,
            pending: VecDeque::with_capacity(pipeline),
        })
    }

    /// The socket, for registration with the poller.
    pub fn stream_mut(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    /// Requests sent and not yet answered.
    #[must_use]
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Encodes the next request of `maker` into the output buffer; `false` when exhausted.
    pub fn push(
        &mut self,
        maker: &mut RequestMaker,
        start_ns: u64,
        measured: bool,
        tally: &mut Tally,
    ) -> bool {
        let Some(request) = maker.encode_next(&mut self.out) else {
            return false;
        };
        if measured {
            tally.sent(request.op, request.keys);
        }
        self.pending.push_back(Pending {
            request,
            start_ns,
            measured,
        });
        true
    }

    /// Writes buffered requests until done or the socket would block (then a writable event
    /// resumes it).
    ///
    /// # Errors
    /// On a socket error.
    pub fn flush(&mut self) -> io::Result<()> {
        while self.out_pos < self.out.len() {
            match self.stream.write(&self.out[self.out_pos..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(written) => self.out_pos += written,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.out.clear();
        self.out_pos = 0;
        Ok(())
    }

    /// Reads until the socket would block, accounting every complete reply at `now_ns`.
    ///
    /// # Errors
    /// When the server closed the connection, a socket error, or an invalid reply.
    pub fn receive(
        &mut self,
        protocol: Protocol,
        now_ns: u64,
        tally: &mut Tally,
    ) -> Result<(), ConnectionError> {
        loop {
            self.make_room()?;
            match self.stream.read(&mut self.input[self.in_end..]) {
                Ok(0) => {
                    let error = io::Error::new(io::ErrorKind::UnexpectedEof, "server closed");
                    return Err(ConnectionError::Io(error));
                }
                Ok(read) => {
                    self.in_end += read;
                    self.parse_replies(protocol, now_ns, tally)?;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ConnectionError::Io(e)),
            }
        }
    }

    /// Ensures free space after `in_end`: compacts, or doubles up to the limit.
    fn make_room(&mut self) -> Result<(), ConnectionError> {
        if self.in_end < self.input.len() {
            return Ok(());
        }
        if self.in_start > 0 {
            self.input.copy_within(self.in_start..self.in_end, 0);
            self.in_end -= self.in_start;
            self.in_start = 0;
        } else if self.input.len() < READ_BUFFER_BYTES_MAX {
            self.input.resize(self.input.len() * 2, 0);
        } else {
            return Err(ConnectionError::Protocol(format!(
                "a reply exceeds the {READ_BUFFER_BYTES_MAX}-byte read buffer"
            )));
        }
        Ok(())
    }

    fn parse_replies(
        &mut self,
        protocol: Protocol,
        now_ns: u64,
        tally: &mut Tally,
    ) -> Result<(), ConnectionError> {
        while self.in_start < self.in_end {
            let Some(front) = self.pending.front().copied() else {
                let stray = &self.input[self.in_start..self.in_end.min(self.in_start + 80)];
                let stray = String::from_utf8_lossy(stray);
                return Err(ConnectionError::Protocol(format!(
                    "bytes arrived with no request pending: {stray:?}"
                )));
            };
            let input = &self.input[self.in_start..self.in_end];
            let request = front.request;
            let reply = protocol
                .parse_reply(request.op, request.keys as usize, input)
                .map_err(ConnectionError::Protocol)?;
            let Some(reply) = reply else { break };
            self.in_start += reply.consumed;
            self.pending.pop_front();
            if front.measured {
                let latency_ns = now_ns.saturating_sub(front.start_ns);
                tally.replied(request.op, request.keys, &reply, latency_ns);
                tally.last_reply_ns = tally.last_reply_ns.max(now_ns);
            }
        }
        if self.in_start == self.in_end {
            self.in_start = 0;
            self.in_end = 0;
        }
        debug_assert!(self.in_start <= self.in_end && self.in_end <= self.input.len());
        Ok(())
    }
}
