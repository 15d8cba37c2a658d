#!/usr/bin/env bash
# Soak the crash matrix: the real `strata serve` on a /dev/shm pool under pipelined load,
# SIGKILLed under load, during recovery and during shutdown, in every combination of index
# placement and durability level (crates/strata/tests/kill_loop.rs); then the same matrix with
# the flash tier below memory (crates/strata/tests/flash.rs, kill_loop_with_flash_…).
#
#   scripts/soak-kill.sh [ROUNDS_PER_CELL] [RUNS]     defaults: 100 rounds per cell, 1 run
#
# 18 cells: ROUNDS_PER_CELL × 18 rounds per run. Each run prints its seed; replay a failure with
# STRATA_KILL_SEED=<seed> (and the same STRATA_KILL_ROUNDS); STRATA_KILL_INDEX,
# STRATA_KILL_DURABILITY and STRATA_KILL_POINT narrow the matrix. Set CARGO_TARGET_DIR /
# CARGO_BUILD_JOBS as for any build. STRATA_FLASH_KILL_INDEX, _DURABILITY and _POINT narrow the
# flash matrix; SOAK_FLASH=0 skips it.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-100}"
runs="${2:-1}"
cargo build --release -p strata --tests
for run in $(seq 1 "$runs"); do
  echo "== soak run $run/$runs: $rounds rounds per cell"
  STRATA_KILL_ROUNDS="$rounds" cargo test --release -p strata --test kill_loop -- --nocapture
  if [ "${SOAK_FLASH:-1}" != 0 ]; then
    STRATA_FLASH_KILL_ROUNDS="$rounds" cargo test --release -p strata --test flash \
      kill_loop_with_flash -- --nocapture
  fi
done
