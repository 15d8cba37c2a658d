//! Runs `compare` end to end on one tiny scenario against real memcached and Redis, with strata's
//! command pointing at a binary that does not exist: the peers' rows must be filled in, strata's
//! must read "not run", and the report, charts and JSON must be written.
//!
//! Needs Debian's memcached and redis-server (see crates/bench/README.md); fails, with that
//! hint, when they are missing.

use std::path::PathBuf;

use clap::Parser;
use strata_bench::compare::servers::program_exists;
use strata_bench::compare::{run_compare, CompareArgs};

#[derive(Parser)]
struct Wrapper {
    #[command(flatten)]
    args: CompareArgs,
}

const SCENARIO: &str = r#"
name = "tiny"
title = "tiny smoke scenario"
protocols = ["memcache-text", "resp"]
repeats = 2
[load]
connections = 2
pipeline = 2
keyspace = 500
preload = true
warmup_secs = 0.1
duration_secs = 0.3
"#;

fn scratch_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("strata-bench-compare-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("scenarios")).unwrap();
    dir
}

#[test]
fn compare_reports_peers_and_marks_missing_strata_not_run() {
    for program in ["memcached", "redis-server", "taskset"] {
        assert!(
            program_exists(program),
            "{program} is not installed. Run the setup in crates/bench/README.md: \
             apt-get install -y memcached redis-server redis-tools libmemcached-tools"
        );
    }
    let dir = scratch_dir();
    std::fs::write(dir.join("scenarios/tiny.toml"), SCENARIO).unwrap();
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
    // memcached (text), redis (resp), strata (text, resp), two repeats each.
    assert_eq!(records.len(), 8);
    for record in &records {
        let ok = record.report.is_some();
        assert_eq!(
            ok,
            record.server != "strata",
            "{}: {:?}",
            record.server,
            record.status
        );
        if let Some(report) = &record.report {
            let measured = report.measured.as_ref().unwrap();
            assert!(measured.counts.is_consistent() && measured.counts.errors == 0);
        }
    }
    let markdown = std::fs::read_to_string(out.join("REPORT.md")).unwrap();
    assert!(
        markdown.contains("| strata | memcache-text | not run |"),
        "{markdown}"
    );
    assert!(markdown.contains("| memcached | memcache-text |"));
    assert!(out.join("tiny.svg").is_file() && out.join("results.json").is_file());
    assert!(out.join("summary.json").is_file());
    std::fs::remove_dir_all(dir).ok();
}
