#!/bin/bash
# MONITOR's cost (issue 32): server CPU per request of pipelined GET/SET (memtier, 10:1) with no
# monitor and with one `redis-cli monitor`, strata vs Valkey vs Redis; server on CPU 0.
#
#   bench/monitor.sh MEMTIER VALKEY [seconds] [rounds]
set -uo pipefail
cd "$(dirname "$0")/.."
memtier=${1:?memtier_benchmark binary}
valkey=${2:?valkey-server binary}
seconds=${3:-5}; rounds=${4:-2}
strata=${STRATA:-target/release/strata}
port=23997
source bench/lib.sh
start() { start_resp "$1" 256MiB; }
for round in $(seq $rounds); do
  for server in strata valkey redis; do
    for monitors in 0 1; do
      start $server
      mon=""
      if [ $monitors = 1 ]; then taskset -c 1 redis-cli -p $port monitor > /dev/null 2>&1 & mon=$!; sleep 0.2; fi
      before=$(cpu_ticks $pid)
      ops=$(taskset -c 1 $memtier -s 127.0.0.1 -p $port -P redis -t 1 -c 4 --pipeline=16 \
        --test-time=$seconds --hide-histogram -d 32 --key-maximum=10000 --ratio=1:10 2>/dev/null | awk '/^Totals/ {print $2}')
      after=$(cpu_ticks $pid)
      [ -n "$mon" ] && kill $mon
      kill $pid; wait $pid 2>/dev/null
      python3 -c "
ops=float('$ops'); t=$after-$before
print(f'round $round $server monitors=$monitors ops/s={ops:.0f} cpu_us_per_op={t*1e6/100/(ops*$seconds):.2f}')"
    done
  done
done
