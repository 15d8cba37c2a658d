#!/bin/sh
# Builds the generator in release mode and runs the side-by-side comparison.
# Usage: bench/compare.sh [strata-bench compare flags...], e.g. --only small-pipelined --repeats 1
# Results go to bench-results/ (REPORT.md, *.svg, results.json, summary.json, logs/).
set -eu
cd "$(dirname "$0")/.."
cargo build --release -p strata-bench
# strata's own server is built if the package exists; its rows read "not run" otherwise.
cargo build --release -p strata 2>/dev/null || echo "strata binary not built; its rows will read 'not run'" >&2
# --scenarios and --out default to bench/scenarios and bench-results unless given (e.g.
# --scenarios bench/scenarios-flash for the flash tier's scenarios, which the default leaves out).
scenarios="--scenarios bench/scenarios"
out="--out bench-results"
for arg in "$@"; do
    case "$arg" in
        --scenarios | --scenarios=*) scenarios="" ;;
        --out | --out=*) out="" ;;
    esac
done
# shellcheck disable=SC2086 # the two defaults are split into flag and value on purpose
exec "${CARGO_TARGET_DIR:-target}/release/strata-bench" compare $scenarios $out "$@"
