#!/usr/bin/env bash
# Issue 12's write figures: 4 KiB random writes with fio at queue depth 1 and 32, side by side,
# against the same backing file on the disk under test, twice: writes alone, and with a flush
# (fsync / NBD FLUSH) every 32 writes, as a database's commits would ask:
#   direct        the file itself, O_DIRECT (fio libaio)
#   nbdkit        nbdkit's file plugin over a Unix socket (writes land in the page cache)
#   nbdkit-cache  the same with nbdkit's cache filter (its default cache=writeback)
#   strata-wt     strata block --mode wt, DRAM cache twice the file (writes go to the disk)
#   strata-wb     strata block --mode wb, DRAM cache twice the file
#   strata-wb-pool  the same with the cache in a pool on /dev/shm (--cache; the PMem stand-in,
#                   where a FLUSH is a settle of the pool)
# The write-back servers keep their default cleaner (lines written back after 5 s, at most
# 16384 a second), so the disk is busy underneath. Server on CPU 0, fio on CPU 1.
#
#   bench/block-write.sh DIR [SIZE_MIB] [SECONDS]      (defaults: 1024 MiB, 15 s per run)
#
# Needs fio, nbdkit, libnbd-bin. Prints Markdown tables; fio's JSON is left in DIR/results-w/.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:?directory on the disk under test}
size_mib=${2:-1024}
secs=${3:-15}
strata=${STRATA:-target/release/strata}
[ -x "$strata" ] || cargo build --release -p strata
for tool in fio nbdkit nbdinfo; do
  command -v "$tool" >/dev/null || { echo "missing $tool (apt-get install -y fio nbdkit libnbd-bin)" >&2; exit 1; }
done
out="$dir/results-w"
mkdir -p "$out"
img="$dir/backing.img"
sock="$dir/nbd.sock"
if [ ! -f "$img" ] || [ "$(stat -c %s "$img")" -ne $((size_mib << 20)) ]; then
  echo "writing $img ($size_mib MiB of random bytes)" >&2
  head -c "$((size_mib << 20))" /dev/urandom > "$img"
fi

run_fio() { # name qd fsync args...
  local name=$1 qd=$2 fsync=$3
  shift 3
  taskset -c 1 fio --name="$name" --rw=randwrite --bs=4k --iodepth="$qd" --time_based \
    --runtime="$secs" --ramp_time=2 --size="$((size_mib << 20))" --fsync="$fsync" \
    --output-format=json "$@" > "$out/$name-qd$qd-fsync$fsync.json"
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
  for fsync in 0 32; do
    for qd in 1 32; do
      rm -f "$sock" /dev/shm/strata-block-bench-w.pool
      taskset -c 0 "$@" &
      local pid=$!
      wait_socket
      run_fio "$name" "$qd" "$fsync" --ioengine=nbd --uri="nbd+unix:///?socket=$sock"
      kill "$pid"
      wait "$pid" 2>/dev/null || true
    done
  done
}

for fsync in 0 32; do
  for qd in 1 32; do
    run_fio direct "$qd" "$fsync" --ioengine=libaio --direct=1 --filename="$img"
  done
done
serve_and_run nbdkit nbdkit -f -U "$sock" file "$img"
serve_and_run nbdkit-cache nbdkit -f -U "$sock" --filter=cache file "$img"
cache="$((2 * size_mib))MiB"
serve_and_run strata-wt "$strata" block --mode wt --cache-size "$cache" \
  --export "disk=$img" --nbd-listen "unix:$sock"
serve_and_run strata-wb "$strata" block --mode wb --cache-size "$cache" \
  --export "disk=$img" --nbd-listen "unix:$sock"
serve_and_run strata-wb-pool "$strata" block --mode wb --cache-size "$cache" \
  --cache /dev/shm/strata-block-bench-w.pool --export "disk=$img" --nbd-listen "unix:$sock"
rm -f /dev/shm/strata-block-bench-w.pool

python3 - "$out" <<'PY'
import json, sys, os
results = sys.argv[1]
for fsync in (0, 32):
    print()
    print("4 KiB random writes" + (f", a flush every {fsync} writes" if fsync else ", no flush"))
    print()
    print("| target | QD | IOPS | p50 µs | p99 µs | p99.9 µs | × direct |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    base = {}
    for name in ["direct", "nbdkit", "nbdkit-cache", "strata-wt", "strata-wb", "strata-wb-pool"]:
        for qd in (1, 32):
            path = os.path.join(results, f"{name}-qd{qd}-fsync{fsync}.json")
            if not os.path.exists(path):
                continue
            text = open(path).read()
            job = json.loads(text[text.index("{"):])["jobs"][0]["write"]
            pct = job["clat_ns"]["percentile"]
            us = lambda p: pct[p] / 1000
            if name == "direct":
                base[qd] = job["iops"]
            ratio = job["iops"] / base[qd] if base.get(qd) else float("nan")
            print(f"| {name} | {qd} | {job['iops']:,.0f} | {us('50.000000'):,.0f} | {us('99.000000'):,.0f} | {us('99.900000'):,.0f} | {ratio:.2f} |")
PY
