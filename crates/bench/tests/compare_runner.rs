//! Runs `compare` end to end on one tiny scenario against real memcached and Redis, with strata's
//! command pointing at a binary that does not exist: the peers' rows must be filled in, strata's
//! must read "not run", and the report, charts and JSON must be written.
//!
//! Needs Debian's memcached and redis-server (see crates/bench/README.md); fails, with that
//! hint, when they are missing.

mod common;

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

#[test]
fn compare_reports_peers_and_marks_missing_strata_not_run() {
    common::require_compare_servers();
    let (records, dir) = common::compare_one("compare", SCENARIO);
    let out = dir.join("out");
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

/// `--valkey PATH` adds the peer `valkey`, run with Redis's command template and its own binary.
#[test]
fn valkey_is_a_peer_when_given() {
    let args = common::compare_args(&["--valkey", "/opt/valkey/valkey-server"]);
    let specs = strata_bench::compare::runner::server_specs(&args);
    let valkey = specs
        .iter()
        .find(|s| s.name == "valkey")
        .expect("a valkey row");
    assert!(valkey.is_peer);
    assert!(
        valkey
            .command
            .starts_with("/opt/valkey/valkey-server --port {resp_port}"),
        "{}",
        valkey.command
    );
    let without = strata_bench::compare::runner::server_specs(&common::compare_args(&[]));
    assert!(without.iter().all(|s| s.name != "valkey"));
}
