//! Defaults, merging and validation of `strata serve` options.

use std::io::Write;

use clap::Parser;

use super::*;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    options: ServeOptions,
}

fn parse(args: &[&str]) -> Result<ServerConfig, String> {
    let cli = Cli::try_parse_from(std::iter::once("serve").chain(args.iter().copied()))
        .map_err(|err| err.to_string())?;
    cli.options.resolve().map_err(|err| err.0)
}

#[test]
fn embedded_defaults_are_valid_and_loopback_only() {
    let config = parse(&[]).expect("defaults are valid");
    for addr in [
        config.memcache_listen,
        config.resp_listen,
        config.admin_listen,
    ] {
        assert!(addr.expect("on by default").ip().is_loopback());
    }
    assert_eq!(config.memory_bytes, MEMORY_BYTES_DEFAULT);
    assert_eq!(config.connections_max, CONNECTIONS_MAX_DEFAULT);
    assert_eq!(config.eviction, EvictionPolicy::Merge);
    assert!(config.threads >= 1);
    assert_eq!(config.pool, None);
}

#[test]
fn flags_are_parsed() {
    let config = parse(&[
        "--memory",
        "64mb",
        "--threads",
        "3",
        "--resp-listen",
        "off",
        "--max-value-size",
        "512KiB",
        "--eviction",
        "fifo",
        "--durability",
        "sync",
        "--idle-timeout",
        "30",
        "--requirepass",
        "secret",
        "--log-format",
        "json",
        "--enable-debug-command",
    ])
    .expect("valid");
    assert_eq!(config.memory_bytes, 64 << 20);
    assert_eq!(config.threads, 3);
    assert_eq!(config.resp_listen, None);
    assert_eq!(config.value_len_max, 512 << 10);
    assert_eq!(config.eviction, EvictionPolicy::Fifo);
    assert_eq!(config.durability, Durability::Sync);
    assert_eq!(config.idle_timeout_secs, 30);
    assert_eq!(config.requirepass.as_deref(), Some("secret"));
    assert_eq!(config.log_format, LogFormat::Json);
    assert!(config.debug_command_enabled);
}

#[test]
fn the_index_placement_is_parsed_and_needs_a_pool_file() {
    let config = parse(&["--pool", "/dev/shm/x.pool", "--index-placement", "pool"]).expect("valid");
    assert_eq!(config.index_placement, IndexPlacement::Pool);
    assert_eq!(config.engine_config().index_placement, IndexPlacement::Pool);
    assert_eq!(
        parse(&[]).expect("defaults").index_placement,
        IndexPlacement::Dram
    );
    let err = parse(&["--index-placement", "pool"]).unwrap_err();
    assert!(
        err.contains("--index-placement pool") && err.contains("--pool"),
        "{err}"
    );
    // A file pool with a flash tier keeps the index in the pool unless told otherwise (so a
    // crash keeps the flash tier); a DRAM pool, or no flash, keeps it in DRAM.
    let flash = ["--flash", "/tmp/x.flash", "--flash-size", "1GiB"];
    let with = |extra: &[&str]| {
        let args: Vec<&str> = flash.iter().chain(extra).copied().collect();
        parse(&args).expect("valid").index_placement
    };
    assert_eq!(with(&["--pool", "/dev/shm/x.pool"]), IndexPlacement::Pool);
    assert_eq!(
        with(&["--pool", "/dev/shm/x.pool", "--index-placement", "dram"]),
        IndexPlacement::Dram
    );
    assert_eq!(with(&[]), IndexPlacement::Dram);
    assert_eq!(
        parse(&["--pool", "/dev/shm/x.pool"])
            .expect("valid")
            .index_placement,
        IndexPlacement::Dram
    );
}

#[test]
fn the_output_buffer_limit_sets_both_output_limits() {
    let defaults = parse(&[]).expect("defaults");
    assert_eq!(
        defaults.output_buffered_bytes_hard,
        OUTPUT_BUFFERED_BYTES_HARD_DEFAULT
    );
    assert_eq!(
        defaults.settings(None, None).output,
        Settings::default().output,
        "the server and the sessions' default settings agree"
    );
    let config = parse(&["--output-buffer-limit", "8MiB"]).expect("valid");
    let output = config.settings(None, None).output;
    assert_eq!(output.buffered_bytes_hard, 8 << 20);
    assert_eq!(output.buffered_bytes_soft, 2 << 20);
    // Four largest values is the least: the soft limit holds one.
    let config = parse(&[
        "--max-value-size",
        "256KiB",
        "--output-buffer-limit",
        "1MiB",
    ]);
    assert_eq!(
        config.expect("valid").settings(None, None).output,
        OutputLimits::new(1 << 20)
    );
}

#[test]
fn the_client_output_memory_defaults_to_the_output_buffer_limit() {
    let defaults = parse(&[]).expect("defaults");
    assert_eq!(defaults.client_output_bytes_max, 256 << 20);
    assert_eq!(
        defaults.settings(None, None).client_output_bytes_max,
        Settings::default().client_output_bytes_max,
        "the server and the sessions' default settings agree"
    );
    let raised = parse(&["--output-buffer-limit", "1GiB"]).expect("valid");
    assert_eq!(
        raised.client_output_bytes_max,
        1 << 30,
        "follows the per-client limit"
    );
    let set = parse(&[
        "--output-buffer-limit",
        "1GiB",
        "--client-output-memory",
        "64MiB",
    ]);
    let settings = set.expect("valid").settings(None, None);
    assert_eq!(settings.client_output_bytes_max, 64 << 20);
    assert_eq!(settings.output.buffered_bytes_hard, 1 << 30);
    let mut file = tempfile();
    writeln!(file.1, "client-output-memory = \"32MiB\"").expect("write");
    let path = file.0.to_str().expect("utf-8 path");
    let config = parse(&["--config", path]).expect("valid");
    std::fs::remove_file(&file.0).expect("remove");
    assert_eq!(config.client_output_bytes_max, 32 << 20);
}

#[test]
fn file_keys_are_flag_names_and_flags_override_them() {
    let mut file = tempfile();
    writeln!(
        file.1,
        "memory = \"128MiB\"\nthreads = 2\nadmin-listen = \"off\"\nmax-connections = 10\n\
         segment-size = 2097152\neviction = \"random\"\nfresh = true\n\
         enable-debug-command = true"
    )
    .expect("write");
    let path = file.0.to_str().expect("utf-8 path");
    let config = parse(&["--config", path, "--threads", "1"]).expect("valid");
    assert_eq!(config.memory_bytes, 128 << 20);
    assert_eq!(config.threads, 1, "the flag wins");
    assert_eq!(config.admin_listen, None);
    assert_eq!(config.connections_max, 10);
    assert_eq!(config.segment_size_bytes, 2 << 20);
    assert_eq!(config.eviction, EvictionPolicy::Random);
    assert!(config.fresh);
    assert!(config.debug_command_enabled);
    assert!(config.settings(None, None).debug_command_enabled);
    assert!(!parse(&[]).expect("defaults").debug_command_enabled);
    std::fs::remove_file(&file.0).expect("remove");
}

/// The default segment holds a value of exactly `--max-value-size`, up to 1 MiB, with a
/// 250-byte key and every record field (issue 10, finding 7); a longer string takes several
/// records, so a larger limit keeps the segment and widens the default output limit.
#[test]
fn the_default_segment_holds_the_largest_value_up_to_one_mib() {
    let config = parse(&[]).expect("defaults");
    assert_eq!(config.segment_size_bytes, (1 << 20) + 4096);
    let config = parse(&["--max-value-size", "512KiB"]).expect("valid");
    assert_eq!(config.segment_size_bytes, (512 << 10) + 4096);
    let config = parse(&["--max-value-size", "512MiB"]).expect("valid");
    assert_eq!(config.segment_size_bytes, (1 << 20) + 4096);
    assert_eq!(config.value_len_max, 512 << 20);
    assert_eq!(
        config.output_buffered_bytes_hard,
        2 << 30,
        "four of the largest value"
    );
    let config = parse(&["--segment-size", "1MiB"]).expect("a 1 MiB value takes two records");
    assert_eq!(config.value_len_max, 1 << 20);
}

#[test]
fn bad_values_are_refused_with_the_flag_named() {
    for (args, needle) in [
        (&["--threads", "0"][..], "--threads"),
        (&["--max-connections", "0"], "--max-connections"),
        (&["--memory", "1MiB"], "--memory"),
        (&["--memory", "lots"], "--memory"),
        (&["--segment-size", "5000"], "segment size"),
        (&["--max-value-size", "513MiB"], "512 MiB"),
        (&["--max-value-size", "10"], "--max-value-size"),
        (&["--memcache-listen", "nowhere"], "--memcache-listen"),
        (
            &["--memcache-listen", "off", "--resp-listen", "off"],
            "nothing to serve",
        ),
        (&["--eviction", "lru"], "--eviction"),
        (&["--output-buffer-limit", "3MiB"], "--output-buffer-limit"),
        (
            &["--client-output-memory", "3MiB"],
            "--client-output-memory",
        ),
        (
            &[
                "--max-value-size",
                "512KiB",
                "--output-buffer-limit",
                "1MiB",
            ],
            "--max-value-size",
        ),
    ] {
        let message = parse(args).expect_err("invalid");
        assert!(message.contains(needle), "{args:?}: {message}");
    }
}

#[test]
fn unknown_file_keys_are_refused() {
    let mut file = tempfile();
    writeln!(file.1, "memroy = \"1GiB\"").expect("write");
    let path = file.0.to_str().expect("utf-8 path");
    let message = parse(&["--config", path]).expect_err("unknown key");
    assert!(message.contains("memroy"), "{message}");
    std::fs::remove_file(&file.0).expect("remove");
}

fn tempfile() -> (std::path::PathBuf, std::fs::File) {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("strata-config-{}-{n}.toml", std::process::id()));
    let file = std::fs::File::create(&path).expect("create temp file");
    (path, file)
}

#[test]
fn the_shipped_example_config_is_valid() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../config/strata.toml");
    let config = parse(&["--config", path]).expect("config/strata.toml is valid");
    assert_eq!(
        config.config_file.as_deref(),
        Some(std::path::Path::new(path))
    );
    assert_eq!(
        ServerConfig {
            config_file: None,
            ..config
        },
        parse(&[]).expect("defaults"),
        "the example only shows defaults"
    );
}

#[test]
fn every_key_shown_in_the_example_config_is_accepted() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../config/strata.toml");
    let example = std::fs::read_to_string(path).expect("read example");
    let mut file = tempfile();
    // The example's auth file path does not exist here: a real one stands in for it.
    let auth_file = AuthFile::new(b"user:password\n");
    let mut keys = 0;
    for line in example.lines() {
        let Some(setting) = line.strip_prefix("# ") else {
            continue;
        };
        let key = setting.split(" = ").next().unwrap_or_default();
        if setting.contains(" = ") && key.chars().all(|c| c.is_ascii_lowercase() || c == '-') {
            if key == "memcache-auth-file" {
                writeln!(file.1, "{key} = \"{}\"", auth_file.path()).expect("write");
            } else {
                writeln!(file.1, "{setting}").expect("write");
            }
            keys += 1;
        }
    }
    assert!(keys >= 21, "found {keys} keys");
    let message = parse(&["--config", file.0.to_str().expect("utf-8")]).map(|_| ());
    std::fs::remove_file(&file.0).expect("remove");
    message.expect("every example key is valid");
}

/// A temporary auth file holding `contents`, removed on drop.
struct AuthFile(std::path::PathBuf);

impl AuthFile {
    fn new(contents: &[u8]) -> AuthFile {
        let (path, mut file) = tempfile();
        file.write_all(contents).expect("write");
        AuthFile(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("utf-8 path")
    }
}

impl Drop for AuthFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn the_memcache_auth_file_is_read_at_startup() {
    let file = AuthFile::new(b"foo:bar\n");
    let config =
        parse(&["--memcache-auth-file", file.path(), "--requirepass", "x"]).expect("valid");
    let credentials = config.memcache_auth.clone().expect("loaded");
    assert!(credentials.check(b"foo", b"bar"));
    assert!(config.authenticates(crate::sessions::Protocol::Memcache));
    let settings = config.settings(None, None);
    assert!(settings
        .memcache_auth
        .expect("passed on")
        .check(b"foo", b"bar"));
    assert_eq!(parse(&[]).expect("defaults").memcache_auth, None);
}

#[test]
fn a_bad_auth_file_stops_the_start_naming_the_file_and_the_line() {
    let file = AuthFile::new(b"foo:bar\nnocolon\n");
    let message = parse(&["--memcache-auth-file", file.path(), "--resp-listen", "off"])
        .expect_err("malformed");
    for needle in [
        "--memcache-auth-file",
        file.path(),
        "line 2",
        "user:password",
    ] {
        assert!(message.contains(needle), "{needle:?} not in: {message}");
    }
    let empty = AuthFile::new(b"");
    let message =
        parse(&["--memcache-auth-file", empty.path(), "--resp-listen", "off"]).expect_err("empty");
    assert!(
        message.contains("empty") && message.contains(empty.path()),
        "{message}"
    );
    let message = parse(&[
        "--memcache-auth-file",
        "/nonexistent/auth",
        "--resp-listen",
        "off",
    ])
    .expect_err("missing");
    assert!(
        message.contains("cannot read") && message.contains("/nonexistent/auth"),
        "{message}"
    );
}

#[test]
fn one_protocol_protected_and_the_other_open_is_refused() {
    let message = parse(&["--requirepass", "x"]).expect_err("memcached open");
    for needle in [
        "--requirepass",
        MEMCACHE_LISTEN_DEFAULT,
        "--memcache-auth-file PATH",
        "--memcache-listen off",
        "--allow-unauthenticated-memcache",
    ] {
        assert!(message.contains(needle), "{needle:?} not in: {message}");
    }
    let file = AuthFile::new(b"foo:bar\n");
    let message = parse(&["--memcache-auth-file", file.path()]).expect_err("Redis open");
    for needle in [
        "--memcache-auth-file",
        RESP_LISTEN_DEFAULT,
        "--requirepass PASSWORD",
        "--resp-listen off",
        "--allow-unauthenticated-resp",
    ] {
        assert!(message.contains(needle), "{needle:?} not in: {message}");
    }
    // Each way out the messages name.
    for args in [
        &["--requirepass", "x", "--memcache-auth-file", file.path()][..],
        &["--requirepass", "x", "--memcache-listen", "off"],
        &["--requirepass", "x", "--allow-unauthenticated-memcache"],
        &["--memcache-auth-file", file.path(), "--resp-listen", "off"],
        &[
            "--memcache-auth-file",
            file.path(),
            "--allow-unauthenticated-resp",
        ],
    ] {
        parse(args).unwrap_or_else(|message| panic!("{args:?}: {message}"));
    }
    // An override only covers its own protocol.
    let message =
        parse(&["--requirepass", "x", "--allow-unauthenticated-resp"]).expect_err("wrong override");
    assert!(
        message.contains("--allow-unauthenticated-memcache"),
        "{message}"
    );
}

#[test]
fn the_overrides_are_file_keys_too() {
    let mut file = tempfile();
    writeln!(
        file.1,
        "requirepass = \"x\"\nallow-unauthenticated-memcache = true"
    )
    .expect("write");
    let config = parse(&["--config", file.0.to_str().expect("utf-8")]);
    std::fs::remove_file(&file.0).expect("remove");
    assert!(config.expect("valid").allow_unauthenticated_memcache);
}

#[test]
fn the_flash_tier_is_configured_from_flags_or_the_file() {
    assert_eq!(
        parse(&[]).expect("defaults").flash,
        None,
        "no flash unless asked"
    );
    let config = parse(&[
        "--flash",
        "/dev/nvme0n1",
        "--flash-size",
        "64GiB",
        "--flash-admission",
        "fetched",
        "--flash-write-rate",
        "100MiB",
        "--flash-sqpoll-idle-ms",
        "50",
    ])
    .expect("valid");
    let flash = config.flash.clone().expect("a flash tier");
    assert_eq!(flash.path, std::path::PathBuf::from("/dev/nvme0n1"));
    assert_eq!(flash.size_bytes, 64 << 30);
    assert_eq!(flash.admission, strata_engine::FlashAdmission::Fetched);
    assert_eq!(flash.write_bytes_per_sec_max, 100 << 20);
    assert_eq!(flash.read_poll_idle_ms, 50);
    let engine = config.engine_config().flash.expect("passed to the engine");
    assert_eq!(
        engine.region_size_bytes,
        strata_engine::FLASH_REGION_SIZE_BYTES_DEFAULT.max(config.segment_size_bytes)
    );

    let mut file = tempfile();
    writeln!(
        file.1,
        "flash = \"/tmp/tier.flash\"\nflash-size = \"1GiB\"\nflash-region-size = \"8MiB\""
    )
    .expect("write");
    let path = file.0.to_str().expect("utf-8 path");
    let config = parse(&["--config", path, "--flash-size", "2GiB"]).expect("valid");
    let flash = config.flash.expect("from the file");
    assert_eq!(flash.size_bytes, 2 << 30, "the flag wins");
    assert_eq!(flash.region_size_bytes, Some(8 << 20));
    assert_eq!(
        flash.read_poll_idle_ms, 0,
        "workers issue their reads unless asked"
    );
    std::fs::remove_file(&file.0).expect("remove");

    let message = parse(&["--flash-admission", "all"]).expect_err("needs --flash");
    assert!(message.contains("give --flash PATH too"), "{message}");
    let message = parse(&["--flash-sqpoll-idle-ms", "10"]).expect_err("needs --flash");
    assert!(message.contains("--flash-sqpoll-idle-ms"), "{message}");
    assert!(message.contains("give --flash PATH too"), "{message}");
    let message = parse(&["--flash-sqpoll-idle-ms", "-1"]).expect_err("not a count");
    assert!(
        message.contains("-1") || message.contains("invalid"),
        "{message}"
    );
}
