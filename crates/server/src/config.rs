//! `strata serve` configuration: flags, the same keys in a TOML file, named defaults and
//! validation.
//!
//! [`ServeOptions`] is both the clap flag set and the TOML file's schema: a file key is the
//! flag's long name (`memory = "256MiB"`, `memcache-listen = "off"`). Flags override the file.
//! [`ServeOptions::resolve`] merges them, fills in the defaults below and checks every value
//! and how values relate, returning a [`ServerConfig`] that the server trusts as it is.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use strata_engine::{
    Durability, EngineConfig, EvictionPolicy, FlashAdmission, FlashConfig, FlashMedium,
    IndexPlacement, PoolLocation, FLASH_REGION_SIZE_BYTES_DEFAULT,
};

use crate::auth::Credentials;
use crate::context::{OutputLimits, Settings, OUTPUT_BUFFERED_BYTES_HARD_DEFAULT};
use crate::size::ByteSize;

/// Default memcached listener (loopback only: exposing a cache is the operator's decision).
pub const MEMCACHE_LISTEN_DEFAULT: &str = "127.0.0.1:11211";
/// Default RESP listener.
pub const RESP_LISTEN_DEFAULT: &str = "127.0.0.1:6379";
/// Default admin (HTTP `/metrics`, `/health`) listener.
pub const ADMIN_LISTEN_DEFAULT: &str = "127.0.0.1:9121";
/// Default memory budget: 256 MiB.
pub const MEMORY_BYTES_DEFAULT: u64 = 256 << 20;
/// Most worker threads.
pub const THREADS_MAX: usize = 256;
/// Default connection limit (memcached's `-c` default).
pub const CONNECTIONS_MAX_DEFAULT: usize = 1024;
/// Highest connection limit accepted.
pub const CONNECTIONS_MAX_LIMIT: usize = 1 << 20;
/// Default largest value (memcached's `-I` and the engine's default).
pub const VALUE_LEN_MAX_DEFAULT: u64 = 1 << 20;
/// Smallest `--max-value-size`.
pub const VALUE_LEN_MAX_MIN: u64 = 1024;
/// Largest `--max-value-size`: Redis's `proto-max-bulk-len` default (a string past one
/// segment is kept in several records).
pub const VALUE_LEN_MAX_LIMIT: u64 = 512 << 20;
/// Room a read buffer keeps beyond the largest value, for the command line and the framing.
/// A request larger than `value_len_max + REQUEST_OVERHEAD_BYTES_MAX` closes the connection.
pub const REQUEST_OVERHEAD_BYTES_MAX: usize = 64 << 10;
/// Smallest `--output-buffer-limit`, in largest values: the soft limit (a quarter) then holds
/// one, and a reply of one value always fits between the soft and the hard limit.
pub const OUTPUT_BUFFER_LIMIT_VALUES_MIN: usize = 4;

/// A listener address, or `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listen(pub Option<SocketAddr>);

impl FromStr for Listen {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text.eq_ignore_ascii_case("off") {
            return Ok(Listen(None));
        }
        let mut addrs = text.to_socket_addrs().map_err(|err| {
            format!(
                "`{text}` is not an address: expected HOST:PORT (127.0.0.1:6379) or off ({err})"
            )
        })?;
        addrs
            .next()
            .map(|addr| Listen(Some(addr)))
            .ok_or_else(|| format!("`{text}` resolves to no address"))
    }
}

impl<'de> serde::Deserialize<'de> for Listen {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Eviction policy names, as flags and file values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EvictionArg {
    /// Refuse writes when full.
    None,
    /// Drop the oldest segment.
    Fifo,
    /// Drop a random segment.
    Random,
    /// Segcache merge: drop the oldest segment but keep its recently read items.
    Merge,
}

/// Which evicted items the flash tier takes, as flags and file values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FlashAdmissionArg {
    /// Every unexpired item evicted from memory (memcached's extstore).
    All,
    /// Only items read at least once since they were written.
    Fetched,
}

/// The flash tier as configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlashSettings {
    /// The file or block device.
    pub path: PathBuf,
    /// Bytes of it to use.
    pub size_bytes: u64,
    /// Which evicted items it takes.
    pub admission: FlashAdmission,
    /// Most bytes written per second (0: no cap).
    pub write_bytes_per_sec_max: u64,
    /// Bytes per region, if given.
    pub region_size_bytes: Option<u64>,
    /// Milliseconds a kernel thread per worker keeps polling the worker's flash read ring
    /// after its last read (io_uring `SQPOLL`); 0: the worker issues its reads itself.
    pub read_poll_idle_ms: u32,
}

impl FlashSettings {
    /// Bytes per region: as given, else the default or one segment, whichever is larger (a
    /// region holds the largest item a segment holds).
    pub fn region_size_bytes(&self, segment_size_bytes: u64) -> u64 {
        self.region_size_bytes
            .unwrap_or_else(|| FLASH_REGION_SIZE_BYTES_DEFAULT.max(segment_size_bytes))
    }
}

/// Where the index lives, as flags and file values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IndexPlacementArg {
    /// DRAM: fastest lookups; saved at a clean stop, rebuilt from the records after a crash.
    Dram,
    /// Files beside the pool (`<pool>.index/`): nothing to rebuild after a clean stop or a
    /// process crash. Needs --pool.
    Pool,
}

/// A durability level as written on the command line or in the file: `none`,
/// `interval=MS` or `sync`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DurabilityArg(pub Durability);

impl std::str::FromStr for DurabilityArg {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Durability::parse(text).map(DurabilityArg).ok_or_else(|| {
            format!("'{text}' is not a durability level: use none, interval=MS (MS > 0) or sync")
        })
    }
}

impl<'de> serde::Deserialize<'de> for DurabilityArg {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Log levels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Errors only.
    Error,
    /// Warnings and errors.
    Warn,
    /// Startup, shutdown and warnings.
    Info,
    /// Per-connection events.
    Debug,
    /// Everything.
    Trace,
}

impl LogLevel {
    /// The `tracing` filter directive.
    pub fn directive(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
            LogLevel::Trace => "trace",
        }
    }
}

/// Log formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One human-readable line per event.
    Text,
    /// One JSON object per line.
    Json,
}

/// `strata serve` options: the flags, and the schema of the `--config` TOML file.
#[derive(Clone, Debug, Default, clap::Args, serde::Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ServeOptions {
    /// TOML file with any of these options (key = the flag's name); flags override it.
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// memcached protocol listener, or `off` [default: 127.0.0.1:11211].
    #[arg(long, value_name = "ADDR")]
    pub memcache_listen: Option<Listen>,
    /// Redis (RESP) protocol listener, or `off` [default: 127.0.0.1:6379].
    #[arg(long, value_name = "ADDR")]
    pub resp_listen: Option<Listen>,
    /// HTTP listener for /metrics and /health, or `off` [default: 127.0.0.1:9121].
    #[arg(long, value_name = "ADDR")]
    pub admin_listen: Option<Listen>,
    /// Worker threads [default: the number of cores].
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Memory budget, pool and index together (256MiB, 4GiB) [default: 256MiB].
    #[arg(long, value_name = "SIZE", value_parser = strata_pool::size::parse_budget)]
    pub memory: Option<ByteSize>,
    /// Keep the data in this file (DAX, tmpfs or plain) instead of DRAM, and reopen it warm.
    #[arg(long, value_name = "PATH")]
    pub pool: Option<PathBuf>,
    /// Discard the existing pool file's contents instead of reopening them.
    #[arg(long)]
    #[serde(default)]
    pub fresh: bool,
    /// A flash tier below memory: items evicted from memory move to this file or block
    /// device (written in whole regions, direct I/O) and are read back from it.
    #[arg(long, value_name = "PATH")]
    pub flash: Option<PathBuf>,
    /// Bytes of --flash to use (a file is created or grown to it, every block reserved)
    /// [default: the size of an existing file or device].
    #[arg(long, value_name = "SIZE", value_parser = strata_pool::size::parse_budget)]
    pub flash_size: Option<ByteSize>,
    /// Which evicted items go to flash: all (memcached's extstore), or fetched (only items
    /// read since they were written, so one-hit wonders never wear the flash) [default: all].
    #[arg(long, value_enum)]
    pub flash_admission: Option<FlashAdmissionArg>,
    /// Most bytes written to flash per second; items evicted past it are dropped, as when
    /// flash is behind; 0: as fast as the device goes [default: 0].
    #[arg(long, value_name = "SIZE")]
    pub flash_write_rate: Option<ByteSize>,
    /// Bytes per flash region, the unit written and reclaimed whole (4 KiB multiple, at
    /// least --segment-size) [default: 4MiB, or --segment-size if larger].
    #[arg(long, value_name = "SIZE")]
    pub flash_region_size: Option<ByteSize>,
    /// Issue each worker's flash reads from a kernel thread of its own (io_uring SQPOLL), which
    /// keeps polling for this many milliseconds after the last read and then sleeps: the
    /// worker's core no longer pays for issuing reads (about 5 µs each on a virtual disk), and
    /// each polling thread spins a core while reads come. For machines with cores to spare;
    /// 0: the workers issue their reads [default: 0].
    #[arg(long, value_name = "MS")]
    pub flash_sqpoll_idle_ms: Option<u32>,
    /// Check every record a read touches (its CRC32C), not only those the pool's scrub has not
    /// checked yet since the start: for pools on memory not trusted to keep what was written.
    /// Costs about 15% of a small GET [default: off].
    #[arg(long)]
    #[serde(default)]
    pub validate_every_read: bool,
    /// Segment size (4 KiB multiple, at most 8 MiB) [default: the smallest that holds
    /// --max-value-size: 1028KiB].
    #[arg(long, value_name = "SIZE")]
    pub segment_size: Option<ByteSize>,
    /// What to drop when memory is full [default: merge].
    #[arg(long, value_enum)]
    pub eviction: Option<EvictionArg>,
    /// What an acknowledged write survives: none, interval=MS or sync [default: none].
    #[arg(long, value_name = "LEVEL")]
    pub durability: Option<DurabilityArg>,
    /// Where the hash index lives: dram, or pool (files beside --pool) [default: pool with
    /// --pool and --flash, so a crash keeps the flash tier; else dram].
    #[arg(long, value_enum)]
    pub index_placement: Option<IndexPlacementArg>,
    /// Most client connections [default: 1024].
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
    /// Largest value a client may store, up to 512MiB (Redis's proto-max-bulk-len); a string
    /// longer than a segment holds is kept in several records [default: 1MiB].
    #[arg(long, value_name = "SIZE")]
    pub max_value_size: Option<ByteSize>,
    /// Close client connections idle this many seconds; 0 never (Redis's timeout; CONFIG SET
    /// changes it) [default: 0].
    #[arg(long, value_name = "SECS")]
    pub idle_timeout: Option<u64>,
    /// Log commands that run at least this many microseconds in SLOWLOG; 0 logs every command,
    /// a negative value none (Redis's slowlog-log-slower-than; CONFIG SET changes it)
    /// [default: 10000].
    #[arg(long, value_name = "US", allow_negative_numbers = true)]
    pub slowlog_log_slower_than: Option<i64>,
    /// Entries SLOWLOG keeps, newest first (Redis's slowlog-max-len) [default: 128].
    #[arg(long, value_name = "N")]
    pub slowlog_max_len: Option<usize>,
    /// Cap on the memory tier within --memory: past it the tier evicts (or refuses writes under
    /// --eviction none) though the pool has room; at least two segments per shard and the
    /// cleaner's two (Redis's maxmemory; CONFIG SET changes it) [default: all of --memory].
    #[arg(long, value_name = "SIZE", value_parser = strata_pool::size::parse_budget)]
    pub maxmemory: Option<ByteSize>,
    /// Record commands that run at least this many milliseconds as latency events for LATENCY
    /// LATEST and HISTORY; 0 records none (Redis's latency-monitor-threshold; CONFIG SET
    /// changes it) [default: 0].
    #[arg(long, value_name = "MS")]
    pub latency_monitor_threshold: Option<u64>,
    /// Keep a run-time histogram per command for INFO latencystats and LATENCY HISTOGRAM:
    /// yes or no (Redis's latency-tracking; CONFIG SET changes it) [default: yes].
    #[arg(long, value_name = "BOOL", value_parser = clap::builder::BoolishValueParser::new())]
    pub latency_tracking: Option<bool>,
    /// Percentiles INFO latencystats reports, separated by single spaces (Redis's
    /// latency-tracking-info-percentiles; CONFIG SET changes it) [default: "50 99 99.9"].
    #[arg(long, value_name = "LIST")]
    pub latency_tracking_info_percentiles: Option<String>,
    /// Output a client may leave unread: past it the client is closed (Redis's
    /// client-output-buffer-limit hard limit); past a quarter its input waits; 0: no limit
    /// (CONFIG SET client-output-buffer-limit changes it) [default: 256MiB].
    #[arg(long, value_name = "SIZE")]
    pub output_buffer_limit: Option<ByteSize>,
    /// Output buffer memory all clients together may hold: past it the Redis client holding
    /// the most is closed and memcached multigets pause (Redis's maxmemory-clients); 0: no
    /// limit (CONFIG SET maxmemory-clients changes it) [default: --output-buffer-limit].
    #[arg(long, value_name = "SIZE")]
    pub client_output_memory: Option<ByteSize>,
    /// Password Redis clients must send with AUTH.
    #[arg(long, value_name = "PASS")]
    pub requirepass: Option<String>,
    /// memcached auth file (memcached's -Y): lines of user:password; a client authenticates
    /// with `set <key> 0 0 <n>` and the data `user password`.
    #[arg(long, value_name = "PATH")]
    pub memcache_auth_file: Option<PathBuf>,
    /// Serve memcached without authentication although --requirepass protects Redis.
    #[arg(long)]
    #[serde(default)]
    pub allow_unauthenticated_memcache: bool,
    /// Serve Redis without a password although --memcache-auth-file protects memcached.
    #[arg(long)]
    #[serde(default)]
    pub allow_unauthenticated_resp: bool,
    /// Log level [default: info].
    #[arg(long, value_enum)]
    pub log_level: Option<LogLevel>,
    /// Log format [default: text].
    #[arg(long, value_enum)]
    pub log_format: Option<LogFormat>,
    /// Accept the Redis DEBUG command, whose subcommands crash parts of the server on purpose:
    /// for tests only, never in production (Redis's enable-debug-command) [default: off].
    #[arg(long)]
    #[serde(default)]
    pub enable_debug_command: bool,
}

/// What the latency monitor and the per-command histograms start with (CONFIG SET changes
/// them while running).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LatencySettings {
    /// `latency-monitor-threshold`, milliseconds (0: off).
    pub monitor_threshold_ms: u64,
    /// `latency-tracking`.
    pub tracking: bool,
    /// `latency-tracking-info-percentiles`, `None` for Redis's default.
    pub percentiles: Option<Vec<f64>>,
}

impl Eq for LatencySettings {}

/// A configuration that failed validation: the message names the option and what to do.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// The validated configuration the server runs with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerConfig {
    /// memcached listener, if any.
    pub memcache_listen: Option<SocketAddr>,
    /// RESP listener, if any.
    pub resp_listen: Option<SocketAddr>,
    /// Admin HTTP listener, if any.
    pub admin_listen: Option<SocketAddr>,
    /// Worker threads.
    pub threads: usize,
    /// Memory budget (pool segments + index).
    pub memory_bytes: u64,
    /// Pool file, or `None` for DRAM.
    pub pool: Option<PathBuf>,
    /// Discard an existing pool.
    pub fresh: bool,
    /// The flash tier, if any.
    pub flash: Option<FlashSettings>,
    /// Validate every read's record.
    pub validate_every_read: bool,
    /// Segment size.
    pub segment_size_bytes: u64,
    /// Eviction policy.
    pub eviction: EvictionPolicy,
    /// Durability.
    pub durability: Durability,
    /// Where the index lives.
    pub index_placement: IndexPlacement,
    /// Most client connections.
    pub connections_max: usize,
    /// Largest value.
    pub value_len_max: usize,
    /// Idle timeout in seconds (0: never).
    pub idle_timeout_secs: u64,
    /// `slowlog-log-slower-than`, microseconds.
    pub slowlog_slower_than_us: i64,
    /// `slowlog-max-len`.
    pub slowlog_max_len: usize,
    /// `maxmemory`: the memory tier's cap, `None` for the whole pool.
    pub memory_limit_bytes: Option<u64>,
    /// The live settings of the latency monitor and histograms.
    pub latency: LatencySettings,
    /// The `--config` file, which CONFIG REWRITE rewrites.
    pub config_file: Option<PathBuf>,
    /// Output a connection's buffer may hold before the connection is closed.
    pub output_buffered_bytes_hard: usize,
    /// Output buffer memory all connections together may hold.
    pub client_output_bytes_max: usize,
    /// Redis AUTH password.
    pub requirepass: Option<String>,
    /// memcached auth file entries, read and checked at startup.
    pub memcache_auth: Option<Arc<Credentials>>,
    /// Run the memcached listener without authentication while Redis has a password.
    pub allow_unauthenticated_memcache: bool,
    /// Run the Redis listener without a password while memcached has an auth file.
    pub allow_unauthenticated_resp: bool,
    /// Log level.
    pub log_level: LogLevel,
    /// Log format.
    pub log_format: LogFormat,
    /// Whether the RESP `DEBUG` command runs.
    pub debug_command_enabled: bool,
}

impl ServeOptions {
    /// Reads `--config` (if given), lets the flags override it, applies defaults and validates.
    pub fn resolve(self) -> Result<ServerConfig, ConfigError> {
        let merged = match self.config.clone() {
            Some(path) => self.overriding(Self::read_file(&path)?),
            None => self,
        };
        merged.validate()
    }

    fn read_file(path: &std::path::Path) -> Result<ServeOptions, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|err| {
            ConfigError(format!("cannot read config file {}: {err}", path.display()))
        })?;
        toml::from_str(&text).map_err(|err| {
            ConfigError(format!("config file {}: {}", path.display(), err.message()))
        })
    }

    /// These options, with `file`'s where a flag was not given.
    fn overriding(self, file: ServeOptions) -> ServeOptions {
        ServeOptions {
            config: self.config,
            memcache_listen: self.memcache_listen.or(file.memcache_listen),
            resp_listen: self.resp_listen.or(file.resp_listen),
            admin_listen: self.admin_listen.or(file.admin_listen),
            threads: self.threads.or(file.threads),
            memory: self.memory.or(file.memory),
            pool: self.pool.or(file.pool),
            fresh: self.fresh || file.fresh,
            flash: self.flash.or(file.flash),
            flash_size: self.flash_size.or(file.flash_size),
            flash_admission: self.flash_admission.or(file.flash_admission),
            flash_write_rate: self.flash_write_rate.or(file.flash_write_rate),
            flash_region_size: self.flash_region_size.or(file.flash_region_size),
            flash_sqpoll_idle_ms: self.flash_sqpoll_idle_ms.or(file.flash_sqpoll_idle_ms),
            validate_every_read: self.validate_every_read || file.validate_every_read,
            segment_size: self.segment_size.or(file.segment_size),
            eviction: self.eviction.or(file.eviction),
            durability: self.durability.or(file.durability),
            index_placement: self.index_placement.or(file.index_placement),
            max_connections: self.max_connections.or(file.max_connections),
            max_value_size: self.max_value_size.or(file.max_value_size),
            idle_timeout: self.idle_timeout.or(file.idle_timeout),
            slowlog_log_slower_than: self
                .slowlog_log_slower_than
                .or(file.slowlog_log_slower_than),
            slowlog_max_len: self.slowlog_max_len.or(file.slowlog_max_len),
            maxmemory: self.maxmemory.or(file.maxmemory),
            latency_monitor_threshold: self
                .latency_monitor_threshold
                .or(file.latency_monitor_threshold),
            latency_tracking: self.latency_tracking.or(file.latency_tracking),
            latency_tracking_info_percentiles: self
                .latency_tracking_info_percentiles
                .or(file.latency_tracking_info_percentiles),
            output_buffer_limit: self.output_buffer_limit.or(file.output_buffer_limit),
            client_output_memory: self.client_output_memory.or(file.client_output_memory),
            requirepass: self.requirepass.or(file.requirepass),
            memcache_auth_file: self.memcache_auth_file.or(file.memcache_auth_file),
            allow_unauthenticated_memcache: self.allow_unauthenticated_memcache
                || file.allow_unauthenticated_memcache,
            allow_unauthenticated_resp: self.allow_unauthenticated_resp
                || file.allow_unauthenticated_resp,
            log_level: self.log_level.or(file.log_level),
            log_format: self.log_format.or(file.log_format),
            enable_debug_command: self.enable_debug_command || file.enable_debug_command,
        }
    }

    fn validate(self) -> Result<ServerConfig, ConfigError> {
        let [memcache_listen, resp_listen, admin_listen] = self.listeners()?;
        let memcache_auth = self
            .memcache_auth_file
            .as_deref()
            .map(Credentials::load)
            .transpose()
            .map_err(|error| ConfigError(format!("--memcache-auth-file: {error}")))?
            .map(Arc::new);
        let value_len_max = self.value_len_max();
        let (output_buffered_bytes_hard, client_output_bytes_max) = self.output_limits();
        let eviction = self.eviction_policy();
        let (slowlog_slower_than_us, slowlog_max_len) = self.slowlog();
        let flash = self.flash_settings()?;
        let latency = self.latency_settings()?;
        // A file pool with a flash tier keeps its index beside the pool unless told otherwise:
        // flash items are named only by the index, so an index rebuilt from the pool's records
        // after a crash would start the flash tier empty.
        let index_placement = match self.index_placement {
            Some(IndexPlacementArg::Pool) => IndexPlacement::Pool,
            Some(IndexPlacementArg::Dram) => IndexPlacement::Dram,
            None if self.pool.is_some() && flash.is_some() => IndexPlacement::Pool,
            None => IndexPlacement::Dram,
        };
        let config = ServerConfig {
            memcache_listen,
            resp_listen,
            admin_listen,
            threads: self.threads.unwrap_or_else(cores),
            memory_bytes: self.memory.map_or(MEMORY_BYTES_DEFAULT, |s| s.0),
            pool: self.pool,
            fresh: self.fresh,
            flash,
            validate_every_read: self.validate_every_read,
            // By default, the smallest segment that holds the largest value up to 1 MiB (with a
            // key of up to 250 bytes and every record field): 1 MiB + 4 KiB for the default. A
            // longer string is kept in several records.
            segment_size_bytes: self.segment_size.map_or_else(
                || {
                    let one_record = value_len_max.min(VALUE_LEN_MAX_DEFAULT as usize);
                    strata_engine::segment_size_bytes_for(one_record)
                },
                |s| s.0,
            ),
            eviction,
            durability: self.durability.map_or(Durability::None, |d| d.0),
            index_placement,
            connections_max: self.max_connections.unwrap_or(CONNECTIONS_MAX_DEFAULT),
            value_len_max,
            idle_timeout_secs: self.idle_timeout.unwrap_or(0),
            slowlog_slower_than_us,
            slowlog_max_len,
            memory_limit_bytes: self.maxmemory.map(|size| size.0),
            latency,
            config_file: self.config,
            output_buffered_bytes_hard,
            client_output_bytes_max,
            requirepass: self.requirepass.filter(|pass| !pass.is_empty()),
            memcache_auth,
            allow_unauthenticated_memcache: self.allow_unauthenticated_memcache,
            allow_unauthenticated_resp: self.allow_unauthenticated_resp,
            log_level: self.log_level.unwrap_or(LogLevel::Info),
            log_format: self.log_format.unwrap_or(LogFormat::Text),
            debug_command_enabled: self.enable_debug_command,
        };
        config.check()?;
        Ok(config)
    }
}

impl ServeOptions {
    /// The output limits, bytes: one client's (`--output-buffer-limit`) and all clients'
    /// together (`--client-output-memory`); 0 is none, as in Redis (the other still bounds).
    /// The largest value given, or the default.
    fn value_len_max(&self) -> usize {
        let given = self
            .max_value_size
            .map_or(VALUE_LEN_MAX_DEFAULT, |size| size.0);
        usize::try_from(given).unwrap_or(usize::MAX)
    }

    pub(crate) fn output_limits(&self) -> (usize, usize) {
        let value_len_max = self.value_len_max();
        let limit = |size: ByteSize| match size.0 {
            0 => usize::MAX,
            bytes => usize::try_from(bytes).unwrap_or(usize::MAX),
        };
        // The default holds a reply of the largest value between its soft and hard limits.
        let default = OUTPUT_BUFFERED_BYTES_HARD_DEFAULT
            .max(value_len_max.saturating_mul(OUTPUT_BUFFER_LIMIT_VALUES_MIN));
        let hard = self.output_buffer_limit.map_or(default, limit);
        // All clients together may hold what one client may: the default bounds the total
        // where it bounded each client, so one client alone meets the same limit as before.
        (hard, self.client_output_memory.map_or(hard, limit))
    }

    /// SLOWLOG's threshold (µs) and length, given or Redis's defaults.
    pub(crate) fn slowlog(&self) -> (i64, usize) {
        (
            self.slowlog_log_slower_than
                .unwrap_or(crate::slowlog::SLOWER_THAN_US_DEFAULT),
            self.slowlog_max_len
                .unwrap_or(crate::slowlog::MAX_LEN_DEFAULT),
        )
    }

    /// The eviction policy given, or merge.
    pub(crate) fn eviction_policy(&self) -> EvictionPolicy {
        eviction(self.eviction.unwrap_or(EvictionArg::Merge))
    }

    /// The memcached, RESP and admin listeners: given, or their defaults.
    fn listeners(&self) -> Result<[Option<SocketAddr>; 3], ConfigError> {
        let listen = |given: Option<Listen>, default: &str| {
            given
                .map_or_else(|| default.parse::<Listen>().map(|l| l.0), |l| Ok(l.0))
                .map_err(ConfigError)
        };
        Ok([
            listen(self.memcache_listen, MEMCACHE_LISTEN_DEFAULT)?,
            listen(self.resp_listen, RESP_LISTEN_DEFAULT)?,
            listen(self.admin_listen, ADMIN_LISTEN_DEFAULT)?,
        ])
    }

    /// The latency monitor's and histograms' settings.
    pub(crate) fn latency_settings(&self) -> Result<LatencySettings, ConfigError> {
        let percentiles = self
            .latency_tracking_info_percentiles
            .as_deref()
            .map(|text| {
                crate::resp_exec::parse_percentiles(text.as_bytes()).map_err(|why| {
                    ConfigError(format!("--latency-tracking-info-percentiles: {why}"))
                })
            })
            .transpose()?;
        Ok(LatencySettings {
            monitor_threshold_ms: self.latency_monitor_threshold.unwrap_or(0),
            tracking: self.latency_tracking.unwrap_or(true),
            percentiles,
        })
    }

    /// The flash tier's settings: none without `--flash`; the other flash options need it.
    fn flash_settings(&self) -> Result<Option<FlashSettings>, ConfigError> {
        let Some(path) = self.flash.clone() else {
            let given = [
                ("--flash-size", self.flash_size.is_some()),
                ("--flash-admission", self.flash_admission.is_some()),
                ("--flash-write-rate", self.flash_write_rate.is_some()),
                ("--flash-region-size", self.flash_region_size.is_some()),
                (
                    "--flash-sqpoll-idle-ms",
                    self.flash_sqpoll_idle_ms.is_some(),
                ),
            ];
            if let Some((flag, _)) = given.iter().find(|(_, set)| *set) {
                return Err(ConfigError(format!(
                    "{flag} configures the flash tier: give --flash PATH too"
                )));
            }
            return Ok(None);
        };
        let size_bytes = match self.flash_size {
            Some(size) => size.0,
            None => existing_size(&path).ok_or_else(|| {
                ConfigError(format!(
                    "--flash {}: give --flash-size SIZE (the file does not exist yet, or its \
                     size cannot be read)",
                    path.display()
                ))
            })?,
        };
        Ok(Some(FlashSettings {
            path,
            size_bytes,
            admission: match self.flash_admission {
                Some(FlashAdmissionArg::Fetched) => FlashAdmission::Fetched,
                Some(FlashAdmissionArg::All) | None => FlashAdmission::All,
            },
            write_bytes_per_sec_max: self.flash_write_rate.map_or(0, |r| r.0),
            region_size_bytes: self.flash_region_size.map(|r| r.0),
            read_poll_idle_ms: self.flash_sqpoll_idle_ms.unwrap_or(0),
        }))
    }
}

/// The size of an existing file or block device (a block device's `metadata().len()` is 0,
/// so its end is found by seeking).
fn existing_size(path: &std::path::Path) -> Option<u64> {
    use std::io::Seek;
    let mut file = std::fs::File::open(path).ok()?;
    let len = file.seek(std::io::SeekFrom::End(0)).ok()?;
    (len > 0).then_some(len)
}

fn eviction(arg: EvictionArg) -> EvictionPolicy {
    match arg {
        EvictionArg::None => EvictionPolicy::None,
        EvictionArg::Fifo => EvictionPolicy::Fifo,
        EvictionArg::Random => EvictionPolicy::Random,
        EvictionArg::Merge => EvictionPolicy::Merge,
    }
}

/// Cores available to this process (1 if unknown).
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

impl ServerConfig {
    /// Checks ranges and relations; messages name the flag and the accepted range.
    fn check(&self) -> Result<(), ConfigError> {
        let fail = |message: String| Err(ConfigError(message));
        if self.threads == 0 || self.threads > THREADS_MAX {
            return fail(format!(
                "--threads must be 1..={THREADS_MAX}, got {}",
                self.threads
            ));
        }
        if self.connections_max == 0 || self.connections_max > CONNECTIONS_MAX_LIMIT {
            return fail(format!(
                "--max-connections must be 1..={CONNECTIONS_MAX_LIMIT}, got {}",
                self.connections_max
            ));
        }
        if self.index_placement == IndexPlacement::Pool && self.pool.is_none() {
            return fail(
                "--index-placement pool keeps the index in files beside the pool: give --pool PATH"
                    .into(),
            );
        }
        self.engine_config().validate().map_err(|message| {
            ConfigError(format!(
                "--memory {} / --segment-size {}: {message}",
                ByteSize(self.memory_bytes),
                ByteSize(self.segment_size_bytes)
            ))
        })?;
        let value_len_max = self.value_len_max as u64;
        if !(VALUE_LEN_MAX_MIN..=VALUE_LEN_MAX_LIMIT).contains(&value_len_max) {
            return fail(format!(
                "--max-value-size must be {} ..= {} (Redis's proto-max-bulk-len), got {}",
                ByteSize(VALUE_LEN_MAX_MIN),
                ByteSize(VALUE_LEN_MAX_LIMIT),
                ByteSize(value_len_max)
            ));
        }
        self.check_output_limits()?;
        if self.memcache_listen.is_none() && self.resp_listen.is_none() {
            return fail(
                "--memcache-listen and --resp-listen are both off: nothing to serve".into(),
            );
        }
        self.check_auth()
    }

    /// Refuses one protocol protected by authentication while the other, serving the same
    /// keys, is open without any: the password would protect nothing. The message says the
    /// three ways out.
    fn check_auth(&self) -> Result<(), ConfigError> {
        let (Some(memcache), Some(resp)) = (self.memcache_listen, self.resp_listen) else {
            return Ok(());
        };
        let (resp_locked, memcache_locked) =
            (self.requirepass.is_some(), self.memcache_auth.is_some());
        if resp_locked && !memcache_locked && !self.allow_unauthenticated_memcache {
            return Err(ConfigError(format!(
                "--requirepass protects the Redis listener ({resp}), but the memcached listener \
                 ({memcache}) serves the same keys without authentication, so anyone who reaches \
                 it can read, write and flush them; give --memcache-auth-file PATH (lines of \
                 user:password), or turn that listener off with --memcache-listen off, or pass \
                 --allow-unauthenticated-memcache to run it open anyway"
            )));
        }
        if memcache_locked && !resp_locked && !self.allow_unauthenticated_resp {
            return Err(ConfigError(format!(
                "--memcache-auth-file protects the memcached listener ({memcache}), but the Redis \
                 listener ({resp}) serves the same keys without a password, so anyone who \
                 reaches it can read, write and flush them; give --requirepass PASSWORD, or \
                 turn that listener off with --resp-listen off, or pass \
                 --allow-unauthenticated-resp to run it open anyway"
            )));
        }
        Ok(())
    }

    /// Whether clients of `protocol` must authenticate.
    pub fn authenticates(&self, protocol: crate::sessions::Protocol) -> bool {
        match protocol {
            crate::sessions::Protocol::Memcache => self.memcache_auth.is_some(),
            crate::sessions::Protocol::Resp => self.requirepass.is_some(),
        }
    }

    /// Each output limit must hold a few of the largest values: a smaller one would close
    /// clients (or pause multigets) for ordinary replies.
    fn check_output_limits(&self) -> Result<(), ConfigError> {
        let output_limit_min = self.value_len_max * OUTPUT_BUFFER_LIMIT_VALUES_MIN;
        let limits = [
            ("--output-buffer-limit", self.output_buffered_bytes_hard),
            ("--client-output-memory", self.client_output_bytes_max),
        ];
        for (flag, bytes) in limits {
            if bytes < output_limit_min {
                return Err(ConfigError(format!(
                    "{flag} ({}) must be at least {OUTPUT_BUFFER_LIMIT_VALUES_MIN} times \
                     --max-value-size ({}): raise it to {} or more",
                    ByteSize(bytes as u64),
                    ByteSize(self.value_len_max as u64),
                    ByteSize(output_limit_min as u64)
                )));
            }
        }
        Ok(())
    }

    /// The engine's configuration.
    pub fn engine_config(&self) -> EngineConfig {
        EngineConfig {
            memory_bytes: self.memory_bytes,
            segment_size_bytes: self.segment_size_bytes,
            shard_count: strata_engine::shard_count_for(self.memory_bytes, self.segment_size_bytes),
            pool: self
                .pool
                .clone()
                .map_or(PoolLocation::Dram, PoolLocation::File),
            fresh: self.fresh,
            eviction: self.eviction,
            value_len_max: self.value_len_max,
            durability: self.durability,
            index_placement: self.index_placement,
            // The server acknowledges a batch only after `Engine::commit` (see connection.rs).
            group_commit: true,
            validate_every_read: self.validate_every_read,
            flash: self.flash.as_ref().map(|flash| FlashConfig {
                medium: FlashMedium::File {
                    path: flash.path.clone(),
                    size_bytes: flash.size_bytes,
                },
                region_size_bytes: flash.region_size_bytes(self.segment_size_bytes),
                admission: flash.admission,
                write_bytes_per_sec_max: flash.write_bytes_per_sec_max,
                read_delay_for_tests: std::time::Duration::ZERO,
            }),
            ..EngineConfig::default()
        }
    }

    /// The settings sessions see, with the ports the listeners actually bound.
    pub fn settings(&self, memcache_port: Option<u16>, resp_port: Option<u16>) -> Settings {
        Settings {
            value_len_max: self.value_len_max,
            requirepass: self.requirepass.clone(),
            memcache_auth: self.memcache_auth.clone(),
            threads: self.threads,
            connections_max: self.connections_max,
            idle_timeout_secs: self.idle_timeout_secs,
            slowlog_slower_than_us: self.slowlog_slower_than_us,
            slowlog_max_len: self.slowlog_max_len,
            memcache_port,
            resp_port,
            durability: self.durability.name(),
            output: OutputLimits::new(self.output_buffered_bytes_hard),
            debug_command_enabled: self.debug_command_enabled,
            client_output_bytes_max: self.client_output_bytes_max,
            latency: self.latency.clone(),
            config_file: self.config_file.clone(),
            ..Settings::default()
        }
    }

    /// Largest read buffer of a connection: the largest value plus room for its command.
    pub fn read_buffer_bytes_max(&self) -> usize {
        self.value_len_max + REQUEST_OVERHEAD_BYTES_MAX
    }
}

pub mod rewrite;

#[cfg(test)]
mod tests;
