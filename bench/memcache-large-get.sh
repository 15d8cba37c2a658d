#!/usr/bin/env bash
# memcached `get` of large values: two strata builds beside memcached, interleaved rounds. Each
# server alone on CPU 0 (strata one worker, memcached `-t 1 -I 128m`), memtier_benchmark on
# CPU 1: 20 keys of SIZE bytes written once, then SECONDS of gets (2 connections,
# unpipelined). Printed per round and server: gets per second and server CPU µs per get.
#
#   bench/memcache-large-get.sh MEMTIER STRATA_A STRATA_B [SECONDS] [ROUNDS] [SIZE]
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
memtier=${1:?memtier_benchmark binary}
strata_a=${2:?strata binary A}
strata_b=${3:?strata binary B}
seconds=${4:-4}; rounds=${5:-3}; size=${6:-4194304}
port=23997
for round in $(seq "$rounds"); do
  for server in a b memcached; do
    case $server in
      a|b) [ $server = a ] && bin=$strata_a || bin=$strata_b
        taskset -c 0 "$bin" serve --threads 1 --memory 2GiB --log-level warn \
          --memcache-listen 127.0.0.1:$port --resp-listen off --admin-listen off \
          --max-value-size 512MiB >/dev/null 2>&1 & ;;
      memcached) taskset -c 0 memcached -u root -p $port -U 0 -m 2048 -I 128m -t 1 \
          >/dev/null 2>&1 & ;;
    esac
    pid=$!
    wait_port $port || exit 1
    taskset -c 1 "$memtier" -s 127.0.0.1 -p $port -P memcache_text -t 1 -c 1 --ratio=1:0 \
      -d "$size" --key-minimum=1 --key-maximum=20 --key-pattern=P:P --requests=20 \
      --hide-histogram >/dev/null 2>&1
    before=$(cpu_ticks $pid)
    ops=$(taskset -c 1 "$memtier" -s 127.0.0.1 -p $port -P memcache_text -t 1 -c 2 \
      --ratio=0:1 -d "$size" --key-minimum=1 --key-maximum=20 --key-pattern=R:R \
      --test-time="$seconds" --hide-histogram 2>/dev/null | awk '/^Totals/ {print $2}')
    after=$(cpu_ticks $pid)
    python3 -c "
ops = float('$ops'); ticks = $after - $before
print(f'round $round $server size=$size gets/s={ops:.1f} cpu_us_per_get={ticks * 1e6 / 100 / (ops * $seconds):.0f}')"
    kill $pid; wait $pid 2>/dev/null
  done
done
