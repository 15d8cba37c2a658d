#!/bin/bash
# The hash commands issue 31 names, strata vs Valkey 8.0.1 vs Redis 7.0.15: server CPU per
# request of HGETALL (10-field hashes), HINCRBY, HSET and HGET, unpipelined and 16 deep, with
# memtier_benchmark's --command mode (4 connections; server on CPU 0, memtier on CPU 1).
# Before each server's runs, 10,000 hashes of 10 fields (8-byte names, 20-byte values) are
# written with redis-py as `user:1` .. `user:10000`, which memtier's keys then name.
#
#   bench/hash-ops.sh MEMTIER VALKEY [seconds] [rounds]
#
# SERVERS="strata valkey" picks the servers; STRATA=PATH another strata build.
set -uo pipefail
cd "$(dirname "$0")/.."
memtier=${1:?memtier_benchmark binary}
valkey=${2:?valkey-server binary}
seconds=${3:-5}; rounds=${4:-2}
strata=${STRATA:-target/release/strata}
port=23996
source bench/lib.sh
start() { start_resp "$1" 1GiB; }
fill() { fill_user_hashes $port; }
for round in $(seq $rounds); do
  for server in ${SERVERS:-strata valkey redis}; do
    for pipeline in 1 16; do
      start $server
      fill
      for cmd in "HGETALL __key__" "HINCRBY __key__ counter 1" "HSET __key__ field001 __data__" \
          "HGET __key__ field002"; do
        before=$(cpu_ticks $pid)
        ops=$(taskset -c 1 $memtier -s 127.0.0.1 -p $port -P redis -t 1 -c 4 --pipeline=$pipeline \
          --test-time=$seconds --hide-histogram -d 20 --key-prefix=user: --key-minimum=1 \
          --key-maximum=10000 --command="$cmd" 2>/dev/null | awk '/^Totals/ {print $2}')
        after=$(cpu_ticks $pid)
        python3 -c "
ops=float('$ops'); t=$after-$before
print(f'round $round $server pipeline=$pipeline {\"$cmd\".split()[0]} ops/s={ops:.0f} cpu_us_per_op={t*1e6/100/(ops*$seconds):.2f}')"
      done
      kill $pid; wait $pid 2>/dev/null
    done
  done
done
