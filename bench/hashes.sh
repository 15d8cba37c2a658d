#!/bin/bash
# Hash commands, strata vs Valkey 8.0.1 vs Redis 7.0.15 (issue 31): server CPU per request of
# HSET and HGET (memtier_benchmark --command mode, 4 connections, unpipelined and 16 deep,
# server on CPU 0, memtier on CPU 1), and memory per field (RSS growth for 200,000 hashes of 10
# fields, 8-byte names and 20-byte values, written with redis-py).
#
#   bench/hashes.sh MEMTIER VALKEY [seconds] [rounds] [field]
#
# `field` is the HSET/HGET field: a constant (`field1`, the default: one-field hashes, each
# HSET overwrites it) or `f__key__`, which memtier fills with a fresh random key each time, so
# the hashes grow during the run (to ~50 fields in 5 s): every HSET then rewrites a growing
# hash, strata's compact encoding's worst case (docs/BENCHMARKS.md). SERVERS="strata valkey"
# picks the servers.
set -uo pipefail
cd "$(dirname "$0")/.."
memtier=${1:?memtier_benchmark binary}
valkey=${2:?valkey-server binary}
seconds=${3:-5}; rounds=${4:-2}; field=${5:-field1}
strata=${STRATA:-target/release/strata}
port=23992
source bench/lib.sh
rss_kb() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
start() { start_resp "$1" 1GiB; }
for round in $(seq $rounds); do
  for server in ${SERVERS:-strata valkey redis}; do
    for pipeline in 1 16; do
      start $server
      for cmd in "HSET __key__ $field __data__" "HGET __key__ $field"; do
        before=$(cpu_ticks $pid)
        ops=$(taskset -c 1 $memtier -s 127.0.0.1 -p $port -P redis -t 1 -c 4 --pipeline=$pipeline \
          --test-time=$seconds --hide-histogram -d 32 --key-maximum=10000 \
          --command="$cmd" 2>/dev/null | awk '/^Totals/ {print $2}')
        after=$(cpu_ticks $pid)
        python3 -c "
ops=float('$ops'); t=$after-$before
print(f'round $round $server pipeline=$pipeline {\"$cmd\".split()[0]} ops/s={ops:.0f} cpu_us_per_op={t*1e6/100/(ops*$seconds):.2f}')"
      done
      kill $pid; wait $pid 2>/dev/null
    done
    # Memory: 50,000 hashes of 10 fields (8-byte names, 20-byte values).
    start $server
    base=$(rss_kb $pid)
    /usr/bin/python3 - $port <<'PY'
import redis, sys
r = redis.Redis(port=int(sys.argv[1]))
p = r.pipeline(transaction=False)
for i in range(200000):
    p.hset(f"user:{i:08d}", mapping={f"field{j:03d}": f"value-{i:08d}-{j:05d}" for j in range(10)})
    if i % 500 == 0: p.execute()
p.execute()
PY
    used=$(( $(rss_kb $pid) - base ))
    python3 -c "print(f'round $round $server memory: {($used*1024)/2000000:.1f} B per field (RSS growth {$used} KiB for 2,000,000 fields)')"
    kill $pid; wait $pid 2>/dev/null
  done
done
