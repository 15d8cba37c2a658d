#!/bin/sh
# Builds the generator in release mode and runs the side-by-side comparison.
# Usage: bench/compare.sh [strata-bench compare flags...], e.g. --only small-pipelined --repeats 1
# Results go to bench-results/ (REPORT.md, *.svg, results.json, summary.json, logs/).
#
# The flash tier's scenarios (bench/scenarios-flash: strata's flash tier against memcached's
# extstore, issue 11) need a directory on the disk under test, not tmpfs, and about 15 minutes
# at full size: with --flash-dir DIR they run after the default scenarios, into
# bench-results/flash/ (or OUT/flash/ with --out OUT). Alone:
#   bench/compare.sh --scenarios bench/scenarios-flash --flash-dir DIR [--size-scale 0.25]
set -eu
cd "$(dirname "$0")/.."
cargo build --release -p strata-bench
# strata's own server is built if the package exists; its rows read "not run" otherwise.
cargo build --release -p strata 2>/dev/null || echo "strata binary not built; its rows will read 'not run'" >&2
bench="${CARGO_TARGET_DIR:-target}/release/strata-bench"
# Takes --out out of the arguments (each run below gets its own), and notes --scenarios
# (then only that run) and --flash-dir (then the flash scenarios too). Rotating "$@" keeps
# every argument as given, quotes included.
out_dir=bench-results
scenarios=bench/scenarios
flash_dir_given=no
expect_out=no
for arg; do
    shift
    if [ "$expect_out" = yes ]; then
        out_dir="$arg"
        expect_out=no
        continue
    fi
    case "$arg" in
        --out) expect_out=yes; continue ;;
        --out=*) out_dir="${arg#--out=}"; continue ;;
        --scenarios | --scenarios=*) scenarios="" ;;
        --flash-dir | --flash-dir=*) flash_dir_given=yes ;;
    esac
    set -- "$@" "$arg"
done
if [ -z "$scenarios" ]; then
    exec "$bench" compare --out "$out_dir" "$@"
fi
# A run that selects none of the default scenarios (--only flash-1k) fails here and goes on.
status=0
"$bench" compare --scenarios "$scenarios" --out "$out_dir" "$@" || status=$?
if [ "$flash_dir_given" = yes ]; then
    "$bench" compare --scenarios bench/scenarios-flash --out "$out_dir/flash" "$@" || status=$?
else
    echo "flash scenarios (bench/scenarios-flash) skipped: give --flash-dir DIR on the disk under test" >&2
fi
exit "$status"
