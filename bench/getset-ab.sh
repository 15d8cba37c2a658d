#!/usr/bin/env bash
# GET/SET server CPU per request of two strata builds, interleaved: the A/B that says what a
# change costs single-key traffic. Each build alone on CPU 0 (`--threads 1`), memtier_benchmark
# on CPU 1: 20 connections, 32-byte values, 100K keys filled first, then SECONDS of SET:GET 1:10
# with uniform keys, unpipelined and pipelined 16. Printed per round, build and depth: requests
# per second and server CPU µs per request (utime + stime from /proc over the measured run).
#
#   bench/getset-ab.sh MEMTIER BUILD_A BUILD_B [SECONDS] [ROUNDS]
set -euo pipefail
memtier=${1:?memtier_benchmark binary}
build_a=${2:?strata binary A}
build_b=${3:?strata binary B}
seconds=${4:-6}
rounds=${5:-4}
port=23991
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

start() {
  taskset -c 0 "$1" serve --threads 1 --memory 256MiB --log-level warn \
    --resp-listen 127.0.0.1:$port --memcache-listen off --admin-listen off >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 100); do redis-cli -p $port ping >/dev/null 2>&1 && return; sleep 0.05; done
  echo "$1 did not start" >&2; exit 1
}

load() {
  taskset -c 1 "$memtier" -s 127.0.0.1 -p $port -P redis -t 1 -c 20 --hide-histogram -d 32 \
    --key-maximum=100000 "$@" 2>/dev/null
}

for round in $(seq "$rounds"); do
  for build in "$build_a" "$build_b"; do
    for pipeline in ${DEPTHS:-1 16}; do
      start "$build"
      load --ratio=1:0 --key-pattern=P:P --requests=allkeys >/dev/null
      before=$(cpu_ticks $pid)
      ops=$(load --ratio=1:10 --key-pattern=R:R --pipeline=$pipeline --test-time="$seconds" \
        | awk '/^Totals/ {print $2}')
      after=$(cpu_ticks $pid)
      kill $pid; wait $pid 2>/dev/null || true
      python3 -c "
ops = float('$ops'); ticks = $after - $before
print(f'round $round {\"A\" if \"$build\" == \"$build_a\" else \"B\"} pipeline=$pipeline req/s={ops:.0f} cpu_us_per_req={ticks * 1e6 / 100 / (ops * $seconds):.3f}')"
    done
  done
done
