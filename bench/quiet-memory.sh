#!/bin/bash
# What quiet-shard compaction gives back and costs (issue 31): for builds A and B and Valkey,
# one hash of a million fields loaded with redis-py (bench/hash-million.py), RSS growth per
# field at the load's end and 1 s and 3 s later; then, for A and B, 100,000 keys of 1 KiB in
# 256 MiB and memtier SET:GET 1:9 at 20,000 requests/s for 20 s (quiet by the compaction's
# bound throughout): server CPU per request, median latency, RSS. Server on CPU 0, clients on
# CPU 1, rounds interleaved.
#
#   bench/quiet-memory.sh MEMTIER VALKEY A_BINARY B_BINARY [rounds]
#
# ONLY=trickle runs the second half alone.
set -uo pipefail
cd "$(dirname "$0")/.."
memtier=${1:?memtier_benchmark binary}
valkey=${2:?valkey-server binary}
a=${3:?strata binary A}; b=${4:?strata binary B}; rounds=${5:-2}
port=23995
source bench/lib.sh
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
million() { # LABEL SERVER BINARY
  strata=$3; start_resp "$2" 1GiB
  local base; base=$(rss_kib $pid)
  taskset -c 1 /usr/bin/python3 bench/hash-million.py $port 1000000 $pid "$1"
  sleep 1; echo "$1 1s_after rss_growth_B_per_field=$(( ($(rss_kib $pid) - base) * 1024 / 1000000 ))"
  sleep 2; echo "$1 3s_after rss_growth_B_per_field=$(( ($(rss_kib $pid) - base) * 1024 / 1000000 ))"
  kill $pid; wait $pid 2>/dev/null
}
trickle() { # LABEL BINARY
  strata=$2; start_resp strata 256MiB
  taskset -c 1 $memtier -s 127.0.0.1 -p $port -P redis -t 1 -c 4 --pipeline=16 --ratio=1:0 \
    --key-pattern=P:P -n allkeys --key-minimum=1 --key-maximum=100000 -d 1024 \
    --hide-histogram >/dev/null 2>&1
  local t0 t1 out; t0=$(cpu_ticks $pid)
  out=$(taskset -c 1 $memtier -s 127.0.0.1 -p $port -P redis -t 1 -c 4 --rate-limiting=5000 \
    --ratio=1:9 --key-pattern=R:R --key-minimum=1 --key-maximum=100000 -d 1024 --test-time=20 \
    --hide-histogram 2>/dev/null | awk '/^Totals/ {print $2, $6, $7, $8}')
  t1=$(cpu_ticks $pid)
  set -- $out
  echo "$label ops/s=$1 p50_ms=$2 p99_ms=$3 p999_ms=$4 cpu_us_per_req=$(python3 -c "print(f'{($t1-$t0)*1e4/($1*20):.2f}')") rss_MiB=$(( $(rss_kib $pid) / 1024 ))"
  kill $pid; wait $pid 2>/dev/null
}
[ "${ONLY:-}" = trickle ] || for round in $(seq $rounds); do
  million "A" strata "$a"; million "B" strata "$b"; million "valkey" valkey "$a"
done
for round in $(seq $rounds); do
  label=A trickle A "$a"; label=B trickle B "$b"
done
