//! Runs the generator against a real memcached and a real Redis on free loopback ports and
//! checks that the report adds up: every request answered, hits + misses = GET keys sent,
//! every SET acknowledged, no error replies, and the preload and read-back see every key.
//!
//! The servers are Debian's; if they are missing the test fails and says how to install them
//! (see crates/bench/README.md). Each server is owned by a `ServerProcess`, whose `Drop` kills
//! it, so a failing assertion never leaves one running.

use std::path::PathBuf;
use strata_bench::compare::servers::{
    ServerProcess, ServerResources, ServerSpec, MEMCACHED_COMMAND, REDIS_COMMAND,
};
use strata_bench::protocol::Protocol;
use strata_bench::report::PhaseReport;
use strata_bench::{BenchArgs, Report};

mod common;

const KEYSPACE: u64 = 2000;

/// A reference server this test started, with the file its output goes to.
struct Started {
    process: ServerProcess,
    log: PathBuf,
}

fn start(name: &str, program: &str, command: &str, protocols: Vec<Protocol>) -> Started {
    common::require(program);
    let spec = ServerSpec {
        name: name.into(),
        command: command.into(),
        protocols,
        is_peer: true,
        flash_args: None,
    };
    let resources = ServerResources {
        threads: 1,
        memory_mib: 64,
        cpu: 0,
    };
    let log = std::env::temp_dir().join(format!(
        "strata-bench-test-{name}-{}.log",
        std::process::id()
    ));
    let process = ServerProcess::start(&spec, resources, &log).expect("server starts");
    Started { process, log }
}

/// Runs the generator against `server`; a failed run panics with whether the server is still
/// running and what it printed.
fn bench(server: &mut Started, protocol: Protocol, extra: &[&str]) -> Report {
    let target = format!("127.0.0.1:{}", server.process.port(protocol));
    let keyspace = KEYSPACE.to_string();
    let mut argv = vec![
        "bench",
        "--target",
        &target,
        "--protocol",
        protocol.name(),
        "--connections",
        "4",
        "--pipeline",
        "4",
        "--keyspace",
        &keyspace,
        "--warmup-secs",
        "0.2",
        "--duration-secs",
        "1",
        "--value-size",
        "10-100",
    ];
    argv.extend_from_slice(extra);
    let args = BenchArgs::parse_from_args(argv).expect("valid arguments");
    strata_bench::run(&args).unwrap_or_else(|error| {
        let exited = server.process.exited();
        let output = std::fs::read_to_string(&server.log).unwrap_or_default();
        panic!("run failed: {error}; server exited: {exited:?}; its output:\n{output}")
    })
}

fn check_measured(phase: &PhaseReport) {
    let c = &phase.counts;
    assert!(c.is_consistent(), "{c:?}");
    assert!(
        c.requests_sent > 0 && c.gets_sent > 0 && c.sets_sent > 0,
        "{c:?}"
    );
    assert_eq!(c.hits + c.misses, c.get_keys_sent);
    assert_eq!(c.sets_stored, c.sets_sent, "every SET acknowledged");
    assert_eq!((c.errors, c.dropped), (0, 0));
    assert_eq!(c.misses, 0, "every key was preloaded");
    assert_eq!(phase.latency.count, c.requests_completed);
    assert_eq!(
        phase.get_latency.count + phase.set_latency.count,
        c.requests_completed
    );
    assert!(
        phase.latency.p50_us <= phase.latency.p99_us
            && phase.latency.p99_us <= phase.latency.max_us
    );
    assert!(phase.client_cpu_secs >= 0.0);
}

fn check_full_run(report: &Report) {
    let preload = report.preload.as_ref().expect("preload ran");
    assert_eq!(preload.counts.sets_stored, KEYSPACE);
    assert!(preload.counts.is_consistent());
    check_measured(report.measured.as_ref().expect("measured phase ran"));
    let readback = report.readback.as_ref().expect("read-back ran");
    assert_eq!(readback.counts.hits, KEYSPACE, "every key read back");
    assert!(readback.counts.is_consistent());
    assert!(report
        .measured
        .as_ref()
        .unwrap()
        .server_cpu_us_per_request
        .is_some());
}

#[test]
fn memcached_text_and_meta_counts_add_up() {
    let mut server = start(
        "memcached",
        "memcached",
        MEMCACHED_COMMAND,
        vec![Protocol::MemcacheText],
    );
    let pid = server.process.pid.to_string();
    let json = std::env::temp_dir().join(format!("strata-bench-test-{}.json", std::process::id()));
    let json_arg = json.to_str().unwrap().to_owned();
    let text = bench(
        &mut server,
        Protocol::MemcacheText,
        &[
            "--preload",
            "--readback",
            "--server-pid",
            &pid,
            "--json",
            &json_arg,
        ],
    );
    check_full_run(&text);
    let parsed: Report = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(
        parsed.measured.unwrap().counts,
        text.measured.unwrap().counts
    );
    std::fs::remove_file(json).ok();
    let meta = bench(
        &mut server,
        Protocol::MemcacheMeta,
        &[
            "--preload",
            "--readback",
            "--server-pid",
            &pid,
            "--batch-keys",
            "10",
        ],
    );
    check_full_run(&meta);
    let multi = bench(
        &mut server,
        Protocol::MemcacheText,
        &["--batch-keys", "100", "--ratio", "1:1"],
    );
    check_measured(multi.measured.as_ref().unwrap());
    let open = bench(
        &mut server,
        Protocol::MemcacheText,
        &["--rate", "2000", "--key-dist", "zipf"],
    );
    check_measured(open.measured.as_ref().unwrap());
}

#[test]
fn redis_counts_add_up() {
    let mut server = start("redis", "redis-server", REDIS_COMMAND, vec![Protocol::Resp]);
    let pid = server.process.pid.to_string();
    let single = bench(
        &mut server,
        Protocol::Resp,
        &[
            "--preload",
            "--readback",
            "--server-pid",
            &pid,
            "--ttl-secs",
            "600",
        ],
    );
    check_full_run(&single);
    let multi = bench(
        &mut server,
        Protocol::Resp,
        &["--batch-keys", "50", "--threads", "2"],
    );
    check_measured(multi.measured.as_ref().unwrap());
    let open = bench(
        &mut server,
        Protocol::Resp,
        &["--rate", "3000", "--arrival", "uniform"],
    );
    let measured = open.measured.as_ref().unwrap();
    check_measured(measured);
    assert_eq!(measured.offered_per_sec, Some(3000.0));
}
