#!/usr/bin/env bash
# Issue 12's block figures: 4 KiB random reads with fio at queue depth 1 and 32, side by side,
# against the same backing file on the disk under test:
#   direct   the file itself, O_DIRECT (fio libaio)
#   nbdkit   nbdkit's file plugin over a Unix socket (served from the page cache)
#   nbdkit+cache  the same with nbdkit's cache filter, warmed by one full read
#   strata-pt     strata block --mode pt (pass-through; direct I/O to the file)
#   strata-wt     strata block --mode wt with a DRAM cache twice the file, warmed by one full read
#                 (--seq-cutoff 0, so that the sequential warm-up read fills it)
#   strata-pool   the same with the cache in a pool on /dev/shm (--cache; the PMem stand-in)
# NBD targets are read with fio's nbd engine (libnbd). Server on CPU 0, fio on CPU 1.
#
#   bench/block.sh DIR [SIZE_MIB] [SECONDS]      (defaults: 1024 MiB, 20 s per run)
#
# Needs fio, nbdkit, libnbd-bin (apt-get install -y fio nbdkit libnbd-bin). Prints a Markdown
# table; fio's JSON for each run is left in DIR/results/.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:?directory on the disk under test}
size_mib=${2:-1024}
secs=${3:-20}
strata=${STRATA:-target/release/strata}
[ -x "$strata" ] || cargo build --release -p strata
for tool in fio nbdkit nbdcopy; do
  command -v "$tool" >/dev/null || { echo "missing $tool (apt-get install -y fio nbdkit libnbd-bin)" >&2; exit 1; }
done
mkdir -p "$dir/results"
img="$dir/backing.img"
sock="$dir/nbd.sock"
if [ ! -f "$img" ] || [ "$(stat -c %s "$img")" -ne $((size_mib << 20)) ]; then
  echo "writing $img ($size_mib MiB of random bytes)" >&2
  head -c "$((size_mib << 20))" /dev/urandom > "$img"
fi

run_fio() { # name qd args...
  local name=$1 qd=$2
  shift 2
  taskset -c 1 fio --name="$name" --rw=randread --bs=4k --iodepth="$qd" --time_based \
    --runtime="$secs" --ramp_time=2 --size="$((size_mib << 20))" --output-format=json \
    "$@" > "$dir/results/$name-qd$qd.json"
}

wait_socket() {
  for _ in $(seq 200); do
    nbdinfo --size "nbd+unix:///?socket=$sock" >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "no server on $sock" >&2
  return 1
}

serve_and_run() { # name command...
  local name=$1
  shift
  rm -f "$sock"
  taskset -c 0 "$@" &
  local pid=$!
  wait_socket
  if [ "$name" = nbdkit-cache ] || [ "$name" = strata-wt ] || [ "$name" = strata-pool ]; then
    nbdcopy "nbd+unix:///?socket=$sock" null: # one full read warms the cache
  fi
  for qd in 1 32; do
    run_fio "$name" "$qd" --ioengine=nbd --uri="nbd+unix:///?socket=$sock"
  done
  kill "$pid"
  wait "$pid" 2>/dev/null || true
}

for qd in 1 32; do
  run_fio direct "$qd" --ioengine=libaio --direct=1 --filename="$img"
done
serve_and_run nbdkit nbdkit -f -U "$sock" file "$img"
serve_and_run nbdkit-cache nbdkit -f -U "$sock" --filter=cache file "$img"
serve_and_run strata-pt "$strata" block --mode pt --export "disk=$img" --nbd-listen "unix:$sock"
serve_and_run strata-wt "$strata" block --mode wt --cache-size "$((2 * size_mib))MiB" --seq-cutoff 0 \
  --export "disk=$img" --nbd-listen "unix:$sock"
pool=/dev/shm/strata-block-bench.pool
rm -f "$pool"
serve_and_run strata-pool "$strata" block --mode wt --cache-size "$((2 * size_mib))MiB" \
  --seq-cutoff 0 --cache "$pool" --export "disk=$img" --nbd-listen "unix:$sock"
rm -f "$pool"

python3 - "$dir/results" <<'PY'
import json, sys, os
results = sys.argv[1]
print("| target | QD | IOPS | p50 µs | p99 µs | p99.9 µs |")
print("|---|---:|---:|---:|---:|---:|")
for name in ["direct", "nbdkit", "nbdkit-cache", "strata-pt", "strata-wt", "strata-pool"]:
    for qd in (1, 32):
        path = os.path.join(results, f"{name}-qd{qd}.json")
        if not os.path.exists(path):
            continue
        text = open(path).read()
        job = json.loads(text[text.index("{"):])["jobs"][0]["read"]  # fio's nbd engine prints a line first
        pct = job["clat_ns"]["percentile"]
        us = lambda p: pct[p] / 1000
        print(f"| {name} | {qd} | {job['iops']:,.0f} | {us('50.000000'):,.0f} | {us('99.000000'):,.0f} | {us('99.900000'):,.0f} |")
PY
