//! The `restart` scenario kind end to end against real memcached and Redis, on a tiny key space:
//! memcached's `-e` restart is warm after SIGUSR1 and cold after SIGKILL; Redis reloads its SAVE
//! dump after both; strata's command points at a missing binary and reads "not run".
//!
//! Needs Debian's memcached and redis-server (see crates/bench/README.md).

use strata_bench::compare::restart::StopKind;

mod common;

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
    common::require_compare_servers();
    let (records, dir) = common::compare_one("restart-test", SCENARIO);
    let out = dir.join("out");
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
