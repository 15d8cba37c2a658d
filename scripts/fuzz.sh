#!/usr/bin/env bash
# Coverage-guided fuzzing of strata's parsers and pool loaders with cargo fuzz (libFuzzer), on
# stable Rust. Installs cargo-fuzz when it is missing, builds the targets, replays the committed
# seeds and regressions, then runs each target for a bounded time, one job each.
#
#   scripts/fuzz.sh                      # 20 s per target (the CI run)
#   scripts/fuzz.sh --seconds 1800       # the long run: 30 min per target
#   scripts/fuzz.sh --seconds 600 resp_parse memcache_parse
#
# Prints executions, coverage and corpus size per target and exits non-zero when a target
# crashed (a panic, a failed invariant, a timeout or running out of memory); the input that did
# it is in fuzz/artifacts/<target>/. Replay it with
#   cargo run --manifest-path fuzz/Cargo.toml --example replay -- <target> <file>
# and, once understood, keep it in fuzz/regressions/<target>/. New interesting inputs collect in
# fuzz/corpus/<target>/ (not committed) and make the next run on this machine start further on.
# fuzz/README.md explains the targets, the choices below and the figures of a long run.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=20
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --seconds=*) seconds="${1#*=}"; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(memcache_parse resp_parse pool_open resp_session hash_decode flash_bundle flash_verify)

# Stable Rust with `--sanitizer none`: cargo fuzz then passes only stable flags (SanitizerCoverage
# through -Cpasses/-Cllvm-args), so neither nightly nor RUSTC_BOOTSTRAP is needed. The code under
# test forbids unsafe outside strata-pool, whose mapping code is what AddressSanitizer would
# watch; see fuzz/README.md for the measured trade-off.
CARGO_FUZZ_VERSION=0.13.2
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz $CARGO_FUZZ_VERSION"
  cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION"
fi
build_flags=(--sanitizer none --release --debug-assertions)

# Each check asserts its invariants with panics; libFuzzer then saves the input. -timeout turns a
# hang into a crash well before libFuzzer's default of 20 minutes per input.
declare -A options=(
  [memcache_parse]="-dict=fuzz/dict/memcache.dict -max_len=4096"
  [resp_parse]="-dict=fuzz/dict/resp.dict -max_len=4096"
  [resp_session]="-dict=fuzz/dict/session.dict -max_len=4096"
  [pool_open]="-max_len=65536"
  [hash_decode]="-max_len=4096"
  [flash_bundle]="-max_len=4096"
  [flash_verify]="-max_len=65536"
)

echo "building the fuzz targets"
cargo fuzz build "${build_flags[@]}"

# The pool target writes its files here; removed whatever happens.
scratch=$(mktemp -d "$( [ -d /dev/shm ] && echo /dev/shm || echo /tmp )/strata-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
export STRATA_FUZZ_SCRATCH="$scratch"

failed=()
for target in "${targets[@]}"; do
  [ -n "${options[$target]+set}" ] || { echo "unknown target $target" >&2; exit 2; }
  mkdir -p "fuzz/corpus/$target" "fuzz/regressions/$target" "fuzz/artifacts/$target"
  log="fuzz/artifacts/$target/last-run.log"
  echo "== $target: $seconds s"
  # A pool the harness configures is at most 4 MiB; a target writing a file past 256 MiB gets
  # SIGXFSZ, which libFuzzer reports as a crash with its input, instead of filling the scratch
  # file system (memory, on /dev/shm) until the kernel kills the fuzzer without one.
  # shellcheck disable=SC2086 # options are words on purpose
  if (ulimit -f 262144 && cargo fuzz run "${build_flags[@]}" "$target" \
      "fuzz/corpus/$target" "fuzz/seeds/$target" "fuzz/regressions/$target" -- \
      ${options[$target]} -max_total_time="$seconds" -timeout=10 -print_final_stats=1 \
      >"$log" 2>&1); then
    status=ok
  else
    status=CRASHED
    failed+=("$target")
    grep -E -A2 "panicked at|ERROR: libFuzzer|Test unit written to|exited with signal" "$log" | head -30 || true
    echo "   full log: $log"
  fi
  executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  last=$(grep -E "^#[0-9]+[[:space:]]+(DONE|NEW|REDUCE|pulse|INITED)" "$log" | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  features=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  corpus=$(sed -n 's/.* corp: \([0-9]*\/[0-9]*[a-zA-Z]*\).*/\1/p' <<<"$last")
  echo "   $status: ${executions:-?} executions (${rate:-?}/s), cov ${cov:-?} edges," \
    "ft ${features:-?}, corpus ${corpus:-?}"
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzzing found crashes in: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
  exit 1
fi
echo "fuzzing: ${#targets[@]} targets, no crash"
