//! The load generator's command-line arguments, shared by `strata-bench run` and `strata bench`.

use std::path::PathBuf;

use crate::arrival::ArrivalKind;
use crate::protocol::Protocol;
use crate::workload::{KeyDist, Ratio, SizeRange};

/// The most load threads.
pub const THREADS_MAX: usize = 64;
/// The most connections over all threads.
pub const CONNECTIONS_MAX: usize = 10_000;
/// The most requests in flight per connection.
pub const PIPELINE_MAX: usize = 1024;
/// Requests in flight per connection during the preload and read-back phases, at least.
pub const BULK_PIPELINE_MIN: usize = 32;

/// One load-generator run against one server.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// The server, host:port.
    #[arg(long, default_value = "127.0.0.1:11211")]
    pub target: String,
    /// Wire protocol.
    #[arg(long, value_enum, default_value_t = Protocol::MemcacheText)]
    pub protocol: Protocol,
    /// Load threads, each with its own event loop.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Connections over all threads.
    #[arg(long, default_value_t = 20)]
    pub connections: usize,
    /// Requests in flight per connection (closed loop: always; open loop: at most).
    #[arg(long, default_value_t = 1)]
    pub pipeline: usize,
    /// Closed loop: send `--pipeline` requests at once and wait for all their replies before
    /// the next batch (as redis-benchmark -P does), instead of refilling each freed slot.
    #[arg(long)]
    pub pipeline_batches: bool,
    /// Open loop: offered requests per second over all threads. Absent: closed loop.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Open loop: gaps between arrivals.
    #[arg(long, value_enum, default_value_t = ArrivalKind::Poisson)]
    pub arrival: ArrivalKind,
    /// Distinct keys.
    #[arg(long, default_value_t = 100_000)]
    pub keyspace: u64,
    /// Key popularity: uniform, zipf (s = 0.99) or zipf:S.
    #[arg(long, default_value = "uniform")]
    pub key_dist: KeyDist,
    /// Key length in bytes: N or MIN-MAX.
    #[arg(long, default_value = "16")]
    pub key_size: SizeRange,
    /// Value length in bytes: N or MIN-MAX.
    #[arg(long, default_value = "64")]
    pub value_size: SizeRange,
    /// GET:SET mix, e.g. 9:1.
    #[arg(long, default_value = "9:1")]
    pub ratio: Ratio,
    /// Keys per GET (multi-get batch size; 1 is a plain GET).
    #[arg(long, default_value_t = 1)]
    pub batch_keys: usize,
    /// Expiry sent with every SET, in seconds (0: never).
    #[arg(long, default_value_t = 0)]
    pub ttl_secs: u32,
    /// Warm-up before measuring, in seconds (excluded from results).
    #[arg(long, default_value_t = 1.0)]
    pub warmup_secs: f64,
    /// Measured time, in seconds (0 skips the measured phase).
    #[arg(long, default_value_t = 5.0)]
    pub duration_secs: f64,
    /// Write every key once (pipelined) before measuring.
    #[arg(long)]
    pub preload: bool,
    /// Read every key once after measuring and count how many the server kept.
    #[arg(long)]
    pub readback: bool,
    /// Keys per GET in the read-back phase.
    #[arg(long, default_value_t = 100)]
    pub readback_batch_keys: usize,
    /// Read back every N-th key only (keys 0, N, 2N...): a sample of a large key space.
    #[arg(long, default_value_t = 1)]
    pub readback_stride: u64,
    /// CPUs to pin load threads to (comma-separated, round-robin), e.g. 1.
    #[arg(long, value_delimiter = ',')]
    pub cpu: Vec<usize>,
    /// The server's PID: report its CPU time per request.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Also write the report as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Seeds keys, verbs and values.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// How long to wait for outstanding replies after sending stops, in seconds.
    #[arg(long, default_value_t = 10)]
    pub drain_secs: u64,
    /// Open loop: arrivals a thread may queue for a free connection before dropping them.
    #[arg(long, default_value_t = 1_000_000)]
    pub backlog_max: usize,
}

impl BenchArgs {
    /// Parses arguments the way the command line does (the first item is the program name).
    ///
    /// # Errors
    /// With clap's message when an argument is unknown or malformed.
    pub fn parse_from_args<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        #[derive(clap::Parser)]
        struct Wrapper {
            #[command(flatten)]
            args: BenchArgs,
        }
        <Wrapper as clap::Parser>::try_parse_from(args).map(|wrapper| wrapper.args)
    }

    /// Checks the limits that clap's types do not.
    ///
    /// # Errors
    /// Naming the first argument out of range.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=THREADS_MAX).contains(&self.threads) {
            return Err(format!("--threads must be 1..={THREADS_MAX}"));
        }
        if self.connections < self.threads || self.connections > CONNECTIONS_MAX {
            return Err(format!(
                "--connections must be --threads..={CONNECTIONS_MAX}"
            ));
        }
        if !(1..=PIPELINE_MAX).contains(&self.pipeline) {
            return Err(format!("--pipeline must be 1..={PIPELINE_MAX}"));
        }
        if self
            .rate
            .is_some_and(|rate| !(rate.is_finite() && rate > 0.0))
        {
            return Err("--rate must be a positive number of requests per second".into());
        }
        let secs_ok = |secs: f64| secs.is_finite() && secs >= 0.0;
        if !secs_ok(self.warmup_secs) || !secs_ok(self.duration_secs) {
            return Err("--warmup-secs and --duration-secs must be >= 0".into());
        }
        if self.readback_stride == 0 {
            return Err("--readback-stride must be >= 1".into());
        }
        if self.backlog_max == 0 {
            return Err("--backlog-max must be > 0".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_overrides_parse() {
        let args = BenchArgs::parse_from_args(["x"]).unwrap();
        assert_eq!(args.connections, 20);
        assert!(args.validate().is_ok());
        let args = BenchArgs::parse_from_args([
            "x",
            "--protocol",
            "resp",
            "--key-dist",
            "zipf:1.1",
            "--value-size",
            "10-20",
            "--ratio",
            "1:1",
            "--cpu",
            "1,0",
            "--rate",
            "5000",
        ])
        .unwrap();
        assert_eq!(args.protocol, Protocol::Resp);
        assert_eq!(args.key_dist, KeyDist::Zipf(1.1));
        assert_eq!(args.cpu, [1, 0]);
        assert!(args.validate().is_ok());
    }

    #[test]
    fn limits_are_enforced() {
        let args = BenchArgs::parse_from_args(["x", "--pipeline", "0"]).unwrap();
        assert!(args.validate().unwrap_err().contains("--pipeline"));
        let args =
            BenchArgs::parse_from_args(["x", "--threads", "4", "--connections", "2"]).unwrap();
        assert!(args.validate().is_err());
        assert!(BenchArgs::parse_from_args(["x", "--ratio", "nine"]).is_err());
    }
}
