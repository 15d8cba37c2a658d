#!/bin/bash
# Overwrites and deletes near memory, strata vs Valkey 8.0.1 vs Redis 7.0.15: after a fill of
# 52,428 keys of 1 KiB (80% of 64 MiB), 8 s of SET:DEL:GET 4:1:5 on uniform keys (memtier
# --command mode, 20 connections, 4 pipelined; server on CPU 0, memtier on CPU 1). Printed:
# ops/s, the keys each server holds at the end, what it evicted, its error replies.
#
#   bench/deletes.sh MEMTIER VALKEY
#
# STRATA=PATH runs another strata binary (an older build, for an A/B); PEERS=0 runs strata only
# (VALKEY is then not used).
set -uo pipefail
cd "$(dirname "$0")/.."
memtier=${1:?memtier_benchmark binary}
valkey=${2:-}
strata=${STRATA:-target/release/strata}
port=23981
servers="strata valkey redis"
if [ "${PEERS:-1}" = 0 ]; then servers=strata; fi
if [ -z "$valkey" ] && [ "$servers" != strata ]; then echo "usage: bench/deletes.sh MEMTIER VALKEY" >&2; exit 2; fi
for server in $servers; do
  case $server in
    strata) taskset -c 0 $strata serve --threads 1 --memory 64MiB --log-level warn --resp-listen 127.0.0.1:$port --memcache-listen off --admin-listen off >/dev/null 2>&1 & ;;
    valkey) taskset -c 0 $valkey --port $port --save '' --appendonly no --maxmemory 64mb --maxmemory-policy allkeys-lru >/dev/null 2>&1 & ;;
    redis) taskset -c 0 redis-server --port $port --save '' --appendonly no --maxmemory 64mb --maxmemory-policy allkeys-lru >/dev/null 2>&1 & ;;
  esac
  pid=$!; for _ in $(seq 100); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.05; done
  taskset -c 1 $memtier -s 127.0.0.1 -p $port -P redis -t 1 -c 20 --pipeline=4 -d 1024 --key-maximum=52428 --key-pattern=P:P --ratio=1:0 --requests=allkeys --hide-histogram >/dev/null 2>&1
  out=$(taskset -c 1 $memtier -s 127.0.0.1 -p $port -P redis -t 1 -c 20 --pipeline=4 -d 1024 --key-maximum=52428 --test-time=8 --hide-histogram \
    --command="SET __key__ __data__" --command-ratio=4 --command-key-pattern=R \
    --command="DEL __key__" --command-ratio=1 --command-key-pattern=R \
    --command="GET __key__" --command-ratio=5 --command-key-pattern=R 2>/dev/null)
  ops=$(echo "$out" | awk '/^Totals/ {print $2}')
  keys=$(redis-cli -p $port dbsize); errors=$(redis-cli -p $port info stats | grep -E "^(total_error_replies|evicted_keys)" | tr -d '\r' | tr '\n' ' ')
  echo "$server ops/s=$ops keys=$keys $errors"
  kill $pid; wait $pid 2>/dev/null
done
