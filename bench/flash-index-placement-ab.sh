#!/usr/bin/env bash
# A pool on a plain disk file with a flash tier: the index in the pool (the default with --pool
# and --flash) against --index-placement dram, strata alone, scenario flash-1k at full size, two
# rounds alternating (docs/BENCHMARKS.md, "What the new default costs").
#
#   bench/flash-index-placement-ab.sh DIR [ROUNDS]    DIR: a directory on the disk to measure
#
# Builds nothing: run `cargo build --release -p strata -p strata-bench` first. Reports land in
# DIR/ab-<placement>-<round>/REPORT.md; DIR's other contents are deleted between runs.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:?a directory on the disk to measure}"
rounds="${2:-2}"
bin="$PWD/target/release/strata"
for round in $(seq 1 "$rounds"); do
  for placement in pool dram; do
    find "$dir" -mindepth 1 -maxdepth 1 ! -name 'ab-*' -exec rm -rf {} +
    extra="--pool $dir/strata.pool --fresh"
    [ "$placement" = dram ] && extra="$extra --index-placement dram"
    out="$dir/ab-$placement-$round"
    target/release/strata-bench compare --scenarios bench/scenarios-flash --only flash-1k \
      --servers strata --flash-dir "$dir" --fio-secs 0 --out "$out" \
      --strata-cmd "taskset -c 0 $bin serve --memcache-listen 127.0.0.1:{memcache_port} --resp-listen 127.0.0.1:{resp_port} --admin-listen off --threads {threads} --memory {memory_mib}MiB $extra" \
      > "$out.log" 2>&1
    echo "== index in $placement, round $round"
    grep -E '^\| strata \|' "$out/REPORT.md" | head -4
  done
done
