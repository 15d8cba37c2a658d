#!/bin/sh
# Builds the generator in release mode and runs the side-by-side comparison.
# Usage: bench/compare.sh [strata-bench compare flags...], e.g. --only small-pipelined --repeats 1
# Results go to bench-results/ (REPORT.md, *.svg, results.json, summary.json, logs/).
set -eu
cd "$(dirname "$0")/.."
cargo build --release -p strata-bench
# strata's own server is built if the package exists; its rows read "not run" otherwise.
cargo build --release -p strata 2>/dev/null || echo "strata binary not built; its rows will read 'not run'" >&2
exec "${CARGO_TARGET_DIR:-target}/release/strata-bench" compare \
    --scenarios bench/scenarios --out bench-results "$@"
