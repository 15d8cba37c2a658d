//! One load thread: a mio event loop over its connections.
//!
//! Closed loop keeps every connection `pipeline` requests deep and sends a new request as soon
//! as a reply frees a slot. Open loop queues arrivals from the schedule in a backlog and hands
//! them to connections with a free slot, one per connection per pass; a request's latency
//! starts at its intended send time, so time spent in the backlog counts.
//!
//! `epoll` sleeps in whole milliseconds, so in open loop the thread sleeps only when the next
//! arrival is more than [`SPIN_NS_MAX`] away and otherwise polls without blocking: the
//! generator's core is busy, but no request is sent late because of timer granularity.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token};
use rand::rngs::SmallRng;

use super::connection::{Connection, ConnectionError};
use super::counts::Tally;
use super::request::RequestMaker;
use super::PhasePlan;
use crate::arrival::Arrivals;
use crate::error::BenchError;
use crate::protocol::Protocol;

/// Events handled per poll.
const EVENTS_MAX: usize = 1024;
/// Below this gap to the next arrival the loop polls without sleeping, in nanoseconds.
const SPIN_NS_MAX: u64 = 2_000_000;
/// The longest sleep while waiting for replies, so deadlines are noticed.
const POLL_TIMEOUT_MAX: Duration = Duration::from_millis(50);

/// How requests are paced.
#[derive(Debug)]
pub enum Pace {
    /// As fast as replies come back, `pipeline` deep per connection.
    Closed,
    /// At the schedule's intended times.
    Open {
        /// The schedule.
        arrivals: Arrivals,
        /// The most arrivals waiting for a free connection slot; more are dropped and counted.
        backlog_max: usize,
        /// Draws the gaps between arrivals.
        rng: SmallRng,
    },
}

/// When a phase sends and which requests it measures, in ns since the phase's origin.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    /// Requests sent before this are warm-up.
    pub measure_start_ns: u64,
    /// No request is sent at or after this; `None` sends until the key source is exhausted.
    pub send_end_ns: Option<u64>,
    /// How long to wait for outstanding replies after sending stops.
    pub drain_ns: u64,
}

/// One thread's connections and state.
pub struct LoadThread {
    /// The target, for error messages.
    pub addr: String,
    /// Wire protocol.
    pub protocol: Protocol,
    /// Open connections.
    pub connections: Vec<Connection>,
    /// Requests in flight per connection.
    pub pipeline: usize,
    /// Closed loop: refill a connection only once all its replies are in.
    pub pipeline_batches: bool,
    /// Request source.
    pub maker: RequestMaker,
    /// Pacing.
    pub pace: Pace,
    /// Timing of the phase.
    pub window: Window,
    /// Counters and histograms.
    pub tally: Tally,
    /// Open loop: arrivals waiting for a connection slot (intended send times, ns).
    backlog: VecDeque<u64>,
    /// Open loop: the deepest the backlog got.
    pub backlog_depth_max: usize,
    /// Where the next fill pass starts, so no connection is always served first.
    rotation: usize,
    origin: Instant,
}

impl LoadThread {
    /// A thread of `plan` over already-connected `connections`; the clock starts at `origin`.
    #[must_use]
    pub fn new(
        plan: &PhasePlan,
        connections: Vec<Connection>,
        maker: RequestMaker,
        pace: Pace,
        window: Window,
        origin: Instant,
    ) -> Self {
        assert!(plan.pipeline >= 1 && !connections.is_empty());
        LoadThread {
            addr: plan.addr.to_string(),
            protocol: plan.protocol,
            connections,
            pipeline: plan.pipeline,
            pipeline_batches: plan.pipeline_batches,
            maker,
            pace,
            window,
            tally: Tally::default(),
            backlog: VecDeque::new(),
            backlog_depth_max: 0,
            rotation: 0,
            origin,
        }
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Runs the phase to completion: sends until the window closes (or the keys run out),
    /// then drains outstanding replies.
    ///
    /// # Errors
    /// On a broken connection, an invalid reply, or replies not arriving before the drain
    /// deadline.
    pub fn run(&mut self) -> Result<(), BenchError> {
        let mut poll = Poll::new()?;
        for (index, connection) in self.connections.iter_mut().enumerate() {
            let interest = Interest::READABLE | Interest::WRITABLE;
            poll.registry()
                .register(connection.stream_mut(), Token(index), interest)?;
        }
        let mut events = Events::with_capacity(EVENTS_MAX);
        let mut stop_ns = None;
        loop {
            let now = self.now_ns();
            if stop_ns.is_none() && !self.sending(now) {
                stop_ns = Some(now);
            }
            match stop_ns {
                None => self.fill(now, true)?,
                Some(stop) => {
                    if self.finish_step(now, stop)? {
                        return Ok(());
                    }
                }
            }
            let timeout = self.poll_timeout(now, stop_ns.is_none());
            poll.poll(&mut events, Some(timeout))?;
            let now = self.now_ns();
            for event in &events {
                let index = event.token().0;
                if event.is_readable() {
                    let result =
                        self.connections[index].receive(self.protocol, now, &mut self.tally);
                    result.map_err(|e| self.connection_error(e))?;
                }
                if event.is_writable() {
                    self.connections[index].flush()?;
                }
            }
        }
    }

    /// True while new requests may be sent.
    fn sending(&self, now: u64) -> bool {
        match self.window.send_end_ns {
            Some(end) => now < end,
            None => !self.maker.is_exhausted(),
        }
    }

    fn outstanding(&self) -> usize {
        self.connections.iter().map(Connection::pending_len).sum()
    }

    fn is_measured(&self, start_ns: u64) -> bool {
        let before_end = match self.window.send_end_ns {
            Some(end) => start_ns < end,
            None => true,
        };
        start_ns >= self.window.measure_start_ns && before_end
    }

    /// Tops up connections with new requests and writes them.
    /// After sending stops: sends what the open-loop backlog still holds (those requests were
    /// due inside the window, so leaving them out would flatter an overloaded server), then
    /// waits for replies. A backlog not sent within the drain time is counted as dropped; replies
    /// not received within a further drain time are a stall. Returns `true` when done.
    fn finish_step(&mut self, now: u64, stop: u64) -> Result<bool, BenchError> {
        let drain_ns = self.window.drain_ns;
        if !self.backlog.is_empty() {
            if now > stop + drain_ns {
                let measure_start = self.window.measure_start_ns;
                let dropped = self.backlog.iter().filter(|&&t| t >= measure_start).count();
                self.tally.counts.dropped += dropped as u64;
                self.backlog.clear();
            } else {
                self.fill(now, false)?;
            }
            return Ok(false);
        }
        if self.outstanding() == 0 {
            return Ok(true);
        }
        if now > stop + 2 * drain_ns {
            let outstanding = self.outstanding() as u64;
            let drain_secs = 2 * drain_ns / 1_000_000_000;
            return Err(BenchError::Stalled {
                outstanding,
                drain_secs,
            });
        }
        Ok(false)
    }

    /// Tops up connections with new requests (admitting new arrivals only while `admitting`)
    /// and writes them.
    fn fill(&mut self, now: u64, admitting: bool) -> Result<(), BenchError> {
        if matches!(self.pace, Pace::Open { .. }) {
            if admitting {
                self.admit_arrivals(now);
            }
            self.fill_open();
        } else {
            self.fill_closed(now);
        }
        self.rotation = (self.rotation + 1) % self.connections.len();
        for connection in &mut self.connections {
            connection.flush()?;
        }
        Ok(())
    }

    fn fill_closed(&mut self, now: u64) {
        let measured = self.is_measured(now);
        for connection in &mut self.connections {
            if self.pipeline_batches && connection.pending_len() > 0 {
                continue;
            }
            while connection.pending_len() < self.pipeline {
                if !connection.push(&mut self.maker, now, measured, &mut self.tally) {
                    return;
                }
            }
        }
    }

    /// Moves due arrivals from the schedule into the backlog.
    fn admit_arrivals(&mut self, now: u64) {
        let Pace::Open {
            arrivals,
            backlog_max,
            rng,
        } = &mut self.pace
        else {
            return;
        };
        let send_end = self.window.send_end_ns.unwrap_or(u64::MAX);
        while arrivals.peek_ns() <= now && arrivals.peek_ns() < send_end {
            let intended = arrivals.advance(rng);
            if self.backlog.len() < *backlog_max {
                self.backlog.push_back(intended);
            } else if intended >= self.window.measure_start_ns {
                self.tally.counts.dropped += 1;
            }
        }
        self.backlog_depth_max = self.backlog_depth_max.max(self.backlog.len());
    }

    /// Hands backlog entries to connections with free slots, one per connection per pass.
    fn fill_open(&mut self) {
        let count = self.connections.len();
        loop {
            let mut progressed = false;
            for offset in 0..count {
                let index = (self.rotation + offset) % count;
                let Some(&intended) = self.backlog.front() else {
                    return;
                };
                if self.connections[index].pending_len() >= self.pipeline {
                    continue;
                }
                let measured = self.is_measured(intended);
                let connection = &mut self.connections[index];
                if !connection.push(&mut self.maker, intended, measured, &mut self.tally) {
                    return;
                }
                self.backlog.pop_front();
                progressed = true;
            }
            if !progressed {
                return;
            }
        }
    }

    fn poll_timeout(&self, now: u64, sending: bool) -> Duration {
        match (&self.pace, sending) {
            (Pace::Open { arrivals, .. }, true) => {
                let gap = arrivals.peek_ns().saturating_sub(now);
                if gap < SPIN_NS_MAX {
                    Duration::ZERO
                } else {
                    Duration::from_nanos(gap - SPIN_NS_MAX / 2).min(POLL_TIMEOUT_MAX)
                }
            }
            (Pace::Closed, true) => match self.window.send_end_ns {
                Some(end) => Duration::from_nanos(end.saturating_sub(now)).min(POLL_TIMEOUT_MAX),
                None => POLL_TIMEOUT_MAX,
            },
            (Pace::Open { .. }, false) if !self.backlog.is_empty() => Duration::from_millis(1),
            (_, false) => Duration::from_millis(5),
        }
    }

    fn connection_error(&self, error: ConnectionError) -> BenchError {
        let detail = match error {
            ConnectionError::Io(e) => e.to_string(),
            ConnectionError::Protocol(detail) => detail,
        };
        BenchError::Protocol {
            addr: self.addr.clone(),
            detail,
        }
    }
}
