//! What the integration tests share: the check that Debian's servers are installed, and a
//! `compare` run of one scenario in a scratch directory.

#![allow(dead_code)] // Each test file uses a different part.

use std::path::PathBuf;

use clap::Parser;
use strata_bench::compare::runner::RunRecord;
use strata_bench::compare::servers::program_exists;
use strata_bench::compare::{run_compare, CompareArgs};

/// Fails, saying how to install it, unless `program` is installed.
pub fn require(program: &str) {
    assert!(
        program_exists(program),
        "{program} is not installed. Run the setup in crates/bench/README.md: \
         apt-get install -y memcached redis-server redis-tools libmemcached-tools"
    );
}

/// [`require`]s what `compare` runs: memcached, Redis and taskset.
pub fn require_compare_servers() {
    for program in ["memcached", "redis-server", "taskset"] {
        require(program);
    }
}

#[derive(Parser)]
struct Wrapper {
    #[command(flatten)]
    args: CompareArgs,
}

/// Runs `compare` on `scenario` (a scenario file's text) alone, in a fresh directory
/// `strata-bench-<name>-<pid>` under the temporary directory, with strata's command naming a
/// binary that does not exist. Returns the records and the directory, whose `out/` holds the
/// report; the caller removes the directory once its checks pass.
pub fn compare_one(name: &str, scenario: &str) -> (Vec<RunRecord>, PathBuf) {
    compare_one_with(name, scenario, &[])
}

/// [`compare_one`] with `extra` `compare` flags.
pub fn compare_one_with(name: &str, scenario: &str, extra: &[&str]) -> (Vec<RunRecord>, PathBuf) {
    let dir = std::env::temp_dir().join(format!("strata-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let scenarios = dir.join("scenarios");
    std::fs::create_dir_all(&scenarios).unwrap();
    std::fs::write(scenarios.join("scenario.toml"), scenario).unwrap();
    let out = dir.join("out");
    let mut argv: Vec<&std::ffi::OsStr> = vec![
        "compare".as_ref(),
        "--scenarios".as_ref(),
        scenarios.as_os_str(),
        "--out".as_ref(),
        out.as_os_str(),
        "--strata-cmd".as_ref(),
        "/nonexistent/strata serve --memcache-listen 127.0.0.1:{memcache_port}".as_ref(),
    ];
    argv.extend(extra.iter().map(std::ffi::OsStr::new));
    let args = Wrapper::try_parse_from(argv).unwrap().args;
    let records = run_compare(&args).expect("compare runs");
    (records, dir)
}

/// `compare`'s arguments parsed from `argv` (after the program name).
pub fn compare_args(argv: &[&str]) -> CompareArgs {
    let argv = std::iter::once("compare").chain(argv.iter().copied());
    Wrapper::try_parse_from(argv).unwrap().args
}
