//! The `restart` scenario kind end to end against real memcached and Redis, on a tiny key space:
//! memcached's `-e` restart is warm after SIGUSR1 and cold after SIGKILL; Redis reloads its SAVE
//! dump after both; strata's command points at a missing binary and reads "not run".
//!
//! Needs Debian's memcached and redis-server (see crates/bench/README.md).

use clap::Parser;
use strata_bench::compare::restart::StopKind;
use strata_bench::compare::servers::program_exists;
use strata_bench::compare::{run_compare, CompareArgs};

#[derive(Parser)]
struct Wrapper {
    #[command(flatten)]
    args: CompareArgs,
}

const SCENARIO: &str = r#"
name = "tiny-restart"
title = "tiny restart scenario"
kind = "restart"
protocols = ["memcache-text", "resp"]
repeats = 1
[restart]
dir = "/tmp"
stops = ["clean", "kill"]
memory_mib = 64
[load]
connections = 2
pipeline = 4
keyspace = 500
duration_secs = 0
"#;

#[test]
fn restart_scenario_times_warm_restarts_and_reports_cold_ones() {
    for program in ["memcached", "redis-server", "taskset"] {
        assert!(program_exists(program), "{program} is not installed");
    }
    let dir =
        std::env::temp_dir().join(format!("strata-bench-restart-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("scenarios")).unwrap();
    std::fs::write(dir.join("scenarios/restart.toml"), SCENARIO).unwrap();
    let (scenarios, out) = (dir.join("scenarios"), dir.join("out"));
    let argv = [
        "compare".as_ref(),
        "--scenarios".as_ref(),
        scenarios.as_os_str(),
        "--out".as_ref(),
        out.as_os_str(),
        "--strata-cmd".as_ref(),
        "/nonexistent/strata serve --memcache-listen 127.0.0.1:{memcache_port}".as_ref(),
    ];
    let args = Wrapper::try_parse_from(argv).unwrap().args;
    let records = run_compare(&args).expect("compare runs");
    // One protocol per server, one record per stop.
    assert_eq!(records.len(), 6, "{records:#?}");
    for record in &records {
        let restart = record.restart.as_ref().expect("restart result");
        if record.server == "strata" {
            assert!(record.report.is_none());
            continue;
        }
        assert!(
            record.report.is_some(),
            "{}: {:?}",
            record.server,
            record.status
        );
        assert_eq!(restart.items_offered, 500);
        let warm = record.server == "redis" || restart.stop == StopKind::Clean;
        assert_eq!(
            restart.first_hit_ms.is_some(),
            warm,
            "{} after {:?}",
            record.server,
            restart.stop
        );
        assert_eq!(restart.items_retained, Some(if warm { 500 } else { 0 }));
    }
    let markdown = std::fs::read_to_string(out.join("REPORT.md")).unwrap();
    assert!(
        markdown.contains("| memcached | memcache-text | kill -9 (SIGKILL) | cold |"),
        "{markdown}"
    );
    assert!(
        markdown.contains("| strata | memcache-text | — | not run |"),
        "{markdown}"
    );
    let leftovers = std::fs::read_dir("/tmp")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("strata-bench-restart-{}-", std::process::id()))
        })
        .count();
    assert_eq!(leftovers, 0, "the servers' files are removed");
    std::fs::remove_dir_all(dir).ok();
}
