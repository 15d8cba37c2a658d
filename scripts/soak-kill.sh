#!/usr/bin/env bash
# Soak the kill loop: the real `strata serve` on a /dev/shm pool under concurrent load,
# SIGKILLed and restarted hundreds of times (crates/strata/tests/kill_loop.rs).
#
#   scripts/soak-kill.sh [KILLS] [RUNS]     defaults: 500 kills, 1 run
#
# Each run prints its seed; replay a failure with STRATA_KILL_SEED=<seed> (and the same
# STRATA_KILLS). Set CARGO_TARGET_DIR / CARGO_BUILD_JOBS as for any build.
set -euo pipefail
cd "$(dirname "$0")/.."
kills="${1:-500}"
runs="${2:-1}"
cargo build --release -p strata --tests
for run in $(seq 1 "$runs"); do
  echo "== soak run $run/$runs: $kills kills"
  STRATA_KILLS="$kills" cargo test --release -p strata --test kill_loop -- --nocapture
done
