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
# --scenarios and --out default to bench/scenarios and bench-results unless given.
scenarios_given=no
flash_dir_given=no
out_dir=bench-results
previous=""
for arg in "$@"; do
    case "$arg" in
        --scenarios | --scenarios=*) scenarios_given=yes ;;
        --flash-dir | --flash-dir=*) flash_dir_given=yes ;;
        --out=*) out_dir="${arg#--out=}" ;;
    esac
    if [ "$previous" = "--out" ]; then
        out_dir="$arg"
    fi
    previous="$arg"
done
out_flag=""
case " $* " in
    *" --out "* | *" --out="*) ;;
    *) out_flag="--out $out_dir" ;;
esac
if [ "$scenarios_given" = yes ]; then
    # shellcheck disable=SC2086 # the default is split into flag and value on purpose
    exec "$bench" compare $out_flag "$@"
fi
# A run that selects none of the default scenarios (--only flash-1k) fails here and goes on.
status=0
# shellcheck disable=SC2086
"$bench" compare --scenarios bench/scenarios $out_flag "$@" || status=$?
if [ "$flash_dir_given" = yes ]; then
    # The same flags, results beside the others in a folder of their own.
    flash_out="$out_dir/flash"
    filtered=""
    previous=""
    for arg in "$@"; do
        case "$arg" in
            --out | --out=*) ;;
            *) if [ "$previous" != "--out" ]; then filtered="$filtered '$arg'"; fi ;;
        esac
        previous="$arg"
    done
    eval "set -- $filtered"
    "$bench" compare --scenarios bench/scenarios-flash --out "$flash_out" "$@" || status=$?
else
    echo "flash scenarios (bench/scenarios-flash) skipped: give --flash-dir DIR on the disk under test" >&2
fi
exit "$status"
