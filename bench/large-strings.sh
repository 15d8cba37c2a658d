#!/bin/bash
# Large strings, strata vs Valkey 8.0.1 vs Redis 7.0.15: SET and GET of values of SIZE bytes
# (1:1, 20 keys, 2 connections, unpipelined; memtier_benchmark on CPU 1, the server on CPU 0):
# ops/s, server CPU per request and the server's RSS after. strata keeps a string past one
# segment (about 1 MiB) in several records (docs/POOL_FORMAT.md, "Strings of several
# records") and runs with --max-value-size 512MiB.
#
#   bench/large-strings.sh MEMTIER VALKEY [seconds] [sizes ...]
#
# SERVERS="strata valkey" picks the servers; STRATA=PATH another strata build.
set -uo pipefail
cd "$(dirname "$0")/.."
memtier=${1:?memtier_benchmark binary}
valkey=${2:?valkey-server binary}
seconds=${3:-5}; shift 3 2>/dev/null || shift $#
sizes=${*:-1048576 4194304 33554432}
strata=${STRATA:-target/release/strata}
port=23996
export STRATA_ARGS="--max-value-size 512MiB"
source bench/lib.sh
for size in $sizes; do
  for server in ${SERVERS:-strata valkey redis}; do
    start_resp "$server" 2GiB || { echo "$server did not start" >&2; exit 1; }
    if [ "$server" != strata ]; then redis-cli -p $port config set proto-max-bulk-len 1gb >/dev/null; fi
    before=$(cpu_ticks $pid)
    ops=$(taskset -c 1 "$memtier" -s 127.0.0.1 -p $port -P redis -t 1 -c 2 --pipeline=1 \
      --test-time="$seconds" --hide-histogram -d "$size" --ratio=1:1 --key-minimum=1 \
      --key-maximum=20 --key-pattern=R:R 2>/dev/null | awk '/^Totals/ {print $2}')
    after=$(cpu_ticks $pid)
    rss_kib=$(awk '/VmRSS/ {print $2}' /proc/$pid/status)
    python3 -c "
ops = float('$ops'); ticks = $after - $before
print(f'$server size=$size ops/s={ops:.1f} cpu_us_per_op={ticks * 1e6 / 100 / (ops * $seconds):.0f} rss_mib={$rss_kib / 1024:.0f}')"
    kill $pid; wait $pid 2>/dev/null
  done
done
