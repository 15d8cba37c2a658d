//! Running one phase (preload, measured run or read-back) over `threads` load threads.
//!
//! ```text
//!  main thread                      load thread 0..T (pinned to --cpu)
//!  ───────────                      ──────────────────────────────────
//!  spawn ─────────────────────────▶ connect its share of the connections
//!  barrier ◀──────────────────────▶ barrier
//!  origin = now; barrier ◀────────▶ barrier, read origin
//!  sample CPU at warm-up end        event loop: send, receive, record
//!  sample CPU at window end         drain outstanding replies
//!  join ◀───────────────────────── tally (counts + histograms)
//! ```

pub mod connection;
pub mod counts;
pub mod event_loop;
pub mod request;

use std::net::SocketAddr;
use std::sync::{Arc, Barrier, OnceLock};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;

use crate::affinity::pin_current_thread;
use crate::arrival::{ArrivalKind, Arrivals};
use crate::cpu::cpu_secs;
use crate::error::BenchError;
use crate::protocol::Protocol;
use crate::workload::{OpKind, Workload};
use connection::Connection;
use counts::Tally;
use event_loop::{LoadThread, Pace, Window};
use request::{KeySource, RequestMaker};

/// What a phase does.
#[derive(Debug, Clone, Copy)]
pub enum PhaseKind {
    /// The measured run: random verbs and keys for `warmup + duration`.
    Timed {
        /// Excluded from results, in ns.
        warmup_ns: u64,
        /// Measured, in ns.
        duration_ns: u64,
        /// Open loop at this many requests per second (all threads together), if set.
        rate: Option<(ArrivalKind, f64)>,
    },
    /// Every key once, with one verb: SET for the preload, GET for the read-back.
    Sequential(OpKind),
}

/// Everything a phase needs.
#[derive(Debug, Clone)]
pub struct PhasePlan {
    /// The server.
    pub addr: SocketAddr,
    /// Wire protocol.
    pub protocol: Protocol,
    /// Load threads.
    pub threads: usize,
    /// Connections over all threads.
    pub connections: usize,
    /// Requests in flight per connection.
    pub pipeline: usize,
    /// Closed loop: refill a connection only once all its replies are in.
    pub pipeline_batches: bool,
    /// Keys, values and mix.
    pub workload: Arc<Workload>,
    /// What to do.
    pub kind: PhaseKind,
    /// CPUs to pin load threads to, round-robin; empty leaves them unpinned.
    pub cpus: Vec<usize>,
    /// Seeds the request streams.
    pub seed: u64,
    /// The server's PID, to measure its CPU time.
    pub server_pid: Option<u32>,
    /// How long to wait for outstanding replies after sending stops, in ns.
    pub drain_ns: u64,
    /// Open loop: arrivals each thread may queue before dropping.
    pub backlog_max: usize,
    /// Sequential phases visit every `stride`-th key (1: every key).
    pub stride: u64,
}

/// A phase's merged results.
#[derive(Debug, Clone)]
pub struct PhaseOutcome {
    /// Counters and histograms of all threads.
    pub tally: Tally,
    /// The measured window (timed) or the wall time (sequential), in seconds.
    pub elapsed_secs: f64,
    /// From the window's start to the last measured reply, in seconds. Longer than the window
    /// when an overloaded open-loop run was still catching up after the window closed.
    pub completion_secs: f64,
    /// This process's CPU time over the same span, in seconds.
    pub client_cpu_secs: f64,
    /// The server's CPU time over the same span, in seconds, when its PID was given.
    pub server_cpu_secs: Option<f64>,
    /// Open loop: the deepest any thread's backlog got.
    pub backlog_depth_max: usize,
}

/// Runs one phase and merges the threads' results.
///
/// # Errors
/// When a connection fails, replies are invalid, or replies stall.
pub fn run_phase(plan: &PhasePlan) -> Result<PhaseOutcome, BenchError> {
    assert!(plan.threads >= 1 && plan.connections >= plan.threads);
    let barrier = Barrier::new(plan.threads + 1);
    let origin_cell = OnceLock::new();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..plan.threads)
            .map(|index| {
                let (barrier, origin_cell) = (&barrier, &origin_cell);
                scope.spawn(move || load_thread(plan, index, barrier, origin_cell))
            })
            .collect();
        barrier.wait();
        let origin = *origin_cell.get_or_init(Instant::now);
        let origin_cpu = read_cpu(plan.server_pid);
        barrier.wait();
        let sampled = sample_cpu(plan, origin);
        let mut tally = Tally::default();
        let mut backlog_depth_max = 0;
        let mut first_error = None;
        for handle in handles {
            match handle.join().expect("load thread panicked") {
                Ok(thread) => {
                    tally.merge(&thread.tally);
                    backlog_depth_max = backlog_depth_max.max(thread.backlog_depth_max);
                }
                Err(error) => first_error = first_error.or(Some(error)),
            }
        }
        if let Some(error) = first_error {
            return Err(error);
        }
        let sampled = match sampled {
            Some(sampled) => sampled?,
            None => cpu_since(plan, origin, origin_cpu?)?,
        };
        let measure_start_ns = match plan.kind {
            PhaseKind::Timed { warmup_ns, .. } => warmup_ns,
            PhaseKind::Sequential(_) => 0,
        };
        #[allow(clippy::cast_precision_loss)]
        let completion_secs = tally.last_reply_ns.saturating_sub(measure_start_ns) as f64 / 1e9;
        Ok(PhaseOutcome {
            tally,
            elapsed_secs: sampled.elapsed_secs,
            completion_secs,
            client_cpu_secs: sampled.client_cpu_secs,
            server_cpu_secs: sampled.server_cpu_secs,
            backlog_depth_max,
        })
    })
}

/// CPU use over a span.
#[derive(Debug, Clone, Copy)]
struct CpuSample {
    elapsed_secs: f64,
    client_cpu_secs: f64,
    server_cpu_secs: Option<f64>,
}

/// Timed phases: CPU over exactly the measured window, sampled by the main thread.
fn sample_cpu(plan: &PhasePlan, origin: Instant) -> Option<Result<CpuSample, BenchError>> {
    let PhaseKind::Timed {
        warmup_ns,
        duration_ns,
        ..
    } = plan.kind
    else {
        return None;
    };
    sleep_until(origin + Duration::from_nanos(warmup_ns));
    let start = read_cpu(plan.server_pid);
    sleep_until(origin + Duration::from_nanos(warmup_ns + duration_ns));
    let end = read_cpu(plan.server_pid);
    Some(start.and_then(|start| {
        let end = end?;
        #[allow(clippy::cast_precision_loss)]
        let elapsed_secs = duration_ns as f64 / 1e9;
        Ok(CpuSample {
            elapsed_secs,
            client_cpu_secs: end.0 - start.0,
            server_cpu_secs: end.1.zip(start.1).map(|(e, s)| e - s),
        })
    }))
}

/// Sequential phases: CPU from the origin (read then as `start`) to now.
fn cpu_since(
    plan: &PhasePlan,
    origin: Instant,
    start: (f64, Option<f64>),
) -> Result<CpuSample, BenchError> {
    let (client, server) = read_cpu(plan.server_pid)?;
    Ok(CpuSample {
        elapsed_secs: origin.elapsed().as_secs_f64(),
        client_cpu_secs: client - start.0,
        server_cpu_secs: server.zip(start.1).map(|(end, start)| end - start),
    })
}

fn read_cpu(server_pid: Option<u32>) -> Result<(f64, Option<f64>), BenchError> {
    let client = cpu_secs(None)?;
    let server = server_pid.map(|pid| cpu_secs(Some(pid))).transpose()?;
    Ok((client, server))
}

fn sleep_until(deadline: Instant) {
    let now = Instant::now();
    if deadline > now {
        std::thread::sleep(deadline - now);
    }
}

/// The body of load thread `index`: pin, connect, synchronise, run.
fn load_thread(
    plan: &PhasePlan,
    index: usize,
    barrier: &Barrier,
    origin_cell: &OnceLock<Instant>,
) -> Result<LoadThread, BenchError> {
    if let Some(&cpu) = plan.cpus.get(index % plan.cpus.len().max(1)) {
        pin_current_thread(cpu)
            .map_err(|e| BenchError::Config(format!("pin to CPU {cpu}: {e}")))?;
    }
    let share = connections_share(plan.connections, plan.threads, index);
    let connections: Result<Vec<_>, _> = (0..share)
        .map(|_| Connection::connect(plan.addr, plan.pipeline))
        .collect();
    barrier.wait();
    barrier.wait();
    let origin = *origin_cell.get().expect("origin set between the barriers");
    let connections = connections.map_err(|source| BenchError::Connect {
        addr: plan.addr.to_string(),
        source,
    })?;
    let seed = plan
        .seed
        .wrapping_add(index as u64)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let (pace, window, source) = thread_schedule(plan, index, seed);
    let maker = RequestMaker::new(plan.protocol, Arc::clone(&plan.workload), source, seed);
    let mut thread = LoadThread::new(plan, connections, maker, pace, window, origin);
    thread.run()?;
    Ok(thread)
}

/// Connections for thread `index` when `total` are spread over `threads`.
fn connections_share(total: usize, threads: usize, index: usize) -> usize {
    total / threads + usize::from(index < total % threads)
}

/// A thread's pacing, window and key source.
fn thread_schedule(plan: &PhasePlan, index: usize, seed: u64) -> (Pace, Window, KeySource) {
    match plan.kind {
        PhaseKind::Timed {
            warmup_ns,
            duration_ns,
            rate,
        } => {
            let window = Window {
                measure_start_ns: warmup_ns,
                send_end_ns: Some(warmup_ns + duration_ns),
                drain_ns: plan.drain_ns,
            };
            let pace = match rate {
                None => Pace::Closed,
                Some((kind, per_sec)) => {
                    #[allow(clippy::cast_precision_loss)]
                    let share = per_sec / plan.threads as f64;
                    Pace::Open {
                        arrivals: Arrivals::new(kind, share, 0),
                        backlog_max: plan.backlog_max,
                        // A stream apart from the request maker's, so gaps and keys do not
                        // correlate.
                        rng: <SmallRng as rand::SeedableRng>::seed_from_u64(!seed),
                    }
                }
            };
            (pace, window, KeySource::Random)
        }
        PhaseKind::Sequential(op) => {
            // The positions 0..visits, split among threads; position p is key p * stride.
            let stride = plan.stride.max(1);
            let visits = plan.workload.keys.keys_count().div_ceil(stride);
            let threads = plan.threads as u64;
            let index = index as u64;
            let keys = visits * index / threads..visits * (index + 1) / threads;
            let window = Window {
                measure_start_ns: 0,
                send_end_ns: None,
                drain_ns: plan.drain_ns,
            };
            let source = KeySource::Sequential { op, keys, stride };
            (Pace::Closed, window, source)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_spread_evenly() {
        let shares: Vec<usize> = (0..3).map(|i| connections_share(10, 3, i)).collect();
        assert_eq!(shares, [4, 3, 3]);
        assert_eq!((0..4).map(|i| connections_share(4, 4, i)).sum::<usize>(), 4);
    }
}
