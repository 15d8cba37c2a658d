#!/bin/bash
# One large hash, strata vs Valkey 8.0.1 vs Redis 7.0.15: server CPU per HGET, per HSET
# (an existing field overwritten) and per HLEN on a hash of N fields (names f1..fN, 32-byte values), with
# memtier_benchmark's --command mode (4 connections, 16 pipelined; server on CPU 0, memtier on
# CPU 1). Each server is filled with redis-py before its runs. strata keeps a hash past 8 KiB
# in chunks (docs/POOL_FORMAT.md, "Typed values"), so a field's write rewrites one chunk.
#
#   bench/hash-large.sh MEMTIER VALKEY [seconds] [fields ...]
#
# SERVERS="strata valkey" picks the servers; STRATA=PATH another strata build.
set -uo pipefail
cd "$(dirname "$0")/.."
memtier=${1:?memtier_benchmark binary}
valkey=${2:?valkey-server binary}
seconds=${3:-4}; shift 3 2>/dev/null || shift $#
sizes=${*:-1000 10000}
strata=${STRATA:-target/release/strata}
port=23997
source bench/lib.sh
for n in $sizes; do
  for server in ${SERVERS:-strata valkey redis}; do
    start_resp "$server" 1GiB || { echo "$server did not start" >&2; exit 1; }
    /usr/bin/python3 - $port "$n" <<'PY'
import redis, sys
r = redis.Redis(port=int(sys.argv[1])); n = int(sys.argv[2])
p = r.pipeline(transaction=False)
for i in range(1, n + 1):
    p.hset("big", f"f{i}", "v" * 32)
    if i % 1000 == 0: p.execute()
p.execute()
assert r.hlen("big") == n
PY
    for cmd in "HGET big __key__" "HSET big __key__ __data__" "HLEN big"; do
      before=$(cpu_ticks $pid)
      ops=$(taskset -c 1 "$memtier" -s 127.0.0.1 -p $port -P redis -t 1 -c 4 --pipeline=16 \
        --test-time="$seconds" --hide-histogram -d 32 --key-prefix=f --key-minimum=1 \
        --key-maximum="$n" --command="$cmd" 2>/dev/null | awk '/^Totals/ {print $2}')
      after=$(cpu_ticks $pid)
      python3 -c "
ops = float('$ops'); ticks = $after - $before
print(f'$server fields=$n ${cmd%% *} ops/s={ops:.0f} cpu_us_per_op={ticks * 1e6 / 100 / (ops * $seconds):.2f}')"
    done
    kill $pid; wait $pid 2>/dev/null
  done
done
