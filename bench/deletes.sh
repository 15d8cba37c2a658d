#!/bin/bash
# Overwrites and deletes near memory, strata vs Valkey 8.0.1 vs Redis 7.0.15: after a fill of
# 52,428 keys of 1 KiB (80% of 64 MiB), SET:DEL:GET 4:1:5 on uniform keys (memtier --command
# mode, 20 connections, 4 pipelined; server on CPU 0, memtier on CPU 1), in two phases:
#   open  8 s as fast as memtier goes: ops/s, and the CPU share of server and generator, which
#         says which one was the bound (on this 2-core VM it is memtier, and then ops/s follow
#         memtier's cost per reply, not the server's);
#   fixed 6 s at RATE requests/s in all (default 60,000), the same offered load for every
#         server: server CPU µs per request, the comparison that does not depend on the bound.
# Printed per server: both phases, the keys it holds at the end, what it evicted, its errors.
#
#   bench/deletes.sh MEMTIER VALKEY
#
# STRATA=PATH runs another strata binary (an older build, for an A/B); PEERS=0 runs strata only
# (VALKEY is then not used); RATE=N sets the fixed phase's requests/s.
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
memtier=${1:?memtier_benchmark binary}
valkey=${2:-}
strata=${STRATA:-target/release/strata}
rate=${RATE:-60000}
port=23981
connections=20
servers="strata valkey redis"
if [ "${PEERS:-1}" = 0 ]; then servers=strata; fi
if [ -z "$valkey" ] && [ "$servers" != strata ]; then echo "usage: bench/deletes.sh MEMTIER VALKEY" >&2; exit 2; fi

timing=$(mktemp)
trap 'rm -f "$timing"' EXIT

# mix SECS [MEMTIER FLAGS]: one phase of the mix; prints "OPS SERVER_CPU% GENERATOR_CPU% US/REQ".
mix() {
  local secs=$1; shift
  local before after out ops
  before=$(cpu_ticks $pid)
  out=$(/usr/bin/time -f "%U %S" -o "$timing" taskset -c 1 $memtier -s 127.0.0.1 -p $port \
    -P redis -t 1 -c $connections --pipeline=4 -d 1024 --key-maximum=52428 --test-time=$secs --hide-histogram "$@" \
    --command="SET __key__ __data__" --command-ratio=4 --command-key-pattern=R \
    --command="DEL __key__" --command-ratio=1 --command-key-pattern=R \
    --command="GET __key__" --command-ratio=5 --command-key-pattern=R 2>/dev/null)
  after=$(cpu_ticks $pid)
  ops=$(echo "$out" | awk '/^Totals/ {print $2}')
  awk -v ops="$ops" -v secs=$secs -v ticks=$((after - before)) -v gen="$(cat "$timing")" 'BEGIN {
    split(gen, g, " ");
    printf "%.0f %.0f%% %.0f%% %.2f", ops, ticks / secs, (g[1] + g[2]) * 100 / secs, ticks * 1e4 / (ops * secs) }'
}

for server in $servers; do
  case $server in
    strata) taskset -c 0 $strata serve --threads 1 --memory 64MiB --log-level warn --resp-listen 127.0.0.1:$port --memcache-listen off --admin-listen off >/dev/null 2>&1 & ;;
    valkey) taskset -c 0 $valkey --port $port --save '' --appendonly no --maxmemory 64mb --maxmemory-policy allkeys-lru >/dev/null 2>&1 & ;;
    redis) taskset -c 0 redis-server --port $port --save '' --appendonly no --maxmemory 64mb --maxmemory-policy allkeys-lru >/dev/null 2>&1 & ;;
  esac
  pid=$!; for _ in $(seq 100); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.05; done
  taskset -c 1 $memtier -s 127.0.0.1 -p $port -P redis -t 1 -c $connections --pipeline=4 -d 1024 --key-maximum=52428 --key-pattern=P:P --ratio=1:0 --requests=allkeys --hide-histogram >/dev/null 2>&1
  read -r ops server_cpu gen_cpu us <<<"$(mix 8)"
  read -r fixed_ops _ _ fixed_us <<<"$(mix 6 --rate-limiting=$((rate / connections)))"
  keys=$(redis-cli -p $port dbsize); errors=$(redis-cli -p $port info stats | grep -E "^(total_error_replies|evicted_keys)" | tr -d '\r' | tr '\n' ' ')
  echo "$server open: ops/s=$ops server_cpu=$server_cpu memtier_cpu=$gen_cpu cpu_us/req=$us" \
    "fixed: ops/s=$fixed_ops cpu_us/req=$fixed_us keys=$keys $errors"
  kill $pid; wait $pid 2>/dev/null
done
