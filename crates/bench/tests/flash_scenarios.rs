//! Parsing for the flash scenarios: the shipped `11-flash-*` files, what a `[flash]` table
//! accepts and refuses, fio's JSON, /proc/mounts and memcached's `stats` lines.

use std::path::{Path, PathBuf};

use strata_bench::compare::disk::{mount_of, parse_fio_json};
use strata_bench::compare::flash::parse_stat_line;
use strata_bench::compare::restart::StopKind;
use strata_bench::compare::scenarios::{load_dir, Scenario, ScenarioKind};
use strata_bench::workload::KeyDist;

const FLASH: &str = r#"
name = "f"
title = "a flash scenario"
kind = "flash"
protocols = ["memcache-text"]
[flash]
memory_mib = 64
flash_mib = 256
offered_mib = 1024
key_dists = ["zipf:0.9", "uniform"]
fixed_rate = 5000
[load]
value_size = "1024"
"#;

/// Writes `text` to a scenario file of its own and loads it.
fn load(name: &str, text: &str) -> Result<Scenario, String> {
    let dir = std::env::temp_dir().join(format!("strata-flash-parse-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path: PathBuf = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    let result = Scenario::load(&path).map_err(|e| e.to_string());
    std::fs::remove_file(&path).unwrap();
    result
}

#[test]
fn shipped_flash_scenarios_match_the_issue() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/scenarios-flash");
    let flash: Vec<Scenario> = load_dir(&dir)
        .unwrap()
        .into_iter()
        .filter(|s| s.kind == ScenarioKind::Flash)
        .collect();
    let names: Vec<&str> = flash.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        ["flash-100b", "flash-1k", "flash-4k", "flash-restart"]
    );
    // The restart figures: a clean stop and a kill -9 with the flash tier full, 1 KiB values
    // at the same sizes; kept apart because the warm-restart flags change how servers run.
    let restart = flash[3].flash.as_ref().unwrap();
    assert_eq!(restart.restarts, [StopKind::Clean, StopKind::Kill]);
    assert_eq!(
        (restart.memory_mib, restart.flash_mib, restart.offered_mib),
        (256, 4096, 8192)
    );
    assert!(restart
        .strata_restart_args
        .contains("--index-placement pool"));
    let flash = &flash[..3];
    for scenario in flash {
        let spec = scenario.flash.as_ref().unwrap();
        assert_eq!(
            (spec.memory_mib, spec.flash_mib),
            (256, 4096),
            "{}",
            scenario.name
        );
        assert_eq!(spec.offered_mib, 32 * spec.memory_mib, "32x memory offered");
        let dists = spec.key_dists().unwrap();
        assert_eq!(dists, [KeyDist::Zipf(0.9), KeyDist::Uniform]);
        assert!(spec.fixed_rate.is_some(), "one fixed-rate open loop");
        assert!(
            spec.restarts.is_empty(),
            "run as a server is run by default"
        );
        let args = scenario.bench_args(&[]).unwrap();
        assert_eq!(args.ratio.to_string(), "9:1");
        assert!(args.rate.is_none(), "the mixed phases are closed loop");
    }
    let values: Vec<usize> = flash
        .iter()
        .map(|s| s.bench_args(&[]).unwrap().value_size.max)
        .collect();
    assert_eq!(values, [100, 1024, 4096]);
}

#[test]
fn flash_table_is_parsed_with_defaults() {
    let scenario = load("ok", FLASH).unwrap();
    let spec = scenario.flash.unwrap();
    assert_eq!(spec.check_keys_max, 200_000);
    assert!(spec.memory_only_run);
    assert!((spec.settle_secs - 2.0).abs() < 1e-12);
    assert_eq!(spec.fixed_rate, Some(5000.0));
    let sizes = spec.sizes(0.5, 1040.0);
    assert_eq!((sizes.memory_mib, sizes.flash_mib), (32, 128));
    assert_eq!(sizes.keys, 512 * 1_048_576 / 1040);
}

#[test]
fn bad_flash_scenarios_are_refused() {
    let cases = [
        (
            "no-table",
            FLASH.replace("[flash]", "[other]"),
            "unknown field",
        ),
        (
            "keyspace",
            FLASH.replace("[load]", "[load]\nkeyspace = 10"),
            "remove keyspace",
        ),
        (
            "dist",
            FLASH.replace("\"uniform\"]", "\"pareto\"]"),
            "pareto",
        ),
        (
            "empty",
            FLASH.replace("[\"zipf:0.9\", \"uniform\"]", "[]"),
            "at least one",
        ),
        ("rate", FLASH.replace("= 5000", "= -1"), "fixed_rate"),
        (
            "zero",
            FLASH.replace("memory_mib = 64", "memory_mib = 0"),
            "must be > 0",
        ),
        (
            "unknown",
            FLASH.replace("fixed_rate", "fixed_rat"),
            "unknown field",
        ),
        (
            "kind",
            FLASH.replace("kind = \"flash\"", "kind = \"memory\""),
            "kind = \"flash\"",
        ),
    ];
    for (name, text, want) in cases {
        let error = load(name, &text).unwrap_err();
        assert!(error.contains(want), "{name}: {error}");
    }
    let missing = FLASH.split("[flash]").next().unwrap().to_owned();
    let error = load("missing", &missing).unwrap_err();
    assert!(error.contains("needs a [flash] table"), "{error}");
}

/// The read section of `fio --output-format=json` (fio 3.33), trimmed to what is parsed and
/// a few neighbours, after a note fio prints before the JSON.
const FIO_JSON: &str = r#"note: both iodepth >= 1 and synchronous I/O engine are selected
{
  "fio version" : "fio-3.33",
  "jobs" : [
    {
      "jobname" : "randread-qd32",
      "read" : {
        "io_bytes" : 585293824,
        "bw" : 285645,
        "iops" : 71411.294353,
        "clat_ns" : {
          "min" : 171000,
          "mean" : 447441.622524,
          "percentile" : {
            "1.000000" : 317440,
            "50.000000" : 411648,
            "99.000000" : 1056768,
            "99.900000" : 4423680
          }
        },
        "lat_ns" : { "mean" : 449000.0 }
      }
    }
  ]
}
"#;

#[test]
fn fio_json_is_read() {
    let job = parse_fio_json(FIO_JSON, 32).unwrap();
    assert_eq!(job.queue_depth, 32);
    assert!((job.iops - 71_411.294_353).abs() < 1e-6);
    assert!((job.mean_us - 447.441_622_524).abs() < 1e-6);
    assert!((job.p50_us - 411.648).abs() < 1e-9);
    assert!((job.p99_us - 1_056.768).abs() < 1e-9);
    assert!(parse_fio_json("fio: no such engine", 1).is_err());
    let no_p99 = FIO_JSON.replace("\"99.000000\"", "\"98.000000\"");
    assert!(parse_fio_json(&no_p99, 1).unwrap_err().contains("p99"));
}

#[test]
fn mounts_pick_the_longest_prefix() {
    let mounts = "/dev/vda / ext4 rw 0 0\n\
                  tmpfs /dev/shm tmpfs rw 0 0\n\
                  /dev/vdb /work/data xfs rw 0 0\n";
    let of = |path| mount_of(mounts, path).map(|(d, t)| format!("{t} on {d}"));
    assert_eq!(of("/dev/shm/x").as_deref(), Some("tmpfs on tmpfs"));
    assert_eq!(of("/work/data").as_deref(), Some("xfs on /dev/vdb"));
    assert_eq!(of("/work/data/flash").as_deref(), Some("xfs on /dev/vdb"));
    assert_eq!(
        of("/work/database").as_deref(),
        Some("ext4 on /dev/vda"),
        "not a prefix"
    );
    assert_eq!(mount_of("", "/x"), None);
}

#[test]
fn stats_lines_are_split() {
    assert_eq!(
        parse_stat_line("STAT extstore_objects_written 467164"),
        Some(("extstore_objects_written".into(), "467164".into()))
    );
    assert_eq!(
        parse_stat_line("STAT version 1.6.18"),
        Some(("version".into(), "1.6.18".into()))
    );
    assert_eq!(parse_stat_line("END"), None);
    assert_eq!(parse_stat_line("STAT lonely"), None);
}

#[test]
fn default_comparison_runs_no_flash_scenario() {
    // bench/compare.sh runs bench/scenarios; the flash scenarios take minutes each and write
    // gigabytes to the disk, so they live in bench/scenarios-flash and run only when asked.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/scenarios");
    let scenarios = load_dir(&dir).unwrap();
    assert!(!scenarios.is_empty());
    assert!(scenarios.iter().all(|s| s.kind != ScenarioKind::Flash));
}
