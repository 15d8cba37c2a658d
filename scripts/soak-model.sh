#!/usr/bin/env bash
# Soak the engine's model tests (crates/engine/tests/model.rs: memory and flash tiers against a
# map, crashes and clean closes, SCAN) with many more cases than CI's 256: the merge-eviction
# bug that refused values over half a segment needed about 3,000 to show.
#
#   scripts/soak-model.sh [CASES] [RUNS]     defaults: 3000 cases, 1 run (~100 s a run here)
#
# Each run draws new seeds; a failure is shrunk and its seed saved in
# crates/engine/tests/model.proptest-regressions, which every later run (and CI) replays first.
set -euo pipefail
cd "$(dirname "$0")/.."
cases="${1:-3000}"
runs="${2:-1}"
for run in $(seq 1 "$runs"); do
  echo "== model soak run $run/$runs: $cases cases per test"
  PROPTEST_CASES="$cases" cargo test --release -p strata-engine --test model
done
