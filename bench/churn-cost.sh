#!/usr/bin/env bash
# What cleaning costs: server CPU per request and tail latency under 1:1 SET:GET churn with a
# working set the cleaner has to work for, against the same load on a small working set whose
# dead segments mostly die whole. strata and Valkey side by side, server on CPU 0, memtier on
# CPU 1, one server at a time.
#
#   bench/churn-cost.sh MEMTIER VALKEY_SERVER [MEMORY_MIB] [SECONDS] [RATE_PER_CONNECTION] [PERCENTS]
#
# Per server and working set (percent of memory, in values' bytes; default "20 60"): a fill,
# then SECONDS flat out (20 connections, pipeline 4: ops/s and server CPU µs per request from
# /proc), then SECONDS at a fixed rate (20 connections × RATE_PER_CONNECTION requests/s, no
# pipelining: memtier's p50/p99/p99.9 in ms). 1 KiB values, uniform keys.
set -euo pipefail
cd "$(dirname "$0")/.."
memtier=${1:?memtier_benchmark binary}
valkey=${2:?valkey-server binary}
memory=${3:-64}
seconds=${4:-10}
rate=${5:-1000}
percents=${6:-20 60}
value=1000
strata=target/release/strata
[ -x "$strata" ] || cargo build --release -p strata

source bench/lib.sh

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

run_memtier() {
  taskset -c 1 "$memtier" -s 127.0.0.1 -p "$1" -P redis -t 1 -c 20 -d "$value" \
    --key-minimum=1 --key-maximum="$2" --key-pattern=R:R --hide-histogram "${@:3}" 2>/dev/null
}

measure() {
  local name=$1 port=$2 pid=$3 keys=$4
  run_memtier "$port" "$keys" --ratio=1:0 --key-pattern=P:P --requests=allkeys --pipeline=8 >/dev/null
  local before after out ops
  before=$(cpu_ticks "$pid")
  out=$(run_memtier "$port" "$keys" --ratio=1:1 --pipeline=4 --test-time="$seconds")
  after=$(cpu_ticks "$pid")
  ops=$(awk '/^Totals/ { print $2 }' <<<"$out")
  local hz requests
  hz=$(getconf CLK_TCK)
  requests=$(awk -v ops="$ops" -v s="$seconds" 'BEGIN { printf "%d", ops * s }')
  printf "%-14s flat out: ops_per_s=%s cpu_us_per_request=%.2f" "$name" "$ops" \
    "$(awk -v t=$((after - before)) -v hz="$hz" -v n="$requests" 'BEGIN { print t / hz * 1e6 / n }')"
  out=$(run_memtier "$port" "$keys" --ratio=1:1 --rate-limiting="$rate" --test-time="$seconds")
  awk '/^Totals/ { printf "  at %d/s: p50_ms=%s p99_ms=%s p999_ms=%s", $2, $6, $7, $8 }' <<<"$out"
  if [ "$name" = strata ]; then
    redis-cli -p "$port" info strata | tr -d '\r' |
      awk -F: '/^memory_write_amplification/ { wa = $2 } /^memory_cleaner_pass_max_us/ { mx = $2 }
        /^evicted_segments/ { ev = $2 } END { printf "  write_amp=%s pass_max_us=%s evicted_segments=%s", wa, mx, ev }'
  fi
  echo
}

stop() { kill "$1"; wait "$1" 2>/dev/null || true; }

for percent in $percents; do
  keys=$((memory * 1048576 * percent / 100 / value))
  echo "== working set $percent% of ${memory} MiB ($keys keys of $value B), SET:GET 1:1, $seconds s each"
  taskset -c 0 "$valkey" --port 23222 --bind 127.0.0.1 --save '' --appendonly no \
    --maxmemory "${memory}mb" --maxmemory-policy allkeys-lru --loglevel warning &>/dev/null &
  pid=$!; wait_port 23222
  measure "valkey" 23222 $pid "$keys"
  stop $pid
  taskset -c 0 "$strata" serve --threads 1 --memory "${memory}MiB" --resp-listen 127.0.0.1:23223 \
    --memcache-listen off --admin-listen off --log-level warn &>/dev/null &
  pid=$!; wait_port 23223
  measure strata 23223 $pid "$keys"
  stop $pid
done
